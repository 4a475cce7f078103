#include "runtime/comm/op_queue.h"

#include <fmt/format.h>

#include "runtime/comm/blocking_call.h"

namespace zs {

OpQueue::OpQueue(std::string name) : name_(std::move(name)), worker_([this] { Run(); }) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

CommHandle OpQueue::Submit(std::string description, std::function<Status()> fn) {
  auto work = std::make_shared<CommWork>(std::move(description));
  Item item{work, std::move(fn)};
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (BlockingCallScope::Active() && items_.empty() && !running_) {
      running_ = true;
      ++ran_on_caller_;
      Status broken = broken_;
      lock.unlock();
      RunItem(item, broken);
      return CommHandle(std::move(work));
    }
    items_.push_back(std::move(item));
  }
  cv_.notify_one();
  return CommHandle(std::move(work));
}

Status OpQueue::broken_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

int64_t OpQueue::ran_on_caller() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ran_on_caller_;
}

void OpQueue::RunItem(Item& item, const Status& broken) {
  Status status;
  if (!broken.ok()) {
    status = AbortedError(fmt::format("{} not run: {} is unusable after an earlier failure: {}",
                                      item.work->description(), name_, broken.ToString()));
  } else {
    status = item.fn();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken.ok() && !status.ok() && broken_.ok()) broken_ = status;
    // Cleared before Complete: the handle's waiter may submit its next operation at once.
    running_ = false;
  }
  item.work->Complete(std::move(status));
}

void OpQueue::Run() {
  while (true) {
    Item item;
    Status broken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || (!items_.empty() && !running_); });
      if (items_.empty()) return;  // stopping and drained
      item = std::move(items_.front());
      items_.pop_front();
      running_ = true;
      broken = broken_;
    }
    RunItem(item, broken);
  }
}

}  // namespace zs

#include "runtime/comm/op_queue.h"

#include <fmt/format.h>

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
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(Item{work, std::move(fn)});
  }
  cv_.notify_one();
  return CommHandle(std::move(work));
}

Status OpQueue::broken_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void OpQueue::Run() {
  while (true) {
    Item item;
    Status broken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !items_.empty(); });
      if (items_.empty()) return;  // stopping and drained
      item = std::move(items_.front());
      items_.pop_front();
      broken = broken_;
    }
    if (!broken.ok()) {
      item.work->Complete(AbortedError(fmt::format("{} not run: {} is unusable after an earlier "
                                                   "failure: {}",
                                                   item.work->description(), name_,
                                                   broken.ToString())));
      continue;
    }
    Status status = item.fn();
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.ok()) broken_ = status;
    }
    item.work->Complete(std::move(status));
  }
}

}  // namespace zs

#include "runtime/comm/comm_handle.h"

#include "runtime/base/check.h"

namespace zs {

void CommWork::Complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ZS_CHECK(!complete_, "operation '{}' completed twice", description_);
    complete_ = true;
    status_ = std::move(status);
  }
  cv_.notify_all();
}

bool CommWork::IsComplete() const {
  std::lock_guard<std::mutex> lock(mu_);
  return complete_;
}

Status CommWork::WaitForCompletion() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return complete_; });
  return status_;
}

CommHandle CommHandle::Completed(Status status, std::string description) {
  auto work = std::make_shared<CommWork>(std::move(description));
  work->Complete(std::move(status));
  return CommHandle(std::move(work));
}

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    ZS_CHECK(work_ == nullptr || waited_, "overwriting a CommHandle of '{}' that was never waited",
             work_->description());
    work_ = std::move(other.work_);
    waited_ = other.waited_;
  }
  return *this;
}

CommHandle::~CommHandle() {
  ZS_CHECK(work_ == nullptr || waited_ || work_.use_count() == 0,
           "CommHandle of '{}' destroyed without Wait(): its buffers may still be in use",
           work_->description());
}

Status CommHandle::Wait() {
  if (work_ == nullptr) return OkStatus();
  waited_ = true;
  return work_->WaitForCompletion();
}

bool CommHandle::Test() const { return work_ == nullptr || work_->IsComplete(); }

}  // namespace zs

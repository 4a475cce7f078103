// CommHandle: the move-only handle of one asynchronous communication operation.
//
// Contract
// - Every Start...() of a Communicator returns a CommHandle; the caller must call Wait() (or
//   Test() until it returns true, then Wait()) before the buffers of the operation are reused
//   or freed. Destroying a handle whose operation was never waited for is a bug: it is caught
//   by a ZS_CHECK (the buffers may still be written by the backend).
// - Wait() blocks the calling host thread until the operation completed or failed, and returns
//   its Status. It may be called more than once; later calls return the same Status.
// - A handle may be waited from any thread, but by one thread at a time.
// - CommWork is the completion record shared between a handle and the backend that runs the
//   operation; backends complete it exactly once with Complete(status).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/base/status.h"

namespace zs {

class CommWork {
 public:
  explicit CommWork(std::string description) : description_(std::move(description)) {}

  // Called once by the backend when the operation finished (ok) or failed.
  void Complete(Status status);
  bool IsComplete() const;
  // Blocks until Complete() was called; returns its status.
  Status WaitForCompletion() const;
  const std::string& description() const { return description_; }

 private:
  const std::string description_;  // "all_reduce(count=1024, f32, sum) on group 'dp'"
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool complete_ = false;  // guarded by mu_
  Status status_;          // guarded by mu_
};

class [[nodiscard]] CommHandle {
 public:
  CommHandle() = default;  // an empty handle: Wait() returns OK at once
  explicit CommHandle(std::shared_ptr<CommWork> work) : work_(std::move(work)) {}
  // A handle that is already complete with `status` (e.g. an argument error).
  static CommHandle Completed(Status status, std::string description = "");

  CommHandle(CommHandle&& other) noexcept = default;
  CommHandle& operator=(CommHandle&& other) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle();

  Status Wait();
  // True once the operation finished (successfully or not); never blocks.
  bool Test() const;

 private:
  std::shared_ptr<CommWork> work_;
  bool waited_ = false;
};

}  // namespace zs

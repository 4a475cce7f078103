// OpQueue: runs a communicator's operations one after another on a worker thread, in the
// order they were started, and completes their CommHandles. Backends whose transport is
// driven from the host (local, fabric) share it.
//
// Contract
// - Submit(description, fn) returns at once with a handle; fn runs later on the queue's one
//   worker thread and its Status completes the handle.
// - The first failing fn breaks the queue: that op's handle gets its error, and every op after
//   it (already queued or submitted later) completes with kAborted naming the first error.
// - The destructor drains queued ops (they still run) and joins the worker. Owned by one
//   communicator; Submit is called by the communicator's one user thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/base/status.h"
#include "runtime/comm/comm_handle.h"

namespace zs {

class OpQueue {
 public:
  explicit OpQueue(std::string name);
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  CommHandle Submit(std::string description, std::function<Status()> fn);

  // The first error, or OK while the queue is healthy.
  Status broken_status() const;

 private:
  struct Item {
    std::shared_ptr<CommWork> work;
    std::function<Status()> fn;
  };
  void Run();

  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  Status broken_;           // guarded by mu_
  std::thread worker_;
};

}  // namespace zs

// OpQueue: runs a communicator's operations one after another, in the order they were
// started, and completes their CommHandles. Backends whose transport is driven from the host
// (local, fabric) share it.
//
// Contract
// - Submit(description, fn) returns a handle; fn runs on the queue's one worker thread and its
//   Status completes the handle. Inside a BlockingCallScope (the blocking forms), when nothing
//   is queued or running, fn runs on the calling thread instead, before Submit returns
//   ([Note: blocking forms run on the caller]). Either way operations run one at a time, in
//   submission order, so fn may use the communicator's per-operation state (scratch, sequence
//   numbers, endpoint) without a lock of its own.
// - The first failing fn breaks the queue: that op's handle gets its error, and every op after
//   it (already queued or submitted later) completes with kAborted naming the first error.
// - The destructor drains queued ops (they still run) and joins the worker. Owned by one
//   communicator; Submit is called by the communicator's one user thread.
//
// [Note: blocking forms run on the caller]
// A blocking collective handed to the worker costs two thread hand-offs: the worker is woken
// to run it, and the caller sleeps until the worker wakes it again. On a loaded or
// oversubscribed host (ranks bound one per core, the worker sharing its rank's core) each
// hand-off is a futex wake plus a context switch, several microseconds per operation, which a
// 64 KiB or 1 MiB collective pays on top of its copies. When the caller is going to wait at
// once anyway and the queue is idle, nothing can run between Submit and Wait, so running fn on
// the caller is the same order and the same result without either hand-off. Operations
// started without the scope (Start...() whose handle is waited later: the engine's overlapped
// reduce-scatter and prefetch) still go to the worker, so they overlap the caller's compute.
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

  // How many operations ran on the calling thread ([Note: blocking forms run on the caller]).
  int64_t ran_on_caller() const;

 private:
  struct Item {
    std::shared_ptr<CommWork> work;
    std::function<Status()> fn;
  };
  void Run();
  // Runs one item outside mu_ (or aborts it when `broken` is not OK), records its failure and
  // completes its handle. Called with running_ set by the caller.
  void RunItem(Item& item, const Status& broken);

  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;      // guarded by mu_
  bool running_ = false;        // an item is running (worker or caller); guarded by mu_
  bool stopping_ = false;       // guarded by mu_
  Status broken_;               // guarded by mu_
  int64_t ran_on_caller_ = 0;   // guarded by mu_
  std::thread worker_;
};

}  // namespace zs

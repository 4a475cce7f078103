// BlockingCallScope: says that the operations started on this thread while it lives will be
// waited for at once, by this same thread, before it does anything else (the blocking forms
// of Communicator: AllReduce(...) is Start...().Wait() inside one).
//
// Contract
// - A hint, never a change of meaning: a backend may ignore it. OpQueue uses it to run such an
//   operation on the calling thread when nothing is queued or running before it, instead of
//   handing it to its worker and sleeping until the worker hands it back ([Note: blocking
//   forms run on the caller] in op_queue.h).
// - Thread-local and nestable; it costs one thread_local read per Start.
#pragma once

namespace zs {

class BlockingCallScope {
 public:
  BlockingCallScope() : outer_(active_) { active_ = true; }
  ~BlockingCallScope() { active_ = outer_; }
  BlockingCallScope(const BlockingCallScope&) = delete;
  BlockingCallScope& operator=(const BlockingCallScope&) = delete;

  // True inside a scope on the calling thread.
  static bool Active() { return active_; }

 private:
  static inline thread_local bool active_ = false;
  const bool outer_;
};

}  // namespace zs

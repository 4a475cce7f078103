// TrackedBytes: a byte count that an object keeps up to date in a MemoryTracker under one tier
// and category (activations a model holds, message buffers a pipeline keeps). Set() records the
// change since the last Set; the destructor gives back what is still recorded.
//
// Contract
// - `tracker` may be null (nothing is recorded; current() still counts). It must outlive this
//   object. Movable (the moved-from object records nothing more), not copyable.
// - Threads: as the owner's; MemoryTracker itself is thread-safe.
#pragma once

#include <cstdint>
#include <utility>

#include "runtime/device/memory_tracker.h"

namespace zs {

class TrackedBytes {
 public:
  TrackedBytes(MemoryTracker* tracker, MemoryTier tier, MemoryCategory category)
      : tracker_(tracker), tier_(tier), category_(category) {}
  ~TrackedBytes() { Set(0); }
  TrackedBytes(TrackedBytes&& other) noexcept
      : tracker_(std::exchange(other.tracker_, nullptr)),
        tier_(other.tier_),
        category_(other.category_),
        current_(std::exchange(other.current_, 0)) {}
  TrackedBytes& operator=(TrackedBytes&& other) noexcept {
    if (this != &other) {
      Set(0);
      tracker_ = std::exchange(other.tracker_, nullptr);
      tier_ = other.tier_;
      category_ = other.category_;
      current_ = std::exchange(other.current_, 0);
    }
    return *this;
  }
  TrackedBytes(const TrackedBytes&) = delete;
  TrackedBytes& operator=(const TrackedBytes&) = delete;

  // Records `bytes` as what the owner holds now.
  void Set(int64_t bytes) {
    if (tracker_ != nullptr) {
      if (bytes > current_) tracker_->Add(tier_, category_, bytes - current_);
      if (bytes < current_) tracker_->Sub(tier_, category_, current_ - bytes);
    }
    current_ = bytes;
  }
  int64_t current() const { return current_; }

 private:
  MemoryTracker* tracker_;
  MemoryTier tier_;
  MemoryCategory category_;
  int64_t current_ = 0;
};

}  // namespace zs

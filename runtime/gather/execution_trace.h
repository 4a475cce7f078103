// ExecutionTrace: the order in which one step acquired the gather units, recorded in the first
// step and replayed in the following ones (DeepSpeed's partitioned_param_coordinator trace).
//
// Contract
// - A pure value: no devices, no communication, no threads. The GatherCoordinator owns one and
//   calls it from the rank's compute thread only.
// - Two modes. kRecording: Record(u) appends every Acquire (nested ones included). EndStep()
//   commits a non-empty recording and switches to kReplaying at position 0 (an empty recording
//   stays kRecording). kReplaying: Advance(u) consumes the entry at position() when it is u;
//   when it is not (or the trace is exhausted), the caller calls Diverge(), which keeps the
//   matched prefix [0, position()) and records from there on, so the next EndStep() commits
//   "prefix + what happened since" as the new trace.
// - EndStep() in kReplaying before the trace is exhausted (the step ended early) truncates the
//   trace at position() and reports it, the second way a trace is invalidated.
// - Weights: each unit has a weight (the GatherCoordinator passes its gathered element count,
//   0 for persistent units). ReuseDistance(u) is the total weight of the entries between
//   position() and u's next entry, the quantity compared with max_reuse_distance_elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace zs {

class ExecutionTrace {
 public:
  enum class Mode { kRecording, kReplaying };

  // One weight (>= 0) per unit; unit ids are indices into it.
  explicit ExecutionTrace(std::vector<int64_t> unit_weights);

  Mode mode() const { return mode_; }
  bool replaying() const { return mode_ == Mode::kReplaying; }
  int num_units() const { return static_cast<int>(weights_.size()); }
  // The committed (kReplaying) or partly recorded (kRecording) entries.
  const std::vector<int>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  int at(size_t index) const { return entries_[index]; }
  // kReplaying: the index of the next expected Acquire. kRecording: size().
  size_t position() const { return mode_ == Mode::kReplaying ? position_ : entries_.size(); }

  // kRecording only: appends `unit`.
  void Record(int unit);
  // kReplaying only: if the entry at position() is `unit`, consumes it and returns true;
  // otherwise (a different unit, or the end of the trace) changes nothing and returns false.
  bool Advance(int unit);
  // kReplaying only: drops the entries from position() on and switches to kRecording.
  void Diverge();
  // Ends a step. kRecording: commits a non-empty recording (kReplaying at position 0).
  // kReplaying: if position() < size(), truncates the trace there (and commits it if it is not
  // empty, else records again) and returns true; otherwise rewinds to 0. Returns whether the
  // trace was invalidated by an early end.
  bool EndStep();

  // kReplaying: the weight of the entries in [position(), j), where j >= position() is the
  // first entry equal to `unit`; nullopt when `unit` does not occur again. kRecording: nullopt.
  std::optional<int64_t> ReuseDistance(int unit) const;

 private:
  void CheckUnit(int unit) const;

  const std::vector<int64_t> weights_;
  Mode mode_ = Mode::kRecording;
  std::vector<int> entries_;
  size_t position_ = 0;  // kReplaying only
};

}  // namespace zs

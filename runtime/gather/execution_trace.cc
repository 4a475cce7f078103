#include "runtime/gather/execution_trace.h"

#include <utility>

#include "runtime/base/check.h"

namespace zs {

ExecutionTrace::ExecutionTrace(std::vector<int64_t> unit_weights)
    : weights_(std::move(unit_weights)) {
  for (size_t u = 0; u < weights_.size(); ++u) {
    ZS_CHECK(weights_[u] >= 0, "unit {} has negative weight {}", u, weights_[u]);
  }
}

void ExecutionTrace::CheckUnit(int unit) const {
  ZS_CHECK(unit >= 0 && unit < num_units(), "unit {} out of range [0, {})", unit, num_units());
}

void ExecutionTrace::Record(int unit) {
  CheckUnit(unit);
  ZS_CHECK(mode_ == Mode::kRecording, "Record({}) while replaying", unit);
  entries_.push_back(unit);
}

bool ExecutionTrace::Advance(int unit) {
  CheckUnit(unit);
  ZS_CHECK(mode_ == Mode::kReplaying, "Advance({}) while recording", unit);
  if (position_ >= entries_.size() || entries_[position_] != unit) return false;
  ++position_;
  return true;
}

void ExecutionTrace::Diverge() {
  ZS_CHECK(mode_ == Mode::kReplaying, "Diverge() while recording");
  entries_.resize(position_);
  mode_ = Mode::kRecording;
  position_ = 0;
}

bool ExecutionTrace::EndStep() {
  bool ended_early = false;
  if (mode_ == Mode::kReplaying && position_ < entries_.size()) {
    entries_.resize(position_);
    ended_early = true;
  }
  mode_ = entries_.empty() ? Mode::kRecording : Mode::kReplaying;
  position_ = 0;
  return ended_early;
}

std::optional<int64_t> ExecutionTrace::ReuseDistance(int unit) const {
  CheckUnit(unit);
  if (mode_ != Mode::kReplaying) return std::nullopt;
  int64_t distance = 0;
  for (size_t i = position_; i < entries_.size(); ++i) {
    if (entries_[i] == unit) return distance;
    distance += weights_[entries_[i]];
  }
  return std::nullopt;
}

}  // namespace zs

#include "runtime/device/memory_tracker.h"

#include <fmt/format.h>

#include "runtime/base/check.h"

namespace zs {

std::string_view MemoryTierName(MemoryTier t) {
  switch (t) {
    case MemoryTier::kDevice: return "device";
    case MemoryTier::kPinnedHost: return "pinned_host";
    case MemoryTier::kHost: return "host";
    case MemoryTier::kNvme: return "nvme";
  }
  return "?";
}

std::string_view MemoryCategoryName(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kParameters: return "parameters";
    case MemoryCategory::kGradients: return "gradients";
    case MemoryCategory::kOptimizerStates: return "optimizer_states";
    case MemoryCategory::kCommBuffers: return "comm_buffers";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kOther: return "other";
    case MemoryCategory::kGatheredParameters: return "gathered_parameters";
  }
  return "?";
}

std::string FormatBytes(int64_t bytes) {
  const double b = double(bytes);
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / double(1 << 30));
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  if (bytes >= (int64_t{1} << 10)) return fmt::format("{:.1f} KiB", b / double(1 << 10));
  return fmt::format("{} B", bytes);
}

void MemoryTracker::Add(MemoryTier tier, MemoryCategory category, int64_t bytes) {
  ZS_CHECK(bytes >= 0, "negative allocation of {} bytes", bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto& c = counters_;
  const int t = int(tier), k = int(category);
  c.current[t][k] += bytes;
  c.peak[t][k] = std::max(c.peak[t][k], c.current[t][k]);
  c.tier_current[t] += bytes;
  c.tier_peak[t] = std::max(c.tier_peak[t], c.tier_current[t]);
  c.total_current += bytes;
  c.total_peak = std::max(c.total_peak, c.total_current);
}

void MemoryTracker::Sub(MemoryTier tier, MemoryCategory category, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& c = counters_;
  const int t = int(tier), k = int(category);
  ZS_CHECK(bytes >= 0 && c.current[t][k] >= bytes,
           "rank {}: freeing {} bytes of {}/{} but only {} are recorded", rank_, bytes,
           MemoryTierName(tier), MemoryCategoryName(category), c.current[t][k]);
  c.current[t][k] -= bytes;
  c.tier_current[t] -= bytes;
  c.total_current -= bytes;
}

int64_t MemoryTracker::Current(MemoryTier tier, MemoryCategory category) const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_.Current(tier, category);
}
int64_t MemoryTracker::Peak(MemoryTier tier, MemoryCategory category) const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_.Peak(tier, category);
}
int64_t MemoryTracker::TierCurrent(MemoryTier tier) const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_.TierCurrent(tier);
}
int64_t MemoryTracker::TierPeak(MemoryTier tier) const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_.TierPeak(tier);
}

MemorySnapshot MemoryTracker::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void MemoryTracker::ResetPeaks() {
  std::lock_guard<std::mutex> lock(mu_);
  auto& c = counters_;
  c.peak = c.current;
  c.tier_peak = c.tier_current;
  c.total_peak = c.total_current;
}

std::string MemorySnapshot::InUseSummary(MemoryTier t) const {
  std::string out = fmt::format("{} in use {}", MemoryTierName(t), FormatBytes(TierCurrent(t)));
  std::string parts;
  for (int k = 0; k < kNumMemoryCategories; ++k) {
    int64_t b = current[int(t)][k];
    if (b == 0) continue;
    if (!parts.empty()) parts += ", ";
    parts += fmt::format("{} {}", MemoryCategoryName(MemoryCategory(k)), FormatBytes(b));
  }
  if (!parts.empty()) out += " (" + parts + ")";
  return out;
}

std::string MemorySnapshot::ToTable() const {
  std::string out = fmt::format("{:<12} {:<17} {:>12} {:>12}\n", "tier", "category", "current",
                                "peak");
  for (int t = 0; t < kNumMemoryTiers; ++t) {
    if (tier_peak[t] == 0) continue;
    for (int k = 0; k < kNumMemoryCategories; ++k) {
      if (peak[t][k] == 0) continue;
      out += fmt::format("{:<12} {:<17} {:>12} {:>12}\n", MemoryTierName(MemoryTier(t)),
                         MemoryCategoryName(MemoryCategory(k)), FormatBytes(current[t][k]),
                         FormatBytes(peak[t][k]));
    }
    out += fmt::format("{:<12} {:<17} {:>12} {:>12}\n", MemoryTierName(MemoryTier(t)), "(total)",
                       FormatBytes(tier_current[t]), FormatBytes(tier_peak[t]));
  }
  return out;
}

std::string MemorySnapshot::ToJson() const {
  std::string out = "{";
  for (int t = 0; t < kNumMemoryTiers; ++t) {
    out += fmt::format("\"{}\": {{", MemoryTierName(MemoryTier(t)));
    for (int k = 0; k < kNumMemoryCategories; ++k) {
      out += fmt::format("\"{}\": {{\"current\": {}, \"peak\": {}}}, ",
                         MemoryCategoryName(MemoryCategory(k)), current[t][k], peak[t][k]);
    }
    out += fmt::format("\"total\": {{\"current\": {}, \"peak\": {}}}}}, ", tier_current[t],
                       tier_peak[t]);
  }
  out += fmt::format("\"total\": {{\"current\": {}, \"peak\": {}}}}}", total_current, total_peak);
  return out;
}

}  // namespace zs

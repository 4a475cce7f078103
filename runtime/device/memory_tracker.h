// MemoryTracker: current and peak bytes of one rank, per memory tier and per category.
//
// Contract
// - One tracker per rank. Every allocation the runtime makes is recorded here (devices call
//   Add/Sub on allocate/free), so memory savings are measured, never estimated.
// - Thread-safe: Add/Sub may be called from any thread (streams, comm workers). Counters are
//   updated under one mutex so the peaks of the per-tier totals are exact, not approximate.
// - Peaks are kept for each (tier, category) cell, for each tier's total and for the total
//   over all tiers. ResetPeaks() sets every peak to the current value.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace zs {

enum class MemoryTier : uint8_t { kDevice = 0, kPinnedHost, kHost, kNvme };
inline constexpr int kNumMemoryTiers = 4;

enum class MemoryCategory : uint8_t {
  kParameters = 0,
  kGradients,
  kOptimizerStates,
  kCommBuffers,
  kActivations,
  kOther,
  // Stage 3: full parameters gathered for a unit's forward or backward and released after
  // (persistent units count as kParameters). Kept apart so the live-parameter cap is checked.
  kGatheredParameters,
};
inline constexpr int kNumMemoryCategories = 7;

std::string_view MemoryTierName(MemoryTier t);          // "device", "pinned_host", "host", "nvme"
std::string_view MemoryCategoryName(MemoryCategory c);  // "parameters", "gradients", ...

// A consistent copy of a tracker's counters.
struct MemorySnapshot {
  std::array<std::array<int64_t, kNumMemoryCategories>, kNumMemoryTiers> current{};
  std::array<std::array<int64_t, kNumMemoryCategories>, kNumMemoryTiers> peak{};
  std::array<int64_t, kNumMemoryTiers> tier_current{};
  std::array<int64_t, kNumMemoryTiers> tier_peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;

  int64_t Current(MemoryTier t, MemoryCategory c) const { return current[int(t)][int(c)]; }
  int64_t Peak(MemoryTier t, MemoryCategory c) const { return peak[int(t)][int(c)]; }
  int64_t TierCurrent(MemoryTier t) const { return tier_current[int(t)]; }
  int64_t TierPeak(MemoryTier t) const { return tier_peak[int(t)]; }

  // "device: 12.0 MiB (parameters 8.0 MiB, gradients 4.0 MiB)" for every non-empty tier.
  std::string InUseSummary(MemoryTier t) const;
  // A multi-line table of current and peak bytes by tier and category.
  std::string ToTable() const;
  // A JSON object: {"device": {"parameters": {"current": N, "peak": N}, ...,
  //                 "total": {"current": N, "peak": N}}, ..., "total": {...}}.
  std::string ToJson() const;
};

class MemoryTracker {
 public:
  explicit MemoryTracker(int rank = 0) : rank_(rank) {}
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  int rank() const { return rank_; }

  void Add(MemoryTier tier, MemoryCategory category, int64_t bytes);
  // Bytes must not exceed what is recorded for that cell (a ZS_CHECK: a double free is a bug).
  void Sub(MemoryTier tier, MemoryCategory category, int64_t bytes);

  int64_t Current(MemoryTier tier, MemoryCategory category) const;
  int64_t Peak(MemoryTier tier, MemoryCategory category) const;
  int64_t TierCurrent(MemoryTier tier) const;
  int64_t TierPeak(MemoryTier tier) const;

  MemorySnapshot Snapshot() const;
  void ResetPeaks();

 private:
  const int rank_;
  mutable std::mutex mu_;
  MemorySnapshot counters_;  // guarded by mu_
};

// "1.50 GiB", "12.0 MiB", "512 B".
std::string FormatBytes(int64_t bytes);

}  // namespace zs

#include "runtime/parallel/pipeline/stage_partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace zs {

std::vector<int> StagePartition::ChunksOfRank(int rank) const {
  std::vector<int> out;
  for (int c = rank; c < num_chunks(); c += ranks) out.push_back(c);
  return out;
}

double StagePartition::MaxChunkCost() const {
  double best = 0;
  for (double c : chunk_costs) best = std::max(best, c);
  return best;
}

std::string StagePartition::ToString() const {
  std::string out;
  for (int c = 0; c < num_chunks(); ++c) {
    if (!out.empty()) out += "; ";
    out += fmt::format("chunk {} (rank {}): units [{}, {}) cost {:g}", c, RankOfChunk(c),
                       chunks[c].begin, chunks[c].end, chunk_costs[c]);
  }
  return out;
}

std::vector<double> UnitParamCosts(const ModelSpec& model) {
  std::vector<double> costs;
  costs.reserve(model.units.size());
  for (const UnitSpec& unit : model.units) costs.push_back(double(unit.numel()));
  return costs;
}

StatusOr<std::vector<ChunkUnits>> MinMaxContiguousPartition(std::span<const double> costs,
                                                            int parts) {
  const int n = int(costs.size());
  if (parts <= 0) {
    return InvalidArgumentError(
        fmt::format("cannot partition {} units into {} stages: need at least 1", n, parts));
  }
  if (n == 0) return InvalidArgumentError("cannot partition a model without units");
  if (parts > n) {
    return InvalidArgumentError(
        fmt::format("cannot partition {} units into {} stages: more stages than units", n, parts));
  }
  for (int i = 0; i < n; ++i) {
    if (!(costs[i] >= 0) || !std::isfinite(costs[i])) {
      return InvalidArgumentError(
          fmt::format("unit {} has cost {}: costs must be finite and non-negative", i, costs[i]));
    }
  }
  // prefix[i] = cost of units [0, i). A range's cost is a difference of prefixes, computed the
  // same way everywhere, so comparisons below are consistent.
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  auto range_cost = [&](int b, int e) { return prefix[e] - prefix[b]; };

  // best[j][i]: the smallest possible largest stage cost of units [0, i) in j stages (j <= i).
  // cut[j][i]: where the last of those j stages begins. Ties keep the smallest cut, so the last
  // stage takes as many units as the optimum allows (then the same for the stages before it).
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(parts + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0;
  for (int j = 1; j <= parts; ++j) {
    // j stages need at least j units; leave at least parts - j units for the later stages.
    for (int i = j; i <= n - (parts - j); ++i) {
      for (int s = j - 1; s < i; ++s) {  // the last stage is [s, i)
        if (best[j - 1][s] == kInf) continue;
        const double value = std::max(best[j - 1][s], range_cost(s, i));
        if (value < best[j][i]) {  // strict: the first (smallest) s wins ties
          best[j][i] = value;
          cut[j][i] = s;
        }
      }
    }
  }
  std::vector<ChunkUnits> ranges(parts);
  int end = n;
  for (int j = parts; j >= 1; --j) {
    const int begin = cut[j][end];
    ZS_CHECK(begin >= 0 && begin < end, "partition reconstruction failed at stage {}", j);
    ranges[j - 1] = ChunkUnits{begin, end};
    end = begin;
  }
  ZS_CHECK(end == 0);
  return ranges;
}

StatusOr<StagePartition> PartitionVirtualStages(std::span<const double> unit_costs, int ranks,
                                                int virtual_stages) {
  if (ranks <= 0 || virtual_stages <= 0) {
    return InvalidArgumentError(fmt::format(
        "cannot partition {} units over {} pp ranks x {} virtual stages: both must be >= 1",
        unit_costs.size(), ranks, virtual_stages));
  }
  const int parts = ranks * virtual_stages;
  if (parts > int(unit_costs.size()) && virtual_stages == 1) {
    return InvalidArgumentError(
        fmt::format("cannot partition {} units into {} stages: more stages than units",
                    unit_costs.size(), parts));
  }
  if (parts > int(unit_costs.size())) {
    return InvalidArgumentError(fmt::format(
        "cannot partition {} units into {} pp ranks x {} virtual stages = {} chunks: more "
        "chunks than units",
        unit_costs.size(), ranks, virtual_stages, parts));
  }
  ZS_ASSIGN_OR_RETURN(std::vector<ChunkUnits> ranges, MinMaxContiguousPartition(unit_costs, parts));
  StagePartition out;
  out.ranks = ranks;
  out.virtual_stages = virtual_stages;
  out.chunks = std::move(ranges);
  for (const ChunkUnits& r : out.chunks) {
    double sum = 0;
    for (int u = r.begin; u < r.end; ++u) sum += unit_costs[u];
    out.chunk_costs.push_back(sum);
  }
  return out;
}

StatusOr<StagePartition> PartitionStages(std::span<const double> unit_costs, int stages) {
  if (stages <= 0) {
    return InvalidArgumentError(fmt::format(
        "cannot partition {} units into {} stages: need at least 1", unit_costs.size(), stages));
  }
  return PartitionVirtualStages(unit_costs, stages, 1);
}

StatusOr<StagePartition> PartitionStages(const ModelSpec& model, int stages) {
  ZS_RETURN_IF_ERROR(model.Validate());
  const std::vector<double> costs = UnitParamCosts(model);
  return PartitionStages(costs, stages);
}

}  // namespace zs

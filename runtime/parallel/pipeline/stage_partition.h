// StagePartition: which contiguous range of a model's units each pipeline chunk holds, and which
// pp rank holds each chunk. A pure value computed by pure functions: no communication, no I/O.
//
// Contract
// - A model is a list of units (runtime/model/model_spec.h: one transformer block, the
//   embeddings, ...), each with a cost: measured seconds of forward + backward, or its parameter
//   count (UnitParamCosts) when nothing was measured yet. A stage's cost is the sum of its
//   units' costs.
// - PartitionStages cuts the units into `stages` contiguous, non-empty ranges that minimize the
//   largest stage cost, exactly (dynamic programming, O(stages * units^2)). Among the optimal
//   partitions the last stage takes as many units as the optimum allows, then the one before it
//   within the rest, and so on (earlier stages are the lighter ones: in 1F1B they hold the most
//   micro-batches in flight).
// - Virtual stages (Megatron-LM's interleaved schedule): `ranks` pp ranks with `virtual_stages`
//   chunks each cut the model into ranks * virtual_stages contiguous chunks, partitioned as
//   above; chunk c is held by rank c % ranks, as the chunk's local index c / ranks. With one
//   virtual stage a chunk is a stage and chunk r is on rank r.
// - Errors (InvalidArgument naming the numbers): zero or negative stages or virtual stages, more
//   chunks than units, a negative or non-finite cost, an empty model.
// - Copyable, immutable after construction; thread-safe.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/model/model_spec.h"

namespace zs {

// Units [begin, end) of the model.
struct ChunkUnits {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  bool operator==(const ChunkUnits&) const = default;
};

struct StagePartition {
  int ranks = 1;                    // pp ranks
  int virtual_stages = 1;           // chunks per rank
  std::vector<ChunkUnits> chunks;   // ranks * virtual_stages ranges, in model order
  std::vector<double> chunk_costs;  // the summed unit costs of each chunk

  int num_chunks() const { return int(chunks.size()); }
  int RankOfChunk(int chunk) const { return chunk % ranks; }
  int LocalIndexOfChunk(int chunk) const { return chunk / ranks; }
  // The chunks of `rank`, by local index: rank, rank + ranks, rank + 2 * ranks, ...
  std::vector<int> ChunksOfRank(int rank) const;
  // The largest chunk cost (what the partitioner minimized).
  double MaxChunkCost() const;
  // "chunk 0 (rank 0): units [0, 3) cost 12; chunk 1 (rank 1): ..."
  std::string ToString() const;
};

// Each unit's parameter count, as a cost.
std::vector<double> UnitParamCosts(const ModelSpec& model);

// `stages` contiguous stages, one per rank (virtual_stages = 1).
StatusOr<StagePartition> PartitionStages(std::span<const double> unit_costs, int stages);
// By parameter count; also InvalidArgument when the model does not Validate().
StatusOr<StagePartition> PartitionStages(const ModelSpec& model, int stages);

// ranks * virtual_stages contiguous chunks; chunk c on rank c % ranks.
StatusOr<StagePartition> PartitionVirtualStages(std::span<const double> unit_costs, int ranks,
                                                int virtual_stages);

// The exact min-max contiguous partition of `costs` into `parts` non-empty ranges, without the
// rank mapping. The building block of the functions above.
StatusOr<std::vector<ChunkUnits>> MinMaxContiguousPartition(std::span<const double> costs,
                                                            int parts);

}  // namespace zs

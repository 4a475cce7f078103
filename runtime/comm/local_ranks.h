// RunLocalRanks: runs one function per rank, each on its own thread, with a communicator of
// the `local` backend (ranks as threads of this process) and a MemoryTracker of its own.
//
// Contract
// - Blocks until every rank's function has returned. The communicators and trackers live for
//   the duration of the call; a rank must not keep references to them after it returns.
// - `options.tracker` is ignored (each rank gets its own tracker, passed to the function and
//   set in its communicator's options); the other options (timeout, group name) apply to all.
// - Returns OK if every rank returned OK; otherwise the error of the lowest failing rank,
//   prefixed with "rank R: ". A rank that fails while others wait in a collective makes them
//   fail at the timeout (or sooner, when the communicator notices), never hang.
// - `trackers_out`, when given, receives each rank's final MemorySnapshot (indexed by rank).
#pragma once

#include <functional>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/memory_tracker.h"

namespace zs {

using RankFunction = std::function<Status(int rank, Communicator& comm, MemoryTracker& tracker)>;

Status RunLocalRanks(int world_size, const CommOptions& options, const RankFunction& fn,
                     std::vector<MemorySnapshot>* snapshots_out = nullptr);

}  // namespace zs

#include "runtime/comm/local_ranks.h"

#include <fmt/format.h>

#include <memory>
#include <thread>

#include "runtime/comm/backend_registry.h"
#include "runtime/topology/store.h"

namespace zs {

Status RunLocalRanks(int world_size, const CommOptions& options, const RankFunction& fn,
                     std::vector<MemorySnapshot>* snapshots_out) {
  if (world_size < 1) {
    return InvalidArgumentError(fmt::format("RunLocalRanks: world size {} < 1", world_size));
  }
  RegisterBuiltinBackends();
  ZS_ASSIGN_OR_RETURN(Backend * backend, FindBackend("local"));
  InProcessStore store;
  std::vector<std::unique_ptr<MemoryTracker>> trackers;
  for (int r = 0; r < world_size; ++r) trackers.push_back(std::make_unique<MemoryTracker>(r));
  std::vector<Status> statuses(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      CommOptions rank_options = options;
      rank_options.tracker = trackers[r].get();
      auto comm = backend->Connect(store, r, world_size, rank_options);
      statuses[r] = comm.ok() ? fn(r, **comm, *trackers[r]) : comm.status();
    });
  }
  for (auto& t : threads) t.join();
  if (snapshots_out != nullptr) {
    snapshots_out->clear();
    for (auto& t : trackers) snapshots_out->push_back(t->Snapshot());
  }
  for (int r = 0; r < world_size; ++r) {
    if (!statuses[r].ok()) {
      return Status(statuses[r].code(), fmt::format("rank {}: {}", r, statuses[r].message()));
    }
  }
  return OkStatus();
}

}  // namespace zs

// Test helper: run N ranks of one backend as threads of this process.
//
// Contract: ConnectRanks connects `world` ranks (one thread each, one InProcessStore) and
// returns their communicators or the connect errors; RunOnRanks runs body(rank) on one thread
// per rank and returns every rank's Status. Header-only, for tests.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/backend_registry.h"
#include "runtime/topology/store.h"

namespace zs::testing {

inline std::vector<Status> RunOnRanks(int world, const std::function<Status(int rank)>& body) {
  std::vector<Status> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { results[r] = body(r); });
  for (std::thread& t : threads) t.join();
  return results;
}

struct ConnectedRanks {
  std::vector<std::unique_ptr<Communicator>> comms;  // null where Connect failed
  std::vector<Status> errors;                        // OK where Connect succeeded
};

inline ConnectedRanks ConnectRanks(Backend& backend, Store& store, int world,
                                   const CommOptions& options) {
  ConnectedRanks out;
  out.comms.resize(world);
  out.errors = RunOnRanks(world, [&](int rank) -> Status {
    StatusOr<std::unique_ptr<Communicator>> comm = backend.Connect(store, rank, world, options);
    if (!comm.ok()) return comm.status();
    out.comms[rank] = std::move(*comm);
    return OkStatus();
  });
  return out;
}

}  // namespace zs::testing

// The "fabric" backend: connects ranks (processes on one or many hosts, or threads of one
// process) into a FabricCommunicator over a libfabric RDM endpoint.
//
// Contract
// - Connect(store, rank, world, options) is collective over `world` ranks sharing `store`.
//   Keys live under "fabric/<group name>/w<world>/g<generation>/": "peer/<rank>" (host, pid,
//   start time) and "addr/<rank>" ("<inject size>:<endpoint address>"; the smallest inject size
//   of the ranks is the rendezvous threshold, see fabric_communicator.h). The generation counts
//   this rank's earlier Connects of the group through the store (the first generation whose
//   "peer/<rank>" key is absent), so one store serves several groups and the same group
//   connected again; the n-th Connect of every rank meets the others' n-th. A rank that failed
//   a Connect after publishing its peer key has moved to the next generation: connect every
//   rank again (or use a fresh store / group name), or its peers wait for it until the timeout.
// - Provider: options.transport, else ZS_FABRIC_PROVIDER, else "shm" when every rank reported
//   this host's name, else "tcp" (kept on the loopback interface when all ranks are local).
//   Every rank must arrive at the same provider.
// - While waiting for a peer's address, a peer on this host whose process died is reported at
//   once (Unavailable naming the group, rank and pid) instead of at the timeout.
// - Tuning knobs (read at Connect, must be equal on every rank): ZS_FABRIC_SEGMENT_BYTES
//   (default 1M) and ZS_FABRIC_WINDOW (default 4); see fabric_communicator.h.
#pragma once

#include <memory>

#include "runtime/comm/backend_registry.h"

namespace zs {

std::unique_ptr<Backend> MakeFabricBackend();

}  // namespace zs

// The "fabric" backend: connects ranks (processes on one or many hosts, or threads of one
// process) into a FabricCommunicator over a libfabric RDM endpoint.
//
// Contract
// - Connect(store, rank, world, options) is collective over `world` ranks sharing `store`.
//   Keys live under "fabric/<group name>/w<world>/g<generation>/": "peer/<rank>" (host, pid,
//   start time), "addr/<rank>" ("<probe>:<eager size>:<endpoint address>"; the smallest eager
//   size of the ranks is the rendezvous threshold, see fabric_communicator.h; <probe> is the hex
//   address of the rank's probe word, or "-") and, for shm on one host, "direct/<rank>" ("1"
//   when the rank read every other rank's probe word with process_vm_readv). Direct copy is on
//   when every rank wrote "1" (FabricTuning::direct_copy). The generation counts
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
//   (default 1M), ZS_FABRIC_WINDOW (default 4), ZS_FABRIC_DIRECT_SEGMENT_BYTES (default 4M)
//   and ZS_FABRIC_DIRECT_WINDOW (default 16); see fabric_communicator.h.
//   ZS_FABRIC_DIRECT_COPY=0 turns direct copy off on that rank (and so on every rank of the group: they agree through the "direct/" keys). ZS_FABRIC_EAGER_BYTES
//   (default: the endpoint's eager size, FabricEndpoint::eager_size) lowers the size above
//   which a segment waits for a clear-to-send; it never raises it, and the ranks agree on the
//   smallest value any of them published.
#pragma once

#include <memory>

#include "runtime/comm/backend_registry.h"

namespace zs {

std::unique_ptr<Backend> MakeFabricBackend();

}  // namespace zs

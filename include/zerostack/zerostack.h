// zerostack.h: the umbrella header of an installed zerostack (find_package(zerostack) and
// link zerostack::zerostack): the public headers of the base, device, topology and comm layers.
//
// Contract
// - Include paths: this file is include/zerostack/zerostack.h of an install (and of the
//   source tree); the headers below resolve from include/zerostack (installed) or the source
//   root (build tree), both put on the include path by the zerostack targets.
// - Only headers; including it costs nothing at run time. Backends register themselves when a
//   program calls RegisterBuiltinBackends() (backend_registry.h) or ConnectFromEnvironment().
#pragma once

// base: errors, checks, element types, environment knobs, logging.
#include "runtime/base/check.h"
#include "runtime/base/dtype.h"
#include "runtime/base/env.h"
#include "runtime/base/log.h"
#include "runtime/base/status.h"

// device: devices, streams, buffers and the memory tracker.
#include "runtime/device/device.h"
#include "runtime/device/device_buffer.h"
#include "runtime/device/device_factory.h"
#include "runtime/device/memory_tracker.h"
#include "runtime/device/stream.h"

// topology: rank grids, launch information and rendezvous stores.
#include "runtime/topology/launch_info.h"
#include "runtime/topology/rank_grid.h"
#include "runtime/topology/store.h"
#include "runtime/topology/tcp_store.h"

// comm: communicators, handles, the backend registry, process groups, connecting a job.
#include "runtime/comm/backend_registry.h"
#include "runtime/comm/comm_handle.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/connect.h"
#include "runtime/comm/process_groups.h"

// sharding: the pure ZeRO layout (padded equal shards, typed offsets, bucket plans).
#include "runtime/sharding/bucket_plan.h"
#include "runtime/sharding/offsets.h"
#include "runtime/sharding/shard_layout.h"

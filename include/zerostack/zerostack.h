// zerostack.h: the umbrella header of an installed zerostack (find_package(zerostack) and
// link zerostack::zerostack): the public headers a training program uses, layer by layer —
// base, device, topology, comm, sharding, model (the hooks a model is written against), nn
// (CPU layers and nn::Gpt), engine (ZeroEngine, EngineConfig), checkpoint and export. The
// README's example ("Using it from your project") includes nothing else, and install_test
// compiles that example from README.md as it stands.
//
// Contract
// - Include paths: this file is include/zerostack/zerostack.h of an install (and of the
//   source tree); the headers below resolve from include/zerostack (installed) or the source
//   root (build tree), both put on the include path by the zerostack targets.
// - Not here, included by their path when used: the model-parallel layers
//   (runtime/parallel/...), the memory planner (runtime/plan/...), the offload stores
//   (offload/...), the optimizer kernels (optimizers/...), the gather and reduce internals the
//   engine wires (runtime/gather, runtime/reduce), and kernels/ (CUDA: zerostack::cuda).
// - Only headers; including it costs nothing at run time and links nothing from CUDA: the
//   cuda device kind and the nccl backend exist only in programs that link zerostack::cuda /
//   zerostack::nccl. Backends register themselves when a program calls
//   RegisterBuiltinBackends() (backend_registry.h) or ConnectFromEnvironment().
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

// comm: communicators, handles, the backend registry, process groups, connecting a job, and
// ranks as threads of one process (RunLocalRanks).
#include "runtime/comm/backend_registry.h"
#include "runtime/comm/comm_handle.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/connect.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/comm/process_groups.h"

// sharding: the pure ZeRO layout (padded equal shards, typed offsets, bucket plans).
#include "runtime/sharding/bucket_plan.h"
#include "runtime/sharding/offsets.h"
#include "runtime/sharding/shard_layout.h"

// model: what a model gives the engine (ModelSpec, ParamInit) and the hooks it calls
// (UnitAccess: Begin/End brackets, Param, Grad), with the single-rank reference DenseUnitAccess.
#include "runtime/model/dense_unit_access.h"
#include "runtime/model/model_spec.h"
#include "runtime/model/unit_access.h"

// nn: CPU layers with explicit backward and the GPT written against UnitAccess.
#include "runtime/nn/gpt.h"

// engine: ZeroEngine (stages 0-3, evaluation, Step), its DeepSpeed-shaped config.
#include "runtime/engine/engine_config.h"
#include "runtime/engine/zero_engine.h"

// checkpoint and export: reshardable checkpoints, safetensors of the full weights.
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors_export.h"

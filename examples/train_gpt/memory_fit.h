// CheckMemoryFits: train_gpt's up-front memory check.
// Sizes that cannot fit are refused before anything is allocated (a --micro-batch of 2^20 or a
// --seq of 65536 died of std::bad_alloc before): zero-plan's plan of this run (runtime/plan,
// within 3% of what the tracker measures) for the busiest rank, times the ranks on this host,
// against the host's physical memory (CPU ranks keep every tier in it). With --experts the
// plan has the expert engine beside the dense one and the MoE layers' activations at full
// capacity (zero-plan's --experts, --ep, --top-k, --capacity-factor).
//
// Contract
// - Pure apart from reading the host's physical memory (sysconf); thread-safe. OutOfMemory
//   naming the bytes per rank and per host, and what to lower; OK when the plan cannot be made
//   (the model refuses such sizes itself, naming them).
#pragma once

#include <cstdint>

#include "examples/train_gpt/train_gpt_args.h"
#include "runtime/base/status.h"
#include "runtime/engine/engine_config.h"
#include "runtime/topology/launch_info.h"

namespace zs {

Status CheckMemoryFits(const Args& args, const EngineConfig& config, int64_t vocab,
                       const LaunchInfo& launch, int dp_size);

}  // namespace zs

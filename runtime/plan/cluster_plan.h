// ClusterPlan: per-rank memory of a GPT (or of a bare parameter count) on a cluster, for each
// ZeRO stage and offload choice, and the configuration with the least overhead that fits.
//
// Contract
// - Every figure is PlanRankMemory's (rank_memory_plan.h: the runtime's own layout, bucket,
//   gather and offload code on a counting device) for the stages GptStages builds
//   (gpt_plan_model.h); nothing is allocated per element. With experts a rank runs two engines
//   as GridGpt does: the dense units over dp, the "block.i.moe" units over dp / ep.
// - A grid's rank memory is the largest over its pipeline stages; only the stages that can be
//   the largest are planned (the first, the second, the last and the one with the most
//   parameters: middle stages differ only in their units and in micro-batches in flight,
//   which fall with the stage index).
// - Fitting: the worst rank's device tier <= device_memory; its host tiers (pageable and
//   pinned) times devices_per_node <= host_memory per node; its NVMe bytes times
//   devices_per_node <= nvme per node.
// - [Note: least overhead first] Recommend walks the candidates from the cheapest to run to the
//   dearest and returns the first that fits. Order: no offload, then the optimizer on CPU, the
//   optimizer and parameters on CPU, the optimizer on NVMe, both on NVMe (each moves more bytes
//   over a slower link every step); then no recompute before recompute (+1 forward);
//   then stages 0-2 before 3 (stage 3 adds a parameter all-gather in backward: 1.5x the
//   communication); then the smaller model-parallel degree tp * pp (tp within a node before
//   pp at equal degree: pipeline bubbles); then the lower stage; then the default reduce bucket
//   before a smaller one (fewer, larger collectives). tp ranges over powers of two up to
//   devices_per_node that divide heads and devices; pp over the divisors of devices / tp up to
//   the layers and the micro-batches per step (a deeper pipeline than its micro-batches idles
//   half the time or more: 1F1B's bubble is (pp - 1) / (micro-batches + pp - 1)).
// - Recommend's `why` names the choice, its largest rank's memory, and for each cheaper kind
//   (offload, recompute, stage) the grid that came closest to fitting and what it lacked.
// - Errors: InvalidArgument naming the flag and the value for bad sizes (see
//   gpt_plan_model.h and CheckCluster); never exits.
// - Threads: any; calls are independent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/engine_config.h"
#include "runtime/plan/gpt_plan_model.h"
#include "runtime/plan/rank_memory_plan.h"

namespace zs {

struct ClusterSpec {
  int devices = 1;
  double device_memory = 80e9;  // bytes per device
  double host_memory = 1e12;    // bytes per node
  double nvme = 0;              // bytes per node (0: none)
  int devices_per_node = 8;
};

// InvalidArgument naming the flag (--devices, --device-memory, ...) and the value.
Status CheckCluster(const ClusterSpec& cluster);

enum class OffloadChoice { kNone, kCpuOptimizer, kCpuAll, kNvmeOptimizer, kNvmeAll };
std::string_view OffloadChoiceName(OffloadChoice o);  // "none", "cpu-opt", "cpu-opt+param", ...
// Whether `o` is allowed at `stage` (optimizer offload at 1-3, parameter offload at 3).
bool OffloadAllowed(OffloadChoice o, int stage);
// The choice a config's offload devices make (Configure's inverse). OffloadChoice has no mixed
// tiers: parameters offloaded anywhere go with the optimizer's tier.
OffloadChoice OffloadChoiceOf(const ZeroConfig& zero);

struct PlanChoice {
  GridShape grid;
  int stage = 0;
  OffloadChoice offload = OffloadChoice::kNone;
  bool recompute = false;
  int64_t reduce_bucket_size = 500'000'000;
};

struct PlanRow {
  PlanChoice choice;
  RankPlan worst;  // the pipeline stage whose rank needs the most device memory
  int worst_pp_rank = 0;
  std::string worst_segments;
  int64_t device_bytes = 0;  // worst rank's device tier peak
  int64_t host_bytes = 0;    // max over stages of host + pinned host peaks
  int64_t nvme_bytes = 0;
  bool fits = false;
  bool planned = true;  // false: ruled out by a lower bound (device_bytes is that bound)
  std::string verdict;  // "fits" or what does not (device 97.1 GB > 80.0 GB)
};

// `base`: the engine config the choice overrides (stage, offload devices, bucket size);
// `micro_batches` per step (gradient accumulation, pipeline micro-batches).
StatusOr<PlanRow> PlanGpt(const GptShape& shape, const EngineConfig& base, const PlanChoice& choice,
                          int micro_batches, const ClusterSpec& cluster);

struct Recommendation {
  bool found = false;
  PlanRow best;
  std::vector<PlanRow> rejected;  // cheaper candidates that did not fit, cheapest first
  int candidates_planned = 0;
  int candidates_bounded = 0;  // rejected by a lower bound of their device bytes, not planned
  std::string why;             // one paragraph: the choice and what ruled out the cheaper ones
};

// With experts, `ep` is the expert-parallel degree every candidate keeps (grids whose dp it
// does not divide are skipped).
StatusOr<Recommendation> Recommend(const GptShape& shape, const EngineConfig& base,
                                   int micro_batches, const ClusterSpec& cluster, int ep = 1);

// The quick form: psi parameters over dp ranks, as the ZeRO paper's Figure 1 counts them
// (mixed-precision Adam: 2 + 2 + 12 bytes per parameter), beside the real layout of a model of
// exactly psi parameters cut into transformer-layer-sized units of 12 h^2 + 13 h parameters
// (h = `hidden`) plus one unit for the remainder.
struct PaperRow {
  int stage = 0;
  double paper_bytes = 0;        // ZeroFormulaBytes(stage).total()
  RankPlan real;                 // the engine's layout, no activations
  double real_model_states = 0;  // parameters + gradients + optimizer states, all tiers
  double real_total = 0;         // everything the engine holds at its peak
};
StatusOr<std::vector<PaperRow>> PaperTable(double psi, int dp, const EngineConfig& base,
                                           int64_t hidden);

// Formatting (GB = 1e9 bytes, as the ZeRO paper).
std::string FormatGB(double bytes);
std::string FormatPaperTable(double psi, int dp, const std::vector<PaperRow>& rows);
std::string FormatPlanRow(const PlanRow& row, bool header);
std::string FormatRankBreakdown(const RankPlan& plan);

}  // namespace zs

#include "runtime/plan/cluster_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "runtime/engine/zero_memory_model.h"

namespace zs {
namespace {

constexpr MemoryTier kTiers[] = {MemoryTier::kDevice, MemoryTier::kPinnedHost, MemoryTier::kHost,
                                 MemoryTier::kNvme};
constexpr MemoryCategory kCategories[] = {MemoryCategory::kParameters,
                                          MemoryCategory::kGradients,
                                          MemoryCategory::kOptimizerStates,
                                          MemoryCategory::kCommBuffers,
                                          MemoryCategory::kGatheredParameters,
                                          MemoryCategory::kActivations,
                                          MemoryCategory::kOther};

EngineConfig Configure(const EngineConfig& base, const PlanChoice& c) {
  EngineConfig e = base;
  e.zero_optimization.stage = c.stage;
  e.zero_optimization.reduce_bucket_size = c.reduce_bucket_size;
  auto& opt = e.zero_optimization.offload_optimizer;
  auto& par = e.zero_optimization.offload_param;
  opt.device = OffloadDevice::kNone;
  par.device = OffloadDevice::kNone;
  switch (c.offload) {
    case OffloadChoice::kNone:
      break;
    case OffloadChoice::kCpuAll:
      par.device = OffloadDevice::kCpu;
      [[fallthrough]];
    case OffloadChoice::kCpuOptimizer:
      opt.device = OffloadDevice::kCpu;
      break;
    case OffloadChoice::kNvmeAll:
      par.device = OffloadDevice::kNvme;
      [[fallthrough]];
    case OffloadChoice::kNvmeOptimizer:
      opt.device = OffloadDevice::kNvme;
      break;
  }
  return e;
}

int64_t HostBytes(const RankPlan& p) {
  return p.TierPeak(MemoryTier::kHost) + p.TierPeak(MemoryTier::kPinnedHost);
}

// Exact for powers of ten and common sizes: "120.0 GB", "512.0 MB".
std::string Human(double bytes) {
  const double a = std::fabs(bytes);
  if (a >= 1e12) return fmt::format("{:.2f} TB", bytes / 1e12);
  if (a >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  if (a >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  if (a >= 1e3) return fmt::format("{:.1f} kB", bytes / 1e3);
  return fmt::format("{:.0f} B", bytes);
}

}  // namespace

std::string FormatGB(double bytes) { return Human(bytes); }

Status CheckCluster(const ClusterSpec& c) {
  if (c.devices < 1) {
    return InvalidArgumentError(fmt::format("--devices {} must be >= 1", c.devices));
  }
  // The flags are in GB (1e9 bytes); the messages show the flag's value.
  if (!(c.device_memory > 0)) {
    return InvalidArgumentError(
        fmt::format("--device-memory {:g} must be a positive size in GB", c.device_memory / 1e9));
  }
  if (!(c.host_memory >= 0)) {
    return InvalidArgumentError(
        fmt::format("--host-memory {:g} must be a non-negative size in GB", c.host_memory / 1e9));
  }
  if (!(c.nvme >= 0)) {
    return InvalidArgumentError(
        fmt::format("--nvme {:g} must be a non-negative size in GB", c.nvme / 1e9));
  }
  if (c.devices_per_node < 1) {
    return InvalidArgumentError(
        fmt::format("--devices-per-node {} must be >= 1", c.devices_per_node));
  }
  return OkStatus();
}

OffloadChoice OffloadChoiceOf(const ZeroConfig& zero) {
  const bool params = zero.offload_param.device != OffloadDevice::kNone;
  switch (zero.offload_optimizer.device) {
    case OffloadDevice::kNvme:
      return params ? OffloadChoice::kNvmeAll : OffloadChoice::kNvmeOptimizer;
    case OffloadDevice::kCpu:
      return params ? OffloadChoice::kCpuAll : OffloadChoice::kCpuOptimizer;
    default:
      return OffloadChoice::kNone;
  }
}

std::string_view OffloadChoiceName(OffloadChoice o) {
  switch (o) {
    case OffloadChoice::kNone:
      return "none";
    case OffloadChoice::kCpuOptimizer:
      return "cpu-opt";
    case OffloadChoice::kCpuAll:
      return "cpu-opt+param";
    case OffloadChoice::kNvmeOptimizer:
      return "nvme-opt";
    case OffloadChoice::kNvmeAll:
      return "nvme-opt+param";
  }
  return "?";
}

bool OffloadAllowed(OffloadChoice o, int stage) {
  switch (o) {
    case OffloadChoice::kNone:
      return true;
    case OffloadChoice::kCpuOptimizer:
    case OffloadChoice::kNvmeOptimizer:
      return stage >= 1;
    case OffloadChoice::kCpuAll:
    case OffloadChoice::kNvmeAll:
      return stage == 3;
  }
  return false;
}

namespace {

// PlanGpt over stages already built for choice.grid and choice.recompute.
StatusOr<PlanRow> PlanStages(const std::vector<StageModel>& stages, const EngineConfig& base,
                             const PlanChoice& choice, const ClusterSpec& cluster) {
  // The stages that can be the largest (see the contract).
  std::vector<int> candidates = {0, std::min(1, int(stages.size()) - 1), int(stages.size()) - 1};
  int most = 0;
  int64_t most_numel = -1;
  for (const StageModel& s : stages) {
    int64_t n = 0;
    for (const PlanUnit& u : s.units) n += u.numel();
    if (n > most_numel) most_numel = n, most = s.pp_rank;
  }
  candidates.push_back(most);
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());

  PlanRow row;
  row.choice = choice;
  row.device_bytes = -1;
  for (int r : candidates) {
    const StageModel& s = stages[size_t(r)];
    RankPlanInput in;
    in.config = Configure(base, choice);
    in.units = s.units;
    in.order = s.order;
    in.dp = choice.grid.dp;
    in.edp = choice.grid.dp / choice.grid.ep;  // GridShape checked by GptStages
    in.model_activation_bytes = s.activation_bytes;
    ZS_ASSIGN_OR_RETURN(RankPlan p, PlanRankMemory(in));
    const int64_t device = p.TierPeak(MemoryTier::kDevice);
    row.host_bytes = std::max(row.host_bytes, HostBytes(p));
    row.nvme_bytes = std::max(row.nvme_bytes, p.TierPeak(MemoryTier::kNvme));
    if (device > row.device_bytes) {
      row.device_bytes = device;
      row.worst = std::move(p);
      row.worst_pp_rank = r;
      row.worst_segments = s.segments;
    }
  }
  std::vector<std::string> over;
  if (double(row.device_bytes) > cluster.device_memory) {
    over.push_back(fmt::format("device {} > {}", Human(double(row.device_bytes)),
                               Human(cluster.device_memory)));
  }
  const double per_node = cluster.devices_per_node;
  if (double(row.host_bytes) * per_node > cluster.host_memory) {
    over.push_back(fmt::format("host {} x {} per node > {}", Human(double(row.host_bytes)),
                               cluster.devices_per_node, Human(cluster.host_memory)));
  }
  if (double(row.nvme_bytes) * per_node > cluster.nvme) {
    over.push_back(fmt::format("nvme {} x {} per node > {}", Human(double(row.nvme_bytes)),
                               cluster.devices_per_node, Human(cluster.nvme)));
  }
  row.fits = over.empty();
  row.verdict = row.fits ? "fits" : fmt::format("{}", fmt::join(over, "; "));
  return row;
}

}  // namespace

StatusOr<PlanRow> PlanGpt(const GptShape& shape, const EngineConfig& base, const PlanChoice& choice,
                          int micro_batches, const ClusterSpec& cluster) {
  ZS_RETURN_IF_ERROR(CheckCluster(cluster));
  if (choice.grid.world() != cluster.devices) {
    return InvalidArgumentError(fmt::format("--tp {} x --pp {} x --dp {} = {} is not --devices {}",
                                            choice.grid.tp, choice.grid.pp, choice.grid.dp,
                                            choice.grid.world(), cluster.devices));
  }
  if (!OffloadAllowed(choice.offload, choice.stage)) {
    return InvalidArgumentError(
        fmt::format("offload {} is not possible at --stage {} (optimizer offload needs stage 1-3, "
                    "parameter offload stage 3)",
                    OffloadChoiceName(choice.offload), choice.stage));
  }
  ZS_ASSIGN_OR_RETURN(std::vector<StageModel> stages,
                      GptStages(shape, choice.grid, choice.recompute, micro_batches));
  return PlanStages(stages, base, choice, cluster);
}

StatusOr<Recommendation> Recommend(const GptShape& shape, const EngineConfig& base,
                                   int micro_batches, const ClusterSpec& cluster, int ep) {
  ZS_RETURN_IF_ERROR(CheckCluster(cluster));
  // Checks the shape once, with a grid of one ep group, so errors name the model's flags.
  {
    GridShape one{1, 1, shape.experts > 0 ? ep : 1};
    one.ep = ep;
    ZS_RETURN_IF_ERROR(GptStages(shape, one, false, micro_batches).status());
  }
  struct Candidate {
    std::tuple<int, int, int, int, int, int, int> key;
    PlanChoice choice;
  };
  std::vector<Candidate> all;
  const OffloadChoice offloads[] = {OffloadChoice::kNone, OffloadChoice::kCpuOptimizer,
                                    OffloadChoice::kCpuAll, OffloadChoice::kNvmeOptimizer,
                                    OffloadChoice::kNvmeAll};
  const int64_t buckets[] = {
      base.zero_optimization.reduce_bucket_size,
      std::min<int64_t>(base.zero_optimization.reduce_bucket_size, 50'000'000)};
  for (int tp = 1; tp <= cluster.devices_per_node; tp *= 2) {
    if (shape.heads % tp != 0 || cluster.devices % tp != 0) continue;
    for (int pp = 1; pp <= cluster.devices / tp && pp <= shape.layers && pp <= micro_batches;
         ++pp) {
      if ((cluster.devices / tp) % pp != 0) continue;
      const int dp = cluster.devices / (tp * pp);
      if (dp % ep != 0) continue;  // the expert-parallel groups cut dp
      for (int o = 0; o < 5; ++o) {
        for (int rc = 0; rc < 2; ++rc) {
          for (int stage = 0; stage <= 3; ++stage) {
            if (!OffloadAllowed(offloads[o], stage)) continue;
            for (int b = 0; b < 2; ++b) {
              if (b == 1 && buckets[1] == buckets[0]) continue;
              PlanChoice c{GridShape{tp, pp, dp}, stage, offloads[o], rc == 1, buckets[b]};
              c.grid.ep = ep;
              all.push_back({{o, rc, stage == 3, tp * pp, pp, stage, b}, c});
            }
          }
        }
      }
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Candidate& a, const Candidate& b) { return a.key < b.key; });
  Recommendation rec;
  std::map<std::tuple<int, int, bool>, std::vector<StageModel>> built;  // by (tp, pp, recompute)
  for (const Candidate& c : all) {
    // A lower bound of the device bytes skips hopeless grids without planning them: the mean
    // rank (the largest holds at least as much) keeps its compute-dtype parameters and
    // gradients and, without offload, at least the fp32 master, as the stage shards them: the
    // dense part split over tp x pp and sharded over dp, the experts (replicated over tp)
    // split over pp x ep and sharded over dp / ep.
    {
      const PlanChoice& ch = c.choice;
      const double expert_psi = double(GptExpertParameterCount(shape));
      const double dense_psi =
          (double(GptParameterCount(shape)) - expert_psi) / double(ch.grid.tp * ch.grid.pp);
      const double cb = (base.bf16.enabled || base.fp16.enabled) ? 2.0 : 4.0;
      const bool opt_off = ch.offload != OffloadChoice::kNone;
      const bool par_off =
          ch.offload == OffloadChoice::kCpuAll || ch.offload == OffloadChoice::kNvmeAll;
      auto states = [&](double psi, double n) {
        double b = par_off ? 0.0 : cb * psi / (ch.stage >= 3 ? n : 1.0);
        b += (opt_off && ch.stage >= 2) ? 0.0 : cb * psi / (ch.stage >= 2 ? n : 1.0);
        b += opt_off ? 0.0 : 4.0 * psi / (ch.stage >= 1 ? n : 1.0);
        return b;
      };
      const double bound =
          states(dense_psi, ch.grid.dp) +
          states(expert_psi / double(ch.grid.pp * ch.grid.ep), double(ch.grid.dp / ch.grid.ep));
      if (bound > cluster.device_memory) {
        PlanRow row;
        row.choice = ch;
        row.device_bytes = int64_t(bound);
        row.planned = false;
        row.verdict = fmt::format(
            "device at least {} > {} (parameters, gradients and fp32 "
            "master alone)",
            Human(bound), Human(cluster.device_memory));
        ++rec.candidates_bounded;
        rec.rejected.push_back(std::move(row));
        continue;
      }
    }
    const auto key = std::make_tuple(c.choice.grid.tp, c.choice.grid.pp, c.choice.recompute);
    auto it = built.find(key);
    if (it == built.end()) {
      ZS_ASSIGN_OR_RETURN(std::vector<StageModel> stages,
                          GptStages(shape, c.choice.grid, c.choice.recompute, micro_batches));
      it = built.emplace(key, std::move(stages)).first;
    }
    ZS_ASSIGN_OR_RETURN(PlanRow row, PlanStages(it->second, base, c.choice, cluster));
    ++rec.candidates_planned;
    if (row.fits) {
      rec.found = true;
      rec.best = std::move(row);
      break;
    }
    rec.rejected.push_back(std::move(row));
  }
  auto describe = [](const PlanChoice& c) {
    return fmt::format(
        "stage {}, offload {}, tp {} x pp {} x dp {}{}, recompute {}, reduce bucket "
        "{:.3g} elements",
        c.stage, OffloadChoiceName(c.offload), c.grid.tp, c.grid.pp, c.grid.dp,
        c.grid.ep > 1 ? fmt::format(" (ep {})", c.grid.ep) : std::string(),
        c.recompute ? "on" : "off", double(c.reduce_bucket_size));
  };
  if (!rec.found) {
    rec.why = fmt::format(
        "nothing fits: {} candidates planned, {} more ruled out by a lower bound; the last one "
        "({}) needs: {}",
        rec.candidates_planned, rec.candidates_bounded,
        rec.rejected.empty() ? std::string("none") : describe(rec.rejected.back().choice),
        rec.rejected.empty() ? std::string("-") : rec.rejected.back().verdict);
    return rec;
  }
  const PlanChoice& b = rec.best.choice;
  std::string why = fmt::format(
      "Recommended: {}. Its largest rank (pp rank {}) needs {} of device memory ({} per "
      "device), {} of host memory and {} of NVMe. ",
      describe(b), rec.best.worst_pp_rank, Human(double(rec.best.device_bytes)),
      Human(cluster.device_memory), Human(double(rec.best.host_bytes)),
      Human(double(rec.best.nvme_bytes)));
  // Of each kind (offload, recompute, stage) cheaper than the choice, the rejected grid that
  // came closest to fitting (a planned one where there is one).
  std::map<std::tuple<int, int, int>, const PlanRow*> firsts;
  for (const PlanRow& r : rec.rejected) {
    const PlanRow*& best =
        firsts[std::make_tuple(int(r.choice.offload), int(r.choice.recompute), r.choice.stage)];
    // Planned rows first (their bytes are exact), then the smallest.
    if (best == nullptr || std::make_pair(!r.planned, r.device_bytes) <
                               std::make_pair(!best->planned, best->device_bytes)) {
      best = &r;
    }
  }
  std::vector<std::string> ruled;
  for (const auto& [k, r] : firsts) {
    if (ruled.size() >= 12) break;
    ruled.push_back(fmt::format("stage {} offload {} recompute {} (closest: tp {} x pp {}, {})",
                                r->choice.stage, OffloadChoiceName(r->choice.offload),
                                r->choice.recompute ? "on" : "off", r->choice.grid.tp,
                                r->choice.grid.pp, r->verdict));
  }
  if (ruled.empty()) {
    why += "Nothing cheaper exists: no offload, no recompute, no model parallelism beyond it.";
  } else {
    why += fmt::format(
        "Cheaper configurations do not fit ({} planned, {} ruled out by a lower "
        "bound): {}.",
        rec.candidates_planned - 1, rec.candidates_bounded, fmt::join(ruled, "; "));
  }
  rec.why = why;
  return rec;
}

StatusOr<std::vector<PaperRow>> PaperTable(double psi, int dp, const EngineConfig& base,
                                           int64_t hidden) {
  if (!(psi >= 1) || psi > 1e15) {
    return InvalidArgumentError(
        fmt::format("--params {} must be a parameter count in [1, 1e15]", psi));
  }
  if (dp < 1) return InvalidArgumentError(fmt::format("--dp {} must be >= 1", dp));
  if (hidden < 1) return InvalidArgumentError(fmt::format("--hidden {} must be >= 1", hidden));
  const int64_t total = int64_t(std::llround(psi));
  const int64_t layer = 12 * hidden * hidden + 13 * hidden;
  const int64_t layers = total / layer;
  std::vector<PlanUnit> units;
  const int64_t rest = total - layers * layer;
  if (rest > 0) units.push_back({"rest", {rest}});
  for (int64_t l = 0; l < layers; ++l) {
    // A transformer layer's 12 parameters, as nn::TransformerBlock orders them.
    const int64_t h = hidden;
    units.push_back({fmt::format("block.{}", l),
                     {h, h, 3 * h * h, 3 * h, h * h, h, h, h, 4 * h * h, 4 * h, 4 * h * h, h}});
  }
  std::vector<PaperRow> rows;
  for (int stage = 0; stage <= 3; ++stage) {
    RankPlanInput in;
    in.config = base;
    in.config.zero_optimization.stage = stage;
    in.units = units;
    in.order = SequentialOrder(int(units.size()));
    in.dp = dp;
    ZS_ASSIGN_OR_RETURN(RankPlan p, PlanRankMemory(in));
    PaperRow row;
    row.stage = stage;
    row.paper_bytes = ZeroFormulaBytes(stage, psi, dp).total();
    for (MemoryTier t : kTiers) {
      for (MemoryCategory c : {MemoryCategory::kParameters, MemoryCategory::kGradients,
                               MemoryCategory::kOptimizerStates}) {
        row.real_model_states += double(p.Peak(t, c));
      }
    }
    row.real_total = double(p.memory.total_peak);
    row.real = std::move(p);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string FormatRankBreakdown(const RankPlan& p) {
  std::string out;
  for (MemoryTier t : kTiers) {
    if (p.TierPeak(t) == 0) continue;
    std::vector<std::string> parts;
    for (MemoryCategory c : kCategories) {
      if (p.Peak(t, c) > 0) {
        parts.push_back(fmt::format("{} {}", MemoryCategoryName(c), Human(double(p.Peak(t, c)))));
      }
    }
    out += fmt::format("    {:<12} {:>10}  ({})\n", MemoryTierName(t), Human(double(p.TierPeak(t))),
                       fmt::join(parts, ", "));
  }
  return out;
}

std::string FormatPaperTable(double psi, int dp, const std::vector<PaperRow>& rows) {
  std::string out = fmt::format(
      "{:.4g} parameters, mixed-precision Adam (2 + 2 + 12 bytes per parameter), dp {}; "
      "GB = 1e9 bytes\n",
      psi, dp);
  out += fmt::format("{:<6} {:>12} {:>16} {:>14} {:>10}\n", "stage", "ZeRO paper", "layout: states",
                     "layout: peak", "states/paper");
  for (const PaperRow& r : rows) {
    out += fmt::format("{:<6} {:>12} {:>16} {:>14} {:>10.4f}\n", r.stage, Human(r.paper_bytes),
                       Human(r.real_model_states), Human(r.real_total),
                       r.real_model_states / r.paper_bytes);
  }
  if (rows.empty()) return out;
  const RankPlan& any = rows[0].real;
  const double pad = double(any.padded_numel - any.numel);
  out += "\nWhy the layout differs from the paper:\n";
  out += fmt::format(
      "  - padding: every unit is padded to dp x an aligned shard ({} elements over {} units, "
      "{:.2g}% of the parameters); each padded element costs the stage's bytes per element.\n",
      int64_t(pad), any.num_units, 100.0 * pad / double(std::max<int64_t>(any.numel, 1)));
  out += fmt::format(
      "  - gradient buckets: {} bucket buffers of {} elements in the compute dtype "
      "(max_inflight_buckets, kCommBuffers), {} buckets in all; the paper counts none.\n",
      any.bucket_buffers, any.largest_bucket_elements, any.num_buckets);
  out +=
      "  - gradient staging: a unit's fp32 gradient while its backward runs (kCommBuffers): "
      "one layer at a time, not the model.\n";
  out +=
      "  - stage 3: the gathered parameters of the units in use and prefetched "
      "(kGatheredParameters, capped by stage3_max_live_parameters).\n";
  out += "  - bf16/fp16: the fp32 view of the unit in use (kActivations).\n";
  out +=
      "  The paper's figures are the model states alone (the 'layout: states' column); "
      "'layout: peak' adds the buffers above.\n";
  return out;
}

std::string FormatPlanRow(const PlanRow& r, bool header) {
  std::string out;
  if (header) {
    out += fmt::format("{:<5} {:<14} {:<6} {:>4} {:>4} {:>5} {:>10} {:>10} {:>10}  {}\n", "stage",
                       "offload", "recomp", "tp", "pp", "dp", "device", "host", "nvme", "verdict");
  }
  out += fmt::format("{:<5} {:<14} {:<6} {:>4} {:>4} {:>5} {:>10} {:>10} {:>10}  {}\n",
                     r.choice.stage, OffloadChoiceName(r.choice.offload),
                     r.choice.recompute ? "on" : "off", r.choice.grid.tp, r.choice.grid.pp,
                     r.choice.grid.dp, Human(double(r.device_bytes)), Human(double(r.host_bytes)),
                     Human(double(r.nvme_bytes)), r.verdict);
  return out;
}

}  // namespace zs

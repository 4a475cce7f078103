// ZeroEngine's checkpoint surface: what this rank owns, read out of the optimizer tiles, and the
// matching load ([Note: checkpoint ownership] and [Note: int8 blocks in checkpoints] in
// zero_engine.h). runtime/checkpoint/ stores what this file hands out; nothing here knows files.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "optimizers/state_codec.h"
#include "runtime/base/check.h"
#include "runtime/comm/all_gather_scalar.h"
#include "runtime/engine/zero_engine_impl.h"

namespace zs {
namespace {

constexpr const char* kArrayKinds[3] = {"master", "state0", "state1"};

// "f32", "bf16", "int8": the names OwnedArray::dtype uses (the master is "f32" too).
std::string CheckpointDTypeName(StateDType type) {
  return type == StateDType::kF32 ? "f32" : std::string(StateDTypeName(type));
}

int64_t BlocksMeeting(int64_t block_origin, int64_t end) {
  return end <= block_origin ? 0 : (end - 1 - block_origin) / kQuantBlock + 1;
}

// A unit's optimizer range on this rank as flat arrays (the tiles concatenated: every tile
// starts on an int8 block, so their scales concatenate too).
struct RangeArrays {
  std::vector<float> master;
  std::vector<uint8_t> codes[2];
  std::vector<float> scales[2];
};

}  // namespace

Status ZeroEngine::Impl::CheckpointBoundary(std::string_view what) const {
  ZS_RETURN_IF_ERROR(TilesUsable());
  if (MicroBatchesPending() > 0 || prepared_) {
    return FailedPreconditionError(
        fmt::format("engine (rank {}): {} between steps; {} micro-batch(es) are pending",
                    dp_.rank(), what, MicroBatchesPending()));
  }
  return OkStatus();
}

ZeroEngine::Impl::StateCodes ZeroEngine::Impl::CheckpointCodes() const {
  const OptimizerHyper hyper = Hyper(0.0);
  const StateDType type = state_dtype();
  return {NumStates(hyper.kind, hyper.beta1), type, int64_t(StateCodeBytes(type)),
          CheckpointDTypeName(type)};
}

EngineTrainingState ZeroEngine::training_state() const {
  const LossScaler::State s = impl_->scaler_.state();
  return {impl_->step_, s.scale, s.hysteresis_left, s.good_steps};
}

Status ZeroEngine::VisitOwnedState(const std::function<Status(const OwnedParamState&)>& visit) {
  Impl& m = *impl_;
  ZS_RETURN_IF_ERROR(m.CheckpointBoundary("the state is saved"));
  const auto [num_states, type, cb, dtype_name] = m.CheckpointCodes();
  const int rank = m.dp_.rank();
  RangeArrays r;
  for (size_t u = 0; u < m.units_.size(); ++u) {
    UnitState& s = m.units_[u];
    const int64_t n_all = s.opt_size;
    // [Note: frozen units]: a frozen unit's values (its parameters), and no states.
    const int unit_states = s.frozen ? 0 : num_states;
    if (s.frozen) {
      ZS_RETURN_IF_ERROR(m.ReadOptimizerRange(int(u), r.master));
    } else {
      r.master.assign(size_t(n_all), 0.0f);
    }
    for (int i = 0; i < unit_states; ++i) {
      r.codes[i].assign(size_t(n_all * cb), 0);
      r.scales[i].assign(size_t(BlocksMeeting(0, n_all)), 0.0f);
    }
    for (int t : s.tiles) {
      const OptimizerTile& tile = m.tiles_[size_t(t)];
      ZS_ASSIGN_OR_RETURN(SlotView arrays, m.states_->Acquire(t));
      std::memcpy(r.master.data() + tile.begin, arrays.arrays[kMaster],
                  size_t(tile.size()) * sizeof(float));
      for (int i = 0; i < num_states; ++i) {
        std::memcpy(r.codes[i].data() + tile.begin * cb, arrays.arrays[kState0 + i],
                    size_t(tile.size() * cb));
        if (type == StateDType::kInt8) {
          std::memcpy(r.scales[i].data() + tile.begin / kQuantBlock, arrays.arrays[kScale0 + i],
                      size_t(BlocksMeeting(0, tile.size())) * sizeof(float));
        }
      }
      ZS_RETURN_IF_ERROR(m.states_->Release(t, /*dirty=*/false));
    }
    for (int p = 0; p < s.layout.num_params(); ++p) {
      const OwnedPart part = s.layout.OwnedBy(p, rank);
      if (part.empty()) continue;
      const int64_t n = part.param.size();
      const int64_t o = s.layout.ToUnit(p, part.param.begin).value() - s.opt_begin;
      ZS_CHECK(o >= 0 && o + n <= n_all,
               "owned part of unit {} param {} outside the optimizer "
               "range",
               u, p);
      // A frozen parameter of a mixed unit, too: its master alone (its states never move).
      const int param_states = m.model_.units[u].params[size_t(p)].trainable ? unit_states : 0;
      OwnedParamState st;
      st.unit = int(u);
      st.param = p;
      st.begin = part.param.begin.value();
      st.end = part.param.end.value();
      OwnedArray master;
      master.kind = kArrayKinds[0];
      master.dtype = "f32";
      master.data.resize(size_t(n) * sizeof(float));
      std::memcpy(master.data.data(), r.master.data() + o, master.data.size());
      st.arrays.push_back(std::move(master));
      for (int i = 0; i < param_states; ++i) {
        OwnedArray a;
        a.kind = kArrayKinds[1 + i];
        a.dtype = dtype_name;
        a.data.assign(r.codes[i].begin() + o * cb, r.codes[i].begin() + (o + n) * cb);
        if (type == StateDType::kInt8) {
          const int64_t b0 = o / kQuantBlock, b1 = (o + n - 1) / kQuantBlock + 1;
          a.scales.assign(r.scales[i].begin() + b0, r.scales[i].begin() + b1);
          a.block_origin = st.begin - (o - b0 * kQuantBlock);
        }
        st.arrays.push_back(std::move(a));
      }
      ZS_RETURN_IF_ERROR(visit(st));
    }
  }
  return OkStatus();
}

Status ZeroEngine::LoadOwnedState(const OwnedStateSource& source,
                                  const EngineTrainingState& state) {
  Impl& m = *impl_;
  ZS_RETURN_IF_ERROR(m.CheckpointBoundary("a checkpoint loads"));
  const auto [num_states, type, cb, dtype_name] = m.CheckpointCodes();
  const OptimizerHyper hyper = m.Hyper(0.0);
  const size_t elem = DTypeSize(m.dtype_);

  // Local phase: every rank fills its tiles; the ranks then agree before any collective, so a
  // rank that failed (a bad file) never leaves the others waiting in a gather.
  auto local = [&]() -> Status {
    RangeArrays r;
    std::vector<float> values[2];
    std::vector<uint8_t> requant[2];  // int8: per block, 1 when it must be encoded from values
    for (size_t u = 0; u < m.units_.size(); ++u) {
      UnitState& s = m.units_[u];
      const UnitSpec& spec = m.model_.units[u];
      const int64_t n_all = s.opt_size;
      // [Note: frozen units]: a frozen unit loads its values into its parameters, no states.
      const int unit_states = s.frozen ? 0 : num_states;
      const int64_t blocks = BlocksMeeting(0, n_all);
      r.master.assign(size_t(n_all), 0.0f);
      // Padding and gaps hold the optimizer's initial states (as InitOptimizerTiles writes).
      for (int i = 0; i < num_states; ++i) {
        float initial = hyper.kind == OptimizerKind::kAdagrad ? hyper.initial_accumulator : 0.0f;
        if (type == StateDType::kInt8 && Int8StoresRoot(hyper.kind, i)) {
          initial = std::sqrt(initial);
        }
        values[i].assign(size_t(n_all), initial);
        r.codes[i].assign(size_t(n_all * cb), 0);
        r.scales[i].assign(size_t(blocks), 0.0f);
        requant[i].assign(size_t(blocks), 0);
        EncodeState(type, values[i].data(), 0, n_all, r.codes[i].data(), r.scales[i].data(), 0, 0,
                    i);
      }
      const UnitRange opt_range{UnitOffset(s.opt_begin), UnitOffset(s.opt_begin + n_all)};
      for (int p = 0; p < s.layout.num_params(); ++p) {
        const UnitRange where = s.layout.ParamRangeInUnit(p);
        const UnitRange part = where.Intersect(opt_range);
        if (part.empty()) continue;
        const int64_t o = part.begin.value() - s.opt_begin, n = part.size();
        // A frozen parameter of a mixed unit loads its master; its states stay initial.
        const int param_states = spec.params[size_t(p)].trainable ? unit_states : 0;
        OwnedStateRequest req;
        req.unit = int(u);
        req.param = p;
        req.begin = part.begin - where.begin;
        req.end = req.begin + n;
        req.num_states = param_states;
        req.state_dtype = dtype_name;
        req.block_origin = req.begin - o % kQuantBlock;
        const std::string what = fmt::format("unit '{}' parameter '{}' [{}, {})", spec.name,
                                             spec.params[size_t(p)].name, req.begin, req.end);
        auto got = source(req);
        if (!got.ok()) {
          return Status(got.status().code(),
                        fmt::format("loading {}: {}", what, got.status().message()));
        }
        const OwnedParamState& st = *got;
        if (int(st.arrays.size()) != 1 + param_states) {
          return InvalidArgumentError(fmt::format("loading {}: {} arrays, the optimizer keeps {}",
                                                  what, st.arrays.size(), 1 + param_states));
        }
        const OwnedArray& master = st.arrays[0];
        if (master.dtype != "f32" || int64_t(master.data.size()) != n * 4) {
          return InvalidArgumentError(
              fmt::format("loading {}: master is {} bytes of {}, want {} bytes of f32", what,
                          master.data.size(), master.dtype, n * 4));
        }
        std::memcpy(r.master.data() + o, master.data.data(), master.data.size());
        for (int i = 0; i < param_states; ++i) {
          const OwnedArray& a = st.arrays[size_t(1 + i)];
          const int64_t b0 = o / kQuantBlock, b1 = (o + n - 1) / kQuantBlock + 1;
          if (a.dtype == dtype_name) {
            if (int64_t(a.data.size()) != n * cb) {
              return InvalidArgumentError(fmt::format("loading {}: {} has {} bytes, want {}", what,
                                                      a.kind, a.data.size(), n * cb));
            }
            std::memcpy(r.codes[i].data() + o * cb, a.data.data(), a.data.size());
            if (type == StateDType::kInt8) {
              if (a.block_origin != req.block_origin || int64_t(a.scales.size()) != b1 - b0) {
                return InvalidArgumentError(fmt::format(
                    "loading {}: {} has {} int8 scales from parameter offset {}, want {} from {}",
                    what, a.kind, a.scales.size(), a.block_origin, b1 - b0, req.block_origin));
              }
              std::copy(a.scales.begin(), a.scales.end(), r.scales[i].begin() + b0);
              // The values too, in case a neighbour in a shared block needs re-encoding.
              for (int64_t x = 0; x < n; ++x) {
                values[i][size_t(o + x)] =
                    float(int8_t(a.data[size_t(x)])) * a.scales[size_t((o + x) / kQuantBlock - b0)];
              }
            }
          } else if (a.dtype == "f32") {
            if (int64_t(a.data.size()) != n * 4) {
              return InvalidArgumentError(fmt::format("loading {}: {} has {} bytes, want {}", what,
                                                      a.kind, a.data.size(), n * 4));
            }
            std::memcpy(values[i].data() + o, a.data.data(), a.data.size());
            if (type == StateDType::kInt8) {
              std::fill(requant[i].begin() + b0, requant[i].begin() + b1, 1);
            } else {
              EncodeState(type, values[i].data() + o, o, n, r.codes[i].data() + o * cb, nullptr,
                          (uint64_t(u) << 40) ^ uint64_t(s.opt_begin), state.step, i);
            }
          } else {
            return InvalidArgumentError(fmt::format("loading {}: {} arrives as {}, want {} or f32",
                                                    what, a.kind, a.dtype, dtype_name));
          }
        }
      }
      // int8 blocks whose saved blocks did not line up: encoded again, block by block.
      for (int i = 0; type == StateDType::kInt8 && i < unit_states; ++i) {
        for (int64_t b = 0; b < blocks; ++b) {
          if (!requant[i][size_t(b)]) continue;
          const int64_t at = b * kQuantBlock, n = std::min(kQuantBlock, n_all - at);
          EncodeState(type, values[i].data() + at, at, n, r.codes[i].data() + at, &r.scales[i][b],
                      0, 0, i);
        }
      }
      for (int t : s.tiles) {
        const OptimizerTile& tile = m.tiles_[size_t(t)];
        ZS_ASSIGN_OR_RETURN(SlotView arrays, m.states_->Acquire(t, ShardStore::Access::kOverwrite));
        std::memcpy(arrays.arrays[kMaster], r.master.data() + tile.begin,
                    size_t(tile.size()) * sizeof(float));
        for (int i = 0; i < num_states; ++i) {
          std::memcpy(arrays.arrays[kState0 + i], r.codes[i].data() + tile.begin * cb,
                      size_t(tile.size() * cb));
          if (type == StateDType::kInt8) {
            std::memcpy(arrays.arrays[kScale0 + i], r.scales[i].data() + tile.begin / kQuantBlock,
                        size_t(BlocksMeeting(0, tile.size())) * sizeof(float));
          }
        }
        ZS_RETURN_IF_ERROR(m.states_->Release(t, /*dirty=*/true));
      }
      // The compute-dtype parameters over the optimizer range: what a step writes (param_out).
      if (m.param_store_ != nullptr) {
        ZS_ASSIGN_OR_RETURN(SlotView slot,
                            m.param_store_->Acquire(int(u), ShardStore::Access::kOverwrite));
        ConvertFromFloat(r.master.data(), slot.arrays[0], m.dtype_, size_t(n_all));
        ZS_RETURN_IF_ERROR(m.param_store_->Release(int(u), /*dirty=*/true));
      } else {
        ConvertFromFloat(r.master.data(),
                         s.params.data_as<char>() + (s.opt_begin - s.param_base) * int64_t(elem),
                         m.dtype_, size_t(n_all));
      }
    }
    return OkStatus();
  };
  Status status = local();
  ZS_ASSIGN_OR_RETURN(const double failed, AllSumScalar(m.dp_, status.ok() ? 0.0 : 1.0));
  if (!status.ok()) {
    m.tiles_broken_ = status;
    return status;
  }
  if (failed > 0) {
    m.tiles_broken_ = AbortedError(
        fmt::format("engine (rank {}): loading a checkpoint failed on {} other rank(s)",
                    m.dp_.rank(), int64_t(failed)));
    return m.tiles_broken_;
  }
  if (m.param_store_ != nullptr) ZS_RETURN_IF_ERROR(m.param_store_->Flush());
  const int stage = m.config_.zero_optimization.stage;
  if (stage == 1 || stage == 2) {
    ZS_RETURN_IF_ERROR(m.AllGatherUpdatedParams(/*frozen_too=*/true));
  }
  if (m.gatherer_ != nullptr) ZS_RETURN_IF_ERROR(m.gatherer_->RegatherPersistent());
  m.step_ = state.step;
  m.scaler_.set_state(
      {state.loss_scale, state.loss_scale_hysteresis_left, state.loss_scale_good_steps});
  return OkStatus();
}

}  // namespace zs

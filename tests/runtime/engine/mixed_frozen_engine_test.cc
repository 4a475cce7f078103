// Units mixing frozen and trainable parameters ([Note: frozen units] in zero_engine.h), on a
// LoRA-like model with hand-written backward, 2 ranks as threads:
//   h = tanh(Win x + bin);  z = W h + B (A h);  y = Wout z + bout;  loss = |y - t|^2 / 2
// W is frozen; A and B (the adapters) train in W's unit ("lora"), or, in the reference layout,
// W has a unit of its own ("lora.base", wholly frozen) and A, B another ("lora.adapter").
// - The trainable parameters match the reference layout bit for bit. Exactly comparable: at
//   world 2 every reduced element is one addition of the two ranks' values (no order to
//   differ), micro-batches accumulate in the same order, the optimizer is elementwise, and
//   without gradient clipping the norm (whose per-rank partial sums do depend on the layout)
//   changes nothing. Stages 0-3 and the offload tiers give the same bits; W keeps the bits of
//   its initial values (-0.0 and subnormals included) under every optimizer kind and state
//   dtype, with weight decay on and W in a parameter group.
// - Garbage (NaN, inf) that the model writes into W's gradient changes nothing: fp32, bf16,
//   fp16 (no overflow skip).
// - Checkpoints save W's master alone and load it back exactly.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"
#include "tests/runtime/engine/engine_test_support.h"

namespace zs {
namespace {

using testing_support::Uniform;

constexpr int kD = 5, kH = 8, kR = 2, kO = 3, kBatch = 4;

// The model's tensors, whatever unit holds them.
enum Tensor { kWin, kBin, kW, kA, kB, kWout, kBout, kNumTensors };

struct Where {
  int unit = 0;
  int param = 0;
};

// Where each tensor lives: the mixed layout (W, A, B in one unit) or W in a unit of its own.
struct Layout {
  bool separate = false;
  Where at[kNumTensors];
  int lora_units[2] = {1, 1};  // the units the LoRA layer brackets (once each)
  int units = 3;
};

Layout MakeLayout(bool separate) {
  Layout l;
  l.separate = separate;
  const int out = separate ? 3 : 2;
  l.at[kWin] = {0, 0};
  l.at[kBin] = {0, 1};
  l.at[kW] = {1, 0};
  l.at[kA] = {separate ? 2 : 1, separate ? 0 : 1};
  l.at[kB] = {separate ? 2 : 1, separate ? 1 : 2};
  l.at[kWout] = {out, 0};
  l.at[kBout] = {out, 1};
  l.lora_units[1] = separate ? 2 : 1;
  l.units = separate ? 4 : 3;
  return l;
}

ModelSpec LoraSpec(const Layout& l, bool freeze_w = true) {
  ModelSpec spec;
  spec.units.push_back({"in", {ParamSpec{"weight", {kH, kD}}, ParamSpec{"bias", {kH}, false}}});
  ParamSpec w{"W", {kH, kH}};
  w.trainable = !freeze_w;
  w.group = "adapters";  // frozen wins over its group's learning rate and decay
  ParamSpec a{"A", {kR, kH}}, b{"B", {kH, kR}};
  b.group = "adapters";
  if (l.separate) {
    spec.units.push_back({"lora.base", {w}});
    spec.units.push_back({"lora.adapter", {a, b}});
  } else {
    spec.units.push_back({"lora", {w, a, b}});
  }
  spec.units.push_back({"out", {ParamSpec{"weight", {kO, kH}}, ParamSpec{"bias", {kO}, false}}});
  return spec;
}

// W starts with -0.0 and subnormals among its values: the bits must survive the steps.
void InitTensor(int t, std::span<float> values) {
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.4f * Uniform(17, uint64_t(t), i);
  if (t == kW) {
    values[0] = -0.0f;
    values[1] = 0.0f;
    values[2] = 1e-40f;
    values[3] = -3e-39f;
  }
}

ParamInit LoraInit(const Layout& l, uint64_t salt = 0) {
  return [l, salt](int unit, int param, std::span<float> values) {
    for (int t = 0; t < kNumTensors; ++t) {
      if (l.at[t].unit == unit && l.at[t].param == param) {
        InitTensor(t + int(salt) * kNumTensors, values);
      }
    }
  };
}

enum class Garbage { kNone, kNaN, kInf };

// One micro-batch of kBatch samples through the brackets; returns the summed loss.
StatusOr<double> ForwardBackward(UnitAccess& e, const Layout& l, int step, int micro, int rank,
                                 int world, Garbage garbage) {
  auto param = [&](Tensor t) { return e.Param(l.at[t].unit, l.at[t].param); };
  auto grad = [&](Tensor t) { return e.Grad(l.at[t].unit, l.at[t].param); };
  std::vector<float> x(kBatch * kD), target(kBatch * kO), h(kBatch * kH), ah(kBatch * kR),
      z(kBatch * kH), y(kBatch * kO);
  for (int b = 0; b < kBatch; ++b) {
    const uint64_t g = uint64_t((micro * world + rank) * kBatch + b);
    for (int i = 0; i < kD; ++i) x[b * kD + i] = Uniform(step, g, i);
    for (int o = 0; o < kO; ++o) target[b * kO + o] = 0.5f * Uniform(step, g, 100 + o);
  }
  // Forward.
  ZS_RETURN_IF_ERROR(e.BeginForward(0));
  {
    auto win = param(kWin), bin = param(kBin);
    for (int b = 0; b < kBatch; ++b) {
      for (int j = 0; j < kH; ++j) {
        float s = bin[j];
        for (int i = 0; i < kD; ++i) s += win[j * kD + i] * x[b * kD + i];
        h[b * kH + j] = std::tanh(s);
      }
    }
  }
  ZS_RETURN_IF_ERROR(e.EndForward(0));
  ZS_RETURN_IF_ERROR(e.BeginForward(l.lora_units[0]));
  if (l.separate) ZS_RETURN_IF_ERROR(e.BeginForward(l.lora_units[1]));
  {
    auto w = param(kW), a = param(kA), bm = param(kB);
    for (int b = 0; b < kBatch; ++b) {
      for (int r = 0; r < kR; ++r) {
        float s = 0;
        for (int j = 0; j < kH; ++j) s += a[r * kH + j] * h[b * kH + j];
        ah[b * kR + r] = s;
      }
      for (int i = 0; i < kH; ++i) {
        float s = 0;
        for (int j = 0; j < kH; ++j) s += w[i * kH + j] * h[b * kH + j];
        for (int r = 0; r < kR; ++r) s += bm[i * kR + r] * ah[b * kR + r];
        z[b * kH + i] = s;
      }
    }
  }
  if (l.separate) ZS_RETURN_IF_ERROR(e.EndForward(l.lora_units[1]));
  ZS_RETURN_IF_ERROR(e.EndForward(l.lora_units[0]));
  const int out = l.at[kWout].unit;
  ZS_RETURN_IF_ERROR(e.BeginForward(out));
  double loss = 0;
  {
    auto wout = param(kWout), bout = param(kBout);
    for (int b = 0; b < kBatch; ++b) {
      for (int o = 0; o < kO; ++o) {
        float s = bout[o];
        for (int i = 0; i < kH; ++i) s += wout[o * kH + i] * z[b * kH + i];
        y[b * kO + o] = s;
        loss += 0.5 * double(s - target[b * kO + o]) * double(s - target[b * kO + o]);
      }
    }
  }
  ZS_RETURN_IF_ERROR(e.EndForward(out));

  // Backward: the mean loss over the samples of the global batch.
  const float scale = e.backward_scale() / float(kBatch);
  std::vector<float> dz(kBatch * kH, 0.f), dh(kBatch * kH, 0.f);
  ZS_RETURN_IF_ERROR(e.BeginBackward(out));
  {
    auto wout = param(kWout);
    auto gw = grad(kWout), gb = grad(kBout);
    for (int b = 0; b < kBatch; ++b) {
      for (int o = 0; o < kO; ++o) {
        const float dy = (y[b * kO + o] - target[b * kO + o]) * scale;
        gb[o] += dy;
        for (int i = 0; i < kH; ++i) {
          gw[o * kH + i] += dy * z[b * kH + i];
          dz[b * kH + i] += wout[o * kH + i] * dy;
        }
      }
    }
  }
  ZS_RETURN_IF_ERROR(e.EndBackward(out));
  if (l.separate) ZS_RETURN_IF_ERROR(e.BeginBackward(l.lora_units[1]));
  ZS_RETURN_IF_ERROR(e.BeginBackward(l.lora_units[0]));
  {
    auto w = param(kW), a = param(kA), bm = param(kB);
    auto gW = grad(kW), gA = grad(kA), gB = grad(kB);
    for (int b = 0; b < kBatch; ++b) {
      float da[kR] = {};
      for (int i = 0; i < kH; ++i) {
        const float d = dz[b * kH + i];
        for (int r = 0; r < kR; ++r) {
          gB[i * kR + r] += d * ah[b * kR + r];
          da[r] += bm[i * kR + r] * d;
        }
        for (int j = 0; j < kH; ++j) {
          // W's gradient: scratch for the engine, computed anyway (or garbage).
          gW[i * kH + j] += d * h[b * kH + j];
          dh[b * kH + j] += w[i * kH + j] * d;
        }
      }
      for (int r = 0; r < kR; ++r) {
        for (int j = 0; j < kH; ++j) {
          gA[r * kH + j] += da[r] * h[b * kH + j];
          dh[b * kH + j] += a[r * kH + j] * da[r];
        }
      }
    }
    if (garbage != Garbage::kNone) {
      const float bad = garbage == Garbage::kNaN ? std::numeric_limits<float>::quiet_NaN()
                                                 : std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < gW.size(); i += 3) gW[i] = i % 2 ? -bad : bad;
    }
  }
  ZS_RETURN_IF_ERROR(e.EndBackward(l.lora_units[0]));
  if (l.separate) ZS_RETURN_IF_ERROR(e.EndBackward(l.lora_units[1]));
  ZS_RETURN_IF_ERROR(e.BeginBackward(0));
  {
    auto gw = grad(kWin), gb = grad(kBin);
    for (int b = 0; b < kBatch; ++b) {
      for (int j = 0; j < kH; ++j) {
        const float d = dh[b * kH + j] * (1 - h[b * kH + j] * h[b * kH + j]);
        gb[j] += d;
        for (int i = 0; i < kD; ++i) gw[j * kD + i] += d * x[b * kD + i];
      }
    }
  }
  ZS_RETURN_IF_ERROR(e.EndBackward(0));
  return loss;
}

EngineConfig LoraConfig(int stage) {
  EngineConfig c;
  c.zero_optimization.stage = stage;
  c.zero_optimization.reduce_bucket_size = 40;
  c.zero_optimization.stage3_param_persistence_threshold = 0;
  c.optimizer.lr = 2e-2;
  c.optimizer.weight_decay = 0.1;
  c.gradient_accumulation_steps = 2;
  ParamGroupConfig adapters;
  adapters.name = "adapters";
  adapters.lr_scale = 0.5;
  adapters.weight_decay = 0.05;
  c.zerostack.param_groups = {adapters};
  return c;
}

struct LoraRun {
  EngineConfig config = LoraConfig(0);
  bool separate = false;
  bool freeze_w = true;
  Garbage garbage = Garbage::kNone;
  int steps = 3;
};

struct LoraResult {
  uint64_t digest = 0;
  std::vector<std::vector<float>> tensors;  // by Tensor: the fp32 master values (rank 0)
  std::vector<StepResult> steps;            // rank 0's
  std::vector<MemorySnapshot> memory;
};

StatusOr<LoraResult> TrainLora(const LoraRun& run) {
  const Layout l = MakeLayout(run.separate);
  LoraResult result;
  result.tensors.resize(kNumTensors);
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(20'000);
  Status status = RunLocalRanks(
      2, options,
      [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(auto e, ZeroEngine::Create(run.config, LoraSpec(l, run.freeze_w),
                                                       LoraInit(l), *device, comm));
        std::vector<StepResult> steps;
        for (int step = 0; step < run.steps; ++step) {
          for (int m = 0; m < run.config.gradient_accumulation_steps; ++m) {
            ZS_RETURN_IF_ERROR(ForwardBackward(*e, l, step, m, rank, 2, run.garbage).status());
          }
          ZS_ASSIGN_OR_RETURN(StepResult r, e->Step());
          steps.push_back(r);
        }
        ZS_ASSIGN_OR_RETURN(uint64_t digest, e->MasterDigest());
        std::vector<std::vector<float>> tensors(kNumTensors);
        for (int t = 0; t < kNumTensors; ++t) {
          ZS_ASSIGN_OR_RETURN(tensors[size_t(t)],
                              e->GatherMasterParam(l.at[t].unit, l.at[t].param));
        }
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) {
          result.digest = digest;
          result.tensors = std::move(tensors);
          result.steps = std::move(steps);
        }
        return OkStatus();
      },
      &result.memory);
  if (!status.ok()) return status;
  return result;
}

// Bitwise equality (EXPECT_EQ on floats calls -0.0 and 0.0 equal).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> InitialW() {
  std::vector<float> w(kH * kH);
  InitTensor(kW, w);
  return w;
}

TEST(MixedFrozenUnits, AdaptersTrainAsWithTheFrozenWeightInAUnitOfItsOwn) {
  uint64_t stage0 = 0, clipped0 = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    LoraRun mixed;
    mixed.config = LoraConfig(stage);
    LoraRun separate = mixed;
    separate.separate = true;
    auto got = TrainLora(mixed);
    auto want = TrainLora(separate);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    EXPECT_TRUE(SameBits(got->tensors[kW], InitialW()));
    for (int t = 0; t < kNumTensors; ++t) {
      EXPECT_TRUE(SameBits(got->tensors[size_t(t)], want->tensors[size_t(t)])) << "tensor " << t;
    }
    std::vector<float> initial_a(kR * kH);
    InitTensor(kA, initial_a);
    EXPECT_FALSE(SameBits(got->tensors[kA], initial_a)) << "the adapters train";
    if (stage == 0) stage0 = got->digest;
    EXPECT_EQ(got->digest, stage0);
    // The mixed unit keeps W's gradient and optimizer state: the bytes of the same unit with W
    // trainable, more gradient bytes than the reference.
    LoraRun trainable = mixed;
    trainable.freeze_w = false;
    auto all = TrainLora(trainable);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    for (int r = 0; r < 2; ++r) {
      for (MemoryCategory c : {MemoryCategory::kGradients, MemoryCategory::kOptimizerStates}) {
        EXPECT_EQ(got->memory[size_t(r)].Peak(MemoryTier::kDevice, c),
                  all->memory[size_t(r)].Peak(MemoryTier::kDevice, c));
      }
      EXPECT_GT(got->memory[size_t(r)].Peak(MemoryTier::kDevice, MemoryCategory::kGradients),
                want->memory[size_t(r)].Peak(MemoryTier::kDevice, MemoryCategory::kGradients));
    }
    EXPECT_FALSE(SameBits(all->tensors[kW], InitialW())) << "W trains when not frozen";
    // With clipping on (the norm's partial sums depend on the layout): stages still agree.
    mixed.config.gradient_clipping = 0.05;
    auto clipped = TrainLora(mixed);
    ASSERT_TRUE(clipped.ok()) << clipped.status().ToString();
    EXPECT_LT(clipped->steps[0].clip_coef, 1.0) << "clipping must engage";
    EXPECT_TRUE(SameBits(clipped->tensors[kW], InitialW()));
    if (stage == 0) clipped0 = clipped->digest;
    EXPECT_EQ(clipped->digest, clipped0);
  }
}

TEST(MixedFrozenUnits, OffloadTiersGiveTheInMemoryBits) {
  const std::string dir = fmt::format("{}/zs_mixed_frozen_{}", ::testing::TempDir(), getpid());
  std::filesystem::create_directories(dir);
  auto run = [&](int stage, OffloadDevice optimizer, OffloadDevice params) -> uint64_t {
    LoraRun r;
    r.config = LoraConfig(stage);
    auto& z = r.config.zero_optimization;
    z.offload_optimizer.device = optimizer;
    z.offload_optimizer.nvme_path = dir;
    z.offload_param.device = params;
    z.offload_param.nvme_path = dir;
    auto got = TrainLora(r);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (!got.ok()) return 0;
    EXPECT_TRUE(SameBits(got->tensors[kW], InitialW()));
    return got->digest;
  };
  const uint64_t in_memory = run(3, OffloadDevice::kNone, OffloadDevice::kNone);
  EXPECT_EQ(run(2, OffloadDevice::kCpu, OffloadDevice::kNone), in_memory);
  EXPECT_EQ(run(3, OffloadDevice::kCpu, OffloadDevice::kCpu), in_memory);
  EXPECT_EQ(run(3, OffloadDevice::kNvme, OffloadDevice::kNvme), in_memory);
  std::filesystem::remove_all(dir);
}

// Learning rate 0 on a zero gradient leaves the bits of W (-0.0, subnormals) under every
// optimizer kind and state dtype, with weight decay asked for.
TEST(MixedFrozenUnits, EveryOptimizerAndStateDTypeLeavesTheFrozenBits) {
  struct Kind {
    OptimizerType type;
    bool adam_w_mode;
    double momentum;
    const char* name;
  };
  const Kind kinds[] = {{OptimizerType::kAdamW, true, 0.0, "AdamW"},
                        {OptimizerType::kAdam, false, 0.0, "Adam (L2)"},
                        {OptimizerType::kSgd, true, 0.9, "SGD momentum"},
                        {OptimizerType::kSgd, true, 0.0, "SGD"},
                        {OptimizerType::kAdagrad, true, 0.0, "Adagrad"},
                        {OptimizerType::kLion, true, 0.0, "Lion"}};
  for (const Kind& kind : kinds) {
    for (OptimizerStateType states :
         {OptimizerStateType::kF32, OptimizerStateType::kBF16, OptimizerStateType::kInt8}) {
      SCOPED_TRACE(fmt::format("{} states {}", kind.name, int(states)));
      LoraRun r;
      r.config = LoraConfig(2);
      r.config.optimizer.type = kind.type;
      r.config.optimizer.adam_w_mode = kind.adam_w_mode;
      r.config.optimizer.momentum = kind.momentum;
      r.config.optimizer.nesterov = kind.momentum > 0;
      r.config.optimizer.initial_accumulator_value = kind.type == OptimizerType::kAdagrad ? 0.1 : 0;
      r.config.zerostack.optimizer_state_dtype = states;
      r.steps = 2;
      auto got = TrainLora(r);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_TRUE(SameBits(got->tensors[kW], InitialW()));
    }
  }
}

TEST(MixedFrozenUnits, GarbageInTheFrozenGradientChangesNothing) {
  for (const char* dtype : {"fp32", "bf16", "fp16"}) {
    for (int stage : {0, 3}) {
      SCOPED_TRACE(fmt::format("{} stage {}", dtype, stage));
      LoraRun clean;
      clean.config = LoraConfig(stage);
      clean.config.bf16.enabled = std::string(dtype) == "bf16";
      clean.config.fp16.enabled = std::string(dtype) == "fp16";
      clean.config.fp16.initial_scale_power = 8;
      clean.config.gradient_clipping = 0.05;
      auto want = TrainLora(clean);
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      for (Garbage garbage : {Garbage::kNaN, Garbage::kInf}) {
        LoraRun dirty = clean;
        dirty.garbage = garbage;
        auto got = TrainLora(dirty);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_EQ(got->digest, want->digest);
        ASSERT_EQ(got->steps.size(), want->steps.size());
        for (size_t s = 0; s < got->steps.size(); ++s) {
          EXPECT_FALSE(got->steps[s].skipped) << "step " << s;
          EXPECT_EQ(got->steps[s].grad_norm, want->steps[s].grad_norm) << "step " << s;
          EXPECT_TRUE(std::isfinite(got->steps[s].grad_norm));
        }
        EXPECT_EQ(got->steps.back().loss_scale, want->steps.back().loss_scale);
      }
    }
  }
}

// W is saved as its master alone, the adapters with their states; the files load into an
// engine of another stage built from other values, which goes on with the same bits.
TEST(MixedFrozenUnits, CheckpointRoundTripKeepsTheFrozenWeightExact) {
  const std::string dir = fmt::format("{}/zs_mixed_ckpt_{}", ::testing::TempDir(), getpid());
  std::filesystem::remove_all(dir);
  const Layout l = MakeLayout(false);
  std::mutex mu;
  uint64_t digests[2] = {0, 0};
  Status status =
      RunLocalRanks(2, {}, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(
            auto a, ZeroEngine::Create(LoraConfig(3), LoraSpec(l), LoraInit(l), *device, comm));
        ZS_ASSIGN_OR_RETURN(auto b, ZeroEngine::Create(LoraConfig(1), LoraSpec(l),
                                                       LoraInit(l, /*salt=*/1), *device, comm));
        auto train = [&](ZeroEngine& e, int step) -> Status {
          for (int m = 0; m < 2; ++m) {
            ZS_RETURN_IF_ERROR(ForwardBackward(e, l, step, m, rank, 2, Garbage::kNone).status());
          }
          return e.Step().status();
        };
        for (int step = 0; step < 2; ++step) ZS_RETURN_IF_ERROR(train(*a, step));
        ZS_RETURN_IF_ERROR(a->VisitOwnedState([&](const OwnedParamState& st) {
          const bool is_w = st.unit == l.at[kW].unit && st.param == l.at[kW].param;
          EXPECT_EQ(st.arrays.size(), is_w ? 1u : 3u) << "unit " << st.unit << " " << st.param;
          return OkStatus();
        }));
        ZS_ASSIGN_OR_RETURN(std::string saved, SaveCheckpoint(*a, comm, dir));
        ZS_RETURN_IF_ERROR(LoadCheckpoint(*b, comm, saved).status());
        ZS_ASSIGN_OR_RETURN(std::vector<float> w, b->GatherMasterParam(l.at[kW].unit, 0));
        EXPECT_TRUE(SameBits(w, InitialW()));
        // The compute-dtype W every rank uses, too.
        ZS_RETURN_IF_ERROR(b->BeginEvaluation());
        ZS_RETURN_IF_ERROR(b->BeginForward(l.at[kW].unit));
        std::span<const float> used = b->Param(l.at[kW].unit, 0);
        EXPECT_TRUE(SameBits(std::vector<float>(used.begin(), used.end()), InitialW()));
        ZS_RETURN_IF_ERROR(b->EndForward(l.at[kW].unit));
        ZS_RETURN_IF_ERROR(b->EndEvaluation());
        for (int step = 2; step < 4; ++step) {
          ZS_RETURN_IF_ERROR(train(*a, step));
          ZS_RETURN_IF_ERROR(train(*b, step));
        }
        ZS_ASSIGN_OR_RETURN(uint64_t da, a->MasterDigest());
        ZS_ASSIGN_OR_RETURN(uint64_t db, b->MasterDigest());
        ZS_ASSIGN_OR_RETURN(w, b->GatherMasterParam(l.at[kW].unit, 0));
        EXPECT_TRUE(SameBits(w, InitialW()));
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) digests[0] = da, digests[1] = db;
        return OkStatus();
      });
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_NE(digests[0], 0u);
  EXPECT_EQ(digests[0], digests[1]);
}

}  // namespace
}  // namespace zs

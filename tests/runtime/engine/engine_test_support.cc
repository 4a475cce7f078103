#include "tests/runtime/engine/engine_test_support.h"

#include <cmath>
#include <mutex>

#include "runtime/base/splitmix64.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"

namespace zs::testing_support {

using examples::TanhMlp;

float Uniform(uint64_t a, uint64_t b, uint64_t c) {
  return 2.0f * float(SplitMix64(a ^ SplitMix64(b ^ SplitMix64(c))) >> 40) / float(1 << 24) - 1.0f;
}

void FillBatch(const TanhMlp& model, int step, int micro, int rank, int world, int batch,
               std::vector<float>& x, std::vector<float>& y) {
  x.assign(size_t(batch) * model.in_width(), 0.f);
  y.assign(size_t(batch) * model.out_width(), 0.f);
  for (int b = 0; b < batch; ++b) {
    const uint64_t g = uint64_t((micro * world + rank) * batch + b);
    float sum = 0.f;
    for (int i = 0; i < model.in_width(); ++i) {
      x[size_t(b) * model.in_width() + i] = Uniform(step, g, i);
      sum += x[size_t(b) * model.in_width() + i] * float(i % 3 - 1);
    }
    for (int o = 0; o < model.out_width(); ++o) {
      y[size_t(b) * model.out_width() + o] =
          std::tanh(0.3f * sum + 0.2f * float(o)) + 0.05f * Uniform(step, g, 1000 + o);
    }
  }
}

StatusOr<RunResult> Train(const RunSpec& spec) {
  RunResult result;
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(30'000);
  Status status = RunLocalRanks(
      spec.world, options,
      [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        TanhMlp model(spec.widths);
        ModelSpec model_spec = model.Spec();
        for (UnitSpec& unit : model_spec.units) {
          if (auto it = spec.unit_groups.find(unit.name); it != spec.unit_groups.end()) {
            for (ParamSpec& p : unit.params) p.group = it->second;
          }
          for (const std::string& frozen : spec.frozen_units) {
            if (unit.name != frozen) continue;
            for (ParamSpec& p : unit.params) p.trainable = false;
          }
        }
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice(spec.device, tracker));
        ZS_ASSIGN_OR_RETURN(
            auto engine,
            ZeroEngine::Create(spec.config, std::move(model_spec), model.Init(7), *device, comm,
                               spec.traces.empty() ? nullptr : spec.traces[size_t(rank)]));
        std::vector<float> x, y;
        for (int step = 0; step < spec.steps; ++step) {
          double loss = 0;
          for (int m = 0; m < spec.config.gradient_accumulation_steps; ++m) {
            FillBatch(model, step, m, rank, spec.world, spec.micro_batch, x, y);
            if (step == spec.nan_input_step && rank == 0) x[0] = std::nanf("");
            ZS_ASSIGN_OR_RETURN(double l, model.ForwardBackward(*engine, x, y, spec.micro_batch));
            loss += l / spec.config.gradient_accumulation_steps;
          }
          ZS_ASSIGN_OR_RETURN(StepResult r, engine->Step());
          ZS_ASSIGN_OR_RETURN(double mean, engine->AllReduceMean(loss));
          if (spec.after_step) ZS_RETURN_IF_ERROR(spec.after_step(rank, step, *engine));
          if (rank == 0) {
            result.losses.push_back(mean);
            result.steps.push_back(r);
          }
        }
        ZS_ASSIGN_OR_RETURN(uint64_t digest, engine->MasterDigest());
        std::vector<std::vector<float>> params;
        for (int u = 0; u < int(engine->model().units.size()); ++u) {
          for (int p = 0; p < int(engine->model().units[u].params.size()); ++p) {
            ZS_ASSIGN_OR_RETURN(auto values, engine->GatherMasterParam(u, p));
            params.push_back(std::move(values));
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) {
          result.digest = digest;
          result.params = std::move(params);
          result.gather = engine->gather_report();
        } else if (digest != result.digest && result.digest != 0) {
          return InternalError("ranks disagree on the digest");
        }
        return OkStatus();
      },
      &result.memory);
  if (!status.ok()) return status;
  return result;
}

EngineConfig BaseConfig(int stage) {
  EngineConfig c;
  c.zero_optimization.stage = stage;
  c.optimizer.lr = 1e-2;
  c.optimizer.weight_decay = 0.1;
  return c;
}

}  // namespace zs::testing_support

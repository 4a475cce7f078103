// wrap_custom_model: a model written by hand (examples/custom_model/tanh_mlp.h, no runtime/nn)
// trained with the ZeroEngine on 2 ranks as threads, ZeRO stage 3. The whole integration is:
//   1. describe the parameters as gather units (TanhMlp::Spec: one unit per layer, weight
//      decay as metadata) and give an initializer that does not depend on the rank;
//   2. bracket every use of a unit with Begin/EndForward and Begin/EndBackward, read
//      parameters with Param() and accumulate gradients into Grad();
//   3. seed backward with backward_scale() and call Step() after each global batch.
#include <fmt/format.h>

#include <cmath>

#include "examples/custom_model/tanh_mlp.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"

int main() {
  using namespace zs;
  constexpr int kWorld = 2, kBatch = 16, kSteps = 60;
  EngineConfig config;
  config.zero_optimization.stage = 3;
  config.zero_optimization.overlap_comm = true;
  config.optimizer.lr = 1e-2;
  CommOptions options;
  Status status = RunLocalRanks(
      kWorld, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        examples::TanhMlp model({8, 32, 32, 1});
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(
            auto engine, ZeroEngine::Create(config, model.Spec(), model.Init(42), *device, comm));
        std::vector<float> x(kBatch * 8), y(kBatch);
        double first_loss = 0, last_loss = 0;
        for (int step = 0; step < kSteps; ++step) {
          // Learn y = sin(x0) * cos(x1) + x2 / 2 from fresh samples (different on each rank).
          for (int b = 0; b < kBatch; ++b) {
            for (int i = 0; i < 8; ++i) {
              x[b * 8 + i] = std::sin(float(step * 131 + (rank * kBatch + b) * 17 + i * 7));
            }
            y[b] = std::sin(x[b * 8]) * std::cos(x[b * 8 + 1]) + x[b * 8 + 2] / 2;
          }
          ZS_ASSIGN_OR_RETURN(double loss, model.ForwardBackward(*engine, x, y, kBatch));
          ZS_ASSIGN_OR_RETURN(StepResult result, engine->Step());
          ZS_ASSIGN_OR_RETURN(double mean, engine->AllReduceMean(loss));
          if (step < 5) first_loss += mean / 5;
          if (step >= kSteps - 5) last_loss += mean / 5;
          if (rank == 0 && step % 10 == 0) {
            fmt::print("step {:3d}  loss {:.5f}  grad norm {:.4f}\n", step, mean, result.grad_norm);
          }
        }
        if (last_loss > 0.5 * first_loss) {
          return InternalError(
              fmt::format("the loss did not fall: {:.5f} over the first 5 steps, "
                          "{:.5f} over the last 5",
                          first_loss, last_loss));
        }
        if (rank == 0) {
          fmt::print("loss {:.5f} -> {:.5f}\n", first_loss, last_loss);
          fmt::print("rank 0 peak device bytes: parameters {}, gradients {}, optimizer states {}\n",
                     tracker.Peak(MemoryTier::kDevice, MemoryCategory::kParameters),
                     tracker.Peak(MemoryTier::kDevice, MemoryCategory::kGradients),
                     tracker.Peak(MemoryTier::kDevice, MemoryCategory::kOptimizerStates));
        }
        return OkStatus();
      });
  if (!status.ok()) {
    fmt::print(stderr, "wrap_custom_model: {}\n", status.ToString());
    return 1;
  }
  return 0;
}

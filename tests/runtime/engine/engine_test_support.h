// The engine tests' harness: train examples/custom_model/tanh_mlp.h through a ZeroEngine on
// ranks as threads, with a fixed data stream, and return what every test compares (the master
// digest, losses, rank 0's step results, memory per rank).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "examples/custom_model/tanh_mlp.h"
#include "runtime/base/status.h"
#include "runtime/engine/zero_engine.h"

namespace zs::testing_support {

float Uniform(uint64_t a, uint64_t b, uint64_t c);

struct RunSpec {
  std::vector<int> widths = {13, 29, 17, 5};
  int world = 1;
  int micro_batch = 4;
  EngineConfig config;
  int steps = 4;
  // ParamSpec::group for every parameter of these units ("layer.k" -> group name).
  std::map<std::string, std::string> unit_groups;
  // Units whose parameters are frozen (ParamSpec::trainable = false).
  std::vector<std::string> frozen_units;
  std::string device = "cpu";  // a CreateDevice spec ("budgeted-cpu:64K")
  // At this step (-1: none) rank 0's first input value is NaN (a diverged run's data).
  int nan_input_step = -1;
  // Called on every rank after each step (e.g. to read the engine's reports).
  std::function<Status(int rank, int step, ZeroEngine&)> after_step;
  // Empty, or one recorder per rank (not owned) that the engines trace into.
  std::vector<TraceRecorder*> traces;
};

struct RunResult {
  uint64_t digest = 0;
  std::vector<double> losses;              // global mean loss per step
  std::vector<StepResult> steps;           // rank 0's
  std::vector<std::vector<float>> params;  // every parameter, rank 0's gather
  std::vector<MemorySnapshot> memory;
  GatherReport gather;
};

// Sample g of step s: x uniform in [-1, 1), y = a fixed smooth function of x plus noise. The
// global index g = (micro * world + rank) * B + b, so every split of a global batch sees the
// same samples.
void FillBatch(const examples::TanhMlp& model, int step, int micro, int rank, int world, int batch,
               std::vector<float>& x, std::vector<float>& y);

StatusOr<RunResult> Train(const RunSpec& spec);

EngineConfig BaseConfig(int stage);

}  // namespace zs::testing_support

// The fused optimizer step (kernels/cuda/fused_optimizer.h) on one GPU against a
// device-to-device cudaMemcpy, measured in the same run.
//
// Setup: N parameters (1e9 by default; ZS_BENCH_OPT_PARAMS overrides; cut to what fits in
// free device memory, with a note on stderr), AdamW with fp32 master, bf16 gradients, bf16
// param_out and fp32, bf16 or int8 states (`states` 0, 1, 2), split into `tensors` equal
// tensors of one launch (8: the table travels in the kernel arguments; 64: through the device
// workspace). Bytes one step moves per parameter (read + written): fp32 states 14 + 14 = 28,
// bf16 states 10 + 10 = 20, int8 states 8 + 8 plus the block scales (2 states x 4 bytes read
// and written per 256 elements) = 16.0625. The baseline copies 14 N bytes (28 N bytes moved).
//
// Counters: bytes_per_second = step bytes moved / step time (GPU time, cudaEvent-timed);
// copy_bytes_per_second likewise for the copy; ratio_to_copy_bandwidth = the first over the
// second (1.0: the step moves its bytes at memcpy speed); params_per_second. Without a CUDA
// device it prints why and exits 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/device_probe.h"
#include "kernels/cuda/fused_optimizer.h"

namespace zs::kernels {
namespace {

constexpr size_t kArenaBytesPerParam = 16;  // master, m, v, grad, param_out
constexpr size_t kCopyBytesPerParam = 14;   // copied once: 28 bytes moved per parameter

// The benchmark's device buffers, allocated once for all benchmarks.
struct Buffers {
  size_t n = 0;
  void* arena = nullptr;     // [master | m | v | grad | param_out]
  void* copy_dst = nullptr;  // kCopyBytesPerParam * n
  void* workspace = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::string error;

  float* master() const { return static_cast<float*>(arena); }
  float* m() const { return master() + n; }
  float* v() const { return master() + 2 * n; }
  uint16_t* grad() const { return reinterpret_cast<uint16_t*>(master() + 3 * n); }
  uint16_t* param_out() const { return grad() + n; }
  // int8 states: the block scales of m and v, after the arena.
  size_t blocks() const { return (n + kFusedQuantBlock - 1) / kFusedQuantBlock; }
  float* m_scales() const { return reinterpret_cast<float*>(param_out() + n); }
  float* v_scales() const { return m_scales() + blocks(); }
  size_t arena_bytes() const { return kArenaBytesPerParam * n + 2 * 4 * blocks(); }

  void Init() {
    size_t want = 1'000'000'000;
    if (const char* env = std::getenv("ZS_BENCH_OPT_PARAMS"))
      want = std::strtoull(env, nullptr, 10);
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      error = "cudaMemGetInfo failed";
      return;
    }
    const size_t fit =
        size_t(double(free_bytes) * 0.9) / (kArenaBytesPerParam + kCopyBytesPerParam) / 1024 * 1024;
    n = std::min(want, fit);
    if (n < want) {
      std::fprintf(
          stderr, "bench_optimizers_cuda: %zu parameters do not fit in %zu free bytes; using %zu\n",
          want, free_bytes, n);
    }
    if (cudaMalloc(&arena, arena_bytes()) != cudaSuccess ||
        cudaMalloc(&copy_dst, kCopyBytesPerParam * n) != cudaSuccess ||
        cudaMalloc(&workspace, FusedOptimizerWorkspaceBytes(1024) + 256) != cudaSuccess ||
        cudaStreamCreate(&stream) != cudaSuccess || cudaEventCreate(&start) != cudaSuccess ||
        cudaEventCreate(&stop) != cudaSuccess) {
      error = "device allocation failed for " + std::to_string(n) + " parameters";
      return;
    }
    // 0x3c3c3c3c = 0.0115f, 0x3c3c = 0.0115 in bf16 and int8 code 60: finite, non-zero, v > 0.
    if (cudaMemset(arena, 0x3c, arena_bytes()) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      error = "cudaMemset failed";
    }
  }

  void Free() {
    cudaFree(arena);
    cudaFree(copy_dst);
    cudaFree(workspace);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};

Buffers& GetBuffers() {
  static Buffers* buffers = [] {
    auto* b = new Buffers;
    b->Init();
    return b;
  }();
  return *buffers;
}

// Bytes one step moves per parameter (see the top of the file).
double StepBytesPerParam(FusedStateType st) {
  switch (st) {
    case FusedStateType::kF32:
      return 28.0;
    case FusedStateType::kBF16:
      return 20.0;
    case FusedStateType::kInt8:
      return 16.0 + 16.0 / double(kFusedQuantBlock);
  }
  return 0.0;
}

// `count` tensors over the buffers; each starts on an int8 block.
std::vector<FusedOptimizerTensor> SplitIntoTensors(const Buffers& b, size_t count,
                                                   FusedStateType st) {
  std::vector<FusedOptimizerTensor> tensors(count);
  const size_t state_bytes = FusedStateElementBytes(st);
  const size_t per = (b.n / count) / kFusedQuantBlock * kFusedQuantBlock;
  for (size_t t = 0; t < count; ++t) {
    const size_t off = t * per;
    FusedOptimizerTensor& x = tensors[t];
    x.master = b.master() + off;
    // Offsets in elements of the state type: the fp32-sized m and v hold any of them.
    x.state0 = static_cast<char*>(static_cast<void*>(b.m())) + off * state_bytes;
    x.state1 = static_cast<char*>(static_cast<void*>(b.v())) + off * state_bytes;
    x.state0_scales = b.m_scales() + off / kFusedQuantBlock;
    x.state1_scales = b.v_scales() + off / kFusedQuantBlock;
    x.index_base = off;
    x.grad = b.grad() + off;
    x.param_out = b.param_out() + off;
    x.n = t + 1 == count ? b.n - off : per;
    x.weight_decay = t % 2 == 0 ? 0.1f : 0.0f;  // alternate decayed / not decayed groups
  }
  return tensors;
}

// GPU seconds of one call of `fn` on the buffers' stream.
template <typename Fn>
double TimeOnStream(const Buffers& b, Fn&& fn, cudaError_t* err) {
  cudaEventRecord(b.start, b.stream);
  *err = fn();
  cudaEventRecord(b.stop, b.stream);
  if (*err == cudaSuccess) *err = cudaEventSynchronize(b.stop);
  float ms = 0;
  if (*err == cudaSuccess) *err = cudaEventElapsedTime(&ms, b.start, b.stop);
  return ms * 1e-3;
}

cudaError_t CopyOnce(const Buffers& b) {
  return cudaMemcpyAsync(b.copy_dst, b.arena, kCopyBytesPerParam * b.n, cudaMemcpyDeviceToDevice,
                         b.stream);
}

void BM_FusedAdamW(benchmark::State& state) {
  Buffers& b = GetBuffers();
  if (!b.error.empty()) {
    state.SkipWithError(b.error.c_str());
    return;
  }
  const auto st = FusedStateType(state.range(1));
  const std::vector<FusedOptimizerTensor> tensors = SplitIntoTensors(b, size_t(state.range(0)), st);
  FusedOptimizerHyper h;
  h.state_type = st;
  h.kind = FusedOptimizerKind::kAdamW;
  h.grad_type = FusedGradType::kBF16;
  h.param_type = FusedParamType::kBF16;
  h.lr = 1e-4f;
  const size_t ws_bytes = FusedOptimizerWorkspaceBytes(tensors.size());
  auto step = [&] {
    return LaunchFusedOptimizer(h, tensors.data(), tensors.size(), b.workspace, ws_bytes, b.stream);
  };
  cudaError_t err = step();  // warm-up
  if (err == cudaSuccess) err = cudaStreamSynchronize(b.stream);
  double step_seconds = 0;
  int64_t steps = 0;
  for (auto _ : state) {
    ++h.step;
    const double s = TimeOnStream(b, step, &err);
    if (err != cudaSuccess) break;
    state.SetIterationTime(s);
    step_seconds += s;
    ++steps;
  }
  if (err != cudaSuccess) {
    state.SkipWithError(cudaGetErrorString(err));
    return;
  }
  // The baseline, in the same run: as many copies as steps (at least 3).
  double copy_seconds = 0;
  const int64_t copies = std::max<int64_t>(3, steps);
  CopyOnce(b);
  cudaStreamSynchronize(b.stream);
  for (int64_t i = 0; i < copies && err == cudaSuccess; ++i) {
    copy_seconds += TimeOnStream(
        b, [&] { return CopyOnce(b); }, &err);
  }
  if (err != cudaSuccess) {
    state.SkipWithError(cudaGetErrorString(err));
    return;
  }
  const double step_bytes = StepBytesPerParam(st) * double(b.n);
  const double step_bw = step_bytes * double(steps) / step_seconds;
  const double copy_bw =
      2.0 * double(kCopyBytesPerParam) * double(b.n) * double(copies) / copy_seconds;
  state.SetBytesProcessed(int64_t(step_bytes) * steps);
  state.counters["params"] = double(b.n);
  state.counters["copy_bytes_per_second"] = copy_bw;
  state.counters["ratio_to_copy_bandwidth"] = step_bw / copy_bw;
  state.counters["params_per_second"] = double(b.n) * double(steps) / step_seconds;
}
BENCHMARK(BM_FusedAdamW)
    ->ArgNames({"tensors", "states"})
    ->ArgsProduct({{8, 64}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_DeviceCopy(benchmark::State& state) {
  Buffers& b = GetBuffers();
  if (!b.error.empty()) {
    state.SkipWithError(b.error.c_str());
    return;
  }
  cudaError_t err = CopyOnce(b);
  if (err == cudaSuccess) err = cudaStreamSynchronize(b.stream);
  for (auto _ : state) {
    const double s = TimeOnStream(
        b, [&] { return CopyOnce(b); }, &err);
    if (err != cudaSuccess) break;
    state.SetIterationTime(s);
  }
  if (err != cudaSuccess) {
    state.SkipWithError(cudaGetErrorString(err));
    return;
  }
  // Bytes moved: each copied byte is read once and written once.
  state.SetBytesProcessed(int64_t(2 * kCopyBytesPerParam * b.n) * state.iterations());
  state.counters["params"] = double(b.n);
}
BENCHMARK(BM_DeviceCopy)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace zs::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (const std::string reason = zs::kernels::NoCudaDeviceReason(); !reason.empty()) {
    std::printf("bench_optimizers_cuda: skipped, no CUDA device: %s\n", reason.c_str());
    return 0;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  zs::kernels::GetBuffers().Free();
  return 0;
}

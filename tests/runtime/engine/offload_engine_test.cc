// ZeroEngine with offload (offload/): the optimizer's shard in host memory or on NVMe, and stage
// 3's parameter shards in host memory, give the in-memory run's fp32 master bits at stages 1-3;
// the device budget holds; faults (a corrupted swap file, a stale file, a low memlock limit) are
// errors naming the file or limit. Ranks as threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "examples/custom_model/tanh_mlp.h"
#include "offload/pinned_buffer_pool.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "tests/offload/scoped_limits.h"
#include "tests/runtime/engine/engine_test_support.h"

namespace zs {
namespace {

using testing::HasSubstr;
using testing_support::BaseConfig;
using testing_support::RunResult;
using testing_support::RunSpec;
using testing_support::Train;
namespace fs = std::filesystem;

// A fresh directory for swap files, removed with the test.
class SwapDir {
 public:
  SwapDir() {
    path_ = fs::path(::testing::TempDir()) /
            fmt::format("zs_offload_{}_{}", getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~SwapDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  size_t files() const {
    return size_t(std::distance(fs::directory_iterator(path_), fs::directory_iterator()));
  }

 private:
  fs::path path_;
};

// Widths whose middle unit (401 x 400 + 401 elements) spans several 65536-element sub-groups
// of a rank's optimizer range at world 2.
const std::vector<int> kWideWidths = {7, 400, 401, 5};

struct Offload {
  std::string name;
  OffloadDevice device = OffloadDevice::kNone;
  bool pin = false;
  int64_t buffer_count = 4;
  bool pipeline = true;
  int64_t sub_group_size = 1'000'000'000;
  OffloadDevice params = OffloadDevice::kNone;  // stage 3: offload_param.device
};

EngineConfig WithOffload(EngineConfig c, const Offload& o, const std::string& dir) {
  auto& opt = c.zero_optimization.offload_optimizer;
  opt.device = o.device;
  opt.nvme_path = dir;
  opt.pin_memory = o.pin;
  // Pinned cases pin what a default `ulimit -l` (often 8 MiB) allows and fall back beyond it;
  // PinnedStatesBeyondTheMemlockLimitAreAClearError checks the strict default.
  c.zerostack.pin_memory_fallback = o.pin;
  opt.buffer_count = o.buffer_count;
  opt.pipeline_read = opt.pipeline_write = o.pipeline;
  c.zero_optimization.sub_group_size = o.sub_group_size;
  c.aio.block_size = 64 * 1024;  // several requests per tile
  auto& param = c.zero_optimization.offload_param;
  param.device = o.params;
  param.nvme_path = dir;
  param.buffer_count = 3;  // fewer than the units: shards are read back before their gathers
  return c;
}

std::vector<Offload> Offloads(int stage) {
  std::vector<Offload> out = {
      {"cpu", OffloadDevice::kCpu},
      {"cpu pinned, sub-groups", OffloadDevice::kCpu, true, 4, true, 65536},
      {"nvme pipelined", OffloadDevice::kNvme, false, 4, true, 65536},
      {"nvme 2 buffers, not pipelined", OffloadDevice::kNvme, true, 2, false, 65536},
      {"nvme whole units", OffloadDevice::kNvme, false, 3, true},
  };
  if (stage == 3) {
    out.push_back({"cpu optimizer + cpu params", OffloadDevice::kCpu, false, 4, true, 1'000'000'000,
                   OffloadDevice::kCpu});
    out.push_back({"nvme optimizer + cpu params", OffloadDevice::kNvme, true, 4, true, 65536,
                   OffloadDevice::kCpu});
    out.push_back({"in-memory optimizer + nvme params", OffloadDevice::kNone, false, 4, true,
                   1'000'000'000, OffloadDevice::kNvme});
    out.push_back({"nvme optimizer + nvme params", OffloadDevice::kNvme, false, 2, true, 65536,
                   OffloadDevice::kNvme});
  }
  return out;
}

// Three steps of the wide model on one rank, the optimizer on NVMe in 65536-element tiles.
RunSpec OneRankOnNvme(int stage, int64_t buffers, bool pipeline, const SwapDir& dir) {
  RunSpec spec;
  spec.widths = kWideWidths;
  spec.world = 1;
  spec.steps = 3;
  spec.config =
      WithOffload(BaseConfig(stage),
                  {"nvme", OffloadDevice::kNvme, false, buffers, pipeline, 65536}, dir.str());
  return spec;
}

TEST(OffloadEngine, EveryTierGivesTheInMemoryBitsAtStages1To3) {
  SwapDir dir;
  uint64_t stage0 = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    RunSpec spec;
    spec.widths = kWideWidths;
    spec.world = 2;
    spec.steps = 3;
    spec.micro_batch = 2;
    spec.config = BaseConfig(stage);
    spec.config.gradient_accumulation_steps = 2;
    spec.config.gradient_clipping = 0.5;
    spec.config.zero_optimization.stage3_param_persistence_threshold = 0;
    auto base = Train(spec);
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    if (stage == 0) {
      stage0 = base->digest;
      continue;
    }
    EXPECT_EQ(base->digest, stage0) << "stage " << stage << " in memory";
    for (const Offload& o : Offloads(stage)) {
      SCOPED_TRACE(fmt::format("stage {}, {}", stage, o.name));
      RunSpec off = spec;
      off.config = WithOffload(spec.config, o, dir.str());
      auto r = Train(off);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->digest, base->digest);
      EXPECT_EQ(r->losses, base->losses);
      for (const MemorySnapshot& m : r->memory) {
        if (o.device != OffloadDevice::kNone) {
          // The optimizer's arrays left the device.
          EXPECT_EQ(m.Peak(MemoryTier::kDevice, MemoryCategory::kOptimizerStates), 0);
          const MemoryTier tier = o.device == OffloadDevice::kNvme ? MemoryTier::kNvme
                                  : o.pin                          ? MemoryTier::kPinnedHost
                                                                   : MemoryTier::kHost;
          EXPECT_GT(m.Peak(tier, MemoryCategory::kOptimizerStates), 0);
          if (stage >= 2) {
            EXPECT_EQ(m.Peak(MemoryTier::kDevice, MemoryCategory::kGradients), 0);
          }
        }
        if (o.params != OffloadDevice::kNone) {
          EXPECT_EQ(m.Peak(MemoryTier::kDevice, MemoryCategory::kParameters), 0);
          const MemoryTier tier =
              o.params == OffloadDevice::kNvme ? MemoryTier::kNvme : MemoryTier::kHost;
          EXPECT_GT(m.Peak(tier, MemoryCategory::kParameters), 0);
        }
      }
      EXPECT_EQ(dir.files(), 0u) << "swap files are removed when the engine is destroyed";
    }
  }
}

// Persistent units (gathered at Create and after every step) read their shards from NVMe one at
// a time, so two staging buffers serve any number of them; prefetched gathers stop where the
// store has no buffer.
TEST(OffloadEngine, NvmeParametersWithPersistentUnitsAndTwoBuffers) {
  SwapDir dir;
  RunSpec spec;
  spec.widths = {6, 9, 8, 7, 9, 5, 4};  // six small units
  spec.world = 2;
  spec.steps = 3;
  spec.config = BaseConfig(3);
  spec.config.zero_optimization.stage3_param_persistence_threshold = 70;  // about half
  spec.config.zero_optimization.stage3_prefetch_bucket_size = 1'000'000;  // prefetch everything
  auto base = Train(spec);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  RunSpec off = spec;
  off.config = WithOffload(spec.config, {"nvme params", OffloadDevice::kNone}, dir.str());
  off.config.zero_optimization.offload_param.device = OffloadDevice::kNvme;
  off.config.zero_optimization.offload_param.buffer_count = 2;
  auto r = Train(off);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->digest, base->digest);
  EXPECT_GT(r->memory[0].Peak(MemoryTier::kNvme, MemoryCategory::kParameters), 0);
  EXPECT_EQ(dir.files(), 0u);
}

TEST(OffloadEngine, ReducedPrecisionStatesKeepTheirBitsOnNvme) {
  SwapDir dir;
  for (OptimizerStateType states : {OptimizerStateType::kBF16, OptimizerStateType::kInt8}) {
    RunSpec spec;
    spec.widths = kWideWidths;
    spec.world = 2;
    spec.steps = 3;
    spec.micro_batch = 2;
    spec.config = BaseConfig(2);
    spec.config.bf16.enabled = true;
    spec.config.zerostack.optimizer_state_dtype = states;
    auto base = Train(spec);
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    for (const Offload& o :
         {Offload{"cpu sub-groups", OffloadDevice::kCpu, false, 4, true, 65536},
          Offload{"nvme sub-groups", OffloadDevice::kNvme, false, 4, true, 65536}}) {
      SCOPED_TRACE(o.name);
      RunSpec off = spec;
      off.config = WithOffload(spec.config, o, dir.str());
      auto r = Train(off);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->digest, base->digest);
    }
  }
}

TEST(OffloadEngine, StepReportsWhatMovedAndWhereTheTimeWent) {
  SwapDir dir;
  RunSpec spec = OneRankOnNvme(1, 3, /*pipeline=*/true, dir);
  std::vector<OffloadReport> reports;
  std::vector<std::string> files;
  spec.after_step = [&](int, int, ZeroEngine& engine) {
    reports.push_back(engine.offload_report());
    files.push_back(reports.back().nvme_file);
    EXPECT_TRUE(fs::exists(reports.back().nvme_file));
    return OkStatus();
  };
  auto r = Train(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(reports.size(), 3u);
  const OffloadReport& last = reports.back();
  EXPECT_EQ(last.optimizer_tier, "nvme");
  EXPECT_NE(last.io_backend, "none");
  EXPECT_GT(last.tiles, 3);  // the wide unit is stepped in sub-groups
  EXPECT_GT(last.nvme_prefetch_hits, 0) << "pipeline_read reads ahead from the second step";
  EXPECT_GT(last.device_to_host_bytes, 0) << "stage 1: gradients copied to the host";
  EXPECT_EQ(last.host_to_device_bytes, last.device_to_host_bytes);  // fp32 both ways
  for (const StepResult& s : r->steps) {
    EXPECT_GT(s.times.nvme_read_bytes, 0);
    EXPECT_EQ(s.times.nvme_read_bytes, s.times.nvme_written_bytes);
    EXPECT_GE(s.times.optimizer_seconds, 0.0);
    // The parts of the step are parts of it.
    EXPECT_GE(s.times.step_seconds, s.times.collective_seconds + s.times.nvme_read_wait_seconds +
                                        s.times.nvme_write_wait_seconds);
  }
  EXPECT_FALSE(fs::exists(files.back())) << "removed on clean shutdown";
}

// The trace shows every kind of work on its own track, per rank, as Chrome trace events.
TEST(OffloadEngine, TraceHasATrackForEveryKindOfWork) {
  SwapDir dir;
  for (int stage : {1, 3}) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    TraceRecorder r0(0), r1(1);
    RunSpec spec;
    spec.widths = kWideWidths;
    spec.world = 2;
    spec.steps = 2;
    spec.traces = {&r0, &r1};
    spec.config = WithOffload(BaseConfig(stage),
                              {"nvme", OffloadDevice::kNvme, false, 3, true, 65536}, dir.str());
    spec.config.zero_optimization.stage3_param_persistence_threshold = 0;
    auto r = Train(spec);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (TraceRecorder* trace : {&r0, &r1}) {
      const nlohmann::json json = nlohmann::json::parse(trace->ToJson());
      std::map<int, std::string> track_names;
      std::map<std::string, int> spans;
      for (const auto& e : json["traceEvents"]) {
        if (e["ph"] == "M" && e["name"] == "thread_name") {
          track_names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
        }
      }
      for (const auto& e : json["traceEvents"]) {
        if (e["ph"] != "X") continue;
        EXPECT_EQ(e["pid"].get<int>(), TracePid(trace->rank()));
        EXPECT_GE(e["dur"].get<double>(), 0.0);
        ++spans[track_names[e["tid"].get<int>()]];
      }
      std::vector<std::string> expected = {"compute", "reduce",    "optimizer",  "engine step",
                                           "gather",  "nvme read", "nvme write", "offload wait"};
      if (stage == 1) {
        expected.push_back("copy d2h");  // the stage 1 gradient goes to the host per tile
        expected.push_back("copy h2d");
      }
      for (const std::string& track : expected) {
        EXPECT_GT(spans[track], 0) << "no spans on track '" << track << "', rank " << trace->rank();
      }
      // Each unit's forward and backward, per micro-batch, per step.
      EXPECT_EQ(spans["compute"], 2 * 2 * int(kWideWidths.size() - 1));
      EXPECT_EQ(spans["engine step"], 2);
    }
  }
}

TEST(OffloadEngine, OptimizerStatesBeyondTheDeviceBudgetTrainWithOffload) {
  RunSpec spec;
  spec.widths = {40, 300, 301, 299, 8};
  spec.world = 2;
  spec.steps = 2;
  spec.micro_batch = 2;
  spec.config = BaseConfig(2);
  spec.config.bf16.enabled = true;
  spec.config.zero_optimization.reduce_bucket_size = 20'000;
  auto in_memory = Train(spec);
  ASSERT_TRUE(in_memory.ok()) << in_memory.status().ToString();
  RunSpec off = spec;
  off.config.zero_optimization.offload_optimizer.device = OffloadDevice::kCpu;
  auto offloaded = Train(off);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status().ToString();
  const int64_t need = in_memory->memory[0].TierPeak(MemoryTier::kDevice);
  const int64_t need_off = offloaded->memory[0].TierPeak(MemoryTier::kDevice);
  ASSERT_GT(need, 2 * need_off) << "the states must be most of the device memory";
  const int64_t budget = (need + need_off) / 2;

  spec.device = off.device = fmt::format("budgeted-cpu:{}", budget);
  auto refused = Train(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory);
  // The error names the device's contents: the optimizer states are what does not fit.
  EXPECT_THAT(refused.status().message(), HasSubstr("out of device memory"));
  EXPECT_THAT(refused.status().message(), HasSubstr("optimizer_states"));
  auto trained = Train(off);
  ASSERT_TRUE(trained.ok()) << trained.status().ToString();
  EXPECT_EQ(trained->digest, in_memory->digest);
  for (const MemorySnapshot& m : trained->memory) {
    EXPECT_LE(m.TierPeak(MemoryTier::kDevice), budget);
    EXPECT_GT(m.TierPeak(MemoryTier::kHost), 0);
  }
}

TEST(OffloadEngine, CorruptedSwapFileStopsTheRunNamingTheFile) {
  SwapDir dir;
  RunSpec spec = OneRankOnNvme(2, 2, /*pipeline=*/false, dir);
  std::string file;
  spec.after_step = [&](int, int step, ZeroEngine& engine) {
    file = engine.offload_report().nvme_file;
    if (step == 0) {
      // Another process scribbles over the first page of the swap file.
      FILE* f = std::fopen(file.c_str(), "r+b");
      EXPECT_NE(f, nullptr);
      const char junk[16] = "not a tile";
      std::fwrite(junk, 1, sizeof(junk), f);
      std::fclose(f);
    }
    return OkStatus();
  };
  auto r = Train(spec);
  ASSERT_FALSE(r.ok()) << "the run must not go on with corrupted optimizer states";
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr(file));
  EXPECT_THAT(r.status().message(), HasSubstr("offset 0"));
  EXPECT_THAT(r.status().message(), HasSubstr("optimizer states"));
}

// After a failed optimizer pass the engine says so on every later call, instead of stepping on
// from half-stepped tiles.
TEST(OffloadEngine, AFailedStepBreaksTheEngineClearly) {
  SwapDir dir;
  CommOptions options;
  Status status = RunLocalRanks(1, options, [&](int, Communicator& comm, MemoryTracker& tracker) {
    examples::TanhMlp model(kWideWidths);
    ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
    EngineConfig config = WithOffload(
        BaseConfig(2), {"nvme", OffloadDevice::kNvme, false, 2, false, 65536}, dir.str());
    ZS_ASSIGN_OR_RETURN(auto engine,
                        ZeroEngine::Create(config, model.Spec(), model.Init(7), *device, comm));
    std::vector<float> x, y;
    auto train_step = [&](int step) -> StatusOr<StepResult> {
      testing_support::FillBatch(model, step, 0, 0, 1, 2, x, y);
      ZS_ASSIGN_OR_RETURN(double loss, model.ForwardBackward(*engine, x, y, 2));
      (void)loss;
      return engine->Step();
    };
    ZS_ASSIGN_OR_RETURN(StepResult first, train_step(0));
    (void)first;
    FILE* f = std::fopen(engine->offload_report().nvme_file.c_str(), "r+b");
    EXPECT_NE(f, nullptr);
    std::fputs("scribbled", f);
    std::fclose(f);
    StatusOr<StepResult> failed = train_step(1);
    EXPECT_EQ(failed.status().code(), StatusCode::kIoError) << failed.status().ToString();
    StatusOr<StepResult> again = train_step(2);
    EXPECT_EQ(again.status().code(), StatusCode::kAborted) << again.status().ToString();
    EXPECT_THAT(again.status().message(), HasSubstr("an earlier optimizer step failed"));
    StatusOr<uint64_t> digest = engine->MasterDigest();
    EXPECT_EQ(digest.status().code(), StatusCode::kAborted) << digest.status().ToString();
    return OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
}

TEST(OffloadEngine, StaleSwapFileOfAKilledRunIsNamed) {
  SwapDir dir;
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);  // its pid is now free: a run that was killed
  const std::string stale =
      (fs::path(dir.str()) / fmt::format("zerostack-optimizer.rank0.{}.swap", child)).string();
  std::ofstream(stale) << "left behind";
  RunSpec spec;
  spec.world = 1;
  spec.steps = 1;
  spec.config = WithOffload(BaseConfig(1), {"nvme", OffloadDevice::kNvme}, dir.str());
  auto r = Train(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr(stale));
}

// A disk that cannot hold the swap file (here: a file-size limit below it) stops the engine at
// Create, naming the file and the bytes, before anything trains.
TEST(OffloadEngine, FullDiskIsAnErrorAtStartNamingTheFile) {
  SwapDir dir;
  RunSpec spec = OneRankOnNvme(2, 2, /*pipeline=*/true, dir);
  spec.steps = 1;
  auto r = [&] {
    testing_support::FileSizeLimit limit(256 * 1024);  // the wide model's states need MiBs
    return Train(spec);
  }();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr(dir.str()));
  EXPECT_THAT(r.status().message(), HasSubstr("zerostack-optimizer.rank0"));
  EXPECT_EQ(dir.files(), 0u) << "a failed start leaves no file behind";
}

TEST(OffloadEngine, PinnedStatesBeyondTheMemlockLimitAreAClearError) {
  constexpr int64_t kLimit = 64 * 1024;  // far below this model's pinned states
  RunSpec spec;
  spec.widths = kWideWidths;
  spec.world = 1;
  spec.steps = 1;
  spec.config = WithOffload(BaseConfig(2), {"cpu pinned", OffloadDevice::kCpu, true}, "");
  spec.config.zerostack.pin_memory_fallback = false;  // the default: strict
  auto r = [&] {
    testing_support::MemlockLimit limit(kLimit);
    return Train(spec);
  }();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("memlock limit"));
  EXPECT_THAT(r.status().message(), HasSubstr("64.0 KiB"));
  EXPECT_THAT(r.status().message(), HasSubstr("pin_memory: false"));
  EXPECT_EQ(PinnedBytesInProcess(), 0u) << "nothing stays pinned after the failed start";

  // With the fallback the same run trains, in pageable memory, counted as host memory.
  spec.config.zerostack.pin_memory_fallback = true;
  auto fallback = [&] {
    testing_support::MemlockLimit limit(kLimit);
    return Train(spec);
  }();
  ASSERT_TRUE(fallback.ok()) << fallback.status().ToString();
  const MemorySnapshot& m = fallback->memory[0];
  EXPECT_GT(m.Peak(MemoryTier::kHost, MemoryCategory::kOptimizerStates), 0);
  EXPECT_LE(m.TierPeak(MemoryTier::kPinnedHost), kLimit) << "pinned only what the limit allows";
  EXPECT_EQ(PinnedBytesInProcess(), 0u);
}

}  // namespace
}  // namespace zs

// Checkpoints (runtime/checkpoint/checkpoint.h) on examples/custom_model/tanh_mlp.h, ranks as
// threads: exact round trips of fp32/bf16/int8 states at stages 0-3, continued runs equal to
// uninterrupted ones, loads at another world size and stage, errors naming corrupt and
// truncated files, and a saver killed with SIGKILL at random moments.
#include "runtime/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "examples/custom_model/tanh_mlp.h"
#include "runtime/checkpoint/shard_file.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "tests/runtime/engine/engine_test_support.h"

namespace zs {
namespace {

namespace fs = std::filesystem;
using examples::TanhMlp;
using testing_support::BaseConfig;
using testing_support::FillBatch;

const std::vector<int> kWidths = {13, 29, 17, 5};
constexpr int kGlobalBatch = 12;  // divides by 4, 3 and 2: every world sees the same samples

// Every owned array of every rank, keyed by (unit, param, begin): equal maps = equal state.
using StateMap = std::map<std::tuple<int, int, int64_t>, OwnedParamState>;

struct Leg {
  int world = 1;
  EngineConfig config;
  int begin_step = 0, end_step = 0;  // trains steps [begin_step, end_step)
  int init_seed = 7;
  std::string load;       // load this checkpoint first
  std::string save_root;  // save after the last step
};

struct LegResult {
  uint64_t digest = 0;
  StateMap state;                          // after load (or init), before training
  StateMap final_state;                    // after the last step
  std::vector<std::vector<float>> loaded;  // every parameter's master right after the load
  std::vector<double> losses;
  EngineTrainingState training;
  Status load_status;
  // Per rank: the rank files its load opened (CheckpointManifest::files_read) and the ranges
  // it owns after the load (unit, param, begin, end).
  std::vector<std::vector<int>> files_read;
  std::vector<std::vector<std::tuple<int, int, int64_t, int64_t>>> owned;
};

StatusOr<LegResult> RunLeg(const Leg& leg) {
  LegResult out;
  out.files_read.resize(size_t(leg.world));
  out.owned.resize(size_t(leg.world));
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(30'000);
  Status status = RunLocalRanks(
      leg.world, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        TanhMlp model(kWidths);
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(
            auto engine,
            ZeroEngine::Create(leg.config, model.Spec(), model.Init(leg.init_seed), *device, comm));
        if (!leg.load.empty()) {
          auto m = LoadCheckpoint(*engine, comm, leg.load);
          if (!m.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (rank == 0) out.load_status = m.status();
            return OkStatus();
          }
          out.files_read[size_t(rank)] = m->files_read;
        }
        std::vector<std::vector<float>> loaded;
        for (int u = 0; u < int(engine->model().units.size()); ++u) {
          for (int p = 0; p < int(engine->model().units[u].params.size()); ++p) {
            ZS_ASSIGN_OR_RETURN(auto values, engine->GatherMasterParam(u, p));
            loaded.push_back(std::move(values));
          }
        }
        ZS_RETURN_IF_ERROR(engine->VisitOwnedState([&](const OwnedParamState& st) {
          std::lock_guard<std::mutex> lock(mu);
          out.state[{st.unit, st.param, st.begin}] = st;
          out.owned[size_t(rank)].push_back({st.unit, st.param, st.begin, st.end});
          return OkStatus();
        }));
        const int batch = kGlobalBatch / leg.world;
        std::vector<float> x, y;
        for (int step = leg.begin_step; step < leg.end_step; ++step) {
          FillBatch(model, step, 0, rank, leg.world, batch, x, y);
          ZS_ASSIGN_OR_RETURN(double l, model.ForwardBackward(*engine, x, y, batch));
          ZS_RETURN_IF_ERROR(engine->Step().status());
          ZS_ASSIGN_OR_RETURN(double mean, engine->AllReduceMean(l));
          if (rank == 0) out.losses.push_back(mean);
        }
        if (!leg.save_root.empty()) {
          ZS_RETURN_IF_ERROR(
              SaveCheckpoint(*engine, comm, leg.save_root, {{"data_position", leg.end_step}})
                  .status());
        }
        ZS_RETURN_IF_ERROR(engine->VisitOwnedState([&](const OwnedParamState& st) {
          std::lock_guard<std::mutex> lock(mu);
          out.final_state[{st.unit, st.param, st.begin}] = st;
          return OkStatus();
        }));
        ZS_ASSIGN_OR_RETURN(uint64_t digest, engine->MasterDigest());
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) {
          out.digest = digest;
          out.loaded = std::move(loaded);
          out.training = engine->training_state();
        }
        return OkStatus();
      });
  if (!status.ok()) return status;
  return out;
}

bool SameArrays(const OwnedParamState& a, const OwnedParamState& b) {
  if (a.end != b.end || a.arrays.size() != b.arrays.size()) return false;
  for (size_t i = 0; i < a.arrays.size(); ++i) {
    const OwnedArray &x = a.arrays[i], &y = b.arrays[i];
    if (x.kind != y.kind || x.dtype != y.dtype || x.data != y.data || x.scales != y.scales ||
        x.block_origin != y.block_origin) {
      return false;
    }
  }
  return true;
}

void ExpectSameState(const StateMap& a, const StateMap& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [key, st] : a) {
    auto it = b.find(key);
    ASSERT_NE(it, b.end()) << what;
    EXPECT_TRUE(SameArrays(st, it->second))
        << what << ": unit " << std::get<0>(key) << " param " << std::get<1>(key);
  }
}

EngineConfig Config(int stage, OptimizerStateType states) {
  EngineConfig c = BaseConfig(stage);
  c.zerostack.optimizer_state_dtype = states;
  return c;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("zs_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(rand()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Save at step 2, load into a fresh engine (another init), continue to step 4: the loaded
// state equals the saved one bit for bit, and the continued run ends where an uninterrupted
// one does, for each state dtype and stage.
TEST(Checkpoint, RoundTripIsExactAndContinuesBitIdentical) {
  for (auto states :
       {OptimizerStateType::kF32, OptimizerStateType::kBF16, OptimizerStateType::kInt8}) {
    for (int stage = 0; stage <= 3; ++stage) {
      const std::string what =
          "states " + std::to_string(int(states)) + " stage " + std::to_string(stage);
      TempDir dir;
      Leg straight{3, Config(stage, states), 0, 4};
      auto full = RunLeg(straight);
      ASSERT_TRUE(full.ok()) << full.status().ToString();
      Leg first{3, Config(stage, states), 0, 2};
      first.save_root = dir.path.string();
      auto a = RunLeg(first);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      Leg second{3, Config(stage, states), 2, 4};
      second.init_seed = 99;
      second.load = dir.path.string();
      auto b = RunLeg(second);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      ASSERT_TRUE(b->load_status.ok()) << what << ": " << b->load_status.ToString();
      ExpectSameState(a->final_state, b->state, what);
      EXPECT_EQ(b->digest, full->digest) << what;
      EXPECT_EQ(b->training.step, 4) << what;
      ASSERT_EQ(b->losses.size(), 2u);
      EXPECT_EQ(b->losses[1], full->losses[3]) << what;
    }
  }
}

// fp16 compute with dynamic loss scaling: the scaler's state (scale, good steps) is part of the
// checkpoint; a window of 1 doubles the scale every step, so a lost state would show.
TEST(Checkpoint, LossScalerStateContinues) {
  EngineConfig c = Config(2, OptimizerStateType::kF32);
  c.fp16.enabled = true;
  c.fp16.initial_scale_power = 4;
  c.fp16.loss_scale_window = 3;
  TempDir dir;
  auto full = RunLeg({3, c, 0, 5});
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  Leg first{3, c, 0, 2};
  first.save_root = dir.path.string();
  ASSERT_TRUE(RunLeg(first).ok());
  Leg second{3, c, 2, 5};
  second.load = dir.path.string();
  auto b = RunLeg(second);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(b->load_status.ok()) << b->load_status.ToString();
  EXPECT_EQ(b->training.loss_scale, full->training.loss_scale);
  EXPECT_EQ(b->training.loss_scale_good_steps, full->training.loss_scale_good_steps);
  EXPECT_EQ(b->digest, full->digest);
}

// Saved at world 4 stage 3: loads at world 4 stage 1 (bit-identical continuation), world 3
// stage 1 and world 2 stage 2 (the same model-space values; the continuation close).
TEST(Checkpoint, LoadsAtAnotherWorldSizeAndStage) {
  TempDir dir;
  auto full = RunLeg({4, Config(3, OptimizerStateType::kF32), 0, 4});
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  Leg first{4, Config(3, OptimizerStateType::kF32), 0, 2};
  first.save_root = dir.path.string();
  auto a = RunLeg(first);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  struct Case {
    int world, stage;
  };
  for (Case c : {Case{4, 1}, Case{4, 0}, Case{3, 1}, Case{2, 2}}) {
    const std::string what =
        "world " + std::to_string(c.world) + " stage " + std::to_string(c.stage);
    Leg second{c.world, Config(c.stage, OptimizerStateType::kF32), 2, 4};
    second.init_seed = 5;
    second.load = dir.path.string();
    auto b = RunLeg(second);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_TRUE(b->load_status.ok()) << what << ": " << b->load_status.ToString();
    EXPECT_EQ(b->training.step, 4) << what;
    ASSERT_EQ(b->losses.size(), 2u);
    if (c.world == 4) {
      EXPECT_EQ(b->digest, full->digest) << what;
      EXPECT_EQ(b->losses[1], full->losses[3]) << what;
    } else {
      EXPECT_NEAR(b->losses[1], full->losses[3], 1e-4 * std::abs(full->losses[3])) << what;
    }
  }
  // The master values right after a load at world 3 are the saved ones, element for element.
  Leg probe{3, Config(2, OptimizerStateType::kF32), 2, 2};
  probe.load = dir.path.string();
  auto p = RunLeg(probe);
  Leg probe4{4, Config(3, OptimizerStateType::kF32), 2, 2};
  probe4.load = dir.path.string();
  auto p4 = RunLeg(probe4);
  ASSERT_TRUE(p.ok() && p4.ok());
  EXPECT_EQ(p->loaded, p4->loaded);
}

// int8 states saved at world 4 stage 3 load at world 3 stage 1 (blocks re-encoded where they
// do not line up) and keep training.
TEST(Checkpoint, Int8StatesReshard) {
  TempDir dir;
  Leg first{4, Config(3, OptimizerStateType::kInt8), 0, 2};
  first.save_root = dir.path.string();
  auto full = RunLeg({4, Config(3, OptimizerStateType::kInt8), 0, 4});
  ASSERT_TRUE(RunLeg(first).ok());
  Leg second{3, Config(1, OptimizerStateType::kInt8), 2, 4};
  second.load = dir.path.string();
  auto b = RunLeg(second);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(b->load_status.ok()) << b->load_status.ToString();
  ASSERT_TRUE(full.ok());
  EXPECT_NEAR(b->losses[1], full->losses[3], 1e-2 * std::abs(full->losses[3]));
}

void FlipByte(const fs::path& file, int64_t from_end) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  f.seekp(size - from_end);
  char c = 0;
  f.seekg(size - from_end);
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(size - from_end);
  f.write(&c, 1);
}

TEST(Checkpoint, CorruptAndTruncatedFilesAreErrorsNamingTheFile) {
  TempDir dir;
  Leg save{2, Config(2, OptimizerStateType::kF32), 0, 1};
  save.save_root = dir.path.string();
  ASSERT_TRUE(RunLeg(save).ok());
  const fs::path step = dir.path / "step-00000001";
  ASSERT_TRUE(fs::exists(step / "manifest.json"));
  auto load = [&](const std::string& path) {
    Leg l{2, Config(2, OptimizerStateType::kF32), 1, 1};
    l.load = path;
    auto r = RunLeg(l);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->load_status : r.status();
  };
  ASSERT_TRUE(load(dir.path.string()).ok());
  const fs::path backup = dir.path / "backup";
  fs::copy(step, backup);
  // A flipped byte in the data.
  FlipByte(step / "rank-00001.zsd", 10);
  Status s = load(dir.path.string());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank-00001.zsd"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("corrupt"), std::string::npos) << s.ToString();
  // A truncated file.
  fs::copy_file(backup / "rank-00001.zsd", step / "rank-00001.zsd",
                fs::copy_options::overwrite_existing);
  fs::resize_file(step / "rank-00000.zsd", fs::file_size(step / "rank-00000.zsd") - 7);
  s = load(step.string());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank-00000.zsd"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
  // A missing file, a corrupt manifest, a missing checkpoint.
  fs::remove(step / "rank-00000.zsd");
  s = load(step.string());
  EXPECT_NE(s.message().find("rank-00000.zsd"), std::string::npos) << s.ToString();
  { std::ofstream(step / "manifest.json") << "{\"format_version\": 1, \"step\""; }
  s = load(step.string());
  EXPECT_NE(s.message().find("manifest.json"), std::string::npos) << s.ToString();
  s = load((dir.path / "nowhere").string());
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  // A model that differs: named.
  fs::remove_all(step);
  fs::copy(backup, step);
  {
    Leg other{2, Config(2, OptimizerStateType::kF32), 1, 1};
    other.load = step.string();
    // Load into a model of other widths.
    CommOptions options;
    Status inner;
    ASSERT_TRUE(RunLocalRanks(2, options,
                              [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
                                TanhMlp model({13, 30, 17, 5});
                                ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
                                ZS_ASSIGN_OR_RETURN(
                                    auto engine, ZeroEngine::Create(other.config, model.Spec(),
                                                                    model.Init(1), *device, comm));
                                auto m = LoadCheckpoint(*engine, comm, step.string());
                                if (rank == 0) inner = m.status();
                                return OkStatus();
                              })
                    .ok());
    EXPECT_EQ(inner.code(), StatusCode::kInvalidArgument) << inner.ToString();
    EXPECT_NE(inner.message().find("shape"), std::string::npos) << inner.ToString();
  }
}

// Offloaded states (host memory; NVMe for the states and the parameter shards) are read and
// written through the engine's shard stores: a save from an offloaded engine, loaded in memory
// or offloaded again, continues as the uninterrupted in-memory run does.
TEST(Checkpoint, OffloadedStatesRoundTrip) {
  auto full = RunLeg({2, Config(3, OptimizerStateType::kBF16), 0, 4});
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  for (OffloadDevice device : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    TempDir dir, swap;
    EngineConfig offloaded = Config(3, OptimizerStateType::kBF16);
    offloaded.zero_optimization.offload_optimizer.device = device;
    offloaded.zero_optimization.offload_optimizer.nvme_path = swap.path.string();
    if (device == OffloadDevice::kNvme) {
      offloaded.zero_optimization.offload_param.device = OffloadDevice::kNvme;
      offloaded.zero_optimization.offload_param.nvme_path = swap.path.string();
    }
    Leg first{2, offloaded, 0, 2};
    first.save_root = dir.path.string();
    ASSERT_TRUE(RunLeg(first).ok());
    for (bool load_offloaded : {false, true}) {
      Leg second{2, load_offloaded ? offloaded : Config(3, OptimizerStateType::kBF16), 2, 4};
      second.init_seed = 3;
      second.load = dir.path.string();
      auto b = RunLeg(second);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      ASSERT_TRUE(b->load_status.ok()) << b->load_status.ToString();
      EXPECT_EQ(b->digest, full->digest)
          << "offload " << int(device) << " loaded offloaded " << load_offloaded;
    }
  }
}

// zero_optimization.stage3_gather_16bit_weights_on_model_save: the save also writes the
// consolidated 16-bit weights into the step directory, listed in the manifest.
TEST(Checkpoint, WritesThe16BitWeightsWhenTheConfigAsks) {
  TempDir dir;
  Leg save{2, Config(3, OptimizerStateType::kF32), 0, 1};
  save.config.zero_optimization.stage3_gather_16bit_weights_on_model_save = true;
  save.save_root = dir.path.string();
  auto r = RunLeg(save);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const fs::path step = dir.path / "step-00000001";
  EXPECT_TRUE(fs::exists(step / "model.16bit.safetensors"));
  std::ifstream in(step / "manifest.json");
  const nlohmann::json m = nlohmann::json::parse(in);
  EXPECT_EQ(m.at("consolidated_16bit").at("name"), "model.16bit.safetensors");
  EXPECT_EQ(m.at("consolidated_16bit").at("bytes").get<int64_t>(),
            int64_t(fs::file_size(step / "model.16bit.safetensors")));
}

// [Note: checkpoint index]: saved at world 8, loaded at world 3 (another stage), each rank opens
// exactly the rank files holding a piece that meets a range it owns after the load. The
// expectation is derived here from every rank file's header (read directly) and the engine's
// own ranges, not from the index. Without the index (an older checkpoint) the load reads every
// file and gives the same state; a corrupt or missing index, or a missing rank file, is an
// error naming the file.
TEST(Checkpoint, LoadAtAnotherWorldOpensOnlyTheFilesItNeeds) {
  TempDir dir;
  Leg first{8, Config(3, OptimizerStateType::kF32), 0, 1};
  first.save_root = dir.path.string();
  ASSERT_TRUE(RunLeg(first).ok());
  const fs::path step = dir.path / "step-00000001";
  ASSERT_TRUE(fs::exists(step / "index.json"));
  // Every piece from the rank files themselves: (file, name, begin, end).
  std::vector<std::tuple<int, std::string, int64_t, int64_t>> saved;
  for (int f = 0; f < 8; ++f) {
    auto r = ShardFileReader::Open((step / RankFileName(f)).string());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const auto& e : r->params()) saved.push_back({f, e.name, e.begin, e.end});
  }
  const ModelSpec spec = TanhMlp(kWidths).Spec();
  Leg load{3, Config(2, OptimizerStateType::kF32), 1, 1};
  load.load = dir.path.string();
  auto indexed = RunLeg(load);
  ASSERT_TRUE(indexed.ok()) << indexed.status().ToString();
  ASSERT_TRUE(indexed->load_status.ok()) << indexed->load_status.ToString();
  size_t total = 0;
  for (int rank = 0; rank < 3; ++rank) {
    std::set<int> want;
    for (const auto& [u, p, b, e] : indexed->owned[size_t(rank)]) {
      const std::string name =
          spec.units[size_t(u)].name + "." + spec.units[size_t(u)].params[size_t(p)].name;
      for (const auto& [f, n, sb, se] : saved) {
        if (n == name && sb < e && b < se) want.insert(f);
      }
    }
    EXPECT_EQ(indexed->files_read[size_t(rank)], std::vector<int>(want.begin(), want.end()))
        << "rank " << rank;
    total += want.size();
  }
  EXPECT_LT(total, size_t(3 * 8)) << "every rank needs every file: the check shows nothing";

  // Without the index: the same state, every file read.
  const fs::path copy = dir.path / "copy";
  fs::copy(step, copy);
  fs::remove(copy / "index.json");
  {
    std::ifstream in(copy / "manifest.json");
    nlohmann::json m = nlohmann::json::parse(in);
    m.erase("index");
    std::ofstream(copy / "manifest.json", std::ios::trunc) << m.dump(2);
  }
  load.load = copy.string();
  auto scanned = RunLeg(load);
  ASSERT_TRUE(scanned.ok()) << scanned.status().ToString();
  ASSERT_TRUE(scanned->load_status.ok()) << scanned->load_status.ToString();
  ExpectSameState(indexed->state, scanned->state, "without the index");
  EXPECT_EQ(scanned->files_read[1], std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7}));

  auto load_status = [&](const fs::path& path) {
    Leg l{3, Config(2, OptimizerStateType::kF32), 1, 1};
    l.load = path.string();
    auto r = RunLeg(l);
    return r.ok() ? r->load_status : r.status();
  };
  // A corrupt index.
  fs::remove_all(copy);
  fs::copy(step, copy);
  FlipByte(copy / "index.json", 20);
  Status s = load_status(copy);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("index.json"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("corrupt"), std::string::npos) << s.ToString();
  // A missing index the manifest lists.
  fs::remove(copy / "index.json");
  s = load_status(copy);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("index.json"), std::string::npos) << s.ToString();
  // A missing rank file.
  fs::copy_file(step / "index.json", copy / "index.json");
  fs::remove(copy / "rank-00005.zsd");
  s = load_status(copy);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank-00005.zsd"), std::string::npos) << s.ToString();
}

// The saver child (run by KillDuringSaveKeepsTheLastGoodCheckpoint through the test binary
// itself): trains 2 ranks and saves after every step until killed.
TEST(CheckpointKill, SaverChild) {
  const char* root = std::getenv("ZS_CKPT_SAVER_ROOT");
  if (root == nullptr) GTEST_SKIP() << "only as the kill test's child";
  const char* start = std::getenv("ZS_CKPT_SAVER_START");
  Leg leg{2, Config(3, OptimizerStateType::kBF16), 0, 0};
  leg.save_root = root;
  // Resume from the last good checkpoint when there is one, then save after every step.
  int step = 0;
  if (start != nullptr && std::string(start) == "resume") {
    auto m = ReadCheckpointManifest(root);
    if (m.ok()) {
      step = int(m->step);
      leg.load = root;
    }
  }
  for (int i = 0; i < 1000; ++i) {
    leg.begin_step = step;
    leg.end_step = step + 1;
    auto r = RunLeg(leg);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->load_status.ok()) << r->load_status.ToString();
    leg.load = root;
    ++step;
  }
}

TEST(CheckpointKill, KillDuringSaveKeepsTheLastGoodCheckpoint) {
  TempDir dir;
  std::mt19937 rng(20261207);
  int64_t last_step = -1;
  int loads = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int iteration = 0; iteration < 20 && std::chrono::steady_clock::now() < deadline;
       ++iteration) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("ZS_CKPT_SAVER_ROOT", dir.path.c_str(), 1);
      ::setenv("ZS_CKPT_SAVER_START", "resume", 1);
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) {
        ::dup2(null, 1);
        ::dup2(null, 2);
      }
      ::execl("/proc/self/exe", "checkpoint_test", "--gtest_filter=CheckpointKill.SaverChild",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Kill it somewhere in its run: start-up, a step, a save or a load.
    const int ms = std::uniform_int_distribution<int>(50, 600)(rng);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ::kill(pid, SIGKILL);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    if (!fs::exists(dir.path / "latest")) continue;  // killed before its first save
    // The last good checkpoint loads (here at world 3, stage 1) and never goes back.
    Leg check{3, Config(1, OptimizerStateType::kBF16), 0, 0};
    check.load = dir.path.string();
    auto r = RunLeg(check);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->load_status.ok())
        << "iteration " << iteration << " after " << ms << " ms: " << r->load_status.ToString();
    EXPECT_GE(r->training.step, last_step);
    last_step = r->training.step;
    ++loads;
  }
  std::printf("%d kills, %d loads of the last good checkpoint, the last at step %lld\n", 20, loads,
              static_cast<long long>(last_step));
  EXPECT_GT(loads, 0) << "no save completed before any kill";
  EXPECT_GT(last_step, 0);
}

}  // namespace
}  // namespace zs

// Grid checkpoints ([Note: grid checkpoints] in runtime/checkpoint/checkpoint.h): a GridGpt
// saved at TP2 x PP2 x DP2 continues bit for bit at the same grid, loads its exact values at
// other tp x pp x dp grids and stages and continues there within the grid parity tolerances
// (tests/runtime/parallel/gpt/grid_parity.h, [Note: parameter tolerance]), and a plain
// data-parallel checkpoint of nn::Gpt loads into a grid and back. Ranks as threads; each test
// declares its world size through its GridSpec (tp * pp * dp).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors_export.h"
#include "runtime/checkpoint/safetensors_writer.h"
#include "runtime/checkpoint/shard_file.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/parallel/tensor/tp_param_layout.h"
#include "tests/runtime/parallel/gpt/grid_parity.h"

namespace zs::parallel {
namespace {

namespace fs = std::filesystem;
using parity::GridSpec;
using parity::kSteps;

constexpr int kSaveAfter = 1;  // steps before the save; the run continues to kSteps

// The full (nn::Gpt-shaped) fp32 parameters by "<unit>.<param>".
using FullParams = std::map<std::string, std::vector<float>>;

MicroBatchData Data(int step, const GridSpec& spec, int dp_rank) {
  return [step, spec, dp_rank](int mb, std::span<int32_t> tokens, std::span<int32_t> targets) {
    parity::Fill(step, mb, dp_rank, spec.dp, spec.micro_batch, tokens, targets);
    return OkStatus();
  };
}

// Every parameter this rank holds, gathered over dp and placed in its full tensor (collective:
// every rank calls it). Ranks of one tp group each place their slice.
Status CollectFull(GridGpt& g, const ProcessGroups& groups, std::mutex& mu, FullParams& out) {
  for (int unit : g.units()) {
    const UnitSpec& us = g.model().spec().units[size_t(unit)];
    for (int p = 0; p < int(us.params.size()); ++p) {
      ZS_ASSIGN_OR_RETURN(std::vector<float> mine, g.GatherMasterParam(unit, p));
      const tp::TpParamLayout& layout = g.model().layout(unit, p);
      const std::string name = us.name + "." + us.params[size_t(p)].name;
      std::lock_guard<std::mutex> lock(mu);
      std::vector<float>& full = out[name];
      full.resize(size_t(layout.full_numel()));
      tp::PlaceLocal(layout, groups.coord().tp, groups.grid().tp_size(), mine, full);
    }
  }
  return OkStatus();
}

// This rank's parameters against full values: `exact` bit for bit, else within the parity
// tolerances (max and mean over this rank's elements, merged by the caller).
struct Diff {
  double max = 0, sum = 0;
  int64_t count = 0;
  std::string worst;
};
Status Compare(GridGpt& g, const ProcessGroups& groups, const FullParams& want, Diff& diff) {
  for (int unit : g.units()) {
    const UnitSpec& us = g.model().spec().units[size_t(unit)];
    for (int p = 0; p < int(us.params.size()); ++p) {
      ZS_ASSIGN_OR_RETURN(std::vector<float> mine, g.GatherMasterParam(unit, p));
      const std::string name = us.name + "." + us.params[size_t(p)].name;
      auto it = want.find(name);
      if (it == want.end()) return InternalError(fmt::format("no '{}' to compare with", name));
      std::vector<float> slice(mine.size());
      tp::SliceFull(g.model().layout(unit, p), groups.coord().tp, groups.grid().tp_size(),
                    it->second, slice);
      for (size_t k = 0; k < mine.size(); ++k) {
        const double d = std::abs(double(mine[k]) - double(slice[k]));
        if (d > diff.max || (std::isnan(d) && diff.worst.empty())) {
          diff.max = std::isnan(d) ? 1e30 : d;
          diff.worst = fmt::format("{}[{}]: {:.9g} vs {:.9g}", name, k, mine[k], slice[k]);
        }
        diff.sum += d;
        ++diff.count;
      }
    }
  }
  return OkStatus();
}

struct RunOut {
  Status status;
  std::vector<uint64_t> digests;
  std::vector<double> losses;                // the steps run, the global mean (rank 0's)
  FullParams full;                           // CollectFull at the end (when asked)
  Diff diff;                                 // against `compare_with` (when given)
  std::vector<std::vector<int>> files_read;  // per rank: CheckpointManifest::files_read
};

// Runs `spec` on spec.world() threads: creates the grid, loads `load` when not empty, trains
// steps [first, last), saves to `save` when not empty, then digests and collects.
RunOut RunGrid(const GridSpec& spec, int first, int last, const std::string& load,
               const std::string& save, bool collect, const FullParams* compare_with = nullptr,
               const std::function<void(GridGptOptions&)>& tweak = nullptr) {
  RunOut out;
  out.digests.resize(size_t(spec.world()));
  out.files_read.resize(size_t(spec.world()));
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(60'000);
  out.status = RunLocalRanks(
      spec.world(), options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(RankGrid grid,
                            RankGrid::Create(spec.tp, spec.pp, spec.dp, spec.world()));
        ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        GridGptOptions grid_options = parity::Options(spec);
        if (tweak) tweak(grid_options);
        ZS_ASSIGN_OR_RETURN(auto g, GridGpt::Create(grid_options, groups, *device, &tracker));
        if (!load.empty()) {
          ZS_ASSIGN_OR_RETURN(CheckpointManifest m, g->LoadCheckpoint(load));
          if (m.step != first) {
            return InternalError(fmt::format("loaded step {}, expected {}", m.step, first));
          }
          out.files_read[size_t(rank)] = m.files_read;
        }
        for (int step = first; step < last; ++step) {
          ZS_ASSIGN_OR_RETURN(GridStepResult r, g->TrainStep(Data(step, spec, groups.coord().dp)));
          if (rank == 0) out.losses.push_back(r.loss);
        }
        if (!save.empty()) {
          ZS_RETURN_IF_ERROR(g->SaveCheckpoint(save, {{"next_step", last}}).status());
        }
        ZS_ASSIGN_OR_RETURN(out.digests[size_t(rank)], g->MasterDigest());
        if (collect) ZS_RETURN_IF_ERROR(CollectFull(*g, groups, mu, out.full));
        if (compare_with != nullptr) {
          Diff d;
          ZS_RETURN_IF_ERROR(Compare(*g, groups, *compare_with, d));
          std::lock_guard<std::mutex> lock(mu);
          if (d.max > out.diff.max || out.diff.worst.empty()) {
            out.diff.max = d.max;
            out.diff.worst = d.worst;
          }
          out.diff.sum += d.sum;
          out.diff.count += d.count;
        }
        return OkStatus();
      });
  return out;
}

GridSpec Grid(int tp, int pp, int dp, int stage) {
  GridSpec s;
  s.tp = tp;
  s.pp = pp;
  s.dp = dp;
  s.stage = stage;
  s.ga = 8 / (dp * int(s.micro_batch));  // the same global batch (8 sequences) at every dp
  return s;
}

std::vector<std::string>& Roots() {
  static std::vector<std::string> roots;
  return roots;
}
std::string TempRoot(const std::string& name) {
  const fs::path root =
      fs::temp_directory_path() / fmt::format("zs_grid_ckpt_{}_{}", name, ::getpid());
  fs::remove_all(root);
  Roots().push_back(root.string());
  return root.string();
}
// Removes the checkpoints the tests wrote, after the last test.
class RemoveRoots : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const std::string& r : Roots()) fs::remove_all(r);
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveRoots =
    ::testing::AddGlobalTestEnvironment(new RemoveRoots);

// The saved run: TP2 x PP2 x DP2, ZeRO-1, kSaveAfter steps, shared by the tests below.
struct Saved {
  std::string root;
  FullParams full;  // the parameters at the save
};
const Saved& SavedGrid() {
  static const Saved* saved = [] {
    auto* s = new Saved;
    s->root = TempRoot("tp2pp2dp2");
    RunOut r = RunGrid(Grid(2, 2, 2, 1), 0, kSaveAfter, "", s->root, true);
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    s->full = std::move(r.full);
    return s;
  }();
  return *saved;
}

// (1) The same grid: the continued run is the uninterrupted one, bit for bit.
TEST(GridCheckpointTest, SameGridContinuesBitForBit) {
  const GridSpec spec = Grid(2, 2, 2, 1);
  const RunOut whole = RunGrid(spec, 0, kSteps, "", "", false);
  ASSERT_TRUE(whole.status.ok()) << whole.status.ToString();
  const Saved& saved = SavedGrid();
  const RunOut resumed = RunGrid(spec, kSaveAfter, kSteps, saved.root, "", false);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.ToString();
  EXPECT_EQ(resumed.digests, whole.digests);
  ASSERT_EQ(resumed.losses.size(), size_t(kSteps - kSaveAfter));
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    EXPECT_EQ(resumed.losses[i], whole.losses[size_t(kSaveAfter) + i]) << "step " << i;
  }
  // The manifest records the grid; every rank wrote a file.
  auto m = ReadCheckpointManifest(saved.root);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->world_size, 8);
  EXPECT_EQ(m->grid.value("tp", 0), 2);
  EXPECT_EQ(m->grid.value("pp", 0), 2);
  EXPECT_EQ(m->grid.value("dp", 0), 2);
  EXPECT_EQ(m->trainer.value("next_step", 0), kSaveAfter);
  // [Note: checkpoint index]: at the same grid a rank reads its own file and, on tp rank 1, tp
  // rank 0's (the parameters replicated over tp are saved there only); never the other 6.
  auto grid = RankGrid::Create(2, 2, 2, 8);
  ASSERT_TRUE(grid.ok());
  for (int r = 0; r < 8; ++r) {
    GridCoord c = grid->Coord(r);
    c.tp = 0;
    std::vector<int> want = {r, grid->RankOf(c)};
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    EXPECT_EQ(resumed.files_read[size_t(r)], want) << "rank " << r;
  }
}

// (2) Other grids and stages: the loaded parameters are the saved ones exactly (padded
// vocabulary rows included: 37 rows padded to 38 at tp 2, none at tp 1), and the continued run
// matches the one-rank reference of the whole run within the parity tolerances.
void ExpectReshardedRun(const GridSpec& spec) {
  SCOPED_TRACE(spec.ToString());
  const Saved& saved = SavedGrid();
  // Loaded, not stepped: exact.
  const RunOut loaded = RunGrid(spec, kSaveAfter, kSaveAfter, saved.root, "", false, &saved.full);
  ASSERT_TRUE(loaded.status.ok()) << loaded.status.ToString();
  EXPECT_GT(loaded.diff.count, 0);
  EXPECT_EQ(loaded.diff.max, 0.0) << loaded.diff.worst;
  if (spec.tp == 1 && spec.pp == 2 && spec.dp == 1) {
    // The same pipeline cut as the saver's: stage p reads exactly the saver's stage-p files.
    auto saver = RankGrid::Create(2, 2, 2, 8);
    ASSERT_TRUE(saver.ok());
    for (int p = 0; p < 2; ++p) {
      std::vector<int> want;
      for (int r = 0; r < 8; ++r) {
        if (saver->Coord(r).pp == p) want.push_back(r);
      }
      EXPECT_EQ(loaded.files_read[size_t(p)], want) << "pp rank " << p;
    }
  }
  // Continued: against nn::Gpt's uninterrupted run.
  auto ref = parity::RunReference(spec);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  FullParams want;
  const nn::GptConfig config = parity::SmallGpt(spec.layers);
  auto gpt = nn::Gpt::Create(config);
  ASSERT_TRUE(gpt.ok());
  for (size_t u = 0; u < ref->params.size(); ++u) {
    const UnitSpec& us = (*gpt)->spec().units[u];
    for (size_t p = 0; p < ref->params[u].size(); ++p) {
      want[us.name + "." + us.params[p].name] = ref->params[u][p];
    }
  }
  const RunOut resumed = RunGrid(spec, kSaveAfter, kSteps, saved.root, "", false, &want);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.ToString();
  EXPECT_LE(resumed.diff.max, parity::kParamTolerance) << resumed.diff.worst;
  EXPECT_LE(resumed.diff.sum / double(std::max<int64_t>(1, resumed.diff.count)),
            parity::kMeanTolerance);
  ASSERT_EQ(resumed.losses.size(), size_t(kSteps - kSaveAfter));
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    const double r = ref->losses[size_t(kSaveAfter) + i];
    EXPECT_LE(std::abs(resumed.losses[i] - r), parity::kLossTolerance * std::abs(r))
        << "step " << kSaveAfter + int(i);
  }
}

TEST(GridCheckpointTest, LoadsAtTp1Pp1Dp2Stage3) { ExpectReshardedRun(Grid(1, 1, 2, 3)); }
TEST(GridCheckpointTest, LoadsAtTp1Pp2Dp1Stage0) { ExpectReshardedRun(Grid(1, 2, 1, 0)); }
TEST(GridCheckpointTest, LoadsAtTp2Pp1Dp1Stage2) { ExpectReshardedRun(Grid(2, 1, 1, 2)); }

// Another model (a third layer) is refused before anything loads, naming the parameter, with
// the same error on every rank.
TEST(GridCheckpointTest, AnotherModelIsInvalidArgumentNamingTheParameter) {
  GridSpec spec = Grid(2, 1, 1, 1);
  spec.layers = 3;
  const RunOut r = RunGrid(spec, kSaveAfter, kSaveAfter, SavedGrid().root, "", false);
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.ToString();
  EXPECT_NE(r.status.message().find("'block.2."), std::string::npos) << r.status.ToString();
}

// Experts: each ep rank saves its own experts (named by their global index), so a checkpoint
// of DP2 with ep 2 continues bit for bit at the same grid and loads exactly at ep 1 (every
// expert on one rank) and at TP2 x DP2 (experts replicated over tp).
TEST(GridCheckpointTest, ExpertsContinueAndLoadAtAnotherEp) {
  GridSpec spec = Grid(1, 1, 2, 3);
  spec.experts = 4;
  spec.ep = 2;
  const std::string root = TempRoot("experts");
  const RunOut whole = RunGrid(spec, 0, kSteps, "", "", false);
  ASSERT_TRUE(whole.status.ok()) << whole.status.ToString();
  const RunOut saved = RunGrid(spec, 0, kSaveAfter, "", root, true);
  ASSERT_TRUE(saved.status.ok()) << saved.status.ToString();
  // Every expert was saved (ep rank 1 holds experts 2 and 3).
  EXPECT_TRUE(std::any_of(saved.full.begin(), saved.full.end(), [](const auto& kv) {
    return kv.first.find("experts.3.fc.weight") != std::string::npos;
  }));
  const RunOut resumed = RunGrid(spec, kSaveAfter, kSteps, root, "", false);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.ToString();
  EXPECT_EQ(resumed.digests, whole.digests);
  GridSpec one = Grid(1, 1, 1, 1);
  one.experts = 4;
  const RunOut at_one = RunGrid(one, kSaveAfter, kSaveAfter, root, "", false, &saved.full);
  ASSERT_TRUE(at_one.status.ok()) << at_one.status.ToString();
  EXPECT_GT(at_one.diff.count, 0);
  EXPECT_EQ(at_one.diff.max, 0.0) << at_one.diff.worst;
  GridSpec tp2 = Grid(2, 1, 2, 2);
  tp2.experts = 4;
  tp2.ep = 2;
  const RunOut at_tp2 = RunGrid(tp2, kSaveAfter, kSaveAfter, root, "", false, &saved.full);
  ASSERT_TRUE(at_tp2.status.ok()) << at_tp2.status.ToString();
  EXPECT_EQ(at_tp2.diff.max, 0.0) << at_tp2.diff.worst;
}

// Rewrites a data-parallel checkpoint as format version 1 wrote it (version 1 headers without
// "unit_name", no index), with the manifest's sizes and checksums to match.
Status DowngradeToVersion1(const std::string& root) {
  ZS_ASSIGN_OR_RETURN(const std::string dir, ResolveCheckpointDir(root));
  ZS_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(dir + "/manifest.json"));
  nlohmann::json m = nlohmann::json::parse(text);
  m["format_version"] = 1;
  m.erase("index");
  fs::remove(dir + "/index.json");
  for (auto& f : m["files"]) {
    const std::string path = dir + "/" + f["name"].get<std::string>();
    ZS_ASSIGN_OR_RETURN(const std::string bytes, ReadWholeFile(path));
    uint64_t length = 0;
    std::memcpy(&length, bytes.data() + 8, 8);
    nlohmann::json h = nlohmann::json::parse(bytes.substr(16, length));
    h["format_version"] = 1;
    for (auto& p : h["params"]) p.erase("unit_name");
    const std::string header = h.dump();
    const uint64_t n = header.size();
    const std::string out = bytes.substr(0, 8) + std::string(reinterpret_cast<const char*>(&n), 8) +
                            header + bytes.substr(16 + length);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << out;
    f["bytes"] = out.size();
    f["checksum"] = ChecksumHex(Fnv1a64(out.data(), out.size()));
  }
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << m.dump(2);
  return OkStatus();
}

// (3) A plain data-parallel checkpoint (nn::Gpt in one ZeroEngine over dp 2) loads into a grid,
// and the grid's checkpoint into a plain engine, the values exact both ways; a version 1
// (data-parallel, before grids) checkpoint still loads.
TEST(GridCheckpointTest, DataParallelAndGridCheckpointsLoadIntoEachOther) {
  const std::string plain_root = TempRoot("plain");
  const GridSpec plain_spec = Grid(1, 1, 2, 2);
  FullParams plain_full;
  std::mutex mu;
  // Save after one step of the plain engine at dp 2.
  Status s = RunLocalRanks(
      2, CommOptions{}, [&](int, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(parity::SmallGpt(plain_spec.layers)));
        ZS_ASSIGN_OR_RETURN(auto engine,
                            ZeroEngine::Create(parity::Config(2, plain_spec.ga), gpt->spec(),
                                               gpt->Init(parity::kSeed), *device, comm));
        std::vector<int32_t> tokens(size_t(plain_spec.micro_batch * parity::kSeq)), targets(tokens);
        for (int m = 0; m < plain_spec.ga; ++m) {
          parity::Fill(0, m, comm.rank(), 2, plain_spec.micro_batch, tokens, targets);
          ZS_RETURN_IF_ERROR(
              gpt->ForwardBackward(*engine, tokens, targets, plain_spec.micro_batch, parity::kSeq)
                  .status());
        }
        ZS_RETURN_IF_ERROR(engine->Step().status());
        ZS_RETURN_IF_ERROR(SaveCheckpoint(*engine, comm, plain_root).status());
        for (int u = 0; u < int(gpt->spec().units.size()); ++u) {
          const UnitSpec& us = gpt->spec().units[size_t(u)];
          for (int p = 0; p < int(us.params.size()); ++p) {
            ZS_ASSIGN_OR_RETURN(auto values, engine->GatherMasterParam(u, p));
            std::lock_guard<std::mutex> lock(mu);
            plain_full[us.name + "." + us.params[size_t(p)].name] = std::move(values);
          }
        }
        return OkStatus();
      });
  ASSERT_TRUE(s.ok()) << s.ToString();
  // Into TP2 x PP2 x DP1.
  const RunOut grid = RunGrid(Grid(2, 2, 1, 1), 1, 1, plain_root, "", false, &plain_full);
  ASSERT_TRUE(grid.status.ok()) << grid.status.ToString();
  EXPECT_GT(grid.diff.count, 0);
  EXPECT_EQ(grid.diff.max, 0.0) << grid.diff.worst;
  // The same checkpoint as format version 1 wrote it: still read, the same values.
  ASSERT_TRUE(DowngradeToVersion1(plain_root).ok());
  auto v1 = ReadCheckpointManifest(plain_root);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(v1->format_version, 1);
  const RunOut from_v1 = RunGrid(Grid(2, 1, 1, 1), 1, 1, plain_root, "", false, &plain_full);
  ASSERT_TRUE(from_v1.status.ok()) << from_v1.status.ToString();
  EXPECT_GT(from_v1.diff.count, 0);
  EXPECT_EQ(from_v1.diff.max, 0.0) << from_v1.diff.worst;

  // The grid's checkpoint into a plain engine at dp 3, stage 1.
  const Saved& saved = SavedGrid();
  s = RunLocalRanks(
      3, CommOptions{}, [&](int, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(parity::SmallGpt(plain_spec.layers)));
        ZS_ASSIGN_OR_RETURN(auto engine,
                            ZeroEngine::Create(parity::Config(1, 1), gpt->spec(),
                                               gpt->Init(parity::kSeed), *device, comm));
        ZS_ASSIGN_OR_RETURN(CheckpointManifest m, LoadCheckpoint(*engine, comm, saved.root));
        if (m.step != kSaveAfter) return InternalError(fmt::format("step {}", m.step));
        for (int u = 0; u < int(gpt->spec().units.size()); ++u) {
          const UnitSpec& us = gpt->spec().units[size_t(u)];
          for (int p = 0; p < int(us.params.size()); ++p) {
            ZS_ASSIGN_OR_RETURN(auto values, engine->GatherMasterParam(u, p));
            const std::string name = us.name + "." + us.params[size_t(p)].name;
            if (values != saved.full.at(name)) {
              return InternalError(fmt::format("'{}' differs from the grid's saved values", name));
            }
          }
        }
        return OkStatus();
      });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// fp32 -> bf16 -> fp32, round to nearest even (finite values), written here independently of
// runtime/base/dtype.h.
float Bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float out;
  std::memcpy(&out, &u, 4);
  return out;
}

// Every tensor of a safetensors file, in file order, widened to f32.
struct Tensors {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::vector<float>> values;
};
StatusOr<Tensors> ReadAllTensors(const std::string& path) {
  ZS_ASSIGN_OR_RETURN(SafetensorsContents c, ReadSafetensors(path));
  Tensors out;
  out.entries = c.tensors;
  for (const SafetensorsEntry& e : c.tensors) {
    ZS_ASSIGN_OR_RETURN(out.values[e.name], ReadTensor(c, e));
  }
  return out;
}

// `got` holds exactly the tensors of `want` (every element, bit for bit), each rounded by `f`.
void ExpectTensors(const Tensors& got, const FullParams& want, float (*f)(float),
                   const std::string& what) {
  ASSERT_EQ(got.values.size(), want.size()) << what;
  for (const auto& [name, values] : want) {
    auto it = got.values.find(name);
    ASSERT_NE(it, got.values.end()) << what << ": no " << name;
    ASSERT_EQ(it->second.size(), values.size()) << what << ": " << name;
    for (size_t k = 0; k < values.size(); ++k) {
      const float w = f(values[k]);
      ASSERT_EQ(std::memcmp(&it->second[k], &w, 4), 0)
          << what << ": " << name << "[" << k << "] " << it->second[k] << " vs " << w;
    }
  }
}

float Same(float v) { return v; }

// zero-ckpt (tools/zero_ckpt) on `args`; its stderr into `err` when given. The exit status.
int ZeroCkpt(const std::string& args, std::string* err = nullptr) {
  const std::string errfile =
      (fs::temp_directory_path() / fmt::format("zs_zero_ckpt_{}.err", ::getpid())).string();
  const int rc =
      std::system(fmt::format("'{}' {} > /dev/null 2> '{}'", ZS_ZERO_CKPT, args, errfile).c_str());
  if (err != nullptr) {
    auto text = ReadWholeFile(errfile);
    *err = text.ok() ? *text : std::string();
  }
  fs::remove(errfile);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

GridGptOptions& With16Bit(GridGptOptions& o) {
  o.engine.zero_optimization.stage3_gather_16bit_weights_on_model_save = true;
  return o;
}

// [Note: 16-bit weights of a grid]: TP2 x PP2 x DP2 at stage 3 with
// stage3_gather_16bit_weights_on_model_save writes model.16bit.safetensors holding nn::Gpt's
// parameters (names, shapes and order; the padded vocabulary row cut off), each the grid's own
// gathered fp32 master rounded to bf16; a data-parallel nn::Gpt engine that loads this
// checkpoint writes the same file byte for byte. zero-ckpt consolidates the same checkpoint to
// the fp32 masters exactly and to the same bf16 values, and verifies it.
TEST(GridCheckpointTest, Writes16BitWeightsAsADataParallelRunDoes) {
  const GridSpec spec = Grid(2, 2, 2, 3);
  const std::string root = TempRoot("16bit");
  const RunOut saved = RunGrid(spec, 0, kSaveAfter, "", root, true, nullptr,
                               [](GridGptOptions& o) { With16Bit(o); });
  ASSERT_TRUE(saved.status.ok()) << saved.status.ToString();
  auto dir = ResolveCheckpointDir(root);
  ASSERT_TRUE(dir.ok());
  const std::string file = *dir + "/" + kConsolidated16BitFile;
  auto got = ReadAllTensors(file);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectTensors(*got, saved.full, Bf16, "the grid's 16-bit file");
  auto gpt = nn::Gpt::Create(parity::SmallGpt(spec.layers));
  ASSERT_TRUE(gpt.ok());
  size_t i = 0;
  for (const UnitSpec& us : (*gpt)->spec().units) {
    for (const ParamSpec& ps : us.params) {
      ASSERT_LT(i, got->entries.size());
      EXPECT_EQ(got->entries[i].name, us.name + "." + ps.name);
      EXPECT_EQ(got->entries[i].shape, ps.shape) << got->entries[i].name;
      EXPECT_EQ(got->entries[i].dtype, DType::kBF16);
      ++i;
    }
  }
  EXPECT_EQ(i, got->entries.size());
  auto manifest = ReadCheckpointManifest(root);
  ASSERT_TRUE(manifest.ok());
  auto listed = ReadWholeFile(*dir + "/manifest.json");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(nlohmann::json::parse(*listed).at("consolidated_16bit").at("bytes").get<int64_t>(),
            int64_t(fs::file_size(file)));

  // A data-parallel run of the same model (dp 2, stage 3, the same key) from this checkpoint.
  const std::string plain_dir = TempRoot("16bit_plain");
  fs::create_directories(plain_dir);
  Status s = RunLocalRanks(
      2, CommOptions{}, [&](int, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(auto model, nn::Gpt::Create(parity::SmallGpt(spec.layers)));
        EngineConfig config = parity::Config(3, 1);
        config.zero_optimization.stage3_gather_16bit_weights_on_model_save = true;
        ZS_ASSIGN_OR_RETURN(
            auto engine, ZeroEngine::Create(config, model->spec(), model->Init(1), *device, comm));
        ZS_RETURN_IF_ERROR(LoadCheckpoint(*engine, comm, root).status());
        ZS_ASSIGN_OR_RETURN(bool written, Save16BitWeightsOnModelSave(*engine, plain_dir));
        if (!written) return InternalError("the data-parallel engine wrote no 16-bit file");
        return OkStatus();
      });
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto grid_bytes = ReadWholeFile(file);
  auto plain_bytes = ReadWholeFile(plain_dir + "/" + kConsolidated16BitFile);
  ASSERT_TRUE(grid_bytes.ok() && plain_bytes.ok());
  EXPECT_TRUE(*grid_bytes == *plain_bytes) << "the grid's and the data-parallel run's files differ";

  // zero-ckpt on the same checkpoint.
  std::string err;
  EXPECT_EQ(ZeroCkpt(fmt::format("verify '{}'", root), &err), 0) << err;
  const std::string f32 = plain_dir + "/consolidated.f32.safetensors";
  const std::string bf16 = plain_dir + "/consolidated.bf16.safetensors";
  ASSERT_EQ(ZeroCkpt(fmt::format("consolidate '{}' '{}'", root, f32), &err), 0) << err;
  ASSERT_EQ(ZeroCkpt(fmt::format("consolidate '{}' '{}' --dtype bf16", root, bf16), &err), 0)
      << err;
  auto got32 = ReadAllTensors(f32);
  ASSERT_TRUE(got32.ok()) << got32.status().ToString();
  ExpectTensors(*got32, saved.full, Same, "zero-ckpt consolidate");
  auto got16 = ReadAllTensors(bf16);
  ASSERT_TRUE(got16.ok()) << got16.status().ToString();
  ExpectTensors(*got16, saved.full, Bf16, "zero-ckpt consolidate --dtype bf16");
}

void FlipByte(const fs::path& file, int64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  f.seekg(at);
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(at);
  f.write(&c, 1);
}

// Rewrites the checkpoint's manifest through `edit`.
void EditManifest(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto text = ReadWholeFile(dir + "/manifest.json");
  ASSERT_TRUE(text.ok());
  nlohmann::json m = nlohmann::json::parse(*text);
  edit(m);
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << m.dump(2);
}

// [Note: checkpoint index] on the TP2 x PP2 x DP2 checkpoint: zero-ckpt verify checks the index
// against the rank files (an index rewritten to disagree, its checksum fixed, is named); a
// corrupt index is an error naming it on every rank; without the index (an older checkpoint)
// the load reads every rank file and gives the same values.
TEST(GridCheckpointTest, TheIndexIsCheckedAndOptional) {
  const Saved& saved = SavedGrid();
  auto step = ResolveCheckpointDir(saved.root);
  ASSERT_TRUE(step.ok());
  const std::string copy = TempRoot("index");
  fs::copy(*step, copy, fs::copy_options::recursive);
  const std::string index = copy + "/index.json";
  auto original = ReadWholeFile(index);
  ASSERT_TRUE(original.ok());
  std::string err;
  ASSERT_EQ(ZeroCkpt(fmt::format("verify '{}'", copy), &err), 0) << err;

  // An index that disagrees with the files: one piece's range moved, the checksum fixed.
  nlohmann::json j = nlohmann::json::parse(*original);
  auto& piece = j["params"][3];
  piece["end"] = piece["end"].get<int64_t>() - 1;
  const std::string bad = j.dump();
  std::ofstream(index, std::ios::trunc | std::ios::binary) << bad;
  EditManifest(copy, [&](nlohmann::json& m) {
    m["index"]["bytes"] = bad.size();
    m["index"]["checksum"] = ChecksumHex(Fnv1a64(bad.data(), bad.size()));
  });
  EXPECT_EQ(ZeroCkpt(fmt::format("verify '{}'", copy), &err), 1);
  EXPECT_NE(err.find("index.json"), std::string::npos) << err;
  EXPECT_NE(err.find("disagrees"), std::string::npos) << err;

  // A corrupt index (the manifest's checksum of the original).
  std::ofstream(index, std::ios::trunc | std::ios::binary) << *original;
  ASSERT_EQ(ZeroCkpt(fmt::format("verify '{}'", copy), &err), 1);  // the manifest's checksum
  EditManifest(copy, [&](nlohmann::json& m) {
    m["index"]["bytes"] = original->size();
    m["index"]["checksum"] = ChecksumHex(Fnv1a64(original->data(), original->size()));
  });
  ASSERT_EQ(ZeroCkpt(fmt::format("verify '{}'", copy), &err), 0) << err;
  FlipByte(index, 100);
  const RunOut corrupt = RunGrid(Grid(1, 1, 2, 1), kSaveAfter, kSaveAfter, copy, "", false);
  ASSERT_FALSE(corrupt.status.ok());
  EXPECT_NE(corrupt.status.message().find("index.json"), std::string::npos)
      << corrupt.status.ToString();
  EXPECT_NE(corrupt.status.message().find("corrupt"), std::string::npos)
      << corrupt.status.ToString();
  EXPECT_EQ(ZeroCkpt(fmt::format("verify '{}'", copy), &err), 1);
  EXPECT_NE(err.find("index.json"), std::string::npos) << err;

  // No index: loads exactly, every file read; verify says so.
  fs::remove(index);
  EditManifest(copy, [](nlohmann::json& m) { m.erase("index"); });
  const RunOut scanned =
      RunGrid(Grid(1, 1, 2, 3), kSaveAfter, kSaveAfter, copy, "", false, &saved.full);
  ASSERT_TRUE(scanned.status.ok()) << scanned.status.ToString();
  EXPECT_EQ(scanned.diff.max, 0.0) << scanned.diff.worst;
  EXPECT_EQ(scanned.files_read[0], std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(ZeroCkpt(fmt::format("verify '{}'", copy), &err), 0) << err;
}

// Experts: the 16-bit file of a DP2 x EP2 stage-3 save holds every expert (each ep rank saved
// its own), each the gathered master rounded to bf16.
TEST(GridCheckpointTest, Writes16BitWeightsOfEveryExpert) {
  GridSpec spec = Grid(1, 1, 2, 3);
  spec.experts = 4;
  spec.ep = 2;
  const std::string root = TempRoot("experts16");
  const RunOut saved = RunGrid(spec, 0, kSaveAfter, "", root, true, nullptr,
                               [](GridGptOptions& o) { With16Bit(o); });
  ASSERT_TRUE(saved.status.ok()) << saved.status.ToString();
  auto dir = ResolveCheckpointDir(root);
  ASSERT_TRUE(dir.ok());
  auto got = ReadAllTensors(*dir + "/" + kConsolidated16BitFile);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(std::any_of(got->values.begin(), got->values.end(), [](const auto& kv) {
    return kv.first.find("experts.3.fc.weight") != std::string::npos;
  }));
  ExpectTensors(*got, saved.full, Bf16, "the 16-bit file with experts");
}

}  // namespace
}  // namespace zs::parallel

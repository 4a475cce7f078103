// The safetensors writer and reader (runtime/checkpoint/safetensors_writer.h) and the export of
// a live engine (safetensors_export.h): the header's bytes as the format specifies them, values
// round-trip (F32 exact, BF16/F16 rounded to nearest even), streaming in pieces that span
// tensors, every documented error, atomic files; an engine's export equals GatherMasterParam at
// every stage (and the files are the same bytes at every stage), and Save16BitModel does what
// stage3_gather_16bit_weights_on_model_save says.
#include "runtime/checkpoint/safetensors_writer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "runtime/base/splitmix64.h"
#include "runtime/checkpoint/safetensors_export.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/nn/gpt.h"

namespace zs {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            fmt::format("zs_safetensors_{}_{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SafetensorsWriter, HeaderBytesFollowTheFormat) {
  TempDir dir;
  const std::string path = dir / "a.safetensors";
  auto w = SafetensorsWriter::Create(path, {{"w", DType::kF32, {2, 3}}, {"b", DType::kBF16, {3}}},
                                     {{"format", "pt"}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 1.0f, 1.00390625f, -2.5f};
  ASSERT_TRUE((*w)->Append(values).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const std::string bytes = ReadAll(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(int64_t(8 + n), (*w)->header_bytes());
  EXPECT_EQ(bytes.size(), 8 + n + 6 * 4 + 3 * 2);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header[0], '{');
  const auto j = nlohmann::json::parse(header);  // trailing spaces are valid JSON whitespace
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j["w"]["dtype"], "F32");
  EXPECT_EQ(j["w"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(j["w"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(j["b"]["dtype"], "BF16");
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({24, 30}));
  // 1.00390625 = 1 + 2^-8 is a tie between bf16 1.0 and 1.0078125: to even, 1.0 (0x3f80).
  uint16_t b1 = 0;
  std::memcpy(&b1, bytes.data() + 8 + n + 24 + 2, 2);
  EXPECT_EQ(b1, 0x3f80);

  auto file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->metadata.at("format"), "pt");
  ASSERT_EQ(file->tensors.size(), 2u);
  auto w_values = ReadTensor(*file, *file->Find("w"));
  ASSERT_TRUE(w_values.ok());
  EXPECT_EQ(*w_values, std::vector<float>(values.begin(), values.begin() + 6));
  auto b_values = ReadTensor(*file, *file->Find("b"));
  ASSERT_TRUE(b_values.ok());
  EXPECT_EQ(*b_values, (std::vector<float>{1.0f, 1.0f, -2.5f}));
}

TEST(SafetensorsWriter, PiecesMaySpanTensorsAndEmptyTensorsAreKept) {
  TempDir dir;
  const std::string path = dir / "p.safetensors";
  auto w = SafetensorsWriter::Create(path, {{"a", DType::kF16, {5}},
                                            {"empty", DType::kF32, {0, 4}},
                                            {"s", DType::kF32, {}},
                                            {"c", DType::kF32, {3}}});
  ASSERT_TRUE(w.ok());
  for (float v : {0.5f, 1.5f, 2.5f, 65504.0f, 1e-7f, 42.0f, 7.0f, 8.0f, 9.0f}) {
    ASSERT_TRUE((*w)->Append(std::span<const float>(&v, 1)).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  auto file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(*ReadTensor(*file, *file->Find("s")), std::vector<float>{42.0f});
  EXPECT_EQ(*ReadTensor(*file, *file->Find("c")), (std::vector<float>{7, 8, 9}));
  EXPECT_TRUE(ReadTensor(*file, *file->Find("empty"))->empty());
  const std::vector<float> a = *ReadTensor(*file, *file->Find("a"));
  EXPECT_EQ(a[3], 65504.0f);
  EXPECT_EQ(a[4], F16ToFloat(FloatToF16(1e-7f)));  // a subnormal, rounded to nearest
}

TEST(SafetensorsWriter, ErrorsNameWhatIsWrong) {
  TempDir dir;
  const std::string path = dir / "e.safetensors";
  auto dup = SafetensorsWriter::Create(path, {{"x", DType::kF32, {1}}, {"x", DType::kF32, {1}}});
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("\"x\""), std::string::npos);
  EXPECT_FALSE(SafetensorsWriter::Create(path, {{"__metadata__", DType::kF32, {1}}}).ok());
  EXPECT_FALSE(SafetensorsWriter::Create(path, {{"n", DType::kF32, {-1}}}).ok());
  auto missing_dir = SafetensorsWriter::Create(dir / "no/such/dir/f.safetensors", {});
  EXPECT_EQ(missing_dir.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing_dir.status().message().find("no/such/dir"), std::string::npos);

  {
    auto w = SafetensorsWriter::Create(path, {{"x", DType::kF32, {2}}});
    ASSERT_TRUE(w.ok());
    const float one = 1.0f;
    ASSERT_TRUE((*w)->Append(std::span<const float>(&one, 1)).ok());
    Status early = (*w)->Finish();
    EXPECT_EQ(early.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(early.message().find("1 of its 2"), std::string::npos) << early.ToString();
    const std::vector<float> three = {1, 2, 3};
    EXPECT_EQ((*w)->Append(three).code(), StatusCode::kInvalidArgument);
  }  // destroyed unfinished: no file, no temporary
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // A file cut short, and one whose header lies, are errors naming the file.
  {
    auto w = SafetensorsWriter::Create(path, {{"x", DType::kF32, {4}}});
    const std::vector<float> v = {1, 2, 3, 4};
    ASSERT_TRUE((*w)->Append(v).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  fs::resize_file(path, fs::file_size(path) - 3);
  auto cut = ReadSafetensors(path);
  EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cut.status().message().find(path), std::string::npos);
  fs::resize_file(path, 5);
  EXPECT_FALSE(ReadSafetensors(path).ok());
  EXPECT_EQ(ReadSafetensors(dir / "absent").status().code(), StatusCode::kIoError);
}

// ---- export from a live engine ----------------------------------------------------------

constexpr int kVocab = 23, kSeq = 5, kBatch = 2;

struct ExportRun {
  std::vector<std::string> files;           // rank 0's bytes of each export
  std::vector<std::vector<float>> masters;  // GatherMasterParam, export order
  std::vector<std::string> names;
  bool saved16 = false;
  bool saved_on_save = false;
};

StatusOr<ExportRun> TrainAndExport(int world, int stage, bool gather16, bool bf16,
                                   const std::string& dir) {
  ExportRun run;
  std::mutex mu;
  CommOptions options;
  Status status = RunLocalRanks(
      world, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        nn::GptConfig gc{kVocab, kSeq, 1, 12, 2};
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(gc, &tracker));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineConfig config;
        config.zero_optimization.stage = stage;
        config.zero_optimization.stage3_gather_16bit_weights_on_model_save = gather16;
        config.bf16.enabled = bf16;
        config.optimizer.lr = 1e-2;
        ZS_ASSIGN_OR_RETURN(auto engine,
                            ZeroEngine::Create(config, gpt->spec(), gpt->Init(3), *device, comm));
        std::vector<int32_t> in(size_t(kBatch) * kSeq), tgt(in.size());
        for (int step = 0; step < 2; ++step) {
          for (size_t i = 0; i < in.size(); ++i) {
            const uint64_t r = SplitMix64(uint64_t(step) * 7919 + uint64_t(rank) * 131 + i);
            in[i] = int32_t(r % kVocab);
            tgt[i] = int32_t((r >> 20) % kVocab);
          }
          ZS_RETURN_IF_ERROR(gpt->ForwardBackward(*engine, in, tgt, kBatch, kSeq).status());
          ZS_RETURN_IF_ERROR(engine->Step().status());
        }
        const std::string tag = fmt::format("w{}s{}", world, stage);
        ZS_RETURN_IF_ERROR(ExportSafetensors(*engine, dir + "/" + tag + ".f32.safetensors"));
        ZS_RETURN_IF_ERROR(ExportSafetensors(*engine, dir + "/" + tag + ".bf16.safetensors",
                                             {.dtype = DType::kBF16}));
        ZS_ASSIGN_OR_RETURN(bool saved16,
                            Save16BitModel(*engine, dir + "/" + tag + ".16.safetensors"));
        ZS_ASSIGN_OR_RETURN(bool on_save, Save16BitWeightsOnModelSave(*engine, dir + "/" + tag));
        std::vector<std::vector<float>> masters;
        std::vector<std::string> names;
        const ModelSpec& model = engine->model();
        for (size_t u = 0; u < model.units.size(); ++u) {
          for (size_t p = 0; p < model.units[u].params.size(); ++p) {
            ZS_ASSIGN_OR_RETURN(auto v, engine->GatherMasterParam(int(u), int(p)));
            masters.push_back(std::move(v));
            names.push_back(ExportTensorName(model, int(u), int(p)));
          }
        }
        if (rank != 0) return OkStatus();
        std::lock_guard<std::mutex> lock(mu);
        run.masters = std::move(masters);
        run.names = std::move(names);
        run.saved16 = saved16;
        run.saved_on_save = on_save;
        run.files = {ReadAll(dir + "/" + tag + ".f32.safetensors"),
                     ReadAll(dir + "/" + tag + ".bf16.safetensors")};
        return OkStatus();
      });
  if (!status.ok()) return status;
  return run;
}

TEST(SafetensorsExport, EqualsGatherMasterParamAndIsTheSameFileAtEveryStage) {
  TempDir dir;
  std::vector<std::string> stage0_files;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    std::filesystem::create_directories(dir / fmt::format("w2s{}", stage));
    auto run = TrainAndExport(2, stage, /*gather16=*/false, /*bf16=*/false, dir / "");
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    // DeepSpeed's rule: at stage 3 without the key, save_16bit_model writes nothing.
    EXPECT_EQ(run->saved16, stage != 3);
    EXPECT_EQ(fs::exists(dir / fmt::format("w2s{}.16.safetensors", stage)), stage != 3);
    EXPECT_FALSE(run->saved_on_save);
    auto f32 = ReadSafetensors(dir / fmt::format("w2s{}.f32.safetensors", stage));
    auto bf = ReadSafetensors(dir / fmt::format("w2s{}.bf16.safetensors", stage));
    ASSERT_TRUE(f32.ok()) << f32.status().ToString();
    ASSERT_TRUE(bf.ok()) << bf.status().ToString();
    ASSERT_EQ(f32->tensors.size(), run->names.size());
    EXPECT_EQ(run->names.front(), "embed.wte.weight");
    for (size_t i = 0; i < run->names.size(); ++i) {
      const SafetensorsEntry* e = f32->Find(run->names[i]);
      ASSERT_NE(e, nullptr) << run->names[i];
      EXPECT_EQ(e->dtype, DType::kF32);
      EXPECT_EQ(*ReadTensor(*f32, *e), run->masters[i]) << run->names[i];
      const SafetensorsEntry* b = bf->Find(run->names[i]);
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(b->dtype, DType::kBF16);
      EXPECT_EQ(b->shape, e->shape);
      const std::vector<float> got = *ReadTensor(*bf, *b);
      for (size_t k = 0; k < got.size(); ++k) {
        ASSERT_EQ(got[k], BF16ToFloat(FloatToBF16(run->masters[i][k]))) << run->names[i] << k;
      }
    }
    if (stage == 0) {
      stage0_files = run->files;
    } else {
      EXPECT_TRUE(run->files == stage0_files) << "the exported bytes differ from stage 0's";
    }
  }
}

TEST(SafetensorsExport, Gather16BitWeightsOnModelSaveWritesTheComputeDType) {
  TempDir dir;
  std::filesystem::create_directories(dir / "w2s3");
  auto run = TrainAndExport(2, 3, /*gather16=*/true, /*bf16=*/true, dir / "");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_TRUE(run->saved16);
  EXPECT_TRUE(run->saved_on_save);
  auto file = ReadSafetensors(dir / "w2s3/" + kConsolidated16BitFile);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ(file->tensors.size(), run->names.size());
  for (size_t i = 0; i < run->names.size(); ++i) {
    const SafetensorsEntry* e = file->Find(run->names[i]);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->dtype, DType::kBF16);
    const std::vector<float> got = *ReadTensor(*file, *e);
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k], BF16ToFloat(FloatToBF16(run->masters[i][k])));
    }
  }
}

TEST(SafetensorsExport, AWriteFailureOnRankZeroIsAnErrorOnEveryRank) {
  CommOptions options;
  std::mutex mu;
  std::vector<Status> results(2);
  Status status = RunLocalRanks(
      2, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        nn::GptConfig gc{kVocab, kSeq, 1, 12, 2};
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(gc, &tracker));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineConfig config;
        config.zero_optimization.stage = 3;
        ZS_ASSIGN_OR_RETURN(auto engine,
                            ZeroEngine::Create(config, gpt->spec(), gpt->Init(3), *device, comm));
        Status s = ExportSafetensors(*engine, "/nonexistent-zs-dir/x.safetensors");
        std::lock_guard<std::mutex> lock(mu);
        results[size_t(rank)] = s;
        return OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status.ToString();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[size_t(r)].code(), StatusCode::kIoError) << results[size_t(r)].ToString();
    EXPECT_NE(results[size_t(r)].message().find("/nonexistent-zs-dir/x.safetensors"),
              std::string::npos);
  }
  EXPECT_NE(results[1].message().find("rank 0 failed"), std::string::npos);
}

}  // namespace
}  // namespace zs

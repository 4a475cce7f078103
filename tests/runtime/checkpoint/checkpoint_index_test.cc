// OpenCheckpointIndex (runtime/checkpoint/checkpoint_index.h) on rank files written by
// WriteShardFile, without an engine: the index file and the scan of the rank files' headers
// give the pieces that were written; the index repeats each header entry byte for byte (one
// writer of an entry, ParamEntryToJson); a missing, truncated or corrupt index, an index of
// other files, and a missing or short rank file are errors naming the file.
#include "runtime/checkpoint/checkpoint_index.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/shard_file.h"
#include "tests/status_is.h"

namespace zs {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "zs-ckpt-index-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// What a piece was written as: (name, saved tp rank, begin, end, file), sorted as the index is.
using Written = std::tuple<std::string, int, int64_t, int64_t, int>;

OwnedArray Array(const std::string& kind, const std::string& dtype, int64_t n, int seed) {
  OwnedArray a;
  a.kind = kind;
  a.dtype = dtype;
  const int64_t per = dtype == "f32" ? 4 : dtype == "bf16" ? 2 : 1;
  for (int64_t i = 0; i < n * per; ++i) a.data.push_back(uint8_t(i * 7 + seed));
  if (dtype == "int8") {
    a.block_origin = -3;
    a.scales = {0.5f, 0.25f * float(seed)};
  }
  return a;
}

ParamPlacement Rows(const std::string& name, int rank) {
  ParamPlacement p;
  p.name = name;
  p.layout = tp::TpParamLayout::SplitRows({6, 2}, 1, 8);  // padded to 8 rows: 8 local elements
  p.tp_rank = rank;
  p.tp_size = 2;
  return p;
}

// Two rank files: "w" (whole, 12 elements) cut over both files, "v" split over tp 2 (one tp
// rank per file, rank 1's in two pieces), int8 and bf16 states among f32 ones.
struct Fixture {
  TempDir dir;
  CheckpointManifest manifest;
  std::vector<Written> written;

  Fixture() {
    manifest.dir = dir.path.string();
    const ParamPlacement w = ParamPlacement::Whole("w", {3, 4});
    std::vector<std::vector<StoredParam>> files(2);
    auto add = [&](int file, const ParamPlacement& p, int unit, int64_t begin, int64_t end,
                   const std::string& state_dtype) {
      StoredParam s;
      s.state.unit = unit;
      s.state.param = 0;
      s.state.begin = begin;
      s.state.end = end;
      s.state.arrays.push_back(Array("master", "f32", end - begin, file + unit));
      s.state.arrays.push_back(Array("state0", state_dtype, end - begin, file + unit + 1));
      s.unit_name = unit == 0 ? "w-unit" : "v-unit";
      s.placement = p;
      files[size_t(file)].push_back(s);
      written.push_back({p.name, p.identity() ? 0 : p.tp_rank, begin, end, file});
    };
    add(0, w, 0, 0, 5, "int8");
    add(0, Rows("v", 0), 1, 0, 8, "f32");
    add(1, w, 0, 5, 12, "bf16");
    add(1, Rows("v", 1), 1, 0, 3, "int8");
    add(1, Rows("v", 1), 1, 3, 8, "f32");
    std::sort(written.begin(), written.end());
    std::vector<RankFileRef> refs;
    for (int f = 0; f < 2; ++f) {
      const std::string name = RankFileName(f);
      auto sum = WriteShardFile((dir.path / name).string(), f, 2, files[size_t(f)]);
      EXPECT_TRUE(sum.ok()) << sum.status().ToString();
      manifest.files.push_back({name, f, sum->bytes, sum->checksum});
      refs.push_back({name, f, sum->bytes});
    }
    // As SaveCheckpoint writes it.
    auto index = IndexRankFiles(manifest.dir, refs);
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    index->Sort();
    const std::string text = CheckpointIndexToJson(*index).dump();
    std::ofstream(dir.path / kCheckpointIndexFile, std::ios::binary) << text;
    manifest.index = {kCheckpointIndexFile, 0, int64_t(text.size()),
                      Fnv1a64(text.data(), text.size())};
  }
  fs::path index_path() const { return dir.path / kCheckpointIndexFile; }
};

std::vector<Written> Pieces(const CheckpointIndex& index) {
  std::vector<Written> out;
  for (const auto& p : index.pieces) {
    const ParamPlacement& pl = p.entry.placement;
    out.push_back({p.entry.name, pl.identity() ? 0 : pl.tp_rank, p.entry.begin, p.entry.end,
                   index.files[size_t(p.file)].rank});
  }
  return out;
}

// A rank file's header as its bytes say (magic, length, JSON), read without ShardFileReader.
nlohmann::json RawHeader(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t length = 0;
  std::memcpy(&length, bytes.data() + 8, 8);
  return nlohmann::json::parse(bytes.substr(16, length));
}

void FlipByte(const fs::path& path, int64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x20);
  f.seekp(at);
  f.write(&c, 1);
}

TEST(OpenCheckpointIndex, TheIndexAndTheScanGiveThePiecesWritten) {
  Fixture fx;
  auto indexed = OpenCheckpointIndex(fx.manifest);
  ASSERT_TRUE(indexed.ok()) << indexed.status().ToString();
  EXPECT_EQ(Pieces(*indexed), fx.written);
  ASSERT_EQ(indexed->files.size(), 2u);
  for (int f = 0; f < 2; ++f) {
    const std::string text = RawHeader(fx.dir.path / RankFileName(f)).dump();
    EXPECT_EQ(indexed->files[size_t(f)].data_start, int64_t(16 + text.size())) << "file " << f;
  }
  const auto [first, last] = indexed->Of("v");
  EXPECT_EQ(last - first, 3);

  // An older checkpoint: no index in the manifest, none on disk.
  fs::remove(fx.index_path());
  fx.manifest.index = {};
  auto scanned = OpenCheckpointIndex(fx.manifest);
  ASSERT_TRUE(scanned.ok()) << scanned.status().ToString();
  EXPECT_EQ(Pieces(*scanned), fx.written);
  ASSERT_EQ(scanned->pieces.size(), indexed->pieces.size());
  for (size_t i = 0; i < scanned->pieces.size(); ++i) {
    EXPECT_EQ(ParamEntryToJson(scanned->pieces[i].entry),
              ParamEntryToJson(indexed->pieces[i].entry))
        << "piece " << i;
  }
}

// The index's entries are the rank files' header entries, as text, plus "file".
TEST(OpenCheckpointIndex, TheIndexRepeatsTheHeaderEntries) {
  Fixture fx;
  std::ifstream in(fx.index_path());
  const nlohmann::json index = nlohmann::json::parse(in);
  std::vector<std::pair<int, std::string>> from_index, from_headers;
  for (nlohmann::json e : index.at("params")) {
    const int file = e.at("file").get<int>();
    e.erase("file");
    from_index.push_back({file, e.dump()});
  }
  for (int f = 0; f < 2; ++f) {
    const nlohmann::json header = RawHeader(fx.dir.path / RankFileName(f));
    for (const auto& e : header.at("params")) {
      EXPECT_TRUE(e.contains("unit_name")) << e.dump();
      EXPECT_EQ(e.contains("tp"), e.at("name") == "v") << e.dump();
      from_headers.push_back({f, e.dump()});
    }
  }
  std::sort(from_index.begin(), from_index.end());
  std::sort(from_headers.begin(), from_headers.end());
  EXPECT_EQ(from_index, from_headers);
  EXPECT_EQ(from_headers.size(), fx.written.size());
}

TEST(OpenCheckpointIndex, ErrorsNameTheFile) {
  Fixture fx;
  const std::string index_name = kCheckpointIndexFile;
  std::ifstream in(fx.index_path(), std::ios::binary);
  const std::string original((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  auto restore = [&] {
    std::ofstream(fx.index_path(), std::ios::binary | std::ios::trunc) << original;
  };

  FlipByte(fx.index_path(), 40);
  EXPECT_TRUE(StatusIs(OpenCheckpointIndex(fx.manifest).status(), StatusCode::kIoError,
                       {index_name, "corrupt"}));
  std::ofstream(fx.index_path(), std::ios::binary | std::ios::trunc)
      << original.substr(0, original.size() - 1);
  EXPECT_TRUE(StatusIs(OpenCheckpointIndex(fx.manifest).status(), StatusCode::kIoError,
                       {index_name, "truncated"}));
  fs::remove(fx.index_path());
  EXPECT_TRUE(
      StatusIs(OpenCheckpointIndex(fx.manifest).status(), StatusCode::kNotFound, {index_name}));
  restore();
  ASSERT_TRUE(OpenCheckpointIndex(fx.manifest).ok());

  // A manifest whose rank files the index does not describe (a file's size differs).
  CheckpointManifest other = fx.manifest;
  other.files[1].bytes += 1;
  EXPECT_TRUE(StatusIs(OpenCheckpointIndex(other).status(), StatusCode::kIoError,
                       {index_name, "does not list the manifest's 2 rank files"}));
  other = fx.manifest;
  other.files.pop_back();
  EXPECT_TRUE(StatusIs(OpenCheckpointIndex(other).status(), StatusCode::kIoError,
                       {index_name, "does not list the manifest's 1 rank files"}));

  // Without an index, the scan names the rank file: short (the manifest's size), then missing.
  fx.manifest.index = {};
  const fs::path rank1 = fx.dir.path / RankFileName(1);
  fs::resize_file(rank1, uint64_t(fx.manifest.files[1].bytes - 1));
  EXPECT_TRUE(StatusIs(OpenCheckpointIndex(fx.manifest).status(), StatusCode::kIoError,
                       {RankFileName(1), "truncated"}));
  fs::remove(rank1);
  EXPECT_TRUE(
      StatusIs(OpenCheckpointIndex(fx.manifest).status(), StatusCode::kIoError, {RankFileName(1)}));
}

}  // namespace
}  // namespace zs

#include "runtime/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "optimizers/optimizer_spec.h"
#include "runtime/base/dtype.h"
#include "runtime/checkpoint/safetensors_export.h"
#include "runtime/checkpoint/shard_file.h"
#include "runtime/comm/all_gather_scalar.h"

namespace zs {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kLatest = "latest";

std::string StepDirName(int64_t step) { return fmt::format("step-{:08d}", step); }

// Every rank learns whether any rank failed, and gets the first failing rank's error (so that
// each rank's error names the file at fault).
Status Agree(Communicator& dp, const Status& mine, const std::string& what) {
  ZS_ASSIGN_OR_RETURN(const std::vector<double> failed, AllGatherScalar(dp, mine.ok() ? 0.0 : 1.0));
  int first = -1;
  for (size_t r = 0; r < failed.size() && first < 0; ++r) {
    if (failed[r] != 0) first = int(r);
  }
  if (first < 0) return OkStatus();
  std::string text = dp.rank() == first ? mine.message() : std::string();
  uint64_t head[2] = {uint64_t(text.size()), uint64_t(mine.code())};
  ZS_RETURN_IF_ERROR(dp.Broadcast(head, 4, DType::kF32, first));  // raw bytes: 4 x 4
  text.resize(size_t((head[0] + 3) / 4 * 4));
  if (!text.empty()) {
    ZS_RETURN_IF_ERROR(dp.Broadcast(text.data(), text.size() / 4, DType::kF32, first));
  }
  text.resize(size_t(head[0]));
  if (!mine.ok()) return mine;
  return Status(StatusCode(head[1]),
                fmt::format("{}: rank {} of '{}' failed: {}", what, first, dp.group_name(), text));
}

Status RemoveAll(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) return IoError(fmt::format("removing '{}': {}", p.string(), ec.message()));
  return OkStatus();
}

nlohmann::json ModelJson(const ModelSpec& model) {
  nlohmann::json params = nlohmann::json::array();
  for (size_t u = 0; u < model.units.size(); ++u) {
    const UnitSpec& unit = model.units[u];
    for (size_t p = 0; p < unit.params.size(); ++p) {
      params.push_back({{"unit", u},
                        {"param", p},
                        {"unit_name", unit.name},
                        {"name", unit.name + "." + unit.params[p].name},
                        {"shape", unit.params[p].shape},
                        {"numel", unit.params[p].numel()}});
    }
  }
  return params;
}

// Rank 0's half of a save: manifest, the rename into place, `latest`.
Status Publish(const fs::path& root, const fs::path& tmp, const fs::path& final_dir,
               const nlohmann::json& manifest) {
  ZS_RETURN_IF_ERROR(WriteFileDurably((tmp / kManifest).string(), manifest.dump(2)));
  ZS_RETURN_IF_ERROR(SyncDirectory(tmp.string()));
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    // Swap the old checkpoint of this step out in one step, then remove it.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
      return IoError(fmt::format("exchanging '{}' with '{}': {}", tmp.string(), final_dir.string(),
                                 std::strerror(errno)));
    }
    ZS_RETURN_IF_ERROR(SyncDirectory(root.string()));
    ZS_RETURN_IF_ERROR(RemoveAll(tmp));
  } else if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    return IoError(fmt::format("renaming '{}' to '{}': {}", tmp.string(), final_dir.string(),
                               std::strerror(errno)));
  }
  ZS_RETURN_IF_ERROR(SyncDirectory(root.string()));
  const fs::path latest_tmp = root / ".latest.tmp";
  ZS_RETURN_IF_ERROR(WriteFileDurably(latest_tmp.string(), final_dir.filename().string() + "\n"));
  if (::rename(latest_tmp.c_str(), (root / kLatest).c_str()) != 0) {
    return IoError(fmt::format("renaming '{}' to '{}': {}", latest_tmp.string(),
                               (root / kLatest).string(), std::strerror(errno)));
  }
  return SyncDirectory(root.string());
}

struct FileSummary {  // all-gathered as raw bytes (6 f32 slots: transports only copy them)
  uint64_t checksum = 0;
  int64_t bytes = 0;
  int64_t ok = 0;
};
static_assert(sizeof(FileSummary) == 24);

}  // namespace

StatusOr<std::string> ResolveCheckpointDir(const std::string& path) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / kManifest, ec)) return path;
  const fs::path latest = fs::path(path) / kLatest;
  if (!fs::exists(latest, ec)) {
    return NotFoundError(fmt::format("no checkpoint at '{}': neither '{}' nor '{}' exists", path,
                                     (fs::path(path) / kManifest).string(), latest.string()));
  }
  ZS_ASSIGN_OR_RETURN(std::string name, ReadWholeFile(latest.string()));
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos) {
    return IoError(fmt::format("'{}' names no step directory (\"{}\")", latest.string(), name));
  }
  const fs::path dir = fs::path(path) / name;
  if (!fs::exists(dir / kManifest, ec)) {
    return NotFoundError(
        fmt::format("'{}' names '{}', which has no {}", latest.string(), dir.string(), kManifest));
  }
  return dir.string();
}

StatusOr<CheckpointManifest> ReadCheckpointManifest(const std::string& path) {
  ZS_ASSIGN_OR_RETURN(const std::string dir, ResolveCheckpointDir(path));
  const std::string file = (fs::path(dir) / kManifest).string();
  ZS_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(file));
  CheckpointManifest m;
  m.dir = dir;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    m.format_version = j.at("format_version").get<int>();
    if (m.format_version != kCheckpointFormatVersion) {
      return FailedPreconditionError(
          fmt::format("'{}' has format version {}; this build reads "
                      "version {}",
                      file, m.format_version, kCheckpointFormatVersion));
    }
    m.step = j.at("step").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.stage = j.at("stage").get<int>();
    m.compute_dtype = j.at("compute_dtype").get<std::string>();
    m.state_dtype = j.at("state_dtype").get<std::string>();
    m.optimizer = j.at("optimizer").get<std::string>();
    const auto& ls = j.at("loss_scaler");
    m.training.step = m.step;
    m.training.loss_scale = ls.at("scale").get<float>();
    m.training.loss_scale_hysteresis_left = ls.at("hysteresis_left").get<int64_t>();
    m.training.loss_scale_good_steps = ls.at("good_steps").get<int64_t>();
    m.config = j.at("config");
    m.trainer = j.at("trainer");
    for (const auto& jp : j.at("params")) {
      CheckpointManifest::Param p;
      p.unit = jp.at("unit").get<int>();
      p.param = jp.at("param").get<int>();
      p.unit_name = jp.at("unit_name").get<std::string>();
      p.name = jp.at("name").get<std::string>();
      p.shape = jp.at("shape").get<std::vector<int64_t>>();
      p.numel = jp.at("numel").get<int64_t>();
      m.params.push_back(std::move(p));
    }
    for (const auto& jf : j.at("files")) {
      CheckpointManifest::File f;
      f.name = jf.at("name").get<std::string>();
      f.rank = jf.at("rank").get<int>();
      f.bytes = jf.at("bytes").get<int64_t>();
      f.checksum = std::stoull(jf.at("checksum").get<std::string>(), nullptr, 16);
      m.files.push_back(std::move(f));
    }
  } catch (const std::exception& e) {
    return IoError(
        fmt::format("'{}' is not a valid manifest (corrupt or truncated): {}", file, e.what()));
  }
  if (int(m.files.size()) != m.world_size) {
    return IoError(fmt::format("'{}' lists {} rank files for world size {}", file, m.files.size(),
                               m.world_size));
  }
  return m;
}

StatusOr<std::string> SaveCheckpoint(ZeroEngine& engine, Communicator& dp, const std::string& root,
                                     const nlohmann::json& trainer) {
  if (dp.size() != engine.world_size() || dp.rank() != engine.rank()) {
    return InvalidArgumentError(fmt::format(
        "SaveCheckpoint: communicator '{}' (rank {} of {}) is not the engine's (rank {} of {})",
        dp.group_name(), dp.rank(), dp.size(), engine.rank(), engine.world_size()));
  }
  const EngineTrainingState training = engine.training_state();
  const fs::path root_path(root);
  const fs::path final_dir = root_path / StepDirName(training.step);
  const fs::path tmp = root_path / (".tmp-" + StepDirName(training.step));
  const std::string what = fmt::format("saving checkpoint '{}'", final_dir.string());

  // Rank 0 prepares an empty temporary directory (a killed save's is removed).
  Status prepared;
  if (dp.rank() == 0) {
    std::error_code ec;
    fs::create_directories(root_path, ec);
    if (ec) {
      prepared = IoError(fmt::format("creating '{}': {}", root, ec.message()));
    } else {
      prepared = RemoveAll(tmp);
      if (prepared.ok() && !fs::create_directory(tmp, ec)) {
        prepared = IoError(fmt::format("creating '{}': {}", tmp.string(), ec.message()));
      }
    }
  }
  ZS_RETURN_IF_ERROR(Agree(dp, prepared, what));

  // Every rank writes what it owns.
  const ModelSpec& model = engine.model();
  std::vector<StoredParam> params;
  Status written = engine.VisitOwnedState([&](const OwnedParamState& st) {
    StoredParam p;
    p.state = st;
    const UnitSpec& unit = model.units[size_t(st.unit)];
    p.name = unit.name + "." + unit.params[size_t(st.param)].name;
    p.shape = unit.params[size_t(st.param)].shape;
    params.push_back(std::move(p));
    return OkStatus();
  });
  FileSummary mine;
  const std::string file = RankFileName(dp.rank());
  if (written.ok()) {
    auto w = WriteShardFile((tmp / file).string(), dp.rank(), dp.size(), params);
    if (w.ok()) {
      mine = {w->checksum, w->bytes, 1};
    } else {
      written = w.status();
    }
  }
  params.clear();
  std::vector<FileSummary> all(size_t(dp.size()));
  ZS_RETURN_IF_ERROR(dp.AllGather(&mine, all.data(), sizeof(FileSummary) / 4, DType::kF32));
  int64_t failed = 0;
  for (const FileSummary& s : all) failed += s.ok ? 0 : 1;
  if (!written.ok()) return written.WithContext(what);
  if (failed > 0) {
    return AbortedError(fmt::format("{}: {} rank(s) failed to write their files", what, failed));
  }

  // DeepSpeed's zero_optimization.stage3_gather_16bit_weights_on_model_save: the consolidated
  // 16-bit weights beside the shards (collective; writes nothing unless the key asks for it).
  auto wrote16 = Save16BitWeightsOnModelSave(engine, tmp.string());
  if (!wrote16.ok()) return wrote16.status().WithContext(what);

  // Rank 0: the manifest, after every file is durable, then the renames.
  Status published;
  if (dp.rank() == 0) {
    nlohmann::json m;
    m["format"] = "zerostack-checkpoint";
    m["format_version"] = kCheckpointFormatVersion;
    m["step"] = training.step;
    m["world_size"] = dp.size();
    m["stage"] = engine.stage();
    m["compute_dtype"] = std::string(DTypeName(engine.compute_dtype()));
    m["state_dtype"] = std::string(
        StateDTypeName(StateDType(int(engine.config().zerostack.optimizer_state_dtype))));
    m["optimizer"] = nlohmann::json::parse(EngineConfigToJson(engine.config()))
                         .value("optimizer", nlohmann::json::object())
                         .value("type", std::string("AdamW"));
    m["loss_scaler"] = {{"scale", training.loss_scale},
                        {"hysteresis_left", training.loss_scale_hysteresis_left},
                        {"good_steps", training.loss_scale_good_steps}};
    m["config"] = nlohmann::json::parse(EngineConfigToJson(engine.config()));
    m["trainer"] = trainer;
    m["params"] = ModelJson(model);
    nlohmann::json files = nlohmann::json::array();
    for (int r = 0; r < dp.size(); ++r) {
      files.push_back({{"name", RankFileName(r)},
                       {"rank", r},
                       {"bytes", all[size_t(r)].bytes},
                       {"checksum", ChecksumHex(all[size_t(r)].checksum)}});
    }
    m["files"] = std::move(files);
    if (*wrote16) {
      auto sum = ChecksumFile((tmp / kConsolidated16BitFile).string());
      if (sum.ok()) {
        m["consolidated_16bit"] = {{"name", kConsolidated16BitFile},
                                   {"bytes", sum->bytes},
                                   {"checksum", ChecksumHex(sum->checksum)}};
      } else {
        published = sum.status();
      }
    }
    if (published.ok()) published = Publish(root_path, tmp, final_dir, m);
  }
  ZS_RETURN_IF_ERROR(Agree(dp, published, what));
  return final_dir.string();
}

StatusOr<CheckpointManifest> LoadCheckpoint(ZeroEngine& engine, Communicator& dp,
                                            const std::string& path) {
  if (dp.size() != engine.world_size() || dp.rank() != engine.rank()) {
    return InvalidArgumentError(fmt::format(
        "LoadCheckpoint: communicator '{}' (rank {} of {}) is not the engine's (rank {} of {})",
        dp.group_name(), dp.rank(), dp.size(), engine.rank(), engine.world_size()));
  }
  // Everything a rank can find wrong alone is agreed on before the engine's collectives.
  std::optional<CheckpointManifest> manifest;
  std::vector<ShardFileReader> readers;
  auto open = [&]() -> Status {
    ZS_ASSIGN_OR_RETURN(CheckpointManifest m, ReadCheckpointManifest(path));
    manifest = std::move(m);
    const std::string mfile = (fs::path(manifest->dir) / kManifest).string();
    // The model must be the one saved.
    const nlohmann::json want = ModelJson(engine.model());
    if (want.size() != manifest->params.size()) {
      return InvalidArgumentError(fmt::format("'{}' holds {} parameters; the model has {}", mfile,
                                              manifest->params.size(), want.size()));
    }
    for (size_t i = 0; i < want.size(); ++i) {
      const CheckpointManifest::Param& p = manifest->params[i];
      if (p.name != want[i]["name"].get<std::string>() ||
          p.shape != want[i]["shape"].get<std::vector<int64_t>>() ||
          p.unit != want[i]["unit"].get<int>() || p.param != want[i]["param"].get<int>()) {
        return InvalidArgumentError(
            fmt::format("'{}': parameter {} is '{}' of shape {}; the model's is '{}' of shape {}",
                        mfile, i, p.name, nlohmann::json(p.shape).dump(),
                        want[i]["name"].get<std::string>(), want[i]["shape"].dump()));
      }
    }
    // This rank's share of the whole-file checksums.
    for (size_t f = size_t(dp.rank()); f < manifest->files.size(); f += size_t(dp.size())) {
      const CheckpointManifest::File& file = manifest->files[f];
      const std::string p = (fs::path(manifest->dir) / file.name).string();
      ZS_ASSIGN_OR_RETURN(WrittenFile sum, ChecksumFile(p));
      if (sum.bytes != file.bytes) {
        return IoError(fmt::format(
            "checkpoint file '{}' (rank {}) is {} bytes, the manifest "
            "says {} ({})",
            p, file.rank, sum.bytes, file.bytes, sum.bytes < file.bytes ? "truncated" : "grown"));
      }
      if (sum.checksum != file.checksum) {
        return IoError(
            fmt::format("checkpoint file '{}' (rank {}) fails its checksum "
                        "(corrupt): {} in the manifest, {} on disk",
                        p, file.rank, ChecksumHex(file.checksum), ChecksumHex(sum.checksum)));
      }
    }
    for (const CheckpointManifest::File& file : manifest->files) {
      ZS_ASSIGN_OR_RETURN(
          ShardFileReader r,
          ShardFileReader::Open((fs::path(manifest->dir) / file.name).string(), file.bytes));
      readers.push_back(std::move(r));
    }
    return OkStatus();
  };
  ZS_RETURN_IF_ERROR(Agree(dp, open(), fmt::format("loading checkpoint '{}'", path)));

  // (unit, param) -> the saved parts, by begin.
  struct Piece {
    const ShardFileReader* file;
    const ShardFileReader::ParamEntry* entry;
  };
  std::map<std::pair<int, int>, std::vector<Piece>> index;
  for (const ShardFileReader& r : readers) {
    for (const auto& e : r.params()) index[{e.unit, e.param}].push_back({&r, &e});
  }
  for (auto& [key, pieces] : index) {
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.entry->begin < b.entry->begin; });
  }
  const std::string dir = manifest->dir;

  OwnedStateSource source = [&](const OwnedStateRequest& req) -> StatusOr<OwnedParamState> {
    const int64_t n = req.end - req.begin;
    const auto& pieces = index[{req.unit, req.param}];
    // The saved parts meeting [begin, end), with their arrays read and checked.
    struct Loaded {
      const Piece* piece;
      std::vector<OwnedArray> arrays;  // master, state0, state1 as the request names them
    };
    std::vector<Loaded> loaded;
    int64_t at = req.begin;
    for (const Piece& piece : pieces) {
      const auto& e = *piece.entry;
      if (e.end <= req.begin || e.begin >= req.end) continue;
      if (e.begin > at) break;
      Loaded l{&piece, {}};
      for (int k = 0; k <= req.num_states; ++k) {
        const std::string kind = k == 0 ? "master" : fmt::format("state{}", k - 1);
        auto it = std::find_if(e.arrays.begin(), e.arrays.end(),
                               [&](const auto& a) { return a.kind == kind; });
        if (it == e.arrays.end()) {
          return InvalidArgumentError(fmt::format(
              "checkpoint file '{}' has no array '{}' for parameter '{}' (saved with another "
              "optimizer?)",
              piece.file->path(), kind, e.name));
        }
        OwnedArray a;
        ZS_RETURN_IF_ERROR(piece.file->ReadArray(e, *it, a));
        l.arrays.push_back(std::move(a));
      }
      at = std::max(at, e.end);
      loaded.push_back(std::move(l));
    }
    if (at < req.end) {
      return IoError(
          fmt::format("checkpoint '{}': elements [{}, {}) of unit {} parameter {} are "
                      "in no rank file",
                      dir, at, req.end, req.unit, req.param));
    }
    OwnedParamState out;
    out.unit = req.unit;
    out.param = req.param;
    out.begin = req.begin;
    out.end = req.end;
    // Each element of [begin, end) from the first piece holding it.
    auto for_each_slice = [&](auto&& fn) {
      int64_t pos = req.begin;
      for (const Loaded& l : loaded) {
        const int64_t b = std::max(pos, l.piece->entry->begin);
        const int64_t e = std::min(req.end, l.piece->entry->end);
        if (b >= e) continue;
        fn(l, b, e);  // elements [b, e) of the parameter
        pos = e;
      }
    };
    OwnedArray master;
    master.kind = "master";
    master.dtype = "f32";
    master.data.resize(size_t(n) * 4);
    for_each_slice([&](const Loaded& l, int64_t b, int64_t e) {
      std::memcpy(master.data.data() + (b - req.begin) * 4,
                  l.arrays[0].data.data() + (b - l.piece->entry->begin) * 4, size_t(e - b) * 4);
    });
    out.arrays.push_back(std::move(master));
    for (int i = 0; i < req.num_states; ++i) {
      const std::string kind = fmt::format("state{}", i);
      bool exact = true;
      for (const Loaded& l : loaded) {
        const OwnedArray& a = l.arrays[size_t(1 + i)];
        if (a.dtype != req.state_dtype) exact = false;
        if (a.dtype == "int8" &&
            ((a.block_origin - req.block_origin) % kQuantBlock + kQuantBlock) % kQuantBlock != 0) {
          exact = false;
        }
      }
      OwnedArray a;
      a.kind = kind;
      if (exact) {
        const int64_t cb = req.state_dtype == "f32" ? 4 : req.state_dtype == "bf16" ? 2 : 1;
        a.dtype = req.state_dtype;
        a.data.resize(size_t(n * cb));
        for_each_slice([&](const Loaded& l, int64_t b, int64_t e) {
          std::memcpy(a.data.data() + (b - req.begin) * cb,
                      l.arrays[size_t(1 + i)].data.data() + (b - l.piece->entry->begin) * cb,
                      size_t((e - b) * cb));
        });
        if (req.state_dtype == "int8") {
          a.block_origin = req.block_origin;
          const int64_t blocks = (req.end - 1 - req.block_origin) / kQuantBlock + 1;
          a.scales.assign(size_t(blocks), 0.0f);
          for_each_slice([&](const Loaded& l, int64_t b, int64_t e) {
            const OwnedArray& s = l.arrays[size_t(1 + i)];
            for (int64_t x = b; x < e;) {
              const int64_t j = (x - req.block_origin) / kQuantBlock;
              const int64_t saved = (x - s.block_origin) / kQuantBlock;
              if (saved >= 0 && saved < int64_t(s.scales.size())) {
                a.scales[size_t(j)] = s.scales[size_t(saved)];
              }
              x = req.block_origin + (j + 1) * kQuantBlock;
            }
          });
        }
      } else {  // decoded to f32; the engine encodes them
        a.dtype = "f32";
        a.data.resize(size_t(n) * 4);
        float* dst = reinterpret_cast<float*>(a.data.data());
        for_each_slice([&](const Loaded& l, int64_t b, int64_t e) {
          const OwnedArray& s = l.arrays[size_t(1 + i)];
          const int64_t base = l.piece->entry->begin;
          for (int64_t x = b; x < e; ++x) {
            float v = 0.0f;
            if (s.dtype == "f32") {
              std::memcpy(&v, s.data.data() + (x - base) * 4, 4);
            } else if (s.dtype == "bf16") {
              uint16_t h;
              std::memcpy(&h, s.data.data() + (x - base) * 2, 2);
              const uint32_t bits = uint32_t(h) << 16;
              std::memcpy(&v, &bits, 4);
            } else {
              v = float(int8_t(s.data[size_t(x - base)])) *
                  s.scales[size_t((x - s.block_origin) / kQuantBlock)];
            }
            dst[x - req.begin] = v;
          }
        });
      }
      out.arrays.push_back(std::move(a));
    }
    return out;
  };
  ZS_RETURN_IF_ERROR(engine.LoadOwnedState(source, manifest->training));
  return std::move(*manifest);
}

}  // namespace zs

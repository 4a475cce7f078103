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
#include "runtime/base/atomic_file.h"
#include "runtime/base/dtype.h"
#include "runtime/checkpoint/checkpoint_index.h"
#include "runtime/checkpoint/consolidate.h"
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
  // [Note: atomic write] (runtime/base/atomic_file.h): `latest` names a whole step, or the
  // previous one.
  ZS_RETURN_IF_ERROR(
      WriteFileAtomically((root / kLatest).string(), final_dir.filename().string() + "\n"));
  return OkStatus();
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
    if (m.format_version < kOldestCheckpointFormatVersion ||
        m.format_version > kCheckpointFormatVersion) {
      return FailedPreconditionError(fmt::format(
          "'{}' has format version {}; this build reads "
          "versions {} to {}",
          file, m.format_version, kOldestCheckpointFormatVersion, kCheckpointFormatVersion));
    }
    m.step = j.at("step").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.stage = j.at("stage").get<int>();
    m.grid = j.value("grid", nlohmann::json());
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
    if (j.contains("index")) {  // [Note: checkpoint index]; absent in older checkpoints
      const auto& ji = j.at("index");
      m.index.name = ji.at("name").get<std::string>();
      m.index.bytes = ji.at("bytes").get<int64_t>();
      m.index.checksum = std::stoull(ji.at("checksum").get<std::string>(), nullptr, 16);
      if (m.index.name.empty() || m.index.name.find('/') != std::string::npos) {
        return IoError(fmt::format("'{}' names index file \"{}\"", file, m.index.name));
      }
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

CheckpointEngine WholeEngine(ZeroEngine& engine, Communicator& dp) {
  CheckpointEngine e;
  e.engine = &engine;
  e.dp = &dp;
  for (const UnitSpec& unit : engine.model().units) {
    std::vector<ParamPlacement>& ps = e.placements.emplace_back();
    for (const ParamSpec& p : unit.params) {
      ps.push_back(ParamPlacement::Whole(unit.name + "." + p.name, p.shape));
    }
  }
  return e;
}

namespace {

Status CheckRank(const CheckpointRank& rank, const char* what) {
  if (rank.world == nullptr || rank.engines.empty()) {
    return InvalidArgumentError(fmt::format("{}: no world communicator or no engine", what));
  }
  for (size_t i = 0; i < rank.engines.size(); ++i) {
    const CheckpointEngine& e = rank.engines[i];
    if (e.engine == nullptr || e.dp == nullptr || e.dp->size() != e.engine->world_size() ||
        e.dp->rank() != e.engine->rank()) {
      return InvalidArgumentError(fmt::format(
          "{}: engine {}'s communicator '{}' (rank {} of {}) is not the engine's (rank {} of {})",
          what, i, e.dp ? e.dp->group_name() : "null", e.dp ? e.dp->rank() : -1,
          e.dp ? e.dp->size() : 0, e.engine ? e.engine->rank() : -1,
          e.engine ? e.engine->world_size() : 0));
    }
    const ModelSpec& m = e.engine->model();
    bool ok = e.placements.size() == m.units.size() &&
              (e.model_units.empty() || e.model_units.size() == m.units.size());
    for (size_t u = 0; ok && u < m.units.size(); ++u) {
      ok = e.placements[u].size() == m.units[u].params.size();
      for (size_t p = 0; ok && p < m.units[u].params.size(); ++p) {
        ok = e.placements[u][p].local_numel() == m.units[u].params[p].numel();
      }
    }
    if (!ok) {
      return InvalidArgumentError(fmt::format(
          "{}: engine {}'s placements do not match its model (units, parameters or sizes)", what,
          i));
    }
  }
  return OkStatus();
}

// A plain data-parallel rank: one engine over the whole world, its own model.
bool IsPlain(const CheckpointRank& rank) {
  if (rank.engines.size() != 1 || rank.world != rank.engines[0].dp) return false;
  for (const auto& unit : rank.engines[0].placements) {
    for (const ParamPlacement& p : unit) {
      if (!p.identity() || !p.saved) return false;
    }
  }
  return true;
}

}  // namespace

StatusOr<std::string> SaveCheckpoint(ZeroEngine& engine, Communicator& dp, const std::string& root,
                                     const nlohmann::json& trainer) {
  CheckpointRank rank;  // CheckRank checks that dp is the engine's
  rank.world = &dp;
  rank.engines.push_back(WholeEngine(engine, dp));
  return SaveCheckpoint(rank, root, trainer);
}

StatusOr<std::string> SaveCheckpoint(const CheckpointRank& rank, const std::string& root,
                                     const nlohmann::json& trainer) {
  ZS_RETURN_IF_ERROR(CheckRank(rank, "SaveCheckpoint"));
  Communicator& world = *rank.world;
  ZeroEngine& engine = *rank.engines[0].engine;
  const EngineTrainingState training = engine.training_state();
  const fs::path root_path(root);
  const fs::path final_dir = root_path / StepDirName(training.step);
  const fs::path tmp = root_path / (".tmp-" + StepDirName(training.step));
  const std::string what = fmt::format("saving checkpoint '{}'", final_dir.string());

  // Rank 0 prepares an empty temporary directory (a killed save's is removed).
  Status prepared;
  if (world.rank() == 0) {
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
  ZS_RETURN_IF_ERROR(Agree(world, prepared, what));

  // Every rank writes what its engines own, each part placed in the model.
  std::vector<StoredParam> params;
  Status written;
  for (const CheckpointEngine& e : rank.engines) {
    if (!written.ok()) break;
    written = e.engine->VisitOwnedState([&](const OwnedParamState& st) {
      const ParamPlacement& place = e.placements[size_t(st.unit)][size_t(st.param)];
      if (!place.saved) return OkStatus();
      StoredParam p;
      p.state = st;
      if (!e.model_units.empty()) p.state.unit = e.model_units[size_t(st.unit)];
      p.unit_name = e.engine->model().units[size_t(st.unit)].name;
      p.placement = place;
      params.push_back(std::move(p));
      return OkStatus();
    });
  }
  FileSummary mine;
  const std::string file = RankFileName(world.rank());
  if (written.ok()) {
    auto w = WriteShardFile((tmp / file).string(), world.rank(), world.size(), params);
    if (w.ok()) {
      mine = {w->checksum, w->bytes, 1};
    } else {
      written = w.status();
    }
  }
  params.clear();
  std::vector<FileSummary> all(size_t(world.size()));
  ZS_RETURN_IF_ERROR(world.AllGather(&mine, all.data(), sizeof(FileSummary) / 4, DType::kF32));
  int64_t failed = 0;
  for (const FileSummary& s : all) failed += s.ok ? 0 : 1;
  if (!written.ok()) return written.WithContext(what);
  if (failed > 0) {
    return AbortedError(fmt::format("{}: {} rank(s) failed to write their files", what, failed));
  }

  // DeepSpeed's zero_optimization.stage3_gather_16bit_weights_on_model_save: the consolidated
  // 16-bit weights beside the shards. A plain engine gathers them (collective; writes nothing
  // unless the key asks for it); a grid's rank 0 reads them back from the rank files below
  // ([Note: 16-bit weights of a grid]).
  const bool plain = IsPlain(rank);
  bool wrote16 = false;
  if (plain) {
    auto w16 = Save16BitWeightsOnModelSave(engine, tmp.string());
    if (!w16.ok()) return w16.status().WithContext(what);
    wrote16 = *w16;
  }
  const bool grid16 = !plain && engine.stage() == 3 &&
                      engine.config().zero_optimization.stage3_gather_16bit_weights_on_model_save;

  // Rank 0: the manifest, after every file is durable, then the renames.
  Status published;
  if (world.rank() == 0) {
    nlohmann::json m;
    m["format"] = "zerostack-checkpoint";
    m["format_version"] = kCheckpointFormatVersion;
    m["step"] = training.step;
    m["world_size"] = world.size();
    m["stage"] = engine.stage();
    if (!rank.grid.is_null()) m["grid"] = rank.grid;
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
    // [Note: checkpoint index]: every rank file's header, read once here.
    std::vector<RankFileRef> refs;
    for (int r = 0; r < world.size(); ++r) {
      refs.push_back({RankFileName(r), r, all[size_t(r)].bytes});
    }
    auto index = IndexRankFiles(tmp.string(), refs);
    if (!index.ok()) published = index.status();
    if (published.ok() && plain) {
      m["params"] = ModelJson(engine.model());
    } else if (published.ok()) {
      // The union of the rank files' parameters, by name, in the order they first appear,
      // then by model unit (stable): the model's order for the 16-bit file and `inspect`.
      nlohmann::json list = nlohmann::json::array();
      std::map<std::string, bool> seen;
      for (const CheckpointIndex::Piece& piece : index->pieces) {
        const ShardFileReader::ParamEntry& e = piece.entry;
        if (seen.emplace(e.name, true).second) {
          list.push_back({{"unit", e.unit},
                          {"param", e.param},
                          {"unit_name", e.unit_name},
                          {"name", e.name},
                          {"shape", e.shape},
                          {"numel", e.placement.layout.full_numel()}});
        }
      }
      std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
        return a.at("unit").template get<int>() < b.at("unit").template get<int>();
      });
      m["params"] = std::move(list);
    }
    if (published.ok()) {
      index->Sort();
      const std::string text = CheckpointIndexToJson(*index).dump();
      published = WriteFileDurably((tmp / kCheckpointIndexFile).string(), text);
      m["index"] = {{"name", kCheckpointIndexFile},
                    {"bytes", text.size()},
                    {"checksum", ChecksumHex(Fnv1a64(text.data(), text.size()))}};
    }
    if (published.ok() && grid16) {
      std::vector<ConsolidatedParam> params;
      for (const auto& p : m["params"]) {
        params.push_back(
            {p.at("name").get<std::string>(), p.at("shape").get<std::vector<int64_t>>()});
      }
      RankFileCache files(tmp.string());
      published =
          ConsolidateCheckpoint(*index, files, params, (tmp / kConsolidated16BitFile).string(),
                                SixteenBitDType(engine), {{"format", "pt"}});
      wrote16 = published.ok();
    }
    nlohmann::json files = nlohmann::json::array();
    for (int r = 0; r < world.size(); ++r) {
      files.push_back({{"name", RankFileName(r)},
                       {"rank", r},
                       {"bytes", all[size_t(r)].bytes},
                       {"checksum", ChecksumHex(all[size_t(r)].checksum)}});
    }
    m["files"] = std::move(files);
    if (wrote16 && published.ok()) {
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
  ZS_RETURN_IF_ERROR(Agree(world, published, what));
  return final_dir.string();
}

StatusOr<CheckpointManifest> LoadCheckpoint(ZeroEngine& engine, Communicator& dp,
                                            const std::string& path) {
  CheckpointRank rank;  // CheckRank checks that dp is the engine's
  rank.world = &dp;
  rank.engines.push_back(WholeEngine(engine, dp));
  return LoadCheckpoint(rank, path);
}

namespace {

// Element x of a saved state array as f32.
float DecodeElement(const OwnedArray& s, int64_t x, int64_t base) {
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
  return v;
}

}  // namespace

StatusOr<CheckpointManifest> LoadCheckpoint(const CheckpointRank& rank, const std::string& path) {
  ZS_RETURN_IF_ERROR(CheckRank(rank, "LoadCheckpoint"));
  Communicator& world = *rank.world;
  // Everything a rank can find wrong alone is agreed on before the engines' collectives.
  std::optional<CheckpointManifest> manifest;
  std::optional<CheckpointIndex> index;
  bool scanned = false;  // no index: every rank file's header was read
  auto open = [&]() -> Status {
    ZS_ASSIGN_OR_RETURN(CheckpointManifest m, ReadCheckpointManifest(path));
    manifest = std::move(m);
    const std::string mfile = (fs::path(manifest->dir) / kManifest).string();
    // The model must be the one saved: every parameter by name and full shape.
    std::map<std::string, const CheckpointManifest::Param*> saved;
    for (const auto& p : manifest->params) saved[p.name] = &p;
    size_t mine = 0;
    for (const CheckpointEngine& e : rank.engines) {
      for (const auto& unit : e.placements) {
        for (const ParamPlacement& p : unit) {
          ++mine;
          auto it = saved.find(p.name);
          if (it == saved.end()) {
            return InvalidArgumentError(
                fmt::format("'{}' has no parameter '{}' (of shape {}): another model?", mfile,
                            p.name, nlohmann::json(p.layout.full_shape).dump()));
          }
          if (it->second->shape != p.layout.full_shape) {
            return InvalidArgumentError(
                fmt::format("'{}': parameter '{}' was saved with shape {}; the model's is {}",
                            mfile, p.name, nlohmann::json(it->second->shape).dump(),
                            nlohmann::json(p.layout.full_shape).dump()));
          }
        }
      }
    }
    if (IsPlain(rank) && mine != manifest->params.size()) {
      return InvalidArgumentError(fmt::format("'{}' holds {} parameters; the model has {}", mfile,
                                              manifest->params.size(), mine));
    }
    // This rank's share of the whole-file checksums.
    for (size_t f = size_t(world.rank()); f < manifest->files.size(); f += size_t(world.size())) {
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
    // Where the pieces are: the index ([Note: checkpoint index]), else every rank file's header.
    ZS_ASSIGN_OR_RETURN(CheckpointIndex i, OpenCheckpointIndex(*manifest));
    index = std::move(i);
    scanned = manifest->index.name.empty();
    return OkStatus();
  };
  ZS_RETURN_IF_ERROR(Agree(world, open(), fmt::format("loading checkpoint '{}'", path)));

  // Parameter name -> its saved pieces, sorted for lookup ([Note: piece lookup]); piece i is
  // index->Of(name).first[i]. Built on first use.
  std::map<std::string, PieceIndex> pieces_of;
  auto pieces_for = [&](const std::string& name) -> StatusOr<const PieceIndex*> {
    auto it = pieces_of.find(name);
    if (it != pieces_of.end()) return &it->second;
    std::vector<SavedPiece> pieces;
    const auto [first, last] = index->Of(name);
    for (const CheckpointIndex::Piece* p = first; p != last; ++p) {
      pieces.push_back({p->entry.placement, p->entry.begin, p->entry.end});
    }
    ZS_ASSIGN_OR_RETURN(PieceIndex built, PieceIndex::Create(name, std::move(pieces)));
    return &pieces_of.emplace(name, std::move(built)).first->second;
  };
  const std::string dir = manifest->dir;
  RankFileCache files(dir);

  for (const CheckpointEngine& engine : rank.engines) {
    OwnedStateSource source = [&](const OwnedStateRequest& req) -> StatusOr<OwnedParamState> {
      const int64_t n = req.end - req.begin;
      const ParamPlacement& want = engine.placements[size_t(req.unit)][size_t(req.param)];
      auto stored = pieces_for(want.name);
      if (!stored.ok()) return stored.status().WithContext(fmt::format("checkpoint '{}'", dir));
      const PieceIndex& pieces = **stored;
      const CheckpointIndex::Piece* at = index->Of(want.name).first;
      auto planned = PlanCopy(want, req.begin, req.end, pieces);
      if (!planned.ok()) {
        return planned.status().WithContext(fmt::format("checkpoint '{}'", dir));
      }
      const std::vector<CopyRun>& plan = *planned;
      // The pieces the plan reads, with their arrays read and checked: master, state0, ...
      std::map<int, std::vector<OwnedArray>> loaded;
      for (const CopyRun& run : plan) {
        if (run.piece < 0 || loaded.count(run.piece)) continue;
        const CheckpointIndex::Piece& piece = at[run.piece];
        const ShardFileReader::ParamEntry* e = &piece.entry;
        ZS_ASSIGN_OR_RETURN(const ShardFileReader* file, files.Get(*index, piece.file));
        std::vector<OwnedArray>& arrays = loaded[run.piece];
        for (int k = 0; k <= req.num_states; ++k) {
          const std::string kind = k == 0 ? "master" : fmt::format("state{}", k - 1);
          auto it = std::find_if(e->arrays.begin(), e->arrays.end(),
                                 [&](const auto& a) { return a.kind == kind; });
          if (it == e->arrays.end()) {
            return InvalidArgumentError(fmt::format(
                "checkpoint file '{}' has no array '{}' for parameter '{}' (saved with another "
                "optimizer?)",
                file->path(), kind, e->name));
          }
          OwnedArray a;
          ZS_RETURN_IF_ERROR(file->ReadArray(*e, *it, a));
          arrays.push_back(std::move(a));
        }
      }
      OwnedParamState out;
      out.unit = req.unit;
      out.param = req.param;
      out.begin = req.begin;
      out.end = req.end;
      // Each run's bytes at `bytes` per element (padding runs stay zero).
      auto copy = [&](int k, int64_t bytes, std::vector<uint8_t>& dst) {
        for (const CopyRun& run : plan) {
          if (run.piece < 0) continue;
          const OwnedArray& s = loaded[run.piece][size_t(k)];
          std::memcpy(dst.data() + run.dst * bytes, s.data.data() + run.src * bytes,
                      size_t(run.count * bytes));
        }
      };
      OwnedArray master;
      master.kind = "master";
      master.dtype = "f32";
      master.data.assign(size_t(n) * 4, 0);
      copy(0, 4, master.data);
      out.arrays.push_back(std::move(master));
      const bool same_frame = PlanIsIdentity(want, req.begin, pieces.pieces(), plan);
      for (int i = 0; i < req.num_states; ++i) {
        bool exact = same_frame;
        for (const auto& [piece, arrays] : loaded) {
          const OwnedArray& a = arrays[size_t(1 + i)];
          if (a.dtype != req.state_dtype) exact = false;
          if (a.dtype == "int8" &&
              ((a.block_origin - req.block_origin) % kQuantBlock + kQuantBlock) % kQuantBlock !=
                  0) {
            exact = false;
          }
        }
        OwnedArray a;
        a.kind = fmt::format("state{}", i);
        if (exact) {
          const int64_t cb = req.state_dtype == "f32" ? 4 : req.state_dtype == "bf16" ? 2 : 1;
          a.dtype = req.state_dtype;
          a.data.assign(size_t(n * cb), 0);
          copy(1 + i, cb, a.data);
          if (req.state_dtype == "int8") {
            // Same frame: run element x of the request is element x of the piece.
            a.block_origin = req.block_origin;
            const int64_t blocks = (req.end - 1 - req.block_origin) / kQuantBlock + 1;
            a.scales.assign(size_t(blocks), 0.0f);
            for (const CopyRun& run : plan) {
              const OwnedArray& s = loaded[run.piece][size_t(1 + i)];
              const int64_t e = req.begin + run.dst + run.count;
              for (int64_t x = req.begin + run.dst; x < e;) {
                const int64_t j = (x - req.block_origin) / kQuantBlock;
                const int64_t saved = (x - s.block_origin) / kQuantBlock;
                if (saved >= 0 && saved < int64_t(s.scales.size())) {
                  a.scales[size_t(j)] = s.scales[size_t(saved)];
                }
                x = req.block_origin + (j + 1) * kQuantBlock;
              }
            }
          }
        } else {  // values as f32 (padding zero); the engine encodes them
          a.dtype = "f32";
          a.data.assign(size_t(n) * 4, 0);
          float* dst = reinterpret_cast<float*>(a.data.data());
          for (const CopyRun& run : plan) {
            if (run.piece < 0) continue;
            const OwnedArray& s = loaded[run.piece][size_t(1 + i)];
            const int64_t base = pieces.pieces()[size_t(run.piece)].begin;
            for (int64_t j = 0; j < run.count; ++j) {
              dst[run.dst + j] = DecodeElement(s, base + run.src + j, base);
            }
          }
        }
        out.arrays.push_back(std::move(a));
      }
      return out;
    };
    ZS_RETURN_IF_ERROR(engine.engine->LoadOwnedState(source, manifest->training));
  }
  if (scanned) {
    for (size_t f = 0; f < manifest->files.size(); ++f) manifest->files_read.push_back(int(f));
  } else {
    manifest->files_read = files.opened();
  }
  return std::move(*manifest);
}

}  // namespace zs

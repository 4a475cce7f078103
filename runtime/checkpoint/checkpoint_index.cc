#include "runtime/checkpoint/checkpoint_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "runtime/checkpoint/checkpoint.h"

namespace zs {
namespace fs = std::filesystem;

void CheckpointIndex::Sort() {
  auto key = [](const Piece& p) {
    return std::tuple<const std::string&, int, int64_t>(
        p.entry.name, p.entry.placement.identity() ? 0 : p.entry.placement.tp_rank, p.entry.begin);
  };
  std::stable_sort(pieces.begin(), pieces.end(),
                   [&](const Piece& a, const Piece& b) { return key(a) < key(b); });
  by_name.clear();
  for (size_t i = 0; i < pieces.size();) {
    size_t j = i;
    while (j < pieces.size() && pieces[j].entry.name == pieces[i].entry.name) ++j;
    by_name[pieces[i].entry.name] = {i, j};
    i = j;
  }
}

std::pair<const CheckpointIndex::Piece*, const CheckpointIndex::Piece*> CheckpointIndex::Of(
    const std::string& name) const {
  auto it = by_name.find(name);
  if (it == by_name.end()) return {nullptr, nullptr};
  return {pieces.data() + it->second.first, pieces.data() + it->second.second};
}

StatusOr<CheckpointIndex> IndexRankFiles(const std::string& dir,
                                         const std::vector<RankFileRef>& files) {
  CheckpointIndex index;
  for (size_t f = 0; f < files.size(); ++f) {
    ZS_ASSIGN_OR_RETURN(
        ShardFileReader r,
        ShardFileReader::Open((fs::path(dir) / files[f].name).string(), files[f].bytes));
    index.files.push_back({files[f].name, files[f].rank, r.file_bytes(), r.data_start()});
    for (const auto& e : r.params()) index.pieces.push_back({int(f), e});
  }
  return index;
}

nlohmann::json CheckpointIndexToJson(const CheckpointIndex& index) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : index.files) {
    files.push_back(
        {{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"data_start", f.data_start}});
  }
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : index.pieces) {
    nlohmann::json e = ParamEntryToJson(p.entry);
    e["file"] = p.file;
    params.push_back(std::move(e));
  }
  return {{"format", "zerostack-checkpoint-index"},
          {"format_version", kCheckpointFormatVersion},
          {"files", std::move(files)},
          {"params", std::move(params)}};
}

StatusOr<CheckpointIndex> ReadCheckpointIndex(const std::string& path, int64_t bytes,
                                              uint64_t checksum) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return NotFoundError(
        fmt::format("checkpoint index '{}' is missing (the manifest lists it)", path));
  }
  ZS_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path));
  if (int64_t(text.size()) != bytes) {
    return IoError(fmt::format("checkpoint index '{}' is {} bytes, the manifest says {} ({})", path,
                               text.size(), bytes,
                               int64_t(text.size()) < bytes ? "truncated" : "grown"));
  }
  const uint64_t sum = Fnv1a64(text.data(), text.size());
  if (sum != checksum) {
    return IoError(fmt::format(
        "checkpoint index '{}' fails its checksum (corrupt): {} in the manifest, {} on disk", path,
        ChecksumHex(checksum), ChecksumHex(sum)));
  }
  CheckpointIndex index;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.at("format").get<std::string>() != "zerostack-checkpoint-index") {
      return IoError(fmt::format("'{}' is not a checkpoint index", path));
    }
    for (const auto& f : j.at("files")) {
      index.files.push_back({f.at("name").get<std::string>(), f.at("rank").get<int>(),
                             f.at("bytes").get<int64_t>(), f.at("data_start").get<int64_t>()});
    }
    for (const auto& e : j.at("params")) {
      const int f = e.at("file").get<int>();
      if (f < 0 || f >= int(index.files.size())) {
        return IoError(fmt::format("checkpoint index '{}': parameter '{}' names file {} of {}",
                                   path, e.value("name", std::string("?")), f, index.files.size()));
      }
      const CheckpointIndex::File& file = index.files[size_t(f)];
      auto entry = ParamEntryFromJson(e, (fs::path(path).parent_path() / file.name).string(),
                                      file.data_start, file.bytes);
      if (!entry.ok()) {
        return IoError(fmt::format("checkpoint index '{}': {}", path, entry.status().message()));
      }
      index.pieces.push_back({f, *std::move(entry)});
    }
  } catch (const std::exception& e) {
    return IoError(fmt::format("checkpoint index '{}': bad JSON: {}", path, e.what()));
  }
  index.Sort();
  return index;
}

StatusOr<CheckpointIndex> OpenCheckpointIndex(const CheckpointManifest& manifest) {
  if (manifest.index.name.empty()) {  // older than the index: every rank file's header
    std::vector<RankFileRef> refs;
    for (const auto& f : manifest.files) refs.push_back({f.name, f.rank, f.bytes});
    ZS_ASSIGN_OR_RETURN(CheckpointIndex index, IndexRankFiles(manifest.dir, refs));
    index.Sort();
    return index;
  }
  const std::string path = (fs::path(manifest.dir) / manifest.index.name).string();
  ZS_ASSIGN_OR_RETURN(CheckpointIndex index,
                      ReadCheckpointIndex(path, manifest.index.bytes, manifest.index.checksum));
  bool same = index.files.size() == manifest.files.size();
  for (size_t f = 0; same && f < index.files.size(); ++f) {
    same = index.files[f].name == manifest.files[f].name &&
           index.files[f].bytes == manifest.files[f].bytes;
  }
  if (!same) {
    return IoError(
        fmt::format("checkpoint index '{}' does not list the manifest's {} rank "
                    "files (names and sizes)",
                    path, manifest.files.size()));
  }
  return index;
}

StatusOr<const ShardFileReader*> RankFileCache::Get(const CheckpointIndex& index, int file) {
  auto it = readers_.find(file);
  if (it != readers_.end()) return &it->second;
  if (file < 0 || file >= int(index.files.size())) {
    return InvalidArgumentError(fmt::format("no rank file {} (of {})", file, index.files.size()));
  }
  if (readers_.size() >= kMaxOpen) {
    readers_.erase(open_order_.front());
    open_order_.pop_front();
  }
  const CheckpointIndex::File& f = index.files[size_t(file)];
  ZS_ASSIGN_OR_RETURN(
      ShardFileReader r,
      ShardFileReader::OpenData((fs::path(dir_) / f.name).string(), f.bytes, f.data_start));
  opened_.insert(file);
  open_order_.push_back(file);
  return &readers_.emplace(file, std::move(r)).first->second;
}

}  // namespace zs

// CheckpointIndex: every saved piece of a checkpoint (parameter name, tp layout, range, and where
// its arrays lie in which rank file) in one file, so that a loader opens only the rank files
// holding pieces it needs; RankFileCache: the rank files a reader opened, each once.
//
// Contract
// - [Note: checkpoint index] "index.json" in the step directory, written once per save by world
//   rank 0 after every rank's file is durable (inside the temporary directory, before the
//   manifest, which lists it with its size and checksum like the rank files):
//     {"format": "zerostack-checkpoint-index", "format_version": 2,
//      "files": [{"name": "rank-00000.zsd", "rank": 0, "bytes": n, "data_start": d}, ...],
//      "params": [<a rank file header's entry ([Note: rank file format]) plus "file": i>, ...]}
//   "data_start" is 16 + the file's header length (array offsets count from it); the entries
//   are sorted by name, then saved tp rank, then begin. Rank 0 learns the other ranks' tables
//   from the files themselves (their headers, one open per file on rank 0 only), not from a
//   collective: the save's all-gather of sizes and checksums already says they are durable.
//   A checkpoint without an index (written before it existed) is read by a scan of every rank
//   file's header instead (IndexRankFiles), which is also what `zero-ckpt verify` compares
//   the index with. Readers (LoadCheckpoint, zero-ckpt) get the index, or the scan, from
//   OpenCheckpointIndex alone.
// - Memory: the index is O(pieces) (for a GPT about tp x parameters x the few dp ranks a
//   parameter's range meets); every loading rank holds all of it.
// - Errors name the file (the index or the rank file) and, where one is at fault, the parameter.
// - Plain values; a RankFileCache is used by one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/checkpoint/shard_file.h"

namespace zs {

inline constexpr const char* kCheckpointIndexFile = "index.json";

struct CheckpointIndex {
  struct File {
    std::string name;  // relative to the checkpoint directory
    int rank = 0;
    int64_t bytes = 0;
    int64_t data_start = 0;
  };
  struct Piece {
    int file = 0;  // into files
    ShardFileReader::ParamEntry entry;
  };
  std::vector<File> files;
  std::vector<Piece> pieces;
  // name -> [first, last) of pieces (after Sort()).
  std::map<std::string, std::pair<size_t, size_t>> by_name;

  // Sorts the pieces by (name, saved tp rank, begin) and fills by_name.
  void Sort();
  // The pieces of parameter `name` (empty when none).
  std::pair<const Piece*, const Piece*> Of(const std::string& name) const;
};

// Reads the headers of `files` (name, rank and size each; `bytes` checked) in `dir`, one file
// open at a time: the index they imply, its pieces in file order (call Sort()).
struct RankFileRef {
  std::string name;
  int rank = 0;
  int64_t bytes = 0;
};
StatusOr<CheckpointIndex> IndexRankFiles(const std::string& dir,
                                         const std::vector<RankFileRef>& files);

nlohmann::json CheckpointIndexToJson(const CheckpointIndex& index);
// Reads `path` and checks it against the manifest's size and checksum (IoError naming the
// file: missing, truncated, corrupt), then parses it (sorted).
StatusOr<CheckpointIndex> ReadCheckpointIndex(const std::string& path, int64_t bytes,
                                              uint64_t checksum);

struct CheckpointManifest;  // checkpoint.h

// The index of the checkpoint `manifest` describes (ReadCheckpointManifest), sorted: its index
// file read and checked (ReadCheckpointIndex: missing, truncated, corrupt) and required to list
// the manifest's rank files (names and sizes, in order: IoError naming the index otherwise);
// when the manifest lists no index (an older checkpoint), built by reading every rank file's
// header (IndexRankFiles, each file's size checked against the manifest; errors name the rank
// file). It was scanned exactly when manifest.index.name is empty. Opens one file at a time.
StatusOr<CheckpointIndex> OpenCheckpointIndex(const CheckpointManifest& manifest);

// The rank files of one checkpoint that a reader has opened, opened on first use and kept
// open, at most kMaxOpen at a time (the longest open is closed when one more is needed: a reader
// of every file, as a consolidation, never runs out of descriptors at thousands of ranks).
class RankFileCache {
 public:
  static constexpr size_t kMaxOpen = 64;
  explicit RankFileCache(std::string dir) : dir_(std::move(dir)) {}
  // File `file` of `index`, opened for its arrays (ShardFileReader::OpenData) unless open.
  // The pointer is valid until the next Get.
  StatusOr<const ShardFileReader*> Get(const CheckpointIndex& index, int file);
  // The file numbers ever opened, ascending.
  std::vector<int> opened() const { return {opened_.begin(), opened_.end()}; }

 private:
  std::string dir_;
  std::map<int, ShardFileReader> readers_;
  std::deque<int> open_order_;  // readers_' keys, oldest first
  std::set<int> opened_;
};

}  // namespace zs

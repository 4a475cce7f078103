// ShardFile: one rank's file of a checkpoint (the arrays it owns, in model space), and the
// durable file-system steps a checkpoint is made of.
//
// Contract
// - [Note: rank file format] "rank-RRRRR.zsd": the 8 bytes "ZSCKPT1\n", a little-endian uint64
//   header length H, H bytes of JSON header, then the arrays' bytes. The header:
//     {"format_version": 2, "rank": r, "world_size": W, "params": [
//       {"unit": u, "param": p, "name": "<unit>.<param>", "unit_name": "<unit>", "shape": [..],
//        "begin": b, "end": e,
//        ("tp": {"kind": "rows"|"columns", "blocks": k, "padded_rows": n, "rank": t,
//                "size": T}, only for a tensor-parallel slice: param_placement.h),
//        "arrays": [{"kind": "master"|"state0"|"state1", "dtype": "f32"|"bf16"|"int8",
//                    "offset": o, "bytes": n, "checksum": "<fnv1a64 hex>",
//                    ("block_origin": k, "scales_offset": o2, "scales_count": c,
//                     "scales_checksum": "<hex>" for int8)}]}]}
//   Offsets count from the first byte after the header. "shape" is the full (model) shape;
//   elements [b, e) are in the saver's local frame ([Note: placement frames]): the full
//   parameter's flattened, unpadded index without "tp", else the index in tp rank t's slice.
//   "unit" and "param" index the saving engine's model (informational; loads match names).
//   Version 1 files (data-parallel only, never a "tp") are read as they are. The checkpoint's
//   index.json repeats every header entry with its file ([Note: checkpoint index] in
//   checkpoint_index.h), so a loader need not read the headers (OpenData).
// - Every read checks what it reads: the magic, the header's JSON, offsets inside the file, and
//   each array's checksum. Errors name the file (and the parameter and array where there is
//   one); nothing here exits or asserts on I/O.
// - Durability: the rank file is fsynced when written; the manifest and `latest` go through
//   runtime/base/atomic_file.h (WriteFileDurably, SyncDirectory, WriteFileAtomically).
// - Plain functions and values; a ShardFileReader is used by one thread at a time.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/checkpoint/param_placement.h"
#include "runtime/engine/zero_engine.h"

namespace zs {

inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr int kOldestCheckpointFormatVersion = 1;  // still read

// FNV-1a 64 of `bytes`, continuing from `h` (start with kFnvOffset).
inline constexpr uint64_t kFnvOffset = 14695981039346656037ull;
uint64_t Fnv1a64(const void* data, size_t bytes, uint64_t h = kFnvOffset);
std::string ChecksumHex(uint64_t h);

// The file name of rank r's arrays: "rank-00003.zsd".
std::string RankFileName(int rank);

// One owned parameter part as stored: where it is in the model and what it holds.
struct StoredParam {
  OwnedParamState state;     // [begin, end) of placement's local frame, and its arrays
  std::string unit_name;     // the engine unit's name (never empty: ModelSpec::Validate)
  ParamPlacement placement;  // the model name, the full shape and the tp slice ("tp")
};

// Writes `params` as rank `rank`'s file at `path` and fsyncs it. Returns the whole file's
// checksum and size.
struct WrittenFile {
  uint64_t checksum = 0;
  int64_t bytes = 0;
};
StatusOr<WrittenFile> WriteShardFile(const std::string& path, int rank, int world_size,
                                     const std::vector<StoredParam>& params);

// Reads a rank file's header, then any of its arrays on demand.
class ShardFileReader {
 public:
  struct ArrayEntry {
    std::string kind, dtype;
    int64_t offset = 0, bytes = 0;
    uint64_t checksum = 0;
    int64_t block_origin = 0, scales_offset = 0, scales_count = 0;
    uint64_t scales_checksum = 0;
  };
  struct ParamEntry {
    int unit = 0, param = 0;
    std::string name, unit_name;  // unit_name: "" in version 1 files
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;
    ParamPlacement placement;  // from "shape" and "tp"
    std::vector<ArrayEntry> arrays;
  };

  // Opens `path` and parses its header; `expected_bytes` >= 0 checks the size first (a short
  // file is "truncated", naming the sizes).
  static StatusOr<ShardFileReader> Open(const std::string& path, int64_t expected_bytes = -1);
  // Opens `path` for its arrays only, with the header's entries known from a checkpoint index
  // (checkpoint_index.h): checks the size, the magic and that the data starts at `data_start`
  // (the index's word), without parsing the header. params() is then empty.
  static StatusOr<ShardFileReader> OpenData(const std::string& path, int64_t expected_bytes,
                                            int64_t data_start);
  ShardFileReader(ShardFileReader&&) noexcept;
  ShardFileReader& operator=(ShardFileReader&&) noexcept;
  ~ShardFileReader();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& path() const { return path_; }
  const std::vector<ParamEntry>& params() const { return params_; }
  int64_t data_start() const { return data_start_; }  // 16 + the header's length
  int64_t file_bytes() const { return file_bytes_; }
  // Reads one array (its elements, and for int8 its scales), checking both checksums.
  Status ReadArray(const ParamEntry& param, const ArrayEntry& array, OwnedArray& out) const;

 private:
  ShardFileReader() = default;
  Status OpenAndCheck(const std::string& path, int64_t expected_bytes, uint64_t* header_length);
  Status ReadAt(int64_t offset, int64_t bytes, void* out, const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  int rank_ = 0, world_size_ = 0;
  int64_t data_start_ = 0, file_bytes_ = 0;
  std::vector<ParamEntry> params_;
};

// One header entry as JSON and back. ParamEntryToJson is the one writer of an entry: the rank
// file's header (WriteShardFile) and the checkpoint index (CheckpointIndexToJson) both use it, so
// the two list the same bytes per piece; "unit_name" is left out when empty (version 1 entries
// only: every unit an engine saves has a name), "tp" for an identity placement. ParamEntryFromJson
// checks the entry as Open does (the range inside the tp slice, the arrays inside a file of
// `file_bytes` whose data starts at `data_start`); errors are IoError naming `path`.
nlohmann::json ParamEntryToJson(const ShardFileReader::ParamEntry& p);
StatusOr<ShardFileReader::ParamEntry> ParamEntryFromJson(const nlohmann::json& j,
                                                         const std::string& path,
                                                         int64_t data_start, int64_t file_bytes);

// The checksum of a whole file (streamed), for the manifest and `zero-ckpt verify`.
StatusOr<WrittenFile> ChecksumFile(const std::string& path);

StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace zs

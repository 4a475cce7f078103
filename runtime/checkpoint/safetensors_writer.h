// SafetensorsWriter / ReadSafetensors: the safetensors file format (Hugging Face's
// huggingface/safetensors), written by streaming and read back for tests and tools.
//
// The format
//   bytes [0, 8)        N, the header's length, a little-endian uint64
//   bytes [8, 8 + N)    the header: a JSON object, UTF-8, padded with spaces (0x20) so that
//                       8 + N is a multiple of 8. One entry per tensor,
//                         "name": {"dtype": "F32" | "BF16" | "F16", "shape": [d0, d1, ...],
//                                  "data_offsets": [begin, end]}
//                       and optionally "__metadata__": {"key": "value", ...} (strings only).
//   bytes [8 + N, ...)  the data: every tensor's elements, row-major, little-endian, at
//                       [begin, end) from the start of the data; tensors are contiguous, in
//                       declaration order, with no gaps (end - begin = numel x dtype size).
//
// Contract
// - SafetensorsWriter::Create() takes every tensor's name, dtype and shape up front (the header
//   precedes the data), writes the header to a temporary file beside `path` and returns a
//   writer; the caller then streams the tensors' values in declaration order with Append()
//   (float values, converted to the tensor's dtype by round-to-nearest-even, runtime/base/dtype.h),
//   in as many pieces as it likes, so nothing is held beyond the piece being written. Finish()
//   checks that every element was given, flushes, fsyncs, renames the file to `path` and fsyncs
//   the directory: `path` appears complete or not at all. A writer destroyed before Finish()
//   removes its temporary file.
// - Errors (Status, never an exit or assert): InvalidArgument for a bad name (empty, duplicate or
//   "__metadata__"), a negative dimension, more values than declared, or Finish() before all
//   were given; IoError naming the path and the system's reason for anything the OS refuses.
//   After an I/O error the writer is broken: later calls return the first error.
// - ReadSafetensors() parses and validates a file's header (sizes, offsets contiguous and
//   within the file, dtypes, shapes); ReadTensor() reads one tensor's values widened to float.
//   Errors name the path and the tensor.
// - Threads: a writer is used by one thread at a time. Nothing is shared between writers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/dtype.h"
#include "runtime/base/status.h"

namespace zs {

// "F32", "BF16" or "F16": the format's name of a zerostack dtype.
std::string_view SafetensorsDTypeName(DType dtype);
StatusOr<DType> ParseSafetensorsDType(std::string_view name);  // the three names above

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [] is a scalar (one element)
  int64_t numel() const;
};

class SafetensorsWriter {
 public:
  // Writes the header of `tensors` (in this order) and `metadata` into `path`'s temporary file
  // (`path` + ".tmp"). The temporary file replaces any earlier one.
  static StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, std::vector<SafetensorsTensorInfo> tensors,
      const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next values, continuing the current tensor and moving on to the next one when it is
  // full (a piece may span tensors). Converted to each tensor's dtype.
  Status Append(std::span<const float> values);
  // Every element given: flush, fsync, rename to the final path, fsync its directory.
  Status Finish();

  const std::string& path() const { return path_; }
  int64_t header_bytes() const { return header_bytes_; }  // 8 + N
  int64_t data_bytes() const { return data_bytes_; }

 private:
  SafetensorsWriter() = default;
  Status WriteBytes(const void* data, size_t bytes);
  Status Fail(Status s);

  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
  std::vector<SafetensorsTensorInfo> tensors_;
  size_t current_ = 0;   // tensor being appended to
  int64_t written_ = 0;  // elements of tensors_[current_] given so far
  int64_t header_bytes_ = 0;
  int64_t data_bytes_ = 0;
  std::vector<char> staging_;  // one converted piece
  bool finished_ = false;
  Status broken_;
};

// One tensor of a file as its header describes it.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // data_offsets, relative to the data's start
  int64_t end = 0;
};

struct SafetensorsContents {
  std::string path;
  int64_t data_start = 0;                 // 8 + N
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  const SafetensorsEntry* Find(const std::string& name) const;
};

// Reads and validates the header of `path`.
StatusOr<SafetensorsContents> ReadSafetensors(const std::string& path);
// Reads one tensor's values as float (exact for all three dtypes).
StatusOr<std::vector<float>> ReadTensor(const SafetensorsContents& file,
                                        const SafetensorsEntry& entry);

}  // namespace zs

#include "runtime/checkpoint/safetensors_writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/base/atomic_file.h"

namespace zs {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr const char* kMetadataKey = "__metadata__";
// The safetensors package refuses headers above 100 MB; so do we.
constexpr int64_t kMaxHeaderBytes = 100'000'000;
// Elements converted and written at once.
constexpr size_t kPieceElements = size_t{1} << 20;

std::string Errno() { return std::strerror(errno); }

// Little-endian uint64 in 8 bytes (the format's, whatever the host's order).
void PutU64(uint64_t v, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint64_t GetU64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

Status FsyncDirectoryOf(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  return SyncDirectory(dir.string());
}

}  // namespace

std::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
  }
  return "?";
}

StatusOr<DType> ParseSafetensorsDType(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  return InvalidArgumentError(
      fmt::format("safetensors dtype \"{}\" is not supported (supported: F32, BF16, F16)", name));
}

int64_t SafetensorsTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, std::vector<SafetensorsTensorInfo> tensors,
    const std::map<std::string, std::string>& metadata) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header[kMetadataKey] = std::move(meta);
  }
  std::set<std::string> names;
  int64_t offset = 0;
  for (const SafetensorsTensorInfo& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || !names.insert(t.name).second) {
      return InvalidArgumentError(
          fmt::format("safetensors file {}: tensor name \"{}\" is empty, reserved or given twice",
                      path, t.name));
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return InvalidArgumentError(fmt::format(
            "safetensors file {}: tensor \"{}\" has a negative dimension {}", path, t.name, d));
      }
    }
    const int64_t bytes = t.numel() * int64_t(DTypeSize(t.dtype));
    header[t.name] = {{"dtype", std::string(SafetensorsDTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // 8 + N a multiple of 8
  if (int64_t(text.size()) > kMaxHeaderBytes) {
    return InvalidArgumentError(fmt::format(
        "safetensors file {}: the header of {} tensors takes {} bytes, more than the format's "
        "limit of {}",
        path, tensors.size(), text.size(), kMaxHeaderBytes));
  }

  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  w->tmp_path_ = path + ".tmp";
  w->tensors_ = std::move(tensors);
  w->header_bytes_ = 8 + int64_t(text.size());
  w->data_bytes_ = offset;
  w->file_ = std::fopen(w->tmp_path_.c_str(), "wb");
  if (w->file_ == nullptr) {
    return IoError(
        fmt::format("safetensors file {}: cannot create {}: {}", path, w->tmp_path_, Errno()));
  }
  unsigned char length[8];
  PutU64(text.size(), length);
  ZS_RETURN_IF_ERROR(w->WriteBytes(length, sizeof(length)));
  ZS_RETURN_IF_ERROR(w->WriteBytes(text.data(), text.size()));
  // Skip tensors without elements.
  while (w->current_ < w->tensors_.size() && w->tensors_[w->current_].numel() == 0) ++w->current_;
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_ && !tmp_path_.empty()) ::unlink(tmp_path_.c_str());
}

Status SafetensorsWriter::Fail(Status s) {
  if (!s.ok() && broken_.ok()) broken_ = s;
  return s;
}

Status SafetensorsWriter::WriteBytes(const void* data, size_t bytes) {
  if (bytes == 0) return OkStatus();
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    return Fail(IoError(fmt::format("safetensors file {}: writing {} bytes to {}: {}", path_, bytes,
                                    tmp_path_, Errno())));
  }
  return OkStatus();
}

Status SafetensorsWriter::Append(std::span<const float> values) {
  ZS_RETURN_IF_ERROR(broken_);
  if (finished_)
    return FailedPreconditionError(fmt::format("safetensors file {}: Append after Finish", path_));
  while (!values.empty()) {
    if (current_ >= tensors_.size()) {
      return InvalidArgumentError(
          fmt::format("safetensors file {}: {} values beyond the {} declared tensors", path_,
                      values.size(), tensors_.size()));
    }
    const SafetensorsTensorInfo& t = tensors_[current_];
    const size_t n = std::min({values.size(), size_t(t.numel() - written_), kPieceElements});
    const size_t elem = DTypeSize(t.dtype);
    staging_.resize(n * elem);
    // Little-endian hosts only (static_assert below): the values' bytes are the format's.
    ConvertFromFloat(values.data(), staging_.data(), t.dtype, n);
    ZS_RETURN_IF_ERROR(WriteBytes(staging_.data(), staging_.size()));
    values = values.subspan(n);
    written_ += int64_t(n);
    if (written_ == t.numel()) {
      written_ = 0;
      ++current_;
      while (current_ < tensors_.size() && tensors_[current_].numel() == 0) ++current_;
    }
  }
  return OkStatus();
}
static_assert(std::endian::native == std::endian::little,
              "SafetensorsWriter writes host-order values; the format is little-endian");

Status SafetensorsWriter::Finish() {
  ZS_RETURN_IF_ERROR(broken_);
  if (finished_) return OkStatus();
  if (current_ < tensors_.size()) {
    return InvalidArgumentError(fmt::format(
        "safetensors file {}: Finish with tensor \"{}\" given {} of its {} elements ({} tensors "
        "declared)",
        path_, tensors_[current_].name, written_, tensors_[current_].numel(), tensors_.size()));
  }
  if (std::fflush(file_) != 0) {
    return Fail(
        IoError(fmt::format("safetensors file {}: flushing {}: {}", path_, tmp_path_, Errno())));
  }
  if (::fsync(::fileno(file_)) != 0) {
    return Fail(
        IoError(fmt::format("safetensors file {}: fsync of {}: {}", path_, tmp_path_, Errno())));
  }
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) {
    return Fail(
        IoError(fmt::format("safetensors file {}: closing {}: {}", path_, tmp_path_, Errno())));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return Fail(IoError(
        fmt::format("safetensors file {}: renaming {} to it: {}", path_, tmp_path_, Errno())));
  }
  finished_ = true;
  return Fail(FsyncDirectoryOf(path_));
}

const SafetensorsEntry* SafetensorsContents::Find(const std::string& name) const {
  for (const SafetensorsEntry& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

StatusOr<SafetensorsContents> ReadSafetensors(const std::string& path) {
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) return IoError(fmt::format("safetensors file {}: {}", path, ec.message()));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return IoError(fmt::format("safetensors file {}: cannot open: {}", path, Errno()));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, &std::fclose);
  unsigned char length[8];
  if (file_size < 8 || std::fread(length, 1, 8, f) != 8) {
    return InvalidArgumentError(fmt::format(
        "safetensors file {}: {} bytes, too short for the header length", path, file_size));
  }
  const uint64_t n = GetU64(length);
  if (n > uint64_t(kMaxHeaderBytes) || 8 + n > file_size) {
    return InvalidArgumentError(fmt::format(
        "safetensors file {}: header length {} exceeds the file ({} bytes) or the limit", path, n,
        file_size));
  }
  std::string text(n, '\0');
  if (std::fread(text.data(), 1, n, f) != n) {
    return IoError(fmt::format("safetensors file {}: reading the header: {}", path, Errno()));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(
        fmt::format("safetensors file {}: bad header JSON: {}", path, e.what()));
  }
  if (!header.is_object()) {
    return InvalidArgumentError(
        fmt::format("safetensors file {}: the header is not an object", path));
  }
  SafetensorsContents out;
  out.path = path;
  out.data_start = int64_t(8 + n);
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) {
        return InvalidArgumentError(
            fmt::format("safetensors file {}: __metadata__ is not an object", path));
      }
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          return InvalidArgumentError(fmt::format(
              "safetensors file {}: __metadata__ value of \"{}\" is not a string", path, k));
        }
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    try {
      SafetensorsEntry e;
      e.name = name;
      ZS_ASSIGN_OR_RETURN(e.dtype, ParseSafetensorsDType(value.at("dtype").get<std::string>()));
      e.shape = value.at("shape").get<std::vector<int64_t>>();
      const auto offsets = value.at("data_offsets").get<std::vector<int64_t>>();
      if (offsets.size() != 2) throw std::runtime_error("data_offsets must hold two numbers");
      e.begin = offsets[0];
      e.end = offsets[1];
      out.tensors.push_back(std::move(e));
    } catch (const std::exception& ex) {
      return InvalidArgumentError(
          fmt::format("safetensors file {}: tensor \"{}\": bad entry: {}", path, name, ex.what()));
    }
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  int64_t at = 0;
  for (const SafetensorsEntry& e : out.tensors) {
    int64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d < 0) {
        return InvalidArgumentError(
            fmt::format("safetensors file {}: tensor \"{}\" has dimension {}", path, e.name, d));
      }
      numel *= d;
    }
    if (e.begin != at || e.end - e.begin != numel * int64_t(DTypeSize(e.dtype))) {
      return InvalidArgumentError(fmt::format(
          "safetensors file {}: tensor \"{}\" has data_offsets [{}, {}]; expected [{}, {}] "
          "(contiguous, {} elements of {})",
          path, e.name, e.begin, e.end, at, at + numel * int64_t(DTypeSize(e.dtype)), numel,
          SafetensorsDTypeName(e.dtype)));
    }
    at = e.end;
  }
  if (uint64_t(out.data_start + at) != file_size) {
    return InvalidArgumentError(
        fmt::format("safetensors file {}: the tensors cover {} data bytes but the file holds {}",
                    path, at, int64_t(file_size) - out.data_start));
  }
  return out;
}

StatusOr<std::vector<float>> ReadTensor(const SafetensorsContents& file,
                                        const SafetensorsEntry& entry) {
  const size_t elem = DTypeSize(entry.dtype);
  const size_t n = size_t(entry.end - entry.begin) / elem;
  std::vector<char> raw(n * elem);
  std::FILE* f = std::fopen(file.path.c_str(), "rb");
  if (f == nullptr) {
    return IoError(fmt::format("safetensors file {}: cannot open: {}", file.path, Errno()));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, &std::fclose);
  if (std::fseek(f, long(file.data_start + entry.begin), SEEK_SET) != 0 ||
      std::fread(raw.data(), 1, raw.size(), f) != raw.size()) {
    return IoError(fmt::format("safetensors file {}: reading tensor \"{}\" ({} bytes at {}): {}",
                               file.path, entry.name, raw.size(), file.data_start + entry.begin,
                               Errno()));
  }
  std::vector<float> values(n);
  ConvertToFloat(raw.data(), entry.dtype, values.data(), n);
  return values;
}

}  // namespace zs

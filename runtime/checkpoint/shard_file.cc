#include "runtime/checkpoint/shard_file.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace zs {
namespace {

constexpr char kMagic[8] = {'Z', 'S', 'C', 'K', 'P', 'T', '1', '\n'};

Status Errno(const std::string& what, const std::string& path) {
  return IoError(fmt::format("{} '{}': {}", what, path, std::strerror(errno)));
}

Status WriteAll(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("writing", path);
    }
    p += n;
    bytes -= size_t(n);
  }
  return OkStatus();
}

// An fd closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

uint64_t ParseHex(const nlohmann::json& j) {
  return std::stoull(j.get<std::string>(), nullptr, 16);
}

}  // namespace

uint64_t Fnv1a64(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string ChecksumHex(uint64_t h) { return fmt::format("{:016x}", h); }

std::string RankFileName(int rank) { return fmt::format("rank-{:05d}.zsd", rank); }

namespace {

// The header entry of `p`, its arrays at data offsets from `*offset` on (advanced past them, in
// the order the arrays' bytes follow the header): what ShardFileReader::Open reads back.
ShardFileReader::ParamEntry StoredEntry(const StoredParam& p, int64_t* offset) {
  ShardFileReader::ParamEntry e;
  e.unit = p.state.unit;
  e.param = p.state.param;
  e.name = p.placement.name;
  e.unit_name = p.unit_name;
  e.shape = p.placement.layout.full_shape;
  e.begin = p.state.begin;
  e.end = p.state.end;
  e.placement = p.placement;
  for (const OwnedArray& a : p.state.arrays) {
    ShardFileReader::ArrayEntry& stored = e.arrays.emplace_back();
    stored.kind = a.kind;
    stored.dtype = a.dtype;
    stored.offset = *offset;
    stored.bytes = int64_t(a.data.size());
    stored.checksum = Fnv1a64(a.data.data(), a.data.size());
    *offset += stored.bytes;
    if (a.dtype == "int8") {
      const size_t sb = a.scales.size() * sizeof(float);
      stored.block_origin = a.block_origin;
      stored.scales_offset = *offset;
      stored.scales_count = int64_t(a.scales.size());
      stored.scales_checksum = Fnv1a64(a.scales.data(), sb);
      *offset += int64_t(sb);
    }
  }
  return e;
}

}  // namespace

StatusOr<WrittenFile> WriteShardFile(const std::string& path, int rank, int world_size,
                                     const std::vector<StoredParam>& params) {
  nlohmann::json header;
  header["format_version"] = kCheckpointFormatVersion;
  header["rank"] = rank;
  header["world_size"] = world_size;
  nlohmann::json list = nlohmann::json::array();
  int64_t offset = 0;
  for (const StoredParam& p : params) list.push_back(ParamEntryToJson(StoredEntry(p, &offset)));
  header["params"] = std::move(list);
  const std::string text = header.dump();
  const uint64_t length = text.size();

  Fd fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (fd.fd < 0) return Errno("creating", path);
  WrittenFile out;
  out.checksum = kFnvOffset;
  auto put = [&](const void* data, size_t bytes) -> Status {
    out.checksum = Fnv1a64(data, bytes, out.checksum);
    out.bytes += int64_t(bytes);
    return WriteAll(fd.fd, data, bytes, path);
  };
  ZS_RETURN_IF_ERROR(put(kMagic, sizeof(kMagic)));
  ZS_RETURN_IF_ERROR(put(&length, sizeof(length)));
  ZS_RETURN_IF_ERROR(put(text.data(), text.size()));
  for (const StoredParam& p : params) {
    for (const OwnedArray& a : p.state.arrays) {
      ZS_RETURN_IF_ERROR(put(a.data.data(), a.data.size()));
      if (a.dtype == "int8") {
        ZS_RETURN_IF_ERROR(put(a.scales.data(), a.scales.size() * sizeof(float)));
      }
    }
  }
  if (::fsync(fd.fd) != 0) return Errno("fsync of", path);
  const int fdv = fd.fd;
  fd.fd = -1;
  if (::close(fdv) != 0) return Errno("closing", path);
  return out;
}

Status ShardFileReader::OpenAndCheck(const std::string& path, int64_t expected_bytes,
                                     uint64_t* length) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return Errno("opening checkpoint file", path);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Errno("stat of", path);
  file_bytes_ = int64_t(st.st_size);
  if (expected_bytes >= 0 && file_bytes_ != expected_bytes) {
    return IoError(fmt::format("checkpoint file '{}' is {} bytes, the manifest says {} ({})", path,
                               file_bytes_, expected_bytes,
                               file_bytes_ < expected_bytes ? "truncated" : "grown"));
  }
  char magic[8];
  ZS_RETURN_IF_ERROR(ReadAt(0, 8, magic, "its magic"));
  if (std::memcmp(magic, kMagic, 8) != 0) {
    return IoError(
        fmt::format("checkpoint file '{}' is not a zerostack rank file (bad "
                    "magic)",
                    path));
  }
  ZS_RETURN_IF_ERROR(ReadAt(8, 8, length, "its header length"));
  if (int64_t(*length) > file_bytes_ - 16) {
    return IoError(
        fmt::format("checkpoint file '{}': header of {} bytes in a file of {} "
                    "(truncated or corrupt)",
                    path, *length, file_bytes_));
  }
  data_start_ = 16 + int64_t(*length);
  return OkStatus();
}

StatusOr<ShardFileReader> ShardFileReader::OpenData(const std::string& path, int64_t expected_bytes,
                                                    int64_t data_start) {
  ShardFileReader r;
  uint64_t length = 0;
  ZS_RETURN_IF_ERROR(r.OpenAndCheck(path, expected_bytes, &length));
  if (r.data_start_ != data_start) {
    return IoError(fmt::format(
        "checkpoint file '{}': its data starts at byte {}, the checkpoint index says {} (the "
        "index does not describe this file)",
        path, r.data_start_, data_start));
  }
  return r;
}

StatusOr<ShardFileReader> ShardFileReader::Open(const std::string& path, int64_t expected_bytes) {
  ShardFileReader r;
  uint64_t length = 0;
  ZS_RETURN_IF_ERROR(r.OpenAndCheck(path, expected_bytes, &length));
  std::string text(length, '\0');
  ZS_RETURN_IF_ERROR(r.ReadAt(16, int64_t(length), text.data(), "its header"));
  try {
    const nlohmann::json h = nlohmann::json::parse(text);
    const int version = h.at("format_version").get<int>();
    if (version < kOldestCheckpointFormatVersion || version > kCheckpointFormatVersion) {
      return FailedPreconditionError(fmt::format(
          "checkpoint file '{}' has format version {}; this build reads versions {} to {}", path,
          version, kOldestCheckpointFormatVersion, kCheckpointFormatVersion));
    }
    r.rank_ = h.at("rank").get<int>();
    r.world_size_ = h.at("world_size").get<int>();
    for (const auto& jp : h.at("params")) {
      ZS_ASSIGN_OR_RETURN(ParamEntry p, ParamEntryFromJson(jp, path, r.data_start_, r.file_bytes_));
      r.params_.push_back(std::move(p));
    }
  } catch (const std::exception& e) {
    return IoError(fmt::format("checkpoint file '{}': bad header: {}", path, e.what()));
  }
  return r;
}

nlohmann::json ParamEntryToJson(const ShardFileReader::ParamEntry& p) {
  nlohmann::json arrays = nlohmann::json::array();
  for (const ShardFileReader::ArrayEntry& a : p.arrays) {
    nlohmann::json ja{{"kind", a.kind},
                      {"dtype", a.dtype},
                      {"offset", a.offset},
                      {"bytes", a.bytes},
                      {"checksum", ChecksumHex(a.checksum)}};
    if (a.dtype == "int8") {
      ja["block_origin"] = a.block_origin;
      ja["scales_offset"] = a.scales_offset;
      ja["scales_count"] = a.scales_count;
      ja["scales_checksum"] = ChecksumHex(a.scales_checksum);
    }
    arrays.push_back(std::move(ja));
  }
  nlohmann::json entry{{"unit", p.unit},
                       {"param", p.param},
                       {"name", p.name},
                       {"shape", p.shape},
                       {"begin", p.begin},
                       {"end", p.end},
                       {"arrays", std::move(arrays)}};
  if (!p.unit_name.empty()) entry["unit_name"] = p.unit_name;
  const nlohmann::json tp = PlacementTpJson(p.placement);
  if (!tp.is_null()) entry["tp"] = tp;
  return entry;
}

StatusOr<ShardFileReader::ParamEntry> ParamEntryFromJson(const nlohmann::json& jp,
                                                         const std::string& path,
                                                         int64_t data_start, int64_t file_bytes) {
  using ParamEntry = ShardFileReader::ParamEntry;
  using ArrayEntry = ShardFileReader::ArrayEntry;
  try {
    ParamEntry p;
    p.unit = jp.at("unit").get<int>();
    p.param = jp.at("param").get<int>();
    p.name = jp.at("name").get<std::string>();
    p.unit_name = jp.value("unit_name", std::string());
    p.shape = jp.at("shape").get<std::vector<int64_t>>();
    p.begin = jp.at("begin").get<int64_t>();
    p.end = jp.at("end").get<int64_t>();
    auto placement = PlacementFromJson(p.name, p.shape, jp.value("tp", nlohmann::json()));
    if (!placement.ok()) {
      return IoError(fmt::format("checkpoint file '{}': {}", path, placement.status().message()));
    }
    p.placement = *std::move(placement);
    if (p.begin < 0 || p.begin > p.end || p.end > p.placement.local_numel()) {
      return IoError(fmt::format(
          "checkpoint file '{}': parameter '{}' holds [{}, {}) of {} elements (corrupt)", path,
          p.name, p.begin, p.end, p.placement.local_numel()));
    }
    for (const auto& ja : jp.at("arrays")) {
      ArrayEntry a;
      a.kind = ja.at("kind").get<std::string>();
      a.dtype = ja.at("dtype").get<std::string>();
      a.offset = ja.at("offset").get<int64_t>();
      a.bytes = ja.at("bytes").get<int64_t>();
      a.checksum = ParseHex(ja.at("checksum"));
      if (a.dtype == "int8") {
        a.block_origin = ja.at("block_origin").get<int64_t>();
        a.scales_offset = ja.at("scales_offset").get<int64_t>();
        a.scales_count = ja.at("scales_count").get<int64_t>();
        a.scales_checksum = ParseHex(ja.at("scales_checksum"));
      }
      const int64_t last = std::max(a.offset + a.bytes, a.scales_offset + 4 * a.scales_count);
      if (a.offset < 0 || a.bytes < 0 || data_start + last > file_bytes) {
        return IoError(fmt::format(
            "checkpoint file '{}': parameter '{}' array {} lies past the end of the file "
            "(truncated)",
            path, p.name, a.kind));
      }
      p.arrays.push_back(a);
    }
    return p;
  } catch (const std::exception& e) {
    return IoError(fmt::format("checkpoint file '{}': bad entry: {}", path, e.what()));
  }
}

ShardFileReader::ShardFileReader(ShardFileReader&& o) noexcept { *this = std::move(o); }
ShardFileReader& ShardFileReader::operator=(ShardFileReader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    rank_ = o.rank_;
    world_size_ = o.world_size_;
    data_start_ = o.data_start_;
    file_bytes_ = o.file_bytes_;
    params_ = std::move(o.params_);
  }
  return *this;
}
ShardFileReader::~ShardFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status ShardFileReader::ReadAt(int64_t offset, int64_t bytes, void* out,
                               const std::string& what) const {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, size_t(bytes), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(fmt::format("reading {} from", what), path_);
    }
    if (n == 0) {
      return IoError(fmt::format("checkpoint file '{}' ends before {} (truncated)", path_, what));
    }
    p += n;
    offset += n;
    bytes -= n;
  }
  return OkStatus();
}

Status ShardFileReader::ReadArray(const ParamEntry& param, const ArrayEntry& array,
                                  OwnedArray& out) const {
  const std::string what = fmt::format("parameter '{}' array {}", param.name, array.kind);
  out.kind = array.kind;
  out.dtype = array.dtype;
  out.data.resize(size_t(array.bytes));
  ZS_RETURN_IF_ERROR(ReadAt(data_start_ + array.offset, array.bytes, out.data.data(), what));
  if (Fnv1a64(out.data.data(), out.data.size()) != array.checksum) {
    return IoError(
        fmt::format("checkpoint file '{}' (rank {}): {} fails its checksum "
                    "(corrupt)",
                    path_, rank_, what));
  }
  out.scales.clear();
  out.block_origin = array.block_origin;
  if (array.dtype == "int8") {
    out.scales.resize(size_t(array.scales_count));
    ZS_RETURN_IF_ERROR(ReadAt(data_start_ + array.scales_offset, 4 * array.scales_count,
                              out.scales.data(), what + " scales"));
    if (Fnv1a64(out.scales.data(), out.scales.size() * 4) != array.scales_checksum) {
      return IoError(
          fmt::format("checkpoint file '{}' (rank {}): {} scales fail their "
                      "checksum (corrupt)",
                      path_, rank_, what));
    }
  }
  return OkStatus();
}

StatusOr<WrittenFile> ChecksumFile(const std::string& path) {
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return Errno("opening", path);
  WrittenFile out;
  out.checksum = kFnvOffset;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd.fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("reading", path);
    }
    if (n == 0) break;
    out.checksum = Fnv1a64(buf.data(), size_t(n), out.checksum);
    out.bytes += n;
  }
  return out;
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return Errno("opening", path);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("reading", path);
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

}  // namespace zs

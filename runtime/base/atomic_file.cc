#include "runtime/base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

namespace zs {
namespace {

Status Errno(const char* what, const std::string& path, int error) {
  return IoError(fmt::format("{} {}: {}", what, path, std::strerror(error)));
}

// An fd closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The directory a file at `path` lives in ("." for a bare name).
std::string ParentDirectory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

std::string AtomicWriteTempPath(const std::string& path) {
  return fmt::format("{}.tmp.{}", path, ::getpid());
}

Status WriteFileDurably(const std::string& path, std::string_view text) {
  Fd fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (fd.fd < 0) return Errno("creating", path, errno);
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd.fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(fmt::format("writing {}: {} (after {} of {} bytes)", path,
                                 std::strerror(errno), text.size() - left, text.size()));
    }
    p += n;
    left -= size_t(n);
  }
  if (::fsync(fd.fd) != 0) return Errno("fsync of", path, errno);
  const int fdv = fd.fd;
  fd.fd = -1;
  // close() can report a delayed write error (NFS): it counts.
  if (::close(fdv) != 0) return Errno("closing", path, errno);
  return OkStatus();
}

Status SyncDirectory(const std::string& dir) {
  Fd fd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (fd.fd < 0) return Errno("opening directory", dir, errno);
  if (::fsync(fd.fd) != 0) return Errno("fsync of directory", dir, errno);
  return OkStatus();
}

// [Note: atomic write] (atomic_file.h)
Status WriteFileAtomically(const std::string& path, std::string_view text) {
  const std::string tmp = AtomicWriteTempPath(path);
  Status status = WriteFileDurably(tmp, text);
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = IoError(
        fmt::format("renaming {} to {}: {}", tmp, path, std::strerror(errno)));
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());  // a missing file is fine: creating it may be what failed
    return status.WithContext(fmt::format("writing {} atomically", path));
  }
  return SyncDirectory(ParentDirectory(path));
}

Status CheckWritableDirectory(const std::string& path) {
  const std::string dir = ParentDirectory(path);
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(dir, ec);
  if (st.type() == std::filesystem::file_type::not_found) {
    return NotFoundError(fmt::format("{}: the directory {} does not exist", path, dir));
  }
  if (ec) return IoError(fmt::format("{}: the directory {}: {}", path, dir, ec.message()));
  if (!std::filesystem::is_directory(st)) {
    return InvalidArgumentError(fmt::format("{}: {} is not a directory", path, dir));
  }
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgumentError(fmt::format("{}: is a directory, not a file", path));
  }
  const std::string probe = AtomicWriteTempPath(path);
  Fd fd{::open(probe.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644)};
  if (fd.fd < 0) {
    return IoError(fmt::format("{}: cannot create a file in {}: {}", path, dir,
                               std::strerror(errno)));
  }
  ::unlink(probe.c_str());
  return OkStatus();
}

}  // namespace zs

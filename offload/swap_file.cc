#include "offload/swap_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <vector>

#include "offload/io_backend.h"
#include "runtime/base/log.h"
#include "runtime/device/memory_tracker.h"

namespace zs {

namespace {
std::string_view WithoutTrailingSlashes(std::string_view dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  return dir;
}
}  // namespace

std::string SwapFilePath(std::string_view dir, std::string_view name, int pid) {
  return fmt::format("{}/zerostack-{}.{}.swap", WithoutTrailingSlashes(dir), name, pid);
}

bool IsNoSpaceErrno(int error) { return error == ENOSPC || error == EFBIG || error == EDQUOT; }

Status CheckSwapDirectory(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT) {
      return NotFoundError(fmt::format("NVMe swap directory {} (nvme_path) does not exist", dir));
    }
    return IoError(fmt::format("cannot stat NVMe swap directory {}: {}", dir, ErrnoText(error)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgumentError(
        fmt::format("NVMe swap path {} (nvme_path) is not a directory", dir));
  }
  return OkStatus();
}

// [stale files] A run that was killed never ran its destructors, so its swap files (often
// hundreds of GiB) stay. Finding one means the disk is probably too full for this run, and the
// file is garbage nobody else will remove: refuse loudly. A pid that still exists may be
// another rank of this host (or, rarely, a reused pid): its file is left alone.
Status CheckForStaleSwapFiles(const std::string& dir, const std::string& name) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return IoError(fmt::format("cannot list NVMe swap directory {}: {}", dir, ErrnoText(errno)));
  }
  const std::string prefix = "zerostack-" + name + ".";
  const std::string_view suffix = ".swap";
  std::vector<std::string> stale;
  while (const dirent* entry = readdir(d)) {
    const std::string_view file = entry->d_name;
    if (file.size() <= prefix.size() + suffix.size() || !file.starts_with(prefix) ||
        !file.ends_with(suffix)) {
      continue;
    }
    // Only "<digits>" between prefix and suffix: "optimizer.rank0" must not match the files of
    // a store named "optimizer".
    const std::string_view digits =
        file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
    int pid = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      stale.push_back(fmt::format("{}/{}", WithoutTrailingSlashes(dir), file));
    }
  }
  closedir(d);
  if (stale.empty()) return OkStatus();
  std::sort(stale.begin(), stale.end());
  return FailedPreconditionError(fmt::format(
      "{} stale NVMe swap file(s) for '{}' in {}, left by a killed run (their process no longer "
      "exists): {}. Remove them (they hold disk space this run needs) and start again",
      stale.size(), name, dir, fmt::join(stale, ", ")));
}

namespace {

std::string NoSpaceFor(int64_t bytes, const std::string& path) {
  return fmt::format("no space for {} bytes ({}) at {}", bytes, FormatBytes(bytes), path);
}

// fallocate may allocate extent by extent and report ENOSPC only once the disk is full (ext4
// does), starving every other writer on it meanwhile: refuse up front when it cannot fit.
Status CheckAvailableSpace(const std::string& dir, const std::string& path, int64_t bytes) {
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) != 0) {
    return IoError(
        fmt::format("statvfs of NVMe swap directory {} failed: {}", dir, ErrnoText(errno)));
  }
  // What unprivileged users may take (df's "Avail"), also for root: the blocks only root may
  // use are the system's reserve, not swap space.
  const auto available = static_cast<int64_t>(std::min<uint64_t>(
      uint64_t{vfs.f_bavail} * static_cast<uint64_t>(vfs.f_frsize), uint64_t{INT64_MAX}));
  if (bytes > available) {
    return IoError(fmt::format("{}: the filesystem of {} has {} bytes ({}) available",
                               NoSpaceFor(bytes, path), dir, available, FormatBytes(available)));
  }
  return OkStatus();
}

Status Preallocate(int fd, const std::string& path, int64_t bytes) {
  int r;
  while ((r = fallocate(fd, 0, 0, bytes)) != 0 && errno == EINTR) {
  }
  if (r == 0) return OkStatus();
  const int error = errno;
  if (IsNoSpaceErrno(error)) {
    return IoError(fmt::format("{}: fallocate: {}", NoSpaceFor(bytes, path), ErrnoText(error)));
  }
  if (error != EOPNOTSUPP) {
    return IoError(
        fmt::format("fallocate of {} bytes at {} failed: {}", bytes, path, ErrnoText(error)));
  }
  // Filesystems without fallocate: size the file; space is then only claimed on write.
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    ZS_LOG(kWarn,
           "the filesystem of {} cannot fallocate: NVMe swap space is not reserved and a "
           "full disk shows up on write",
           path);
  }
  if (ftruncate(fd, bytes) == 0) return OkStatus();
  const int e = errno;
  return IoError(fmt::format("{}: ftruncate: {}",
                             IsNoSpaceErrno(e) ? NoSpaceFor(bytes, path) : "cannot size " + path,
                             ErrnoText(e)));
}

}  // namespace

StatusOr<int> CreateSwapFile(const std::string& dir, const std::string& path, int64_t bytes) {
  ZS_RETURN_IF_ERROR(CheckAvailableSpace(dir, path, bytes));
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int error = errno;
    if (error == EEXIST) {
      return FailedPreconditionError(
          fmt::format("{} already exists: this process already has an NvmeStore of that name in {}",
                      path, dir));
    }
    if (error == EINVAL) {
      return IoError(
          fmt::format("cannot open {} with O_DIRECT ({}): the filesystem of {} does "
                      "not support direct I/O; choose another nvme_path",
                      path, ErrnoText(error), dir));
    }
    return IoError(fmt::format("cannot create {}: {}", path, ErrnoText(error)));
  }
  if (Status status = Preallocate(fd, path, bytes); !status.ok()) {
    close(fd);
    unlink(path.c_str());
    return status;
  }
  return fd;
}

}  // namespace zs

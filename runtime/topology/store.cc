#include "runtime/topology/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace zs {
namespace {

std::string NextInProcessName() {
  static std::atomic<int> counter{0};
  return fmt::format("in-process store #{}", counter.fetch_add(1));
}

// Keys may contain '/' (namespaces): they become '%2F' so every key is one file.
std::string EscapeKey(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '/' || c == '%') {
      out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

InProcessStore::InProcessStore() : name_(NextInProcessName()) {}

Status InProcessStore::Set(std::string_view key, std::string_view value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = values_.emplace(std::string(key), std::string(value));
    if (!inserted) {
      return InvalidArgumentError(fmt::format("{}: key '{}' was already set", name_, key));
    }
  }
  cv_.notify_all();
  return OkStatus();
}

StatusOr<std::string> InProcessStore::Get(std::string_view key,
                                          std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto found = [&] { return values_.find(key) != values_.end(); };
  if (!cv_.wait_for(lock, timeout, found)) {
    return DeadlineExceededError(fmt::format("{}: key '{}' did not appear within {} ms", name_,
                                             key, timeout.count()));
  }
  return values_.find(key)->second;
}

bool InProcessStore::Contains(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.find(key) != values_.end();
}

StatusOr<std::unique_ptr<FileStore>> FileStore::Open(std::string directory) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    return IoError(fmt::format("cannot create rendezvous directory '{}': {}", directory,
                               ec.message()));
  }
  return std::unique_ptr<FileStore>(new FileStore(std::move(directory)));
}

std::string FileStore::PathOf(std::string_view key) const {
  return directory_ + "/" + EscapeKey(key);
}

Status FileStore::Set(std::string_view key, std::string_view value) {
  const std::string path = PathOf(key);
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(),
                                      std::hash<std::thread::id>{}(std::this_thread::get_id()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return IoError(fmt::format("cannot create '{}': {}", tmp, std::strerror(errno)));
  }
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return IoError(fmt::format("cannot write '{}': {}", tmp, std::strerror(err)));
    }
    done += size_t(n);
  }
  ::close(fd);
  // link() fails if the key exists, which makes Set write-once across processes.
  if (::link(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    if (err == EEXIST) {
      return InvalidArgumentError(
          fmt::format("file store '{}': key '{}' was already set", directory_, key));
    }
    return IoError(fmt::format("cannot publish '{}': {}", path, std::strerror(err)));
  }
  ::unlink(tmp.c_str());
  return OkStatus();
}

bool FileStore::Contains(std::string_view key) {
  struct stat st;
  return ::stat(PathOf(key).c_str(), &st) == 0;
}

StatusOr<std::string> FileStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  const std::string path = PathOf(key);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto delay = std::chrono::microseconds(50);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream contents;
      contents << in.rdbuf();
      return contents.str();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceededError(fmt::format("file store '{}': key '{}' did not appear within {} ms",
                                               directory_, key, timeout.count()));
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::microseconds(20'000));
  }
}

}  // namespace zs

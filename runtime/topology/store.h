// Store: the key-value rendezvous that ranks use to find each other before any communicator
// exists (addresses, unique ids, liveness information), in the shape of torch's c10d Store.
//
// Contract
// - Keys are written once (Set on an existing key is an InvalidArgument error) and are visible
//   to every rank of the job once Set returns.
// - Get blocks the calling thread until the key exists or `timeout` passes; on timeout it
//   returns DeadlineExceeded naming the key, the store and the time waited.
// - Implementations are thread-safe: many ranks-as-threads may share one store object.
// - InProcessStore serves ranks that are threads of one process; FileStore serves processes
//   that share a directory (one host, or many hosts on a shared file system).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "runtime/base/status.h"

namespace zs {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status Set(std::string_view key, std::string_view value) = 0;
  virtual StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) = 0;
  // True if the key exists now; never blocks.
  virtual bool Contains(std::string_view key) = 0;
  // A string that identifies this store within the job (an address or a directory).
  virtual std::string Describe() const = 0;
};

class InProcessStore final : public Store {
 public:
  InProcessStore();
  Status Set(std::string_view key, std::string_view value) override;
  StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  bool Contains(std::string_view key) override;
  std::string Describe() const override { return name_; }

 private:
  const std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string, std::less<>> values_;  // guarded by mu_
};

// Each key is a file in `directory` (written to a temporary name, then renamed, so readers
// never see a partial value). Get polls with a short back-off.
class FileStore final : public Store {
 public:
  // Creates `directory` (and its parents) if needed.
  static StatusOr<std::unique_ptr<FileStore>> Open(std::string directory);

  Status Set(std::string_view key, std::string_view value) override;
  StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  bool Contains(std::string_view key) override;
  std::string Describe() const override { return directory_; }

 private:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {}
  std::string PathOf(std::string_view key) const;
  const std::string directory_;
};

}  // namespace zs

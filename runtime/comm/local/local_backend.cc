#include "runtime/comm/local/local_backend.h"

#include <fmt/format.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm/local/local_communicator.h"
#include "runtime/comm/local/shared_group.h"

namespace zs {
namespace {

using local::Clock;
using local::LocalCommunicator;
using local::SharedGroup;

// The process-wide table through which the ranks of one group find their SharedGroup.
class GroupTable {
 public:
  static GroupTable& Get() {
    static GroupTable* table = new GroupTable();  // never destroyed: threads may outlive statics
    return *table;
  }

  // The shared state of `rank`'s next group under `key`, and its generation number.
  std::pair<std::shared_ptr<SharedGroup>, uint64_t> Join(const std::string& key, int rank,
                                                         int world, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t>& generations = next_generation_[key];
    generations.resize(world, 0);
    const uint64_t generation = generations[rank]++;
    const std::string pending_key = fmt::format("{}#{}", key, generation);
    Pending& pending = pending_[pending_key];
    if (pending.group == nullptr) pending.group = std::make_shared<SharedGroup>(name, world);
    std::shared_ptr<SharedGroup> group = pending.group;
    if (++pending.taken == world) pending_.erase(pending_key);
    return {std::move(group), generation};
  }

 private:
  struct Pending {
    std::shared_ptr<SharedGroup> group;
    int taken = 0;
  };
  std::mutex mu_;
  std::map<std::string, std::vector<uint64_t>> next_generation_;  // guarded by mu_
  std::map<std::string, Pending> pending_;                        // guarded by mu_
};

class LocalBackend final : public Backend {
 public:
  std::string_view name() const override { return "local"; }
  Status Available() const override { return OkStatus(); }

  StatusOr<std::unique_ptr<Communicator>> Connect(Store& store, int rank, int world_size,
                                                  const CommOptions& options) override {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      return InvalidArgumentError(
          fmt::format("local backend: rank {} is not in a group of {} "
                      "ranks (group '{}')",
                      rank, world_size, options.group_name));
    }
    const Clock::time_point deadline = Clock::now() + options.timeout;
    const std::string key =
        fmt::format("{}\x1f{}\x1f{}", store.Describe(), options.group_name, world_size);
    auto [group, generation] = GroupTable::Get().Join(key, rank, world_size, options.group_name);

    // Rendezvous through the store: every rank announces itself, then waits for the others.
    const std::string prefix =
        fmt::format("zs/local/{}/w{}/g{}/", options.group_name, world_size, generation);
    const std::string pid = std::to_string(::getpid());
    ZS_RETURN_IF_ERROR(store.Set(prefix + std::to_string(rank), pid));
    for (int k = 0; k < world_size; ++k) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      StatusOr<std::string> value =
          store.Get(prefix + std::to_string(k), std::max(left, std::chrono::milliseconds(0)));
      if (!value.ok()) {
        if (value.status().code() != StatusCode::kDeadlineExceeded) return value.status();
        std::string missing;
        for (int j = 0; j < world_size; ++j) {
          if (!store.Contains(prefix + std::to_string(j))) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(j);
          }
        }
        return DeadlineExceededError(fmt::format(
            "local backend: rank {} connecting to group '{}' of {} ranks through store '{}': "
            "rank(s) {} never joined within {} ms",
            rank, options.group_name, world_size, store.Describe(), missing,
            options.timeout.count()));
      }
      if (*value != pid) {
        return InvalidArgumentError(fmt::format(
            "local backend: rank {} of group '{}' is in process {} but rank {} is in process "
            "{}; the local backend connects threads of one process (use 'fabric')",
            k, options.group_name, *value, rank, pid));
      }
    }
    return std::unique_ptr<Communicator>(
        std::make_unique<LocalCommunicator>(std::move(group), rank, options));
  }
};

}  // namespace

std::unique_ptr<Backend> MakeLocalBackend() { return std::make_unique<LocalBackend>(); }

}  // namespace zs

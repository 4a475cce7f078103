#include "runtime/comm/backend_registry.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

namespace zs {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Backend>, std::less<>> backends;  // guarded by mu
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: backends outlive statics
  return *registry;
}

}  // namespace

Status RegisterBackend(std::unique_ptr<Backend> backend) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string name(backend->name());
  if (r.backends.count(name) != 0) {
    return InvalidArgumentError(fmt::format("backend '{}' is already registered", name));
  }
  r.backends.emplace(std::move(name), std::move(backend));
  return OkStatus();
}

StatusOr<Backend*> FindBackend(std::string_view name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backends.find(name);
  if (it == r.backends.end()) {
    std::string known;
    for (const auto& [n, b] : r.backends) known += (known.empty() ? "" : ", ") + n;
    return NotFoundError(fmt::format("no communication backend '{}' (built: {})", name,
                                     known.empty() ? "none registered" : known));
  }
  return it->second.get();
}

std::vector<std::string> RegisteredBackendNames() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [n, b] : r.backends) names.push_back(n);
  return names;
}

}  // namespace zs

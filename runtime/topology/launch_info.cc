#include "runtime/topology/launch_info.h"

#include <fmt/format.h>

#include <charconv>
#include <vector>

#include "runtime/base/env.h"
#include "runtime/topology/tcp_store.h"

namespace zs {
namespace {

// Strict decimal integer: no suffixes, no spaces.
StatusOr<int> ParseInt(const char* name, const std::string& text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgumentError(
        fmt::format("environment variable {}='{}' is not an integer", name, text));
  }
  return value;
}

// A variable that must be present once its launcher family was detected.
StatusOr<int> Required(const EnvLookup& env, const char* name, const char* because) {
  auto v = env(name);
  if (!v) {
    return InvalidArgumentError(fmt::format("{} is set but {} is not", because, name));
  }
  return ParseInt(name, *v);
}

StatusOr<std::optional<int>> Optional(const EnvLookup& env, const char* name) {
  auto v = env(name);
  if (!v) return std::optional<int>();
  ZS_ASSIGN_OR_RETURN(int value, ParseInt(name, *v));
  return std::optional<int>(value);
}

// Slurm's compressed task counts: "2(x3),1" = 2 tasks on each of nodes 0..2, then 1 on node 3.
StatusOr<int> SlurmTasksOnNode(const std::string& spec, int node) {
  int next_node = 0;
  size_t pos = 0;
  auto bad = [&] {
    return InvalidArgumentError(
        fmt::format("environment variable SLURM_TASKS_PER_NODE='{}' is not like '2(x3),1'", spec));
  };
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(pos, comma - pos);
    int tasks = 0, repeat = 1;
    const size_t paren = item.find("(x");
    auto [e1, ec1] =
        std::from_chars(item.data(), item.data() + std::min(paren, item.size()), tasks);
    if (ec1 != std::errc() || e1 != item.data() + std::min(paren, item.size())) return bad();
    if (paren != std::string::npos) {
      if (item.back() != ')') return bad();
      auto [e2, ec2] =
          std::from_chars(item.data() + paren + 2, item.data() + item.size() - 1, repeat);
      if (ec2 != std::errc() || e2 != item.data() + item.size() - 1 || repeat < 1) return bad();
    }
    if (node < next_node + repeat) return tasks;
    next_node += repeat;
    pos = comma + 1;
  }
  return InvalidArgumentError(fmt::format(
      "SLURM_NODEID={} is past the {} nodes of SLURM_TASKS_PER_NODE='{}'", node, next_node, spec));
}

Status Validate(const LaunchInfo& info, const char* rank_var, const char* size_var,
                const char* local_rank_var, const char* local_size_var) {
  if (info.world_size < 1) {
    return InvalidArgumentError(fmt::format("{}={} must be at least 1", size_var, info.world_size));
  }
  if (info.rank < 0 || info.rank >= info.world_size) {
    return InvalidArgumentError(fmt::format("{}={} is outside 0..{} ({}={})", rank_var, info.rank,
                                            info.world_size - 1, size_var, info.world_size));
  }
  if (info.local_size < 1 || info.local_size > info.world_size) {
    return InvalidArgumentError(fmt::format("{}={} is outside 1..{} ({}={})", local_size_var,
                                            info.local_size, info.world_size, size_var,
                                            info.world_size));
  }
  if (info.local_rank < 0 || info.local_rank >= info.local_size) {
    return InvalidArgumentError(fmt::format("{}={} is outside 0..{} ({}={})", local_rank_var,
                                            info.local_rank, info.local_size - 1, local_size_var,
                                            info.local_size));
  }
  return OkStatus();
}

// Fills rank/size/local fields from one family of variables (local ones optional).
StatusOr<LaunchInfo> FromFamily(const EnvLookup& env, const char* launcher, const char* rank_var,
                                const char* size_var, const char* local_rank_var,
                                const char* local_size_var) {
  LaunchInfo info;
  info.launcher = launcher;
  const std::string because = fmt::format("{}='{}'", rank_var, env(rank_var).value_or(""));
  ZS_ASSIGN_OR_RETURN(info.rank, ParseInt(rank_var, *env(rank_var)));
  ZS_ASSIGN_OR_RETURN(info.world_size, Required(env, size_var, because.c_str()));
  ZS_ASSIGN_OR_RETURN(std::optional<int> local_rank, Optional(env, local_rank_var));
  ZS_ASSIGN_OR_RETURN(std::optional<int> local_size, Optional(env, local_size_var));
  if (local_rank.has_value() != local_size.has_value()) {
    return InvalidArgumentError(fmt::format("{} and {} must be set together (only {} is set)",
                                            local_rank_var, local_size_var,
                                            local_rank ? local_rank_var : local_size_var));
  }
  info.local_known = local_rank.has_value();
  info.local_rank = local_rank.value_or(info.rank);
  info.local_size = local_size.value_or(info.world_size);
  ZS_RETURN_IF_ERROR(Validate(info, rank_var, size_var, local_rank_var, local_size_var));
  return info;
}

StatusOr<LaunchInfo> FromSlurm(const EnvLookup& env) {
  LaunchInfo info;
  info.launcher = "srun";
  const std::string because = fmt::format("SLURM_PROCID='{}'", env("SLURM_PROCID").value_or(""));
  ZS_ASSIGN_OR_RETURN(info.rank, ParseInt("SLURM_PROCID", *env("SLURM_PROCID")));
  ZS_ASSIGN_OR_RETURN(info.world_size, Required(env, "SLURM_NTASKS", because.c_str()));
  ZS_ASSIGN_OR_RETURN(std::optional<int> local_rank, Optional(env, "SLURM_LOCALID"));
  ZS_ASSIGN_OR_RETURN(std::optional<int> node, Optional(env, "SLURM_NODEID"));
  const auto per_node = env("SLURM_STEP_TASKS_PER_NODE") ? env("SLURM_STEP_TASKS_PER_NODE")
                                                         : env("SLURM_TASKS_PER_NODE");
  info.local_known = local_rank.has_value() && node.has_value() && per_node.has_value();
  info.local_rank = info.local_known ? *local_rank : info.rank;
  info.local_size = info.world_size;
  if (info.local_known) {
    ZS_ASSIGN_OR_RETURN(info.local_size, SlurmTasksOnNode(*per_node, *node));
  }
  ZS_RETURN_IF_ERROR(
      Validate(info, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_TASKS_PER_NODE"));
  return info;
}

}  // namespace

std::string LaunchInfo::ToString() const {
  return fmt::format("rank {} of {} (local {} of {}{}, {}, rendezvous {})", rank, world_size,
                     local_rank, local_size, local_known ? "" : " guessed", launcher,
                     rendezvous.empty() ? "none" : rendezvous);
}

StatusOr<LaunchInfo> DetectLaunch() { return DetectLaunchFrom(&GetEnvString); }

StatusOr<LaunchInfo> DetectLaunchFrom(const EnvLookup& env) {
  LaunchInfo info;
  if (env("ZS_RANK")) {
    ZS_ASSIGN_OR_RETURN(info, FromFamily(env, "zerorun", "ZS_RANK", "ZS_WORLD_SIZE",
                                         "ZS_LOCAL_RANK", "ZS_LOCAL_SIZE"));
  } else if (env("ZS_WORLD_SIZE")) {
    return InvalidArgumentError(
        fmt::format("ZS_WORLD_SIZE='{}' is set but ZS_RANK is not", *env("ZS_WORLD_SIZE")));
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    ZS_ASSIGN_OR_RETURN(info,
                        FromFamily(env, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"));
  } else if (env("PMI_RANK")) {
    ZS_ASSIGN_OR_RETURN(info, FromFamily(env, "mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                         "MPI_LOCALNRANKS"));
  } else if (env("SLURM_PROCID")) {
    ZS_ASSIGN_OR_RETURN(info, FromSlurm(env));
  }
  info.rendezvous = env("ZS_RENDEZVOUS").value_or("");
  if (info.rendezvous.empty() && info.world_size > 1) {
    return InvalidArgumentError(fmt::format(
        "launched by {} as {} ranks, but ZS_RENDEZVOUS is not set: set it to a directory "
        "every rank can reach (a fresh one per job, on a shared file system for several "
        "hosts), or to tcp://HOST:PORT where HOST runs rank 0 and PORT is free there",
        info.launcher, info.world_size));
  }
  return info;
}

StatusOr<std::unique_ptr<Store>> OpenStore(const LaunchInfo& info,
                                           std::chrono::milliseconds timeout) {
  const std::string& r = info.rendezvous;
  if (r.empty()) {
    if (info.world_size != 1) {
      return InvalidArgumentError(
          fmt::format("{}: a job of {} ranks needs a rendezvous (ZS_RENDEZVOUS)", info.ToString(),
                      info.world_size));
    }
    return std::unique_ptr<Store>(std::make_unique<InProcessStore>());
  }
  if (r.rfind("tcp://", 0) == 0) {
    std::string host;
    int port = 0;
    ZS_RETURN_IF_ERROR(TcpStore::ParseAddress(r, &host, &port).WithContext("ZS_RENDEZVOUS"));
    TcpStoreOptions options;
    options.connect_timeout = timeout;
    options.op_timeout = timeout;
    if (info.rank == 0) {
      ZS_ASSIGN_OR_RETURN(auto store, TcpStore::Serve(port, options));
      return std::unique_ptr<Store>(std::move(store));
    }
    ZS_ASSIGN_OR_RETURN(auto store, TcpStore::Connect(host, port, options));
    return std::unique_ptr<Store>(std::move(store));
  }
  std::string dir = r.rfind("file://", 0) == 0 ? r.substr(7) : r;
  if (dir.find("://") != std::string::npos) {
    return InvalidArgumentError(
        fmt::format("ZS_RENDEZVOUS='{}' is neither a directory nor tcp://host:port", r));
  }
  ZS_ASSIGN_OR_RETURN(auto store, FileStore::Open(dir));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace zs

#include "runtime/comm/connect.h"

#include <fmt/format.h>

#include <charconv>

#include "runtime/base/env.h"
#include "runtime/comm/backend_registry.h"

namespace zs {

EnvironmentCommunicator::EnvironmentCommunicator(LaunchInfo launch, std::unique_ptr<Store> store,
                                                 std::unique_ptr<Communicator> comm)
    : launch_(std::move(launch)), store_(std::move(store)), comm_(std::move(comm)) {}

EnvironmentCommunicator::~EnvironmentCommunicator() = default;

CommHandle EnvironmentCommunicator::StartAllGather(const void* send, void* recv, size_t count,
                                                   DType dtype) {
  return comm_->StartAllGather(send, recv, count, dtype);
}
CommHandle EnvironmentCommunicator::StartReduceScatter(const void* send, void* recv, size_t count,
                                                       DType dtype, ReduceOp op) {
  return comm_->StartReduceScatter(send, recv, count, dtype, op);
}
CommHandle EnvironmentCommunicator::StartAllReduce(const void* send, void* recv, size_t count,
                                                   DType dtype, ReduceOp op) {
  return comm_->StartAllReduce(send, recv, count, dtype, op);
}
CommHandle EnvironmentCommunicator::StartBroadcast(void* buffer, size_t count, DType dtype,
                                                   int root) {
  return comm_->StartBroadcast(buffer, count, dtype, root);
}
CommHandle EnvironmentCommunicator::StartSend(const void* buffer, size_t count, DType dtype,
                                              int peer) {
  return comm_->StartSend(buffer, count, dtype, peer);
}
CommHandle EnvironmentCommunicator::StartRecv(void* buffer, size_t count, DType dtype, int peer) {
  return comm_->StartRecv(buffer, count, dtype, peer);
}
CommHandle EnvironmentCommunicator::StartAllToAllv(const void* send,
                                                   std::span<const size_t> send_counts,
                                                   std::span<const size_t> send_offsets, void* recv,
                                                   std::span<const size_t> recv_counts,
                                                   std::span<const size_t> recv_offsets,
                                                   DType dtype) {
  return comm_->StartAllToAllv(send, send_counts, send_offsets, recv, recv_counts, recv_offsets,
                               dtype);
}
CommHandle EnvironmentCommunicator::StartBarrier() { return comm_->StartBarrier(); }
StatusOr<std::unique_ptr<Communicator>> EnvironmentCommunicator::Split(int color, int key,
                                                                       std::string name) {
  return comm_->Split(color, key, std::move(name));
}

StatusOr<std::unique_ptr<EnvironmentCommunicator>> ConnectFromEnvironment(
    std::string_view backend_name, CommOptions options) {
  std::string backend(backend_name);
  if (auto v = GetEnvString("ZS_BACKEND"); v && !v->empty()) backend = *v;
  if (auto v = GetEnvString("ZS_COMM_TIMEOUT_MS")) {
    int64_t ms = 0;
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), ms);
    if (v->empty() || ec != std::errc() || end != v->data() + v->size() || ms < 1) {
      return InvalidArgumentError(
          fmt::format("environment variable ZS_COMM_TIMEOUT_MS='{}' is not a positive number of "
                      "milliseconds",
                      *v));
    }
    options.timeout = std::chrono::milliseconds(ms);
  }
  ZS_ASSIGN_OR_RETURN(LaunchInfo launch, DetectLaunch());
  RegisterBuiltinBackends();
  ZS_ASSIGN_OR_RETURN(Backend * found, FindBackend(backend));
  if (Status available = found->Available(); !available.ok()) {
    return available.WithContext(
        fmt::format("backend '{}' cannot run here ({})", backend, launch.ToString()));
  }
  auto store = OpenStore(launch, options.timeout);
  if (!store.ok()) {
    return store.status().WithContext(
        fmt::format("opening the rendezvous of {}", launch.ToString()));
  }
  auto comm = found->Connect(**store, launch.rank, launch.world_size, options);
  if (!comm.ok()) {
    return comm.status().WithContext(fmt::format("connecting {} with backend '{}' through {}",
                                                 launch.ToString(), backend, (*store)->Describe()));
  }
  return std::make_unique<EnvironmentCommunicator>(std::move(launch), std::move(*store),
                                                   std::move(*comm));
}

}  // namespace zs

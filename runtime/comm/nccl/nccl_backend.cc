#include "runtime/comm/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstring>
#include <map>
#include <mutex>

#include "runtime/comm/nccl/nccl_communicator.h"
#include "runtime/comm/nccl/nccl_status.h"

namespace zs {
namespace {

using Clock = std::chrono::steady_clock;

// The device count, or Unavailable saying why there is no usable device.
StatusOr<int> DeviceCount() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return UnavailableError(
        fmt::format("nccl: no usable CUDA device: cudaGetDeviceCount failed "
                    "with error {} {} ({})",
                    int(e), cudaGetErrorName(e), cudaGetErrorString(e)));
  }
  if (count <= 0) return UnavailableError("nccl: cudaGetDeviceCount found no CUDA device");
  return count;
}

std::string ToHex(const void* data, size_t size) {
  std::string out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) out += fmt::format("{:02x}", p[i]);
  return out;
}

bool FromHex(std::string_view hex, void* data, size_t size) {
  if (hex.size() != 2 * size) return false;
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    unsigned v = 0;
    for (char c : hex.substr(2 * i, 2)) {
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= unsigned(c - 'a' + 10);
      else
        return false;
    }
    p[i] = static_cast<unsigned char>(v);
  }
  return true;
}

// How many times this process connected (store, group, world, rank) before: the generation
// that keeps the unique-id keys of repeated Connects apart.
uint64_t NextGeneration(const std::string& key) {
  static std::mutex mu;
  static std::map<std::string, uint64_t>* generations = new std::map<std::string, uint64_t>();
  std::lock_guard<std::mutex> lock(mu);
  return (*generations)[key]++;
}

class NcclBackend final : public Backend {
 public:
  std::string_view name() const override { return "nccl"; }

  Status Available() const override { return DeviceCount().status(); }

  StatusOr<std::unique_ptr<Communicator>> Connect(Store& store, int rank, int world_size,
                                                  const CommOptions& options) override {
    if (world_size <= 0 || rank < 0 || rank >= world_size) {
      return InvalidArgumentError(
          fmt::format("nccl: rank {} is not in a world of size {} "
                      "(group '{}')",
                      rank, world_size, options.group_name));
    }
    ZS_ASSIGN_OR_RETURN(const int devices, DeviceCount());
    const int device = rank % devices;
    const auto deadline = Clock::now() + options.timeout;
    const std::string where = fmt::format("nccl group '{}' (rank {} of {}, device {})",
                                          options.group_name, rank, world_size, device);

    const std::string group_key =
        fmt::format("{}|{}|{}", store.Describe(), options.group_name, world_size);
    const uint64_t generation = NextGeneration(fmt::format("{}|{}", group_key, rank));
    const std::string id_key =
        fmt::format("zs/nccl/{}/w{}/g{}/unique_id", options.group_name, world_size, generation);
    ncclUniqueId id;
    if (rank == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) return NcclError(r, nullptr, where + ": ncclGetUniqueId");
      ZS_RETURN_IF_ERROR(store.Set(id_key, ToHex(&id, sizeof(id))));
    } else {
      ZS_ASSIGN_OR_RETURN(std::string hex, store.Get(id_key, options.timeout));
      if (!FromHex(hex, &id, sizeof(id))) {
        return InternalError(
            fmt::format("{}: the unique id under key '{}' of store '{}' is "
                        "malformed ({} characters, expected {})",
                        where, id_key, store.Describe(), hex.size(), 2 * sizeof(id)));
      }
    }

    const cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return CudaError(e, where + ": cudaSetDevice");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // init and every later call return at once; we poll and time out
    config.commName = options.group_name.c_str();
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
    Status s;
    if (r != ncclSuccess && r != ncclInProgress) {
      s = NcclError(r, comm, where + ": ncclCommInitRankConfig");
    } else {
      s = WaitUntilReady(comm, deadline, options.timeout,
                         where + ": initialisation (waiting for every rank to join)");
    }
    if (!s.ok()) {
      if (comm != nullptr) ncclCommAbort(comm);
      return s;
    }
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> c,
                        NcclCommunicator::Create(comm, device, options));
    return std::unique_ptr<Communicator>(std::move(c));
  }
};

}  // namespace

std::unique_ptr<Backend> MakeNcclBackend() { return std::make_unique<NcclBackend>(); }

}  // namespace zs

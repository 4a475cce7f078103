// Uses an installed zerostack through <zerostack/zerostack.h>: prints the registered backends
// and the device specs (run_install_test.cmake checks which are there: nccl and cuda only when
// the program links zerostack::nccl) and, if the `local` backend is there, runs a 2-rank
// all-reduce and checks its result. Exit status 0 on success.
#include <zerostack/zerostack.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

int main() {
  zs::RegisterBuiltinBackends();
  bool have_local = false;
  std::printf("registered backends:");
  for (const std::string& name : zs::RegisteredBackendNames()) {
    std::printf(" %s", name.c_str());
    have_local |= name == "local";
  }
  std::printf("\ndevice specs:");
  for (const std::string& form : zs::DeviceSpecForms()) std::printf(" %s", form.c_str());
  std::printf("\n");
  if (!have_local) return 0;

  zs::StatusOr<zs::Backend*> backend = zs::FindBackend("local");
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  zs::InProcessStore store;
  std::vector<std::vector<float>> data = {{1.f, 2.f, 3.f}, {10.f, 20.f, 30.f}};
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      zs::StatusOr<std::unique_ptr<zs::Communicator>> comm =
          (*backend)->Connect(store, rank, 2, zs::CommOptions{});
      zs::Status s = comm.ok() ? (*comm)->AllReduce(data[rank].data(), data[rank].data(), 3,
                                                    zs::DType::kF32, zs::ReduceOp::kSum)
                               : comm.status();
      if (!s.ok()) errors[rank] = s.ToString();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    if (!errors[rank].empty()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, errors[rank].c_str());
      return 1;
    }
    if (data[rank] != std::vector<float>{11.f, 22.f, 33.f}) {
      std::fprintf(stderr, "rank %d: wrong all_reduce result\n", rank);
      return 1;
    }
  }
  std::printf("2-rank local all_reduce: ok (%s)\n",
              std::string(zs::DTypeName(zs::DType::kBF16)).c_str());
  return 0;
}

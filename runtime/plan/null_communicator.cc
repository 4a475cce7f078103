#include "runtime/plan/null_communicator.h"

namespace zs {

NullCommunicator::NullCommunicator(int rank, int size, std::string group_name)
    : rank_(rank), size_(size) {
  options_.group_name = std::move(group_name);
}

StatusOr<std::unique_ptr<Communicator>> NullCommunicator::Split(int color, int /*key*/,
                                                                std::string name) {
  if (color < 0) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(new NullCommunicator(rank_, size_, std::move(name)));
}

}  // namespace zs

// AllGatherScalar: one double from every rank of a communicator, in its rank order, bit for bit
// (a double travels as two f32 elements). The building block of sums that must come out the
// same on every rank: gather the parts, then add them in rank order (the global gradient norm,
// a mean loss).
//
// Contract: collective over `comm` (every rank calls it in the same order as its other
// operations); blocks the calling thread; returns the communicator's error.
#pragma once

#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"

namespace zs {

inline StatusOr<std::vector<double>> AllGatherScalar(Communicator& comm, double local) {
  std::vector<double> all(size_t(comm.size()), 0.0);
  all[size_t(comm.rank())] = local;
  ZS_RETURN_IF_ERROR(comm.AllGather(&all[size_t(comm.rank())], all.data(), 2, DType::kF32));
  return all;
}

// The rank-order sum of every rank's `local`: the same bits on every rank.
inline StatusOr<double> AllSumScalar(Communicator& comm, double local) {
  ZS_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherScalar(comm, local));
  double sum = 0.0;
  for (double x : all) sum += x;
  return sum;
}

}  // namespace zs

// Host reductions shared by the CPU backends: combine the contributions of N ranks into one
// output in the fixed rank order the Communicator contract promises.
//
// Contract
// - ReduceSources(dst, sources, n, dtype, op, world): dst[i] = reduce over k = 0..n-1 of
//   sources[k][i], computed as ((s_0 + s_1) + s_2) + ... in f32 (for every dtype) and rounded
//   once to dtype; kAvg divides the sum by `world` at the end; kMax propagates NaN.
//   sources must be given in rank order. dst may alias sources[k] (element i is read before
//   it is written). One pass over memory: tiles of a few KiB are reduced in a float buffer on
//   the stack, so the result never depends on how the caller chunks the data.
// - Pure function; call from any thread.
#pragma once

#include <cstddef>

#include "runtime/base/dtype.h"
#include "runtime/comm/communicator.h"

namespace zs {

void ReduceSources(void* dst, const void* const* sources, int n, size_t count, DType dtype,
                   ReduceOp op, int world);

}  // namespace zs

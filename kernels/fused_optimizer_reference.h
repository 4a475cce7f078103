// The CPU reference of the fused multi-tensor optimizer step (kernels/cuda/fused_optimizer.h):
// the same arguments (kernels/fused_optimizer_types.h) on host memory, element by element
// through the same functions the GPU kernel runs (kernels/optimizer_element.h), so the GPU
// test compares the kernel with it bit for bit. tests/kernels checks it against the SIMD CPU
// optimizer (optimizers/cpu_optimizer.h) bit for bit, and so against the float64 references.
//
// Contract
// - Updates every tensor in place, as LaunchFusedOptimizer would; returns false, touching
//   nothing, for the arguments FusedOptimizerArgsError refuses.
// - Runs on the calling thread and returns when done; no allocation (int8: two blocks of fp32
//   scratch, 2 KiB, on the stack); safe to call concurrently on disjoint tensors. Not fast: a
//   reference, for tests and for hosts that want the GPU's exact bits.
#pragma once

#include <cstddef>

#include "kernels/fused_optimizer_types.h"

namespace zs::kernels {

bool FusedOptimizerStepReference(const FusedOptimizerHyper& hyper,
                                 const FusedOptimizerTensor* tensors, size_t num_tensors);

}  // namespace zs::kernels

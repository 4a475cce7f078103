// The memory floor of bench_optimizers: one fused pass over a tile that reads and writes
// exactly the arrays an optimizer step does, with one add each: the master weights and the
// states in place, grad read, param_out = grad + 1 written. No step that moves these bytes can
// go faster. Highway-dispatched to the best target, as the step is (the static target of a
// build without -m flags is scalar, and compilers do not vectorize non-temporal stores).
// With `stream_param_out`, param_out is written through non-temporal stores from its first
// vector-aligned element on, as the step does then ([Note: streaming param_out] in
// optimizers/optimizer_spec.h), and the stores are fenced before the call returns.
// Thread-safe for disjoint tiles.
#pragma once

#include <cstdint>

#include "optimizers/optimizer_spec.h"

namespace zs {

// Elements [b, e) of master (fp32), grad and param_out (16-bit), and the states (null when
// absent; codes of `state_dtype`: fp32, bf16 bits or int8; int8 scales are not touched).
void FloorTile(float* master, const uint16_t* grad, uint16_t* param_out, void* state0, void* state1,
               StateDType state_dtype, bool stream_param_out, int64_t b, int64_t e);

}  // namespace zs

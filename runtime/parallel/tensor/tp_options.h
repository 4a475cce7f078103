// TpOptions: where one rank sits in its tensor-parallel group, and whether the group runs
// Megatron's sequence parallelism. Every layer of runtime/parallel/tensor is built from one.
//
// Contract
// - [Note: tp activations] Activations are row-major [rows, H] with rows = batch * seq (row
//   b * seq + t). Without sequence parallelism every tp rank holds all rows of the activations
//   between tp regions (the residual stream, LayerNorm inputs and outputs), identical on every
//   rank. With sequence parallelism rank r holds only the contiguous row block
//   [r * rows / tp, (r + 1) * rows / tp) of those activations (a block may cross sequence
//   boundaries; the tp regions, attention and MLP, always see all rows), and rows must be a
//   multiple of tp.
// - Plain value; no threads, no ownership.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"

namespace zs::tp {

struct TpOptions {
  int size = 1;  // the tp degree
  int rank = 0;  // this rank in the tp group, [0, size)
  bool sequence_parallel = false;

  // The communicator's rank and size.
  static TpOptions Of(const Communicator& tp, bool sequence_parallel);

  // InvalidArgument naming size and rank for size < 1 or a rank outside [0, size).
  Status Validate() const;
  // InvalidArgument "<what> N is not divisible by tp S" unless n % size == 0.
  Status CheckDivisible(std::string_view what, int64_t n) const;
  // With sequence parallelism: InvalidArgument naming rows and tp unless rows % size == 0.
  Status CheckRows(int64_t rows) const;
  // Rows of a sequence-region activation this rank holds: rows / size with sequence
  // parallelism, else rows.
  int64_t local_rows(int64_t rows) const { return sequence_parallel ? rows / size : rows; }
  // First row of this rank's block (0 without sequence parallelism).
  int64_t first_row(int64_t rows) const { return sequence_parallel ? rank * (rows / size) : 0; }
};

}  // namespace zs::tp

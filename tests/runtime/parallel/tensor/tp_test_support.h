// Test helpers for runtime/parallel/tensor: tp ranks as threads of the local backend, the
// pieces of a full activation each rank holds, and float comparisons scaled to a tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/comm/local_ranks.h"
#include "runtime/parallel/tensor/tp_options.h"

namespace zs::tp::testing {

// Runs body(rank, comm) on `tp` ranks as threads (local backend); EXPECTs every rank OK.
inline void RunTp(int tp, const std::function<Status(int rank, Communicator& comm)>& body) {
  CommOptions options;
  options.group_name = "tp";
  options.timeout = std::chrono::milliseconds(20'000);
  const Status s = RunLocalRanks(
      tp, options, [&](int rank, Communicator& comm, MemoryTracker&) { return body(rank, comm); });
  ASSERT_TRUE(s.ok()) << s.ToString();
}

// Which part of a full [rows, cols] activation a tp rank holds.
enum class Piece { kAll, kRowBlock, kColumnBlock };

inline std::vector<float> TakePiece(Piece piece, std::span<const float> full, int64_t rows,
                                    int64_t cols, int rank, int tp) {
  switch (piece) {
    case Piece::kAll:
      return {full.begin(), full.end()};
    case Piece::kRowBlock: {
      const int64_t n = rows / tp * cols;
      return {full.begin() + rank * n, full.begin() + (rank + 1) * n};
    }
    case Piece::kColumnBlock: {
      const int64_t c = cols / tp;
      std::vector<float> out(rows * c);
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(full.data() + r * cols + rank * c, c, out.data() + r * c);
      }
      return out;
    }
  }
  return {};
}

inline void PutPiece(Piece piece, std::span<const float> local, int64_t rows, int64_t cols,
                     int rank, int tp, std::span<float> full) {
  switch (piece) {
    case Piece::kAll:
      std::copy(local.begin(), local.end(), full.begin());
      return;
    case Piece::kRowBlock:
      std::copy(local.begin(), local.end(), full.begin() + rank * (rows / tp * cols));
      return;
    case Piece::kColumnBlock: {
      const int64_t c = cols / tp;
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(local.data() + r * c, c, full.data() + r * cols + rank * c);
      }
      return;
    }
  }
}

inline float MaxAbs(std::span<const float> v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

// Every element within rtol * max|want| + atol_floor: float results computed in another
// summation order (partial sums per tp rank, then the rank-order reduction) differ from the
// unsplit layer's by a few ulps of the largest terms, not of each element.
inline void ExpectClose(const std::string& what, std::span<const float> got,
                        std::span<const float> want, double rtol, double atol_floor = 1e-7) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = rtol * MaxAbs(want) + atol_floor;
  int reported = 0;
  if (std::getenv("ZS_TP_TEST_ERRORS") != nullptr) {  // measuring tolerances
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    std::printf("%-40s max|diff| / max|want| = %.2e\n", what.c_str(), worst / MaxAbs(want));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(double(got[i]) - want[i]) <= tol) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i] << " (tol " << tol
                    << ")";
    }
  }
}

}  // namespace zs::tp::testing

namespace zs::tp::testing {

// The status is InvalidArgument and its message names every one of `parts`.
inline void ExpectInvalidArgument(const Status& s, std::initializer_list<std::string> parts) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

}  // namespace zs::tp::testing

#include "runtime/parallel/tensor/tp_param_layout.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "runtime/base/check.h"

namespace zs::tp {
namespace {

int64_t Product(std::span<const int64_t> dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

// Row geometry of a kSplitRows layout.
struct RowSplit {
  int64_t rows;        // full dim 0
  int64_t cols;        // product of the other dims
  int64_t block_rows;  // padded dim 0 / blocks
  int64_t local_rows;  // block_rows / tp, per block
};

RowSplit Rows(const TpParamLayout& l, int tp) {
  ZS_CHECK(!l.full_shape.empty(), "a split parameter is not a scalar");
  const int64_t rows = l.full_shape[0];
  const int64_t padded = l.padded_rows > 0 ? l.padded_rows : rows;
  ZS_CHECK(padded >= rows && (l.blocks == 1 || padded == rows), "padded rows {} for {} rows",
           padded, rows);
  ZS_CHECK(l.blocks >= 1 && padded % l.blocks == 0, "{} rows in {} blocks", padded, l.blocks);
  const int64_t block_rows = padded / l.blocks;
  ZS_CHECK(tp >= 1 && block_rows % tp == 0, "{} rows per block over tp {}", block_rows, tp);
  return {rows, Product(std::span(l.full_shape).subspan(1)), block_rows, block_rows / tp};
}

// Calls fn(local_offset, full_offset, count) for every contiguous run of the rank's part.
template <typename Fn>
void ForEachRun(const TpParamLayout& l, int rank, int tp, Fn&& fn) {
  ZS_CHECK(rank >= 0 && rank < tp, "rank {} of tp {}", rank, tp);
  switch (l.kind) {
    case TpParamLayout::Kind::kReplicated:
      fn(0, 0, l.full_numel());
      return;
    case TpParamLayout::Kind::kSplitRows: {
      const RowSplit s = Rows(l, tp);
      for (int b = 0; b < l.blocks; ++b) {
        for (int64_t i = 0; i < s.local_rows; ++i) {
          const int64_t full_row = b * s.block_rows + rank * s.local_rows + i;
          const int64_t local_row = b * s.local_rows + i;
          fn(local_row * s.cols, full_row < s.rows ? full_row * s.cols : -1, s.cols);
        }
      }
      return;
    }
    case TpParamLayout::Kind::kSplitColumns: {
      ZS_CHECK(l.full_shape.size() == 2, "column split of a {}-d parameter", l.full_shape.size());
      const int64_t rows = l.full_shape[0], cols = l.full_shape[1];
      ZS_CHECK(cols % tp == 0, "{} columns over tp {}", cols, tp);
      const int64_t local_cols = cols / tp;
      for (int64_t r = 0; r < rows; ++r)
        fn(r * local_cols, r * cols + rank * local_cols, local_cols);
      return;
    }
  }
}

}  // namespace

TpParamLayout TpParamLayout::Replicated(std::vector<int64_t> full_shape) {
  return {Kind::kReplicated, std::move(full_shape), 1, 0};
}

TpParamLayout TpParamLayout::SplitRows(std::vector<int64_t> full_shape, int blocks,
                                       int64_t padded_rows) {
  return {Kind::kSplitRows, std::move(full_shape), blocks, padded_rows};
}

TpParamLayout TpParamLayout::SplitColumns(std::vector<int64_t> full_shape) {
  return {Kind::kSplitColumns, std::move(full_shape), 1, 0};
}

TpModuleParam MakeTpParam(const nn::ModuleParam& full, TpParamLayout layout, int tp) {
  ZS_CHECK(full.spec.shape == layout.full_shape, "{}: layout of another shape", full.spec.name);
  TpModuleParam out{full.spec, full.init, std::move(layout)};
  out.spec.shape = out.layout.LocalShape(tp);
  out.spec.tensor_parallel = out.layout.tensor_parallel();
  return out;
}

int64_t TpParamLayout::full_numel() const { return Product(full_shape); }

std::vector<int64_t> TpParamLayout::LocalShape(int tp) const {
  std::vector<int64_t> shape = full_shape;
  switch (kind) {
    case Kind::kReplicated:
      break;
    case Kind::kSplitRows:
      shape[0] = blocks * Rows(*this, tp).local_rows;
      break;
    case Kind::kSplitColumns:
      ZS_CHECK(shape.size() == 2 && shape[1] % tp == 0, "column split over tp {}", tp);
      shape[1] /= tp;
      break;
  }
  return shape;
}

int64_t TpParamLayout::local_numel(int tp) const { return Product(LocalShape(tp)); }

void SliceFull(const TpParamLayout& layout, int rank, int tp, std::span<const float> full,
               std::span<float> local) {
  ZS_CHECK(static_cast<int64_t>(full.size()) == layout.full_numel() &&
               static_cast<int64_t>(local.size()) == layout.local_numel(tp),
           "slice: full {} local {} floats", full.size(), local.size());
  ForEachRun(layout, rank, tp, [&](int64_t local_off, int64_t full_off, int64_t count) {
    float* out = local.data() + local_off;
    if (full_off < 0) {
      std::fill(out, out + count, 0.0f);
    } else {
      std::copy_n(full.data() + full_off, count, out);
    }
  });
}

void PlaceLocal(const TpParamLayout& layout, int rank, int tp, std::span<const float> local,
                std::span<float> full) {
  ZS_CHECK(static_cast<int64_t>(full.size()) == layout.full_numel() &&
               static_cast<int64_t>(local.size()) == layout.local_numel(tp),
           "place: full {} local {} floats", full.size(), local.size());
  ForEachRun(layout, rank, tp, [&](int64_t local_off, int64_t full_off, int64_t count) {
    if (full_off >= 0) std::copy_n(local.data() + local_off, count, full.data() + full_off);
  });
}

LocalToFullRun LocalToFull(const TpParamLayout& l, int rank, int tp, int64_t local) {
  ZS_CHECK(rank >= 0 && rank < tp && local >= 0 && local < l.local_numel(tp),
           "local element {} of rank {} of tp {}", local, rank, tp);
  switch (l.kind) {
    case TpParamLayout::Kind::kReplicated:
      return {local, l.full_numel() - local};
    case TpParamLayout::Kind::kSplitRows: {
      const RowSplit s = Rows(l, tp);
      const int64_t local_row = local / s.cols, col = local % s.cols;
      const int64_t b = local_row / s.local_rows, i = local_row % s.local_rows;
      const int64_t full_row = b * s.block_rows + int64_t(rank) * s.local_rows + i;
      if (full_row >= s.rows) return {-1, (s.local_rows - i) * s.cols - col};
      return {full_row * s.cols + col,
              std::min(s.local_rows - i, s.rows - full_row) * s.cols - col};
    }
    case TpParamLayout::Kind::kSplitColumns: {
      const int64_t lc = l.full_shape[1] / tp;
      const int64_t r = local / lc, c = local % lc;
      return {r * l.full_shape[1] + int64_t(rank) * lc + c, lc - c};
    }
  }
  return {};
}

FullToLocalRun FullToLocal(const TpParamLayout& l, int tp, int64_t full) {
  ZS_CHECK(tp >= 1 && full >= 0 && full < l.full_numel(), "full element {} of tp {}", full, tp);
  switch (l.kind) {
    case TpParamLayout::Kind::kReplicated:
      return {0, full, l.full_numel() - full};
    case TpParamLayout::Kind::kSplitRows: {
      const RowSplit s = Rows(l, tp);
      const int64_t row = full / s.cols, col = full % s.cols;
      const int64_t b = row / s.block_rows, w = row % s.block_rows;
      const int64_t i = w % s.local_rows;
      return {int(w / s.local_rows), (b * s.local_rows + i) * s.cols + col,
              std::min(s.local_rows - i, s.rows - row) * s.cols - col};
    }
    case TpParamLayout::Kind::kSplitColumns: {
      const int64_t cols = l.full_shape[1], lc = cols / tp;
      const int64_t r = full / cols, c = full % cols;
      return {int(c / lc), r * lc + c % lc, lc - c % lc};
    }
  }
  return {};
}

}  // namespace zs::tp

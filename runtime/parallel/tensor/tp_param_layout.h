// TpParamLayout: how one tp rank's local parameter relates to the full (unsplit) parameter of
// the same name in runtime/nn, as a pure value. TpGpt's Init slices nn::Gpt's full values with
// it; tests and checkpoint converters gather the shards back with it.
//
//   kind            local shape                       local element <-> full element
//   kReplicated     the full shape                    the same index
//   kSplitRows      [blocks * P/(blocks*tp), rest]    rank r's contiguous row range of each
//                                                     of the `blocks` equal blocks of dim 0,
//                                                     block 0's range first (qkv: blocks = 3,
//                                                     this rank's heads of q, then k, then v)
//   kSplitColumns   [R, C/tp]                         columns [r*C/tp, (r+1)*C/tp) of every row
//
// P is dim 0 padded to padded_rows (a vocabulary padded up to a multiple of tp, as Megatron
// pads; only with blocks = 1): local rows past the full dim 0 are padding, zero when sliced and
// dropped when placed. A 1-D parameter is a column of R rows (kSplitRows only).
//
// Contract
// - Pure functions; thread-safe. Sizes that do not divide are programming errors (ZS_CHECK):
//   the layers that make layouts have already refused them with InvalidArgument.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/model/model_spec.h"
#include "runtime/nn/param_init.h"

namespace zs::tp {

struct TpParamLayout {
  enum class Kind : uint8_t { kReplicated, kSplitRows, kSplitColumns };

  Kind kind = Kind::kReplicated;
  std::vector<int64_t> full_shape;  // the unsplit parameter's shape (runtime/nn's)
  int blocks = 1;                   // kSplitRows: dim 0 is this many equal blocks
  int64_t padded_rows = 0;          // kSplitRows: dim 0 padded to this (0: no padding)

  static TpParamLayout Replicated(std::vector<int64_t> full_shape);
  static TpParamLayout SplitRows(std::vector<int64_t> full_shape, int blocks = 1,
                                 int64_t padded_rows = 0);
  static TpParamLayout SplitColumns(std::vector<int64_t> full_shape);

  bool tensor_parallel() const { return kind != Kind::kReplicated; }
  std::vector<int64_t> LocalShape(int tp) const;
  int64_t local_numel(int tp) const;
  int64_t full_numel() const;
};

// What a tp layer exports for each parameter it reads: the local ParamSpec (local shape,
// tensor_parallel = layout.tensor_parallel()), the InitKind of the full parameter and the layout.
struct TpModuleParam {
  ParamSpec spec;
  nn::InitKind init = nn::InitKind::kNormal;
  TpParamLayout layout;
};

// A local parameter's TpModuleParam from the full one that runtime/nn exports.
TpModuleParam MakeTpParam(const nn::ModuleParam& full, TpParamLayout layout, int tp);

// local = rank `rank`'s part of full (padding rows zero).
void SliceFull(const TpParamLayout& layout, int rank, int tp, std::span<const float> full,
               std::span<float> local);
// full[rank's part] = local (padding rows dropped); the rest of full is left as it is, so
// placing every rank's local part fills the whole parameter (replicated: rank's copy).
void PlaceLocal(const TpParamLayout& layout, int rank, int tp, std::span<const float> local,
                std::span<float> full);

// Element-wise index maps, for converters that move ranges rather than whole tensors
// (checkpoints resharded over tp). Each returns the place of one element and `count`, how many
// elements from it on stay contiguous in both frames (so a caller walks runs, not elements).
struct LocalToFullRun {
  int64_t full = 0;  // the full (flattened, unpadded) index; -1 for a padding row's element
  int64_t count = 0;
};
// Local element `local` of rank `rank`'s part (0 <= local < local_numel(tp)).
LocalToFullRun LocalToFull(const TpParamLayout& layout, int rank, int tp, int64_t local);
struct FullToLocalRun {
  int rank = 0;       // the tp rank holding the element (0 for a replicated parameter)
  int64_t local = 0;  // its index in that rank's part
  int64_t count = 0;
};
// Full element `full` (0 <= full < full_numel()).
FullToLocalRun FullToLocal(const TpParamLayout& layout, int tp, int64_t full);

}  // namespace zs::tp

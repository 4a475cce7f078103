// ConsolidateCheckpoint: a checkpoint's full, unpadded parameters as one safetensors file, read
// from its rank files: what `zero-ckpt consolidate` writes, and a grid save's 16-bit weights
// (zero_optimization.stage3_gather_16bit_weights_on_model_save, [Note: 16-bit weights of a
// grid] in checkpoint.h).
//
// Contract
// - Every parameter of `params` (name and full shape, in this order) is built from its pieces'
//   fp32 master arrays, each placed in the full tensor through its tp layout
//   (ForEachFullRun; padded vocabulary rows dropped), then appended to the writer, converted
//   to `dtype` (F32, or BF16 / F16 rounded to nearest even); an exact copy of a piece (same tp
//   rank and range, as PieceIndex) is read once. One parameter at a time: the
//   memory beyond the writer is one full parameter in fp32 plus one piece's master array.
// - Errors name the file and parameter: a piece without a master array, pieces that do not
//   hold every element exactly once, a read or checksum failure, the output's I/O.
// - Plain function; the caller's thread. `files` opens the rank files it reads (once each).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/base/dtype.h"
#include "runtime/base/status.h"
#include "runtime/checkpoint/checkpoint_index.h"

namespace zs {

struct ConsolidatedParam {
  std::string name;
  std::vector<int64_t> shape;
};

Status ConsolidateCheckpoint(const CheckpointIndex& index, RankFileCache& files,
                             const std::vector<ConsolidatedParam>& params, const std::string& out,
                             DType dtype, const std::map<std::string, std::string>& metadata);

}  // namespace zs

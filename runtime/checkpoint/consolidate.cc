#include "runtime/checkpoint/consolidate.h"

#include <fmt/format.h>

#include <algorithm>
#include <span>

#include "runtime/checkpoint/safetensors_writer.h"

namespace zs {

Status ConsolidateCheckpoint(const CheckpointIndex& index, RankFileCache& files,
                             const std::vector<ConsolidatedParam>& params, const std::string& out,
                             DType dtype, const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsTensorInfo> tensors;
  for (const auto& p : params) tensors.push_back({p.name, dtype, p.shape});
  ZS_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(out, std::move(tensors), metadata));
  std::vector<float> full;
  for (const auto& p : params) {
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    // The loader's own lookup (PieceIndex: one shape, one tp cut, no element held twice, exact
    // copies ignored), asked for the whole parameter.
    const auto [first, last] = index.Of(p.name);
    std::vector<SavedPiece> saved;
    for (const CheckpointIndex::Piece* piece = first; piece != last; ++piece) {
      const ShardFileReader::ParamEntry& e = piece->entry;
      if (e.placement.layout.full_numel() != numel) {
        return IoError(fmt::format("'{}': parameter '{}' is saved with {} elements, listed with {}",
                                   index.files[size_t(piece->file)].name, p.name,
                                   e.placement.layout.full_numel(), numel));
      }
      saved.push_back({e.placement, e.begin, e.end});
    }
    ZS_ASSIGN_OR_RETURN(PieceIndex pieces, PieceIndex::Create(p.name, std::move(saved)));
    ZS_ASSIGN_OR_RETURN(std::vector<CopyRun> runs,
                        PlanCopy(ParamPlacement::Whole(p.name, p.shape), 0, numel, pieces));
    // By piece, so each piece is read once (tp slices interleave in the full parameter).
    std::stable_sort(runs.begin(), runs.end(),
                     [](const CopyRun& x, const CopyRun& y) { return x.piece < y.piece; });
    full.assign(size_t(numel), 0.0f);
    int64_t placed = 0;
    int read_piece = -1;
    OwnedArray a;
    for (const CopyRun& run : runs) {
      if (run.piece < 0) continue;
      if (run.piece != read_piece) {
        const CheckpointIndex::Piece& piece = first[run.piece];
        const ShardFileReader::ParamEntry& e = piece.entry;
        ZS_ASSIGN_OR_RETURN(const ShardFileReader* r, files.Get(index, piece.file));
        auto it = std::find_if(e.arrays.begin(), e.arrays.end(),
                               [](const auto& x) { return x.kind == "master"; });
        if (it == e.arrays.end()) {
          return IoError(
              fmt::format("'{}': parameter '{}' has no master array", r->path(), p.name));
        }
        ZS_RETURN_IF_ERROR(r->ReadArray(e, *it, a));
        if (a.dtype != "f32" || int64_t(a.data.size()) != 4 * (e.end - e.begin)) {
          return IoError(fmt::format("'{}': parameter '{}' master is {} bytes of {} for {} "
                                     "elements", r->path(), p.name, a.data.size(), a.dtype,
                                     e.end - e.begin));
        }
        read_piece = run.piece;
      }
      const float* src = reinterpret_cast<const float*>(a.data.data());
      std::copy_n(src + run.src, run.count, full.data() + run.dst);
      placed += run.count;
    }
    if (placed != numel) {
      return IoError(fmt::format(
          "parameter '{}': its pieces hold {} of {} elements (zero-ckpt verify names the gap)",
          p.name, placed, numel));
    }
    ZS_RETURN_IF_ERROR(writer->Append(std::span<const float>(full)));
  }
  return writer->Finish();
}

}  // namespace zs

#include "runtime/checkpoint/consolidate.h"

#include <fmt/format.h>

#include <algorithm>
#include <span>

#include "runtime/checkpoint/safetensors_writer.h"

namespace zs {
namespace {

// The same tp rank and range: an ep-replicated parameter saved on every ep rank by older saves
// (PieceIndex reads such copies from the first, too).
bool SameSlot(const ShardFileReader::ParamEntry& a, const ShardFileReader::ParamEntry& b) {
  auto rank = [](const ParamPlacement& p) { return p.identity() ? 0 : p.tp_rank; };
  return rank(a.placement) == rank(b.placement) && a.begin == b.begin && a.end == b.end;
}

}  // namespace

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
    full.assign(size_t(numel), 0.0f);
    int64_t placed = 0;
    const auto [first, last] = index.Of(p.name);
    for (const CheckpointIndex::Piece* piece = first; piece != last; ++piece) {
      const ShardFileReader::ParamEntry& e = piece->entry;
      if (piece != first && SameSlot(piece[-1].entry, e)) continue;  // an exact copy
      ZS_ASSIGN_OR_RETURN(const ShardFileReader* r, files.Get(index, piece->file));
      auto it = std::find_if(e.arrays.begin(), e.arrays.end(),
                             [](const auto& a) { return a.kind == "master"; });
      if (it == e.arrays.end()) {
        return IoError(fmt::format("'{}': parameter '{}' has no master array", r->path(), p.name));
      }
      if (e.placement.layout.full_numel() != numel) {
        return IoError(fmt::format("'{}': parameter '{}' is saved with {} elements, listed with {}",
                                   r->path(), p.name, e.placement.layout.full_numel(), numel));
      }
      OwnedArray a;
      ZS_RETURN_IF_ERROR(r->ReadArray(e, *it, a));
      if (a.dtype != "f32" || int64_t(a.data.size()) != 4 * (e.end - e.begin)) {
        return IoError(fmt::format("'{}': parameter '{}' master is {} bytes of {} for {} elements",
                                   r->path(), p.name, a.data.size(), a.dtype, e.end - e.begin));
      }
      const float* src = reinterpret_cast<const float*>(a.data.data());
      ForEachFullRun(e.placement, e.begin, e.end, [&](int64_t off, int64_t f, int64_t n) {
        if (f < 0) return;
        std::copy_n(src + off, n, full.data() + f);
        placed += n;
      });
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

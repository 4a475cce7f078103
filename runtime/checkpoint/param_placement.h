// ParamPlacement: where one engine parameter's elements sit in the model's full parameter, and
// the pure copy plan a checkpoint load follows to fill an owned range from saved pieces that
// were cut differently (another tp size, dp size or ZeRO stage).
//
// [Note: placement frames] Three frames, one conversion each:
//   owned range  [begin, end) of the engine's parameter (zero_engine.h [Note: checkpoint
//                ownership]): the LOCAL frame, the rank's tp slice, flattened;
//   local <-> full  the tp layout (tp_param_layout.h LocalToFull / FullToLocal) with the tp rank
//                and size: the FULL frame is runtime/nn's unsplit, unpadded parameter;
//   saved pieces  each holds [begin, end) of its saver's local frame and names its layout, so a
//                loader maps any of its local elements to full, then to (saved tp rank, saved
//                local index), and copies runs.
// A data-parallel run's parameters are the special case tp = 1, Replicated(full shape): local
// and full frames coincide and a v1 (data-parallel only) rank file is read as such.
//
// Contract
// - Pure values and functions; thread-safe. PlanCopy returns NotFound naming the parameter and
//   the first full element no saved piece holds, and InvalidArgument when the pieces disagree
//   on the full shape or tp layout, or two of them hold the same element.
// - [Note: piece lookup] A PieceIndex sorts a parameter's pieces once by (saved tp rank,
//   begin); PlanCopy then finds the piece holding each run by binary search, O(runs x log
//   pieces) per request instead of a scan of every piece. A loader builds one PieceIndex per
//   parameter and plans every request against it.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/parallel/tensor/tp_param_layout.h"

namespace zs {

struct ParamPlacement {
  std::string name;          // the model's "<unit name>.<param name>" (nn::Gpt's for a GPT)
  tp::TpParamLayout layout;  // full_shape inside; Replicated for a parameter not split over tp
  int tp_rank = 0, tp_size = 1;
  // Whether this rank writes its owned part: a parameter replicated over tp is saved by tp rank
  // 0 only (its copies are equal), so the ranks write disjoint pieces covering it once.
  bool saved = true;

  // The plain engine's parameter: tp 1, replicated.
  static ParamPlacement Whole(std::string name, std::vector<int64_t> shape);
  bool identity() const { return tp_size == 1 || !layout.tensor_parallel(); }
  int64_t local_numel() const { return layout.local_numel(tp_size); }
};

// The "tp" object of a rank file entry (absent for Whole placements) and back.
nlohmann::json PlacementTpJson(const ParamPlacement& p);
// `tp` may be null (a Whole placement of `shape`). InvalidArgument on unknown kinds.
StatusOr<ParamPlacement> PlacementFromJson(const std::string& name,
                                           const std::vector<int64_t>& shape,
                                           const nlohmann::json& tp);

// Calls fn(offset, full, count) for the runs of local elements [begin, end) of `p`: `offset`
// from begin, `full` the full index of its first element (-1: padding rows).
void ForEachFullRun(const ParamPlacement& p, int64_t begin, int64_t end,
                    const std::function<void(int64_t, int64_t, int64_t)>& fn);

// One saved piece: elements [begin, end) of its saver's local frame.
struct SavedPiece {
  ParamPlacement placement;
  int64_t begin = 0, end = 0;
};

// Copy `count` elements: destination [dst, dst + count) of the requested range (offsets from
// its begin) from piece `piece`'s elements [src, src + count) (offsets from the piece's begin);
// piece -1: padding, zeros.
struct CopyRun {
  int64_t dst = 0;
  int piece = -1;
  int64_t src = 0;
  int64_t count = 0;
};

// One parameter's saved pieces, checked (one full shape, one tp cut, no element held twice)
// and sorted for lookup ([Note: piece lookup]). Piece numbers are positions in `pieces`. An
// exact copy of an earlier piece (same tp rank and range: an ep-replicated router saved on
// every ep rank by older saves) is ignored; any other overlap is InvalidArgument.
class PieceIndex {
 public:
  // InvalidArgument naming the parameter when the pieces disagree on the full shape or tp
  // layout, or overlap; `name` is only for the messages.
  static StatusOr<PieceIndex> Create(const std::string& name, std::vector<SavedPiece> pieces);
  const std::vector<SavedPiece>& pieces() const { return pieces_; }
  // The piece holding local element `local` of saved tp rank `rank`, or -1.
  int Find(int rank, int64_t local) const;

 private:
  std::vector<SavedPiece> pieces_;
  std::vector<int> order_;  // piece numbers by (tp rank, begin)
};

// How to fill local elements [begin, end) of `want` from the indexed pieces. Adjacent runs are
// merged.
StatusOr<std::vector<CopyRun>> PlanCopy(const ParamPlacement& want, int64_t begin, int64_t end,
                                        const PieceIndex& pieces);
// The same from pieces in any order (builds a PieceIndex: for one-off plans and tests).
StatusOr<std::vector<CopyRun>> PlanCopy(const ParamPlacement& want, int64_t begin, int64_t end,
                                        const std::vector<SavedPiece>& pieces);

// True when every run of `plan` copies elements at the same local index from a piece of the
// same local frame (same layout, tp rank and size): the saved bytes (int8 blocks included) are
// then the loader's own.
bool PlanIsIdentity(const ParamPlacement& want, int64_t begin,
                    const std::vector<SavedPiece>& pieces, const std::vector<CopyRun>& plan);

}  // namespace zs

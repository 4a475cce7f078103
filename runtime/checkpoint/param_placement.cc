#include "runtime/checkpoint/param_placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace zs {
namespace {

using Kind = tp::TpParamLayout::Kind;

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kReplicated:
      return "replicated";
    case Kind::kSplitRows:
      return "rows";
    case Kind::kSplitColumns:
      return "columns";
  }
  return "?";
}

// Whether a and b cut the full parameter into the same local frame.
bool SameFrame(const ParamPlacement& a, const ParamPlacement& b) {
  if (a.layout.full_shape != b.layout.full_shape) return false;
  if (a.identity() || b.identity()) return a.identity() && b.identity();
  const int64_t rows = a.layout.full_shape.empty() ? 0 : a.layout.full_shape[0];
  auto padded = [rows](const tp::TpParamLayout& l) {
    return l.padded_rows > 0 ? l.padded_rows : rows;
  };
  return a.layout.kind == b.layout.kind && a.layout.blocks == b.layout.blocks &&
         padded(a.layout) == padded(b.layout) && a.tp_rank == b.tp_rank && a.tp_size == b.tp_size;
}

}  // namespace

ParamPlacement ParamPlacement::Whole(std::string name, std::vector<int64_t> shape) {
  ParamPlacement p;
  p.name = std::move(name);
  p.layout = tp::TpParamLayout::Replicated(std::move(shape));
  return p;
}

nlohmann::json PlacementTpJson(const ParamPlacement& p) {
  if (p.identity()) return nullptr;
  return {{"kind", KindName(p.layout.kind)},
          {"blocks", p.layout.blocks},
          {"padded_rows", p.layout.padded_rows},
          {"rank", p.tp_rank},
          {"size", p.tp_size}};
}

StatusOr<ParamPlacement> PlacementFromJson(const std::string& name,
                                           const std::vector<int64_t>& shape,
                                           const nlohmann::json& tp) {
  if (tp.is_null()) return ParamPlacement::Whole(name, shape);
  ParamPlacement p;
  p.name = name;
  const std::string kind = tp.at("kind").get<std::string>();
  const int blocks = tp.at("blocks").get<int>();
  const int64_t padded = tp.at("padded_rows").get<int64_t>();
  p.tp_rank = tp.at("rank").get<int>();
  p.tp_size = tp.at("size").get<int>();
  if (p.tp_size < 1 || p.tp_rank < 0 || p.tp_rank >= p.tp_size || shape.empty()) {
    return InvalidArgumentError(fmt::format("parameter '{}': tp rank {} of {} (shape {})", name,
                                            p.tp_rank, p.tp_size, nlohmann::json(shape).dump()));
  }
  // The layout's own checks are ZS_CHECKs: a file must not reach them with sizes that do not
  // divide.
  const int64_t rows = padded > 0 ? padded : shape[0];
  if (kind == "rows") {
    if (blocks < 1 || rows < shape[0] || (blocks > 1 && padded > 0 && padded != shape[0]) ||
        rows % blocks != 0 || (rows / blocks) % p.tp_size != 0) {
      return InvalidArgumentError(fmt::format(
          "parameter '{}': a row split of {} rows (padded to {}) in {} blocks over tp {}", name,
          shape[0], rows, blocks, p.tp_size));
    }
    p.layout = tp::TpParamLayout::SplitRows(shape, blocks, padded);
  } else if (kind == "columns") {
    if (shape.size() != 2 || shape[1] % p.tp_size != 0) {
      return InvalidArgumentError(
          fmt::format("parameter '{}': a column split of shape {} over tp {}", name,
                      nlohmann::json(shape).dump(), p.tp_size));
    }
    p.layout = tp::TpParamLayout::SplitColumns(shape);
  } else if (kind == "replicated") {
    p.layout = tp::TpParamLayout::Replicated(shape);
  } else {
    return InvalidArgumentError(fmt::format("parameter '{}': unknown tp kind '{}'", name, kind));
  }
  return p;
}

void ForEachFullRun(const ParamPlacement& p, int64_t begin, int64_t end,
                    const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  for (int64_t x = begin; x < end;) {
    const tp::LocalToFullRun r = p.identity() ? tp::LocalToFullRun{x, p.layout.full_numel() - x}
                                              : tp::LocalToFull(p.layout, p.tp_rank, p.tp_size, x);
    const int64_t n = std::min(r.count, end - x);
    fn(x - begin, r.full, n);
    x += n;
  }
}

namespace {

int SavedRank(const ParamPlacement& p) { return p.identity() ? 0 : p.tp_rank; }

}  // namespace

StatusOr<PieceIndex> PieceIndex::Create(const std::string& name, std::vector<SavedPiece> pieces) {
  PieceIndex out;
  out.pieces_ = std::move(pieces);
  if (out.pieces_.empty()) return out;
  const ParamPlacement& saved = out.pieces_[0].placement;
  for (const SavedPiece& p : out.pieces_) {
    if (p.placement.layout.full_shape != saved.layout.full_shape) {
      return InvalidArgumentError(
          fmt::format("parameter '{}': its saved pieces have shapes {} and {}", name,
                      nlohmann::json(saved.layout.full_shape).dump(),
                      nlohmann::json(p.placement.layout.full_shape).dump()));
    }
    if (p.placement.identity() != saved.identity() ||
        (!saved.identity() &&
         (p.placement.layout.kind != saved.layout.kind || p.placement.tp_size != saved.tp_size ||
          p.placement.layout.blocks != saved.layout.blocks ||
          p.placement.layout.padded_rows != saved.layout.padded_rows))) {
      return InvalidArgumentError(
          fmt::format("parameter '{}': its saved pieces are cut by different tp layouts", name));
    }
  }
  for (size_t i = 0; i < out.pieces_.size(); ++i) {
    if (out.pieces_[i].begin < out.pieces_[i].end) out.order_.push_back(int(i));  // not empty
  }
  auto key = [&](int i) {
    const SavedPiece& p = out.pieces_[size_t(i)];
    return std::tuple(SavedRank(p.placement), p.begin, i);
  };
  std::sort(out.order_.begin(), out.order_.end(), [&](int a, int b) { return key(a) < key(b); });
  // An exact copy of a piece (checkpoints that saved the ep-replicated router on every ep rank)
  // is read from the first; any other overlap is an error.
  std::vector<int> kept;
  for (int i : out.order_) {
    if (!kept.empty()) {
      const SavedPiece& a = out.pieces_[size_t(kept.back())];
      const SavedPiece& b = out.pieces_[size_t(i)];
      if (SavedRank(a.placement) == SavedRank(b.placement) && a.begin == b.begin &&
          a.end == b.end) {
        continue;
      }
    }
    kept.push_back(i);
  }
  out.order_ = std::move(kept);
  for (size_t i = 1; i < out.order_.size(); ++i) {
    const SavedPiece& a = out.pieces_[size_t(out.order_[i - 1])];
    const SavedPiece& b = out.pieces_[size_t(out.order_[i])];
    if (SavedRank(a.placement) == SavedRank(b.placement) && b.begin < a.end) {
      return InvalidArgumentError(fmt::format(
          "parameter '{}': saved pieces [{}, {}) and [{}, {}) of tp rank {} overlap (an element "
          "held twice)",
          name, a.begin, a.end, b.begin, b.end, SavedRank(a.placement)));
    }
  }
  return out;
}

int PieceIndex::Find(int rank, int64_t local) const {
  // The last piece of `rank` beginning at or before `local`.
  auto it = std::upper_bound(order_.begin(), order_.end(), std::pair(rank, local),
                             [&](const std::pair<int, int64_t>& k, int i) {
                               const SavedPiece& p = pieces_[size_t(i)];
                               return k < std::pair(SavedRank(p.placement), p.begin);
                             });
  if (it == order_.begin()) return -1;
  const SavedPiece& p = pieces_[size_t(*(it - 1))];
  return SavedRank(p.placement) == rank && local < p.end ? *(it - 1) : -1;
}

StatusOr<std::vector<CopyRun>> PlanCopy(const ParamPlacement& want, int64_t begin, int64_t end,
                                        const std::vector<SavedPiece>& pieces) {
  ZS_ASSIGN_OR_RETURN(PieceIndex index, PieceIndex::Create(want.name, pieces));
  return PlanCopy(want, begin, end, index);
}

StatusOr<std::vector<CopyRun>> PlanCopy(const ParamPlacement& want, int64_t begin, int64_t end,
                                        const PieceIndex& index) {
  std::vector<CopyRun> plan;
  if (begin >= end) return plan;
  const std::vector<SavedPiece>& pieces = index.pieces();
  if (pieces.empty()) {
    return NotFoundError(fmt::format("parameter '{}' is in no rank file", want.name));
  }
  const ParamPlacement& saved = pieces[0].placement;
  if (saved.layout.full_shape != want.layout.full_shape) {
    return InvalidArgumentError(
        fmt::format("parameter '{}' was saved with shape {}; the model's is {}", want.name,
                    nlohmann::json(saved.layout.full_shape).dump(),
                    nlohmann::json(want.layout.full_shape).dump()));
  }
  const int saved_tp = saved.identity() ? 1 : saved.tp_size;
  auto push = [&](int64_t dst, int piece, int64_t src, int64_t count) {
    if (!plan.empty()) {
      CopyRun& last = plan.back();
      if (last.piece == piece && last.dst + last.count == dst &&
          (piece < 0 || last.src + last.count == src)) {
        last.count += count;
        return;
      }
    }
    plan.push_back({dst, piece, src, count});
  };
  for (int64_t x = begin; x < end;) {
    const tp::LocalToFullRun lf = want.identity()
                                      ? tp::LocalToFullRun{x, want.layout.full_numel() - x}
                                      : tp::LocalToFull(want.layout, want.tp_rank, want.tp_size, x);
    const int64_t n1 = std::min(lf.count, end - x);
    if (lf.full < 0) {
      push(x - begin, -1, 0, n1);
      x += n1;
      continue;
    }
    for (int64_t done = 0; done < n1;) {
      const int64_t f = lf.full + done;
      const tp::FullToLocalRun fl = saved.identity()
                                        ? tp::FullToLocalRun{0, f, saved.layout.full_numel() - f}
                                        : tp::FullToLocal(saved.layout, saved_tp, f);
      const int found = index.Find(fl.rank, fl.local);
      if (found < 0) {
        return NotFoundError(fmt::format(
            "element {} of parameter '{}' (full index; tp rank {} of {}, local {}) is in no rank "
            "file",
            f, want.name, fl.rank, saved_tp, fl.local));
      }
      const SavedPiece& p = pieces[size_t(found)];
      const int64_t n = std::min({n1 - done, fl.count, p.end - fl.local});
      push(x - begin + done, found, fl.local - p.begin, n);
      done += n;
    }
    x += n1;
  }
  return plan;
}

bool PlanIsIdentity(const ParamPlacement& want, int64_t begin,
                    const std::vector<SavedPiece>& pieces, const std::vector<CopyRun>& plan) {
  for (const CopyRun& r : plan) {
    if (r.piece < 0) return false;
    const SavedPiece& p = pieces[size_t(r.piece)];
    if (!SameFrame(want, p.placement) || p.begin + r.src != begin + r.dst) return false;
  }
  return true;
}

}  // namespace zs

#include "runtime/checkpoint/param_placement.h"

#include <fmt/format.h>

#include <algorithm>

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

StatusOr<std::vector<CopyRun>> PlanCopy(const ParamPlacement& want, int64_t begin, int64_t end,
                                        const std::vector<SavedPiece>& pieces) {
  std::vector<CopyRun> plan;
  if (begin >= end) return plan;
  if (pieces.empty()) {
    return NotFoundError(fmt::format("parameter '{}' is in no rank file", want.name));
  }
  const ParamPlacement& saved = pieces[0].placement;
  for (const SavedPiece& p : pieces) {
    if (p.placement.layout.full_shape != want.layout.full_shape) {
      return InvalidArgumentError(
          fmt::format("parameter '{}' was saved with shape {}; the model's is {}", want.name,
                      nlohmann::json(p.placement.layout.full_shape).dump(),
                      nlohmann::json(want.layout.full_shape).dump()));
    }
    if (p.placement.identity() != saved.identity() ||
        (!saved.identity() &&
         (p.placement.layout.kind != saved.layout.kind || p.placement.tp_size != saved.tp_size ||
          p.placement.layout.blocks != saved.layout.blocks ||
          p.placement.layout.padded_rows != saved.layout.padded_rows))) {
      return InvalidArgumentError(fmt::format(
          "parameter '{}': its saved pieces are cut by different tp layouts", want.name));
    }
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
      int found = -1;
      for (size_t i = 0; i < pieces.size() && found < 0; ++i) {
        const SavedPiece& p = pieces[i];
        const int rank = p.placement.identity() ? 0 : p.placement.tp_rank;
        if (rank == fl.rank && p.begin <= fl.local && fl.local < p.end) found = int(i);
      }
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

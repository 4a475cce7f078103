// ParamPlacement's copy plans (runtime/checkpoint/param_placement.h): a parameter saved as the
// pieces of one tp size and cut into dp shards, loaded into any range of any tp rank of
// another tp size, gives exactly tp::SliceFull of the full parameter (padding rows zero).
#include "runtime/checkpoint/param_placement.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace zs {
namespace {

using tp::TpParamLayout;

struct Case {
  const char* what;
  TpParamLayout (*make)(int tp);  // the layout at tp (padding depends on tp)
};

int64_t Pad(int64_t rows, int tp) { return (rows + tp - 1) / tp * tp; }

const Case kCases[] = {
    {"replicated",
     [](int) {
       return TpParamLayout::Replicated({6, 4});
     }},
    {"columns",
     [](int) {
       return TpParamLayout::SplitColumns({3, 8});
     }},
    {"rows qkv",
     [](int) {
       return TpParamLayout::SplitRows({24, 5}, 3);
     }},
    {"rows 1-d", [](int) { return TpParamLayout::SplitRows({16}); }},
    {"vocab padded",
     [](int tp) {
       return TpParamLayout::SplitRows({37, 3}, 1, Pad(37, tp));
     }},
};

ParamPlacement Place(const TpParamLayout& layout, int rank, int tp) {
  ParamPlacement p;
  p.name = "w";
  p.layout = layout;
  p.tp_rank = rank;
  p.tp_size = tp;
  return p;
}

// Rank `rank`'s local values of a full parameter whose element i is i + 1.
std::vector<float> LocalValues(const TpParamLayout& layout, int rank, int tp) {
  std::vector<float> full(size_t(layout.full_numel()));
  std::iota(full.begin(), full.end(), 1.0f);
  std::vector<float> local(size_t(layout.local_numel(tp)));
  tp::SliceFull(layout, rank, tp, full, local);
  return local;
}

TEST(ParamPlacementTest, PlansReproduceSliceFullAtEveryTpSize) {
  std::mt19937 rng(7);
  for (const Case& c : kCases) {
    for (int saved_tp : {1, 2, 4}) {
      for (int load_tp : {1, 2, 4}) {
        SCOPED_TRACE(fmt::format("{}: saved at tp {}, loaded at tp {}", c.what, saved_tp, load_tp));
        // Saved: each tp rank's local range cut into 1-3 dp shards (replicated: rank 0 only).
        const TpParamLayout saved_layout = c.make(saved_tp);
        std::vector<SavedPiece> pieces;
        std::vector<std::vector<float>> data;
        for (int r = 0; r < (saved_layout.tensor_parallel() ? saved_tp : 1); ++r) {
          const std::vector<float> local = LocalValues(saved_layout, r, saved_tp);
          const int64_t n = int64_t(local.size());
          int64_t at = 0;
          const int shards = 1 + int(rng() % 3);
          for (int s = 0; s < shards; ++s) {
            const int64_t end = s + 1 == shards ? n : std::min(n, at + int64_t(rng() % (n + 1)));
            if (end <= at) continue;
            pieces.push_back({Place(saved_layout, r, saved_tp), at, end});
            data.emplace_back(local.begin() + at, local.begin() + end);
            at = end;
          }
        }
        std::shuffle(pieces.begin(), pieces.end(), rng);  // order must not matter...
        // ... so rebuild data in the shuffled order.
        data.clear();
        for (const SavedPiece& p : pieces) {
          const std::vector<float> local = LocalValues(saved_layout, p.placement.tp_rank, saved_tp);
          data.emplace_back(local.begin() + p.begin, local.begin() + p.end);
        }
        const TpParamLayout load_layout = c.make(load_tp);
        for (int r = 0; r < load_tp; ++r) {
          const ParamPlacement want = Place(load_layout, r, load_tp);
          const std::vector<float> expect = LocalValues(load_layout, r, load_tp);
          const int64_t n = int64_t(expect.size());
          for (int trial = 0; trial < 4; ++trial) {
            int64_t b = trial == 0 ? 0 : int64_t(rng() % n);
            int64_t e = trial == 0 ? n : b + 1 + int64_t(rng() % (n - b));
            auto plan = PlanCopy(want, b, e, pieces);
            ASSERT_TRUE(plan.ok()) << plan.status().ToString();
            std::vector<float> got(size_t(e - b), -1.0f);
            int64_t covered = 0;
            for (const CopyRun& run : *plan) {
              covered += run.count;
              for (int64_t k = 0; k < run.count; ++k) {
                got[size_t(run.dst + k)] =
                    run.piece < 0 ? 0.0f : data[size_t(run.piece)][size_t(run.src + k)];
              }
            }
            EXPECT_EQ(covered, e - b);
            for (int64_t k = b; k < e; ++k) {
              ASSERT_EQ(got[size_t(k - b)], expect[size_t(k)]) << "rank " << r << " element " << k;
            }
            const bool same = saved_tp == load_tp || !load_layout.tensor_parallel();
            // Same frame (or replicated): the plan reads every element at its own index.
            if (same && std::none_of(plan->begin(), plan->end(),
                                     [](const CopyRun& x) { return x.piece < 0; })) {
              EXPECT_TRUE(PlanIsIdentity(want, b, pieces, *plan));
            }
            if (!same && load_layout.tensor_parallel() && b == 0 && e == n) {
              EXPECT_FALSE(PlanIsIdentity(want, b, pieces, *plan));
            }
          }
        }
      }
    }
  }
}

TEST(ParamPlacementTest, AMissingPieceIsNotFoundNamingTheElement) {
  const TpParamLayout layout = TpParamLayout::SplitColumns({2, 4});
  std::vector<SavedPiece> pieces = {{Place(layout, 0, 2), 0, 4}};  // tp rank 1's half missing
  auto plan = PlanCopy(Place(TpParamLayout::SplitColumns({2, 4}), 0, 1), 0, 8, pieces);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
  EXPECT_NE(plan.status().message().find("element 2 of parameter 'w'"), std::string::npos)
      << plan.status().ToString();
}

TEST(ParamPlacementTest, AnotherShapeIsInvalidArgument) {
  std::vector<SavedPiece> pieces = {{ParamPlacement::Whole("w", {4, 4}), 0, 16}};
  auto plan = PlanCopy(ParamPlacement::Whole("w", {2, 8}), 0, 16, pieces);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
}

TEST(ParamPlacementTest, TpJsonRoundTripsAndRejectsBadSizes) {
  const ParamPlacement p = Place(TpParamLayout::SplitRows({37, 3}, 1, 38), 1, 2);
  const nlohmann::json j = PlacementTpJson(p);
  auto back = PlacementFromJson("w", {37, 3}, j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tp_rank, 1);
  EXPECT_EQ(back->tp_size, 2);
  EXPECT_EQ(back->layout.padded_rows, 38);
  EXPECT_TRUE(PlacementTpJson(ParamPlacement::Whole("w", {3})).is_null());
  nlohmann::json bad = j;
  bad["size"] = 4;  // 38 rows do not split over 4
  EXPECT_FALSE(PlacementFromJson("w", {37, 3}, bad).ok());
  bad = j;
  bad["kind"] = "diagonal";
  EXPECT_FALSE(PlacementFromJson("w", {37, 3}, bad).ok());
}

// [Note: piece lookup]: PieceIndex::Find against a scan of every piece (the simple reference),
// for every element of every tp rank, over many pieces of uneven sizes in shuffled order
// (including empty ones), and PlanCopy over them reproduces SliceFull.
TEST(ParamPlacementTest, PieceLookupAgreesWithAScan) {
  std::mt19937 rng(11);
  const TpParamLayout layout = TpParamLayout::SplitRows({64, 9}, 1);
  const int tp = 4;
  std::vector<SavedPiece> pieces;
  for (int r = 0; r < tp; ++r) {
    const int64_t n = layout.local_numel(tp);
    for (int64_t at = 0; at < n;) {
      const int64_t end = std::min(n, at + int64_t(rng() % 7));  // 0..6 elements
      pieces.push_back({Place(layout, r, tp), at, end});
      at = end;
    }
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  auto index = PieceIndex::Create("w", pieces);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  for (int r = 0; r < tp; ++r) {
    for (int64_t x = 0; x < layout.local_numel(tp) + 2; ++x) {
      int scan = -1;
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (pieces[i].placement.tp_rank == r && pieces[i].begin <= x && x < pieces[i].end) {
          scan = int(i);
        }
      }
      ASSERT_EQ(index->Find(r, x), scan) << "rank " << r << " element " << x;
    }
  }
  const ParamPlacement want = Place(layout, 1, 2);
  auto plan = PlanCopy(want, 0, want.local_numel(), *index);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::vector<float> got(size_t(want.local_numel()));
  for (const CopyRun& run : *plan) {
    const SavedPiece& p = pieces[size_t(run.piece)];
    const std::vector<float> local = LocalValues(layout, p.placement.tp_rank, tp);
    for (int64_t k = 0; k < run.count; ++k) {
      got[size_t(run.dst + k)] = local[size_t(p.begin + run.src + k)];
    }
  }
  EXPECT_EQ(got, LocalValues(layout, 1, 2));
}

// Two pieces holding the same element are a corrupt checkpoint: InvalidArgument naming the
// parameter and both ranges.
TEST(ParamPlacementTest, OverlappingPiecesAreInvalidArgument) {
  const TpParamLayout layout = TpParamLayout::SplitColumns({2, 4});
  std::vector<SavedPiece> pieces = {
      {Place(layout, 0, 2), 0, 3}, {Place(layout, 1, 2), 0, 4}, {Place(layout, 0, 2), 2, 4}};
  auto index = PieceIndex::Create("w", pieces);
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(index.status().message().find("'w': saved pieces [0, 3) and [2, 4) of tp rank 0"),
            std::string::npos)
      << index.status().ToString();
  EXPECT_FALSE(PlanCopy(Place(layout, 0, 1), 0, 8, pieces).ok());
  // An exact copy (an ep-replicated router saved on every ep rank) is read from the first.
  pieces = {{Place(layout, 0, 2), 0, 4}, {Place(layout, 1, 2), 0, 4}, {Place(layout, 0, 2), 0, 4}};
  index = PieceIndex::Create("w", pieces);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->Find(0, 3), 0);
  EXPECT_EQ(index->Find(1, 0), 1);
}

}  // namespace
}  // namespace zs

// TpParamLayout: the pure mapping between a tp rank's local parameter and the full one.
#include "runtime/parallel/tensor/tp_param_layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace zs::tp {
namespace {

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

std::vector<float> Slice(const TpParamLayout& l, int rank, int tp) {
  const std::vector<float> full = Iota(l.full_numel());
  std::vector<float> local(l.local_numel(tp), -1.0f);
  SliceFull(l, rank, tp, full, local);
  return local;
}

TEST(TpParamLayoutTest, QkvRowsAreThisRanksHeadsOfQThenKThenV) {
  // [3 * 4, 2]: q rows 0-3, k rows 4-7, v rows 8-11; tp 2 -> rank 1 holds rows 2,3 | 6,7 | 10,11.
  const TpParamLayout l = TpParamLayout::SplitRows({12, 2}, 3);
  EXPECT_EQ(l.LocalShape(2), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(Slice(l, 1, 2), (std::vector<float>{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23}));
  // The qkv bias: 1-D, the same rows.
  EXPECT_EQ(Slice(TpParamLayout::SplitRows({12}, 3), 1, 2),
            (std::vector<float>{2, 3, 6, 7, 10, 11}));
}

TEST(TpParamLayoutTest, PaddedVocabularyRowsAreZeroAndDropped) {
  const TpParamLayout l = TpParamLayout::SplitRows({5, 2}, 1, 8);  // vocab 5 padded to 8, tp 4
  EXPECT_EQ(l.LocalShape(4), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Slice(l, 0, 4), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(Slice(l, 2, 4), (std::vector<float>{8, 9, 0, 0}));
  EXPECT_EQ(Slice(l, 3, 4), (std::vector<float>{0, 0, 0, 0}));
  std::vector<float> full(10, -1.0f);
  PlaceLocal(l, 3, 4, std::vector<float>{7, 7, 7, 7}, full);
  EXPECT_EQ(full, std::vector<float>(10, -1.0f));  // padding only: nothing placed
}

TEST(TpParamLayoutTest, ColumnsAndReplicated) {
  const TpParamLayout cols = TpParamLayout::SplitColumns({2, 6});
  EXPECT_EQ(cols.LocalShape(3), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Slice(cols, 1, 3), (std::vector<float>{2, 3, 8, 9}));
  EXPECT_TRUE(cols.tensor_parallel());
  const TpParamLayout repl = TpParamLayout::Replicated({3});
  EXPECT_FALSE(repl.tensor_parallel());
  EXPECT_EQ(Slice(repl, 2, 3), (std::vector<float>{0, 1, 2}));
}

TEST(TpParamLayoutTest, PlacingEveryRanksSliceRebuildsTheFullParameter) {
  for (const TpParamLayout& l :
       {TpParamLayout::SplitRows({12, 3}, 3), TpParamLayout::SplitRows({7, 3}, 1, 8),
        TpParamLayout::SplitRows({8}), TpParamLayout::SplitColumns({3, 8}),
        TpParamLayout::Replicated({2, 5})}) {
    for (int tp : {1, 2, 4}) {
      const std::vector<float> full = Iota(l.full_numel());
      std::vector<float> rebuilt(full.size(), -1.0f);
      for (int r = 0; r < tp; ++r) PlaceLocal(l, r, tp, Slice(l, r, tp), rebuilt);
      EXPECT_EQ(rebuilt, full) << "tp " << tp << " kind " << int(l.kind);
    }
  }
}

TEST(TpParamLayoutTest, MakeTpParamKeepsNameAndMetadataWithTheLocalShape) {
  const nn::ModuleParam full{ParamSpec{"attn.qkv.weight", {12, 4}, true, "g"},
                             nn::InitKind::kNormal};
  const TpModuleParam p = MakeTpParam(full, TpParamLayout::SplitRows({12, 4}, 3), 2);
  EXPECT_EQ(p.spec.name, "attn.qkv.weight");
  EXPECT_EQ(p.spec.shape, (std::vector<int64_t>{6, 4}));
  EXPECT_TRUE(p.spec.weight_decay);
  EXPECT_EQ(p.spec.group, "g");
  EXPECT_TRUE(p.spec.tensor_parallel);
  EXPECT_EQ(p.init, nn::InitKind::kNormal);
}

}  // namespace
}  // namespace zs::tp

// GradientReducer against a host reference: every element reduced over ranks in rank order,
// for all-reduce and reduce-scatter, fp32 and bf16, with accumulation, many small buckets and
// fewer buffers than buckets.
#include "runtime/reduce/gradient_reducer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"

namespace zs {
namespace {

float Value(int rank, int unit, int64_t i, int pass) {
  return float((rank * 7 + unit * 13 + i * 3 + pass * 5) % 23) / 8.0f - 1.3f;
}

void RunCase(int world, DType dtype, GradReduction reduction, bool overlap) {
  const std::vector<std::vector<int64_t>> units = {{37, 5}, {101}, {3, 64, 9}};
  CommOptions options;
  Status status = RunLocalRanks(
      world, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        std::vector<ShardLayout> layouts;
        for (const auto& sizes : units) {
          ZS_ASSIGN_OR_RETURN(ShardLayout l, ShardLayout::Create(sizes, world, 4));
          layouts.push_back(l);
        }
        ReducerOptions ro;
        ro.dtype = dtype;
        ro.reduction = reduction;
        ro.bucket_elements = 8 * world;  // several buckets per unit
        ro.max_inflight = 2;
        ro.overlap = overlap;
        ZS_ASSIGN_OR_RETURN(auto reducer, GradientReducer::Create(layouts, ro, *device, comm));
        const size_t elem = DTypeSize(dtype);
        std::vector<std::vector<char>> dest(units.size());
        for (int pass = 0; pass < 2; ++pass) {  // the second pass accumulates
          for (int u = int(units.size()) - 1; u >= 0; --u) {
            const ShardLayout& l = layouts[u];
            std::vector<float> grad(size_t(l.padded_size()), 0.0f);
            for (int p = 0; p < l.num_params(); ++p) {
              const UnitRange r = l.ParamRangeInUnit(p);
              for (int64_t i = r.begin.value(); i < r.end.value(); ++i)
                grad[i] = Value(rank, u, i, pass);
            }
            const int64_t n =
                reduction == GradReduction::kAllReduce ? l.padded_size() : l.shard_size();
            if (pass == 0) dest[u].assign(size_t(n) * elem, 0);
            ZS_RETURN_IF_ERROR(reducer->ReduceUnit(u, grad.data(), dest[u].data(), pass > 0));
            std::fill(grad.begin(), grad.end(), 1e9f);  // the reducer must not read it later
          }
        }
        ZS_RETURN_IF_ERROR(reducer->Finish());
        for (size_t u = 0; u < units.size(); ++u) {
          const ShardLayout& l = layouts[u];
          const int64_t begin =
              reduction == GradReduction::kAllReduce ? 0 : l.ShardRangeInUnit(rank).begin.value();
          const int64_t n =
              reduction == GradReduction::kAllReduce ? l.padded_size() : l.shard_size();
          for (int64_t k = 0; k < n; ++k) {
            const int64_t i = begin + k;
            bool in_param = false;
            for (int p = 0; p < l.num_params(); ++p)
              in_param |= l.ParamRangeInUnit(p).Contains(UnitOffset(i));
            // Reference: each pass summed over ranks in order (f32), rounded to dtype; then added.
            float passes[2];
            for (int pass = 0; pass < 2; ++pass) {
              float s = 0;
              for (int r = 0; r < world; ++r) {
                std::vector<char> tmp(elem);
                StoreFromFloat(tmp.data(), dtype, 0, in_param ? Value(r, int(u), i, pass) : 0.0f);
                s += LoadAsFloat(tmp.data(), dtype, 0);
              }
              std::vector<char> tmp(elem);
              StoreFromFloat(tmp.data(), dtype, 0, s);
              passes[pass] = LoadAsFloat(tmp.data(), dtype, 0);
            }
            std::vector<char> expected(elem);
            StoreFromFloat(expected.data(), dtype, 0, passes[0] + passes[1]);
            if (std::memcmp(expected.data(), dest[u].data() + k * elem, elem) != 0) {
              return InternalError(fmt::format("unit {} element {}: got {} expected {}", u, i,
                                               LoadAsFloat(dest[u].data(), dtype, size_t(k)),
                                               LoadAsFloat(expected.data(), dtype, 0)));
            }
          }
        }
        if (reducer->stats().buffer_waits == 0) return InternalError("expected buffer waits");
        return OkStatus();
      });
  EXPECT_TRUE(status.ok()) << "world " << world << " " << DTypeName(dtype) << ": "
                           << status.ToString();
}

TEST(GradientReducer, MatchesRankOrderReference) {
  for (int world : {1, 2, 3, 4}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      RunCase(world, dtype, GradReduction::kAllReduce, true);
      RunCase(world, dtype, GradReduction::kReduceScatter, true);
      RunCase(world, dtype, GradReduction::kReduceScatter, false);
    }
  }
}

}  // namespace
}  // namespace zs

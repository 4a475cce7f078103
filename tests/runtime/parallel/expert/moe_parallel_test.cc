// Expert parallelism: n = 2 and 4 ranks (threads over the local backend), each holding E / n
// experts and its own tokens (different counts per rank), against one rank holding every
// expert that runs each rank's tokens as its own micro-batch (capacity is per source rank per
// micro-batch, moe_config.h). Outputs, aux losses, input gradients, expert gradients and the
// summed router gradient agree; with drops, the same (token, choice)s are dropped; two runs
// give the same bits. E not divisible by n is an error naming both.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/comm/local_ranks.h"
#include "runtime/parallel/expert/moe_mlp.h"
#include "tests/runtime/parallel/expert/moe_test_support.h"

namespace zs {
namespace {

using testing::MakeModel;
using testing::MoeModel;
using testing::Random;

// Everything one rank (or one micro-batch of the single-rank reference) produced.
struct RankResult {
  std::vector<float> y, dx;
  float aux = 0;
  std::vector<int32_t> slot;
  int64_t dropped = 0;
  int64_t expert_rows = 0;  // rows this rank's experts computed
  std::vector<float> router_grad;
  std::vector<std::vector<float>> expert_grads;  // [local expert] its four gradients, concatenated
};

MoeConfig Config(int k, double capacity_factor) {
  MoeConfig c;
  c.hidden = 8;
  c.ffn = 12;
  c.num_experts = 8;
  c.top_k = k;
  c.capacity_factor = capacity_factor;
  c.aux_loss_coef = 0.1f;
  return c;
}

int64_t Tokens(int rank) { return 12 + 3 * rank; }  // uneven on purpose
std::vector<float> Input(const MoeConfig& c, int rank) {
  return Random(Tokens(rank) * c.hidden, 100 + rank);
}
std::vector<float> OutputGrad(const MoeConfig& c, int rank) {
  return Random(Tokens(rank) * c.hidden, 200 + rank);
}

// One micro-batch through `m`: forward and backward of rank `rank`'s tokens; gradients
// accumulate in m.access.
Status Step(MoeModel& m, const MoeConfig& c, int rank, RankResult& out) {
  const int64_t T = Tokens(rank);
  const std::vector<float> x = Input(c, rank), dy = OutputGrad(c, rank);
  out.y.assign(x.size(), 0.0f);
  out.dx.assign(x.size(), 0.0f);
  MoeActivations act;
  ZS_RETURN_IF_ERROR(m.access->BeginForward(0));
  ZS_RETURN_IF_ERROR(m.layer->Forward(*m.access, x.data(), T, out.y.data(), act));
  ZS_RETURN_IF_ERROR(m.access->EndForward(0));
  ZS_RETURN_IF_ERROR(m.access->BeginBackward(0));
  ZS_RETURN_IF_ERROR(m.layer->Backward(*m.access, x.data(), dy.data(), out.dx.data(), act));
  ZS_RETURN_IF_ERROR(m.access->EndBackward(0));
  out.aux = act.aux_loss();
  out.slot = act.plan().slot;
  out.dropped = act.plan().dropped();
  return OkStatus();
}

void CollectGrads(MoeModel& m, RankResult& out) {
  std::span<const float> r = m.access->GradData(0, 0);
  out.router_grad.assign(r.begin(), r.end());
  out.expert_grads.clear();
  for (int le = 0; le < m.layer->local_experts(); ++le) {
    std::vector<float> g;
    for (int p = 1; p <= 4; ++p) {
      std::span<const float> s = m.access->GradData(0, 1 + 4 * le + (p - 1));
      g.insert(g.end(), s.begin(), s.end());
    }
    out.expert_grads.push_back(std::move(g));
  }
}

// The reference: one rank, all experts, each of the n ranks' token sets as a micro-batch.
std::vector<RankResult> RunReference(const MoeConfig& c, int n) {
  MoeModel m = MakeModel(c, nullptr, 42);
  std::vector<RankResult> out(n);
  for (int r = 0; r < n; ++r) {
    const Status s = Step(m, c, r, out[r]);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  CollectGrads(m, out[0]);  // grads summed over the micro-batches, on entry 0
  return out;
}

std::vector<RankResult> RunExpertParallel(const MoeConfig& c, int n) {
  std::vector<RankResult> out(n);
  CommOptions options;
  options.group_name = "ep";
  options.timeout = std::chrono::milliseconds(30'000);
  const Status status = RunLocalRanks(n, options, [&](int rank, Communicator& ep, MemoryTracker&) {
    MoeModel m = MakeModel(c, &ep, 42);
    ZS_RETURN_IF_ERROR(Step(m, c, rank, out[rank]));
    CollectGrads(m, out[rank]);
    return OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float v : want) scale = std::max(scale, double(std::abs(v)));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rtol * (scale + 1e-3)) << what << "[" << i << "]";
  }
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void CompareWithReference(const MoeConfig& c, int n, bool expect_drops) {
  const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(c.top_k) +
                           " cf=" + std::to_string(c.capacity_factor);
  const std::vector<RankResult> ref = RunReference(c, n);
  const std::vector<RankResult> ep = RunExpertParallel(c, n);
  ASSERT_EQ(int(ep.size()), n);
  int64_t dropped = 0;
  std::vector<double> router_sum(ref[0].router_grad.size(), 0.0);
  const int L = c.num_experts / n;
  for (int r = 0; r < n; ++r) {
    const std::string at = what + " rank " + std::to_string(r);
    EXPECT_EQ(ep[r].slot, ref[r].slot) << at << ": not the same drops and rows";
    EXPECT_EQ(ep[r].aux, ref[r].aux) << at;
    ExpectNear(ep[r].y, ref[r].y, 1e-6, at + " y");
    ExpectNear(ep[r].dx, ref[r].dx, 1e-5, at + " dx");
    ASSERT_EQ(int(ep[r].expert_grads.size()), L) << at;
    for (int le = 0; le < L; ++le) {
      ExpectNear(ep[r].expert_grads[le], ref[0].expert_grads[r * L + le], 1e-5,
                 at + " expert " + std::to_string(r * L + le) + " grads");
    }
    for (size_t i = 0; i < router_sum.size(); ++i) router_sum[i] += ep[r].router_grad[i];
    dropped += ep[r].dropped;
  }
  std::vector<float> router(router_sum.begin(), router_sum.end());
  ExpectNear(router, ref[0].router_grad, 1e-5, what + " router grad summed over ranks");
  EXPECT_EQ(dropped > 0, expect_drops) << what << ": " << dropped << " dropped";

  // Deterministic: a second run gives the same bits.
  const std::vector<RankResult> again = RunExpertParallel(c, n);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(SameBits(again[r].y, ep[r].y)) << what << " rank " << r;
    EXPECT_TRUE(SameBits(again[r].dx, ep[r].dx)) << what << " rank " << r;
    EXPECT_TRUE(SameBits(again[r].router_grad, ep[r].router_grad)) << what << " rank " << r;
    for (int le = 0; le < L; ++le) {
      EXPECT_TRUE(SameBits(again[r].expert_grads[le], ep[r].expert_grads[le])) << what;
    }
    EXPECT_EQ(again[r].slot, ep[r].slot);
  }
}

TEST(MoeParallelTest, NothingDroppedMatchesOneRank) {
  for (int n : {2, 4}) {
    for (int k : {1, 2}) CompareWithReference(Config(k, /*capacity_factor=*/8.0), n, false);
  }
}

TEST(MoeParallelTest, DropsMatchOneRankAndRepeat) {
  for (int n : {2, 4}) {
    for (int k : {1, 2}) CompareWithReference(Config(k, /*capacity_factor=*/0.75), n, true);
  }
}

TEST(MoeParallelTest, RankWithoutTokensTakesPart) {
  // Rank 1 has no tokens this micro-batch; it still serves its experts for rank 0.
  const MoeConfig c = Config(2, 8.0);
  std::vector<RankResult> out(2);
  const Status status =
      RunLocalRanks(2, CommOptions{}, [&](int rank, Communicator& ep, MemoryTracker&) -> Status {
        MoeModel m = MakeModel(c, &ep, 42);
        const int64_t T = rank == 0 ? 10 : 0;
        const std::vector<float> x = Random(T * c.hidden, 5), dy = Random(T * c.hidden, 6);
        std::vector<float> y(x.size()), dx(x.size());
        MoeActivations act;
        ZS_RETURN_IF_ERROR(m.access->BeginForward(0));
        ZS_RETURN_IF_ERROR(m.layer->Forward(*m.access, x.data(), T, y.data(), act));
        ZS_RETURN_IF_ERROR(m.access->EndForward(0));
        ZS_RETURN_IF_ERROR(m.access->BeginBackward(0));
        ZS_RETURN_IF_ERROR(m.layer->Backward(*m.access, x.data(), dy.data(), dx.data(), act));
        ZS_RETURN_IF_ERROR(m.access->EndBackward(0));
        out[rank].y = y;
        out[rank].aux = act.aux_loss();
        out[rank].expert_rows = act.expert_rows();
        return OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(out[1].aux, 0.0f);
  EXPECT_GT(out[1].expert_rows, 0) << "rank 1's experts computed no rows";
  double norm = 0;
  for (float v : out[0].y) norm += std::abs(v);
  EXPECT_GT(norm, 0.0);
}

TEST(MoeParallelTest, ExpertsNotDivisibleByRanks) {
  std::vector<Status> errors(3);
  const Status status =
      RunLocalRanks(3, CommOptions{}, [&](int rank, Communicator& ep, MemoryTracker&) -> Status {
        errors[rank] = MoeMlp::Create(0, 0, Config(2, 1.0), &ep).status();
        return OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status.ToString();
  for (const Status& s : errors) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("E=8 is not divisible by the expert-parallel size n=3"),
              std::string::npos)
        << s.ToString();
  }
}

}  // namespace
}  // namespace zs

#include "runtime/parallel/expert/moe_mlp.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/base/check.h"
#include "runtime/nn/gelu.h"

namespace zs {

int64_t MoeActivations::bytes() const {
  const auto f = [](const auto& v) { return int64_t(v.capacity() * sizeof(v[0])); };
  return f(probs_) + f(expert_of_) + f(gates_) + f(first_fraction_) + f(plan_.routed) +
         f(plan_.kept) + f(plan_.offsets) + f(plan_.assignment) + f(plan_.slot) + f(expert_in_) +
         f(pre_) + f(act_) + f(combined_);
}

int64_t MoeActivations::BytesAfterForward(const MoeConfig& c, int64_t tokens, MoeRows rows) {
  const int64_t T = tokens, E = c.num_experts, k = c.top_k, H = c.hidden, F = c.ffn;
  const int64_t f = int64_t(sizeof(float)), i = int64_t(sizeof(int32_t));
  int64_t bytes = f * (T * E + T * k + E);  // probs_, gates_, first_fraction_
  bytes += i * T * k;                       // expert_of_
  // plan_ (PlanDispatch): routed, kept [E], offsets [E + 1], slot [T * k], and assignment,
  // filled at T * k and resized down to the kept rows (its capacity stays).
  bytes += i * (3 * E + 1 + 2 * T * k);
  bytes += f * rows.received * (H + 2 * F);  // expert_in_, pre_, act_
  bytes += f * rows.dispatched * H;           // combined_
  return bytes;
}

StatusOr<MoeMlp> MoeMlp::Create(int unit, int first_param, const MoeConfig& config,
                                Communicator* ep) {
  ZS_RETURN_IF_ERROR(ValidateMoeConfig(config, ep == nullptr ? 1 : ep->size()));
  return MoeMlp(unit, first_param, config, ep);
}

MoeMlp::MoeMlp(int unit, int first_param, const MoeConfig& config, Communicator* ep)
    : config_(config),
      exchange_(ep, config.num_experts),
      router_(unit, first_param, config.hidden, config.num_experts, /*bias=*/false) {
  const int L = exchange_.local_experts();
  for (int le = 0; le < L; ++le) {
    const int p = first_param + 1 + 4 * le;
    fc_.emplace_back(unit, p, config.hidden, config.ffn);
    proj_.emplace_back(unit, p + 2, config.ffn, config.hidden, /*bias=*/true,
                       nn::InitKind::kNormalResidual);
  }
}

std::vector<nn::ModuleParam> MoeMlp::params(std::string_view prefix) const {
  const std::string p(prefix);
  std::vector<nn::ModuleParam> out = router_.params(p + "router.");
  for (int le = 0; le < local_experts(); ++le) {
    const std::string expert = p + "experts." + std::to_string(first_expert() + le) + ".";
    for (nn::ModuleParam& m : fc_[le].params(expert + "fc.")) out.push_back(std::move(m));
    for (nn::ModuleParam& m : proj_[le].params(expert + "proj.")) out.push_back(std::move(m));
  }
  return out;
}

void MoeMlp::Route(MoeActivations& a) const {
  const int64_t T = a.tokens_;
  const int E = config_.num_experts;
  const int k = config_.top_k;
  a.expert_of_.resize(size_t(T * k));
  a.gates_.resize(size_t(T * k));
  std::vector<double> first_count(E, 0.0), prob_sum(E, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    float* p = a.probs_.data() + t * E;
    const float max = *std::max_element(p, p + E);
    double sum = 0.0;
    for (int e = 0; e < E; ++e) {
      p[e] = std::exp(p[e] - max);
      sum += p[e];
    }
    const float inv = float(1.0 / sum);
    for (int e = 0; e < E; ++e) p[e] *= inv;
    // Top-k by strict comparison: on ties the lower expert index wins.
    int first = 0;
    for (int e = 1; e < E; ++e)
      if (p[e] > p[first]) first = e;
    a.expert_of_[t * k] = first;
    if (k == 1) {
      a.gates_[t] = p[first];
    } else {
      int second = first == 0 ? 1 : 0;
      for (int e = 0; e < E; ++e)
        if (e != first && p[e] > p[second]) second = e;
      a.expert_of_[t * k + 1] = second;
      const float s = p[first] + p[second];
      a.gates_[t * k] = p[first] / s;
      a.gates_[t * k + 1] = p[second] / s;
    }
    first_count[first] += 1.0;
    for (int e = 0; e < E; ++e) prob_sum[e] += p[e];
  }
  a.first_fraction_.assign(E, 0.0f);
  double aux = 0.0;
  if (T > 0) {
    for (int e = 0; e < E; ++e) {
      a.first_fraction_[e] = float(first_count[e] / double(T));
      aux += (first_count[e] / double(T)) * (prob_sum[e] / double(T));
    }
  }
  a.aux_loss_ = float(double(config_.aux_loss_coef) * E * aux);
}

Status MoeMlp::Forward(UnitAccess& access, const float* x, int64_t tokens, float* y,
                       MoeActivations& a) const {
  ZS_CHECK(tokens >= 0, "tokens={}", tokens);
  const int64_t H = config_.hidden;
  const int64_t F = config_.ffn;
  const int E = config_.num_experts;
  const int k = config_.top_k;
  a.forward_done_ = false;
  a.tokens_ = tokens;

  // Router and routing (this rank's tokens only).
  a.probs_.resize(size_t(tokens * E));
  if (tokens > 0) router_.Forward(access, x, tokens, a.probs_.data());
  Route(a);
  ZS_ASSIGN_OR_RETURN(a.plan_, PlanDispatch(a.expert_of_, k, E, ExpertCapacity(config_, tokens)));

  // Dispatch: gather each kept (token, choice)'s row in plan order, send rows to their experts.
  const DispatchPlan& plan = a.plan_;
  const int64_t rows = plan.rows();
  std::vector<float> gathered(size_t(rows * H));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + int64_t(plan.assignment[r] / k) * H;
    std::copy(src, src + H, gathered.data() + r * H);
  }
  ZS_ASSIGN_OR_RETURN(a.layout_, exchange_.Exchange(plan));
  const ExpertExchange::Layout& layout = a.layout_;
  const int64_t R = layout.rows;
  a.expert_in_.resize(size_t(R * H));
  ZS_RETURN_IF_ERROR(exchange_.ToExperts(layout, gathered.data(), H, a.expert_in_.data()));

  // This rank's experts, each on its contiguous rows.
  a.pre_.resize(size_t(R * F));
  a.act_.resize(size_t(R * F));
  std::vector<float> out(size_t(R * H));
  for (int le = 0; le < local_experts(); ++le) {
    const int64_t begin = layout.expert_begin[le];
    const int64_t n = layout.expert_begin[le + 1] - begin;
    if (n == 0) continue;
    fc_[le].Forward(access, a.expert_in_.data() + begin * H, n, a.pre_.data() + begin * F);
    nn::GeluForward(a.pre_.data() + begin * F, n * F, a.act_.data() + begin * F);
    proj_[le].Forward(access, a.act_.data() + begin * F, n, out.data() + begin * H);
  }

  // Combine: outputs back to their tokens' ranks, weighted by the gates, choices in order.
  a.combined_.resize(size_t(rows * H));
  ZS_RETURN_IF_ERROR(exchange_.FromExperts(layout, out.data(), H, a.combined_.data()));
  std::fill(y, y + tokens * H, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    float* yt = y + t * H;
    for (int j = 0; j < k; ++j) {
      const int32_t row = plan.slot[t * k + j];
      if (row < 0) continue;
      const float g = a.gates_[t * k + j];
      const float* o = a.combined_.data() + int64_t(row) * H;
      for (int64_t h = 0; h < H; ++h) yt[h] += g * o[h];
    }
  }
  a.forward_done_ = true;
  return OkStatus();
}

Status MoeMlp::Backward(UnitAccess& access, const float* x, const float* dy, float* dx,
                        MoeActivations& a) const {
  ZS_CHECK(a.forward_done_, "MoeMlp::Backward without a Forward into these activations");
  const int64_t T = a.tokens_;
  const int64_t H = config_.hidden;
  const int64_t F = config_.ffn;
  const int E = config_.num_experts;
  const int k = config_.top_k;
  const DispatchPlan& plan = a.plan_;
  const ExpertExchange::Layout& layout = a.layout_;
  const int64_t rows = plan.rows();
  const int64_t R = layout.rows;

  // Through the combine: d(expert output row) = gate * dy[t]; d gate = dy[t] . output row.
  std::vector<float> d_rows(size_t(rows * H));
  std::vector<float> d_gates(size_t(T * k), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    const float* dyt = dy + t * H;
    for (int j = 0; j < k; ++j) {
      const int32_t row = plan.slot[t * k + j];
      if (row < 0) continue;
      const float g = a.gates_[t * k + j];
      const float* o = a.combined_.data() + int64_t(row) * H;
      float* d = d_rows.data() + int64_t(row) * H;
      double dot = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        d[h] = g * dyt[h];
        dot += double(dyt[h]) * o[h];
      }
      d_gates[t * k + j] = float(dot);
    }
  }

  // The experts' backward, on the rows they computed.
  std::vector<float> d_out(size_t(R * H)), d_act(size_t(R * F)), d_in(size_t(R * H));
  ZS_RETURN_IF_ERROR(exchange_.ToExperts(layout, d_rows.data(), H, d_out.data()));
  for (int le = 0; le < local_experts(); ++le) {
    const int64_t begin = layout.expert_begin[le];
    const int64_t n = layout.expert_begin[le + 1] - begin;
    if (n == 0) continue;
    float* da = d_act.data() + begin * F;
    proj_[le].Backward(access, a.act_.data() + begin * F, d_out.data() + begin * H, n, da);
    nn::GeluBackward(a.pre_.data() + begin * F, da, n * F, da);
    fc_[le].Backward(access, a.expert_in_.data() + begin * H, da, n, d_in.data() + begin * H);
  }
  std::vector<float> dx_rows(size_t(rows * H));
  ZS_RETURN_IF_ERROR(exchange_.FromExperts(layout, d_in.data(), H, dx_rows.data()));

  // Router: d probs from the gates and from the aux loss, then through the softmax.
  std::vector<float> d_logits(size_t(T * E), 0.0f);
  const float aux_seed =
      T > 0 ? access.backward_scale() * config_.aux_loss_coef * float(E) / float(T) : 0.0f;
  for (int64_t t = 0; t < T; ++t) {
    const float* p = a.probs_.data() + t * E;
    float* dp = d_logits.data() + t * E;
    for (int e = 0; e < E; ++e) dp[e] = aux_seed * a.first_fraction_[e];
    const int32_t* chosen = a.expert_of_.data() + t * k;
    const float* g = a.gates_.data() + t * k;
    const float* dg = d_gates.data() + t * k;
    if (k == 1) {
      dp[chosen[0]] += dg[0];
    } else {
      // g_j = p_j / s with s = p_0 + p_1: d p_i = (dg_i - sum_j dg_j g_j) / s.
      const float s = p[chosen[0]] + p[chosen[1]];
      const float mean = dg[0] * g[0] + dg[1] * g[1];
      dp[chosen[0]] += (dg[0] - mean) / s;
      dp[chosen[1]] += (dg[1] - mean) / s;
    }
    double dot = 0.0;
    for (int e = 0; e < E; ++e) dot += double(p[e]) * dp[e];
    for (int e = 0; e < E; ++e) dp[e] = p[e] * (dp[e] - float(dot));
  }
  if (T > 0) router_.Backward(access, x, d_logits.data(), T, dx);

  // dx = router part + each kept choice's part, choices in order.
  for (int64_t t = 0; t < T; ++t) {
    float* dxt = dx + t * H;
    for (int j = 0; j < k; ++j) {
      const int32_t row = plan.slot[t * k + j];
      if (row < 0) continue;
      const float* d = dx_rows.data() + int64_t(row) * H;
      for (int64_t h = 0; h < H; ++h) dxt[h] += d[h];
    }
  }
  return OkStatus();
}

}  // namespace zs

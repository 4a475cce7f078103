#include "runtime/parallel/expert/expert_exchange.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/base/check.h"

namespace zs {
namespace {

constexpr int64_t kExactF32Counts = int64_t{1} << 24;

void CopyRows(const float* from, int64_t from_row, float* to, int64_t to_row, int64_t rows,
              int64_t width) {
  if (rows == 0) return;
  std::memcpy(to + to_row * width, from + from_row * width, size_t(rows * width) * sizeof(float));
}

}  // namespace

ExpertExchange::ExpertExchange(Communicator* ep, int num_experts)
    : ep_(ep),
      ranks_(ep == nullptr ? 1 : ep->size()),
      rank_(ep == nullptr ? 0 : ep->rank()),
      num_experts_(num_experts) {
  ZS_CHECK(num_experts > 0 && num_experts % ranks_ == 0, "E={} over n={} ranks", num_experts,
           ranks_);
  local_experts_ = num_experts / ranks_;
}

StatusOr<ExpertExchange::Layout> ExpertExchange::Exchange(const DispatchPlan& plan) const {
  ZS_CHECK(plan.num_experts == num_experts_, "plan for E={} on an exchange of E={}",
           plan.num_experts, num_experts_);
  const int n = ranks_;
  const int L = local_experts_;
  std::vector<float> send(static_cast<size_t>(num_experts_));
  std::vector<float> recv(send.size());
  for (int e = 0; e < num_experts_; ++e) {
    if (plan.kept[e] >= kExactF32Counts) {
      return InvalidArgumentError(
          fmt::format("expert exchange: {} rows for expert {} reach 2^24, past exact f32 counts",
                      plan.kept[e], e));
    }
    send[e] = float(plan.kept[e]);
  }
  if (ep_ != nullptr) {
    Status s = ep_->AllToAll(send.data(), recv.data(), size_t(L), DType::kF32);
    if (!s.ok()) return s.WithContext("expert exchange: all-to-all of the per-expert counts");
  } else {
    recv = send;
  }

  Layout layout;
  layout.ranks = n;
  layout.local_experts = L;
  layout.send_rows.resize(n);
  layout.send_first.resize(n);
  for (int q = 0; q < n; ++q) {
    layout.send_first[q] = plan.offsets[size_t(q) * L];
    layout.send_rows[q] = plan.offsets[size_t(q + 1) * L] - layout.send_first[q];
  }
  const size_t blocks = size_t(n) * L;
  layout.block_rows.resize(blocks);
  layout.recv_first.resize(blocks);
  layout.expert_first.resize(blocks);
  layout.expert_begin.resize(size_t(L) + 1);
  int64_t at = 0;
  for (size_t b = 0; b < blocks; ++b) {  // source-major: b = s * L + le
    layout.block_rows[b] = int64_t(recv[b]);
    layout.recv_first[b] = at;
    at += layout.block_rows[b];
  }
  layout.rows = at;
  at = 0;
  for (int le = 0; le < L; ++le) {  // expert-major: (le, s)
    layout.expert_begin[le] = at;
    for (int s = 0; s < n; ++s) {
      const size_t b = size_t(s) * L + le;
      layout.expert_first[b] = at;
      at += layout.block_rows[b];
    }
  }
  layout.expert_begin[L] = at;
  return layout;
}

Status ExpertExchange::MoveRows(const float* send, const std::vector<int64_t>& send_rows,
                                const std::vector<int64_t>& send_first, float* recv,
                                const std::vector<int64_t>& recv_rows,
                                const std::vector<int64_t>& recv_first, int64_t width,
                                const char* step) const {
  if (ep_ == nullptr) {
    CopyRows(send, send_first[0], recv, recv_first[0], send_rows[0], width);
    return OkStatus();
  }
  const size_t n = size_t(ranks_);
  std::vector<size_t> sc(n), so(n), rc(n), ro(n);
  for (size_t p = 0; p < n; ++p) {
    sc[p] = size_t(send_rows[p] * width);
    so[p] = size_t(send_first[p] * width);
    rc[p] = size_t(recv_rows[p] * width);
    ro[p] = size_t(recv_first[p] * width);
  }
  Status s = ep_->AllToAllv(send, sc, so, recv, rc, ro, DType::kF32);
  if (!s.ok()) return s.WithContext(fmt::format("expert exchange: {}", step));
  return OkStatus();
}

Status ExpertExchange::ToExperts(const Layout& layout, const float* plan_rows, int64_t width,
                                 float* expert_rows) const {
  const int n = ranks_;
  const int L = local_experts_;
  std::vector<int64_t> from_rows(n), from_first(n);
  for (int s = 0; s < n; ++s) {
    from_first[s] = layout.recv_first[size_t(s) * L];
    from_rows[s] = 0;
    for (int le = 0; le < L; ++le) from_rows[s] += layout.block_rows[size_t(s) * L + le];
  }
  if (n == 1) {  // one source: source-major is expert-major
    return MoveRows(plan_rows, layout.send_rows, layout.send_first, expert_rows, from_rows,
                    from_first, width, "dispatch of token rows to the experts");
  }
  std::vector<float> received(size_t(layout.rows * width));
  ZS_RETURN_IF_ERROR(MoveRows(plan_rows, layout.send_rows, layout.send_first, received.data(),
                              from_rows, from_first, width,
                              "dispatch of token rows to the experts"));
  for (size_t b = 0; b < layout.block_rows.size(); ++b) {
    CopyRows(received.data(), layout.recv_first[b], expert_rows, layout.expert_first[b],
             layout.block_rows[b], width);
  }
  return OkStatus();
}

Status ExpertExchange::FromExperts(const Layout& layout, const float* expert_rows, int64_t width,
                                   float* plan_rows) const {
  const int n = ranks_;
  const int L = local_experts_;
  std::vector<int64_t> to_rows(n), to_first(n);
  for (int s = 0; s < n; ++s) {
    to_first[s] = layout.recv_first[size_t(s) * L];
    to_rows[s] = 0;
    for (int le = 0; le < L; ++le) to_rows[s] += layout.block_rows[size_t(s) * L + le];
  }
  if (n == 1) {
    return MoveRows(expert_rows, to_rows, to_first, plan_rows, layout.send_rows, layout.send_first,
                    width, "combine of expert outputs to their tokens");
  }
  std::vector<float> staged(size_t(layout.rows * width));
  for (size_t b = 0; b < layout.block_rows.size(); ++b) {
    CopyRows(expert_rows, layout.expert_first[b], staged.data(), layout.recv_first[b],
             layout.block_rows[b], width);
  }
  return MoveRows(staged.data(), to_rows, to_first, plan_rows, layout.send_rows, layout.send_first,
                  width, "combine of expert outputs to their tokens");
}

}  // namespace zs

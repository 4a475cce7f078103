// The CPU instantiation of the dispatch template: Thrust's sequential C++ system, named by the
// policy at each call (thrust::cpp::par), so the build's THRUST_DEVICE_SYSTEM does not matter
// here. cmake/ZsThrust.cmake says why CPP rather than OMP.
#include "runtime/parallel/expert/token_dispatch.h"

#include <fmt/format.h>
#include <thrust/system/cpp/execution_policy.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <new>

#include "runtime/parallel/expert/token_dispatch_impl.h"

namespace zs {

Status CheckDispatchArgs(size_t choices, int k, int num_experts, int64_t capacity) {
  if (k < 1 || num_experts < 1 || capacity < 0) {
    return InvalidArgumentError(fmt::format(
        "dispatch plan: k={}, num_experts={}, capacity={}: need k >= 1, num_experts >= 1 and "
        "capacity >= 0",
        k, num_experts, capacity));
  }
  if (choices % size_t(k) != 0 || choices > size_t(std::numeric_limits<int32_t>::max())) {
    return InvalidArgumentError(
        fmt::format("dispatch plan: {} expert choices with k={}: need a multiple of k, at most {}",
                    choices, k, std::numeric_limits<int32_t>::max()));
  }
  return OkStatus();
}

DispatchPlan DispatchPlan::Sized(size_t choices, int k, int num_experts, int64_t capacity) {
  DispatchPlan plan;
  plan.tokens = int64_t(choices) / k;
  plan.k = k;
  plan.num_experts = num_experts;
  plan.capacity = capacity;
  plan.routed.resize(size_t(num_experts));
  plan.kept.resize(size_t(num_experts));
  plan.offsets.resize(size_t(num_experts) + 1);
  plan.slot.resize(choices);
  return plan;
}

StatusOr<DispatchPlan> PlanDispatch(std::span<const int32_t> expert_of, int k, int num_experts,
                                    int64_t capacity) {
  ZS_RETURN_IF_ERROR(CheckDispatchArgs(expert_of.size(), k, num_experts, capacity));
  const size_t n = expert_of.size();
  DispatchPlan plan = DispatchPlan::Sized(n, k, num_experts, capacity);
  std::vector<int32_t> sort_keys(n), sorted_assign(n), expert_begin(size_t(num_experts) + 1),
      assignment(n);

  dispatch_detail::DispatchArrays d;
  d.expert_of = expert_of.data();
  d.tokens = int32_t(plan.tokens);
  d.k = k;
  d.num_experts = num_experts;
  d.capacity = int32_t(std::min<int64_t>(capacity, int64_t(n)));
  d.sort_keys = sort_keys.data();
  d.sorted_assign = sorted_assign.data();
  d.expert_begin = expert_begin.data();
  d.routed = plan.routed.data();
  d.kept = plan.kept.data();
  d.offsets = plan.offsets.data();
  d.assignment = assignment.data();
  d.slot = plan.slot.data();
  try {
    if (const int64_t bad = dispatch_detail::CountInvalidExperts(thrust::cpp::par, d); bad > 0) {
      const auto it = std::find_if(expert_of.begin(), expert_of.end(),
                                   [&](int32_t e) { return e < 0 || e >= num_experts; });
      const size_t at = size_t(it - expert_of.begin());
      return InvalidArgumentError(fmt::format(
          "dispatch plan: {} expert choice(s) outside [0, {}), the first at token {} choice {}: {}",
          bad, num_experts, at / size_t(k), at % size_t(k), *it));
    }
    dispatch_detail::RunDispatch(thrust::cpp::par, d);
  } catch (const std::bad_alloc&) {
    return OutOfMemoryError(
        fmt::format("dispatch plan: Thrust's scratch for {} assignments was refused", n));
  } catch (const std::exception& e) {
    return InternalError(fmt::format("dispatch plan: Thrust failed: {}", e.what()));
  }
  assignment.resize(size_t(plan.offsets.back()));
  plan.assignment = std::move(assignment);
  return plan;
}

}  // namespace zs

// The dispatch plan as one Thrust template over an execution policy: the single code path that
// token_dispatch.cc instantiates for the CPU (thrust::cpp::par, compiled by the C++ compiler)
// and token_dispatch.cu for a GPU (thrust::cuda::par, compiled by nvcc). Private to those two
// files (not installed: *_impl.h); token_dispatch.h states the rule it computes.
//
// Contract
// - Every pointer of DispatchArrays lies in the policy's memory (host memory for cpp::par,
//   device memory for cuda::par) and holds the element count its comment gives; n = tokens * k
//   fits int32 (the callers check). Scratch arrays are overwritten.
// - CountInvalidExperts must return 0 before RunDispatch is called (RunDispatch reads
//   expert_begin[expert] unchecked).
// - Blocks the calling thread until the policy's work is done (thrust algorithms returning
//   values synchronize; cuda::par without .on(stream) uses the default stream).
#pragma once

#include <thrust/binary_search.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include <cstdint>

#if defined(__CUDACC__)
#define ZS_DISPATCH_HD __host__ __device__
#else
#define ZS_DISPATCH_HD
#endif

namespace zs::dispatch_detail {

struct DispatchArrays {
  const int32_t* expert_of = nullptr;  // [n] token-major: expert_of[t * k + j]
  int32_t tokens = 0;
  int32_t k = 0;
  int32_t num_experts = 0;
  int32_t capacity = 0;  // clamped to n by the caller
  // Scratch.
  int32_t* sort_keys = nullptr;      // [n] expert of each assignment, sorted
  int32_t* sorted_assign = nullptr;  // [n] assignment index t * k + j, sorted with the keys
  int32_t* expert_begin = nullptr;   // [E + 1] first sorted position of expert e
  // Outputs.
  int32_t* routed = nullptr;      // [E]
  int32_t* kept = nullptr;        // [E]
  int32_t* offsets = nullptr;     // [E + 1]
  int32_t* assignment = nullptr;  // [n]; the first offsets[E] entries are written
  int32_t* slot = nullptr;        // [n]
};

struct OutOfRange {
  int32_t num_experts;
  ZS_DISPATCH_HD bool operator()(int32_t e) const { return e < 0 || e >= num_experts; }
};

// Position i of the choice-major enumeration (all first choices in token order, then all
// second choices) -> the expert of that assignment.
struct ChoiceMajorExpert {
  const int32_t* expert_of;
  int32_t tokens;
  int32_t k;
  ZS_DISPATCH_HD int32_t operator()(int32_t i) const {
    return expert_of[(i % tokens) * k + i / tokens];
  }
};

// Position i of the choice-major enumeration -> its token-major assignment index t * k + j.
struct ChoiceMajorAssignment {
  int32_t tokens;
  int32_t k;
  ZS_DISPATCH_HD int32_t operator()(int32_t i) const { return (i % tokens) * k + i / tokens; }
};

struct RangeLength {
  const int32_t* begin;
  ZS_DISPATCH_HD int32_t operator()(int32_t e) const { return begin[e + 1] - begin[e]; }
};

struct ClampToCapacity {
  int32_t capacity;
  ZS_DISPATCH_HD int32_t operator()(int32_t count) const {
    return count < capacity ? count : capacity;
  }
};

// Sorted position i: its rank within its expert decides kept (-> a row) or dropped (-> -1).
struct Place {
  const int32_t* sort_keys;
  const int32_t* sorted_assign;
  const int32_t* expert_begin;
  const int32_t* offsets;
  int32_t capacity;
  int32_t* assignment;
  int32_t* slot;
  ZS_DISPATCH_HD void operator()(int32_t i) const {
    const int32_t e = sort_keys[i];
    const int32_t rank = i - expert_begin[e];
    const int32_t a = sorted_assign[i];
    if (rank < capacity) {
      const int32_t row = offsets[e] + rank;
      assignment[row] = a;
      slot[a] = row;
    } else {
      slot[a] = -1;
    }
  }
};

template <class Policy>
int64_t CountInvalidExperts(const Policy& policy, const DispatchArrays& d) {
  const int32_t n = d.tokens * d.k;
  return thrust::count_if(policy, d.expert_of, d.expert_of + n, OutOfRange{d.num_experts});
}

template <class Policy>
void RunDispatch(const Policy& policy, const DispatchArrays& d) {
  const int32_t n = d.tokens * d.k;
  const int32_t num_experts = d.num_experts;
  thrust::counting_iterator<int32_t> first(0);
  if (n > 0) {
    // Keys and values in choice-major order; a stable sort by expert then yields each expert's
    // assignments in the drop rule's priority order (choice, then token).
    thrust::transform(policy, first, first + n, d.sort_keys,
                      ChoiceMajorExpert{d.expert_of, d.tokens, d.k});
    thrust::transform(policy, first, first + n, d.sorted_assign,
                      ChoiceMajorAssignment{d.tokens, d.k});
    thrust::stable_sort_by_key(policy, d.sort_keys, d.sort_keys + n, d.sorted_assign);
  }
  // expert_begin[e] = first sorted position with key >= e (e = E gives n).
  thrust::lower_bound(policy, d.sort_keys, d.sort_keys + n, first, first + (num_experts + 1),
                      d.expert_begin);
  thrust::transform(policy, first, first + num_experts, d.routed, RangeLength{d.expert_begin});
  thrust::transform(policy, d.routed, d.routed + num_experts, d.kept, ClampToCapacity{d.capacity});
  thrust::fill_n(policy, d.offsets, 1, 0);
  thrust::inclusive_scan(policy, d.kept, d.kept + num_experts, d.offsets + 1);
  thrust::for_each_n(policy, first, n,
                     Place{d.sort_keys, d.sorted_assign, d.expert_begin, d.offsets, d.capacity,
                           d.assignment, d.slot});
}

}  // namespace zs::dispatch_detail

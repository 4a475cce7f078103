// The core of causal multi-head attention, between the qkv projection and the output
// projection, over any number of heads: the math of CausalSelfAttention, shared with the
// tensor-parallel attention (runtime/parallel/tensor), which runs it on its rank's heads.
//
// Contract
// - Plain functions on caller-owned row-major fp32 buffers; no parameters, no state, no
//   allocation. Every matmul goes through Sgemm; the softmax of each row's prefix j <= i
//   through the cross-entropies' SIMD row kernels (softmax_kernels.h: the same bits on every
//   call on one machine, not across SIMD targets). Thread-safe.
// - Layout: rows are batch * seq (row b * seq + t); w = heads * head_dim. qkv [rows, 3w] holds
//   q, k and v side by side: head a's q at columns [a*D, (a+1)*D), its k at w + a*D, its v at
//   2w + a*D. ctx and dctx are [rows, w]; probs [batch, heads, seq, seq] (zero above the
//   diagonal); dprobs is scratch of seq * seq floats.
// - CausalAttentionForward writes probs = softmax_causal(q k^T / sqrt(D)) and ctx = probs v.
//   CausalAttentionBackward takes the qkv and probs of that forward and writes dqkv [rows, 3w]
//   (overwrites).
#pragma once

#include <cstdint>

namespace zs::nn {

void CausalAttentionForward(const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                            int64_t head_dim, float* probs, float* ctx);
void CausalAttentionBackward(const float* qkv, const float* probs, const float* dctx, int64_t batch,
                             int64_t seq, int64_t heads, int64_t head_dim, float* dprobs,
                             float* dqkv);

}  // namespace zs::nn

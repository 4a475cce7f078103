#include "kernels/fused_optimizer_reference.h"

#include <cstdint>

#include "kernels/float_bits.h"
#include "kernels/optimizer_element.h"
#include "kernels/stochastic_rounding_bits.h"

namespace zs::kernels {
namespace {

template <typename E>
float LoadAs(const void* p, size_t i) {
  return E::Load(static_cast<const typename E::T*>(p)[i]);
}

void StoreParam(FusedParamType type, void* out, size_t i, float w) {
  static_cast<uint16_t*>(out)[i] =
      type == FusedParamType::kBF16 ? FloatToBF16Bits(w) : FloatToF16Bits(w);
}

// fp32 and bf16 states: element by element.
template <FusedOptimizerKind K, typename G>
void StepElements(const FusedOptimizerHyper& h, const FusedStepConstants& c,
                  const FusedOptimizerTensor& t) {
  const bool bf16 = h.state_type == FusedStateType::kBF16;
  const float decay = 1.0f - c.lr * t.weight_decay;
  const bool reads0 = ReadsState0<K>(c), writes0 = WritesState0<K>(c);
  constexpr bool kTwo = kFusedNumStates<K> == 2;
  auto load = [&](const void* state, size_t i) {
    return bf16 ? BF16BitsToFloat(static_cast<const uint16_t*>(state)[i])
                : static_cast<const float*>(state)[i];
  };
  sr::SrKey key{};
  uint64_t key_hi = ~uint64_t{0};
  for (size_t i = 0; i < t.n; ++i) {
    float w = t.master[i];
    const float g = ScaledGrad(c, LoadAs<G>(t.grad, i));
    float s0 = reads0 ? load(t.state0, i) : 0.0f;
    float s1 = kTwo ? load(t.state1, i) : 0.0f;
    UpdateElement<K>(c, t.weight_decay, decay, /*as_root=*/false, g, w, s0, s1);
    t.master[i] = w;
    if (t.param_out != nullptr) StoreParam(h.param_type, t.param_out, i, w);
    if (bf16) {
      const uint64_t index = t.index_base + i;
      if (index >> 32 != key_hi) {
        key_hi = index >> 32;
        key = sr::MakeSrKey(h.seed, h.step, uint32_t(key_hi));
      }
      const uint32_t hash = sr::SrHash(key, uint32_t(index));
      if (writes0) {
        static_cast<uint16_t*>(t.state0)[i] =
            sr::StochasticRoundToBF16Bits(s0, sr::SrBitsOfHash(hash, 0));
      }
      if (kTwo) {
        static_cast<uint16_t*>(t.state1)[i] =
            sr::StochasticRoundToBF16Bits(s1, sr::SrBitsOfHash(hash, 1));
      }
    } else {
      if (writes0) static_cast<float*>(t.state0)[i] = s0;
      if (kTwo) static_cast<float*>(t.state1)[i] = s1;
    }
  }
}

// One int8 block of `count` new values whose largest |value| has the bits max_bits.
void EncodeBlock(uint32_t max_bits, const float* values, size_t count, int8_t* codes,
                 float* scale) {
  const Int8BlockCoder coder = MakeInt8BlockCoder(max_bits);
  *scale = coder.scale;
  for (size_t k = 0; k < count; ++k) codes[k] = EncodeInt8(coder, values[k]);
}

// int8 states: block by block (decode, update, re-encode the whole block).
template <FusedOptimizerKind K, typename G>
void StepInt8Blocks(const FusedOptimizerHyper& h, const FusedStepConstants& c,
                    const FusedOptimizerTensor& t) {
  const float decay = 1.0f - c.lr * t.weight_decay;
  const bool reads0 = ReadsState0<K>(c), writes0 = WritesState0<K>(c);
  constexpr bool kTwo = kFusedNumStates<K> == 2;
  auto* codes0 = static_cast<int8_t*>(t.state0);
  auto* codes1 = static_cast<int8_t*>(t.state1);
  float new0[kFusedQuantBlock], new1[kFusedQuantBlock];
  for (size_t begin = 0, b = 0; begin < t.n; begin += kFusedQuantBlock, ++b) {
    const size_t count = t.n - begin < kFusedQuantBlock ? t.n - begin : kFusedQuantBlock;
    uint32_t max0 = 0, max1 = 0;
    for (size_t k = 0; k < count; ++k) {
      const size_t i = begin + k;
      float w = t.master[i];
      const float g = ScaledGrad(c, LoadAs<G>(t.grad, i));
      float s0 = reads0 ? DecodeInt8(codes0[i], t.state0_scales[b]) : 0.0f;
      float s1 = kTwo ? DecodeInt8(codes1[i], t.state1_scales[b]) : 0.0f;
      UpdateElement<K>(c, t.weight_decay, decay, /*as_root=*/true, g, w, s0, s1);
      t.master[i] = w;
      if (t.param_out != nullptr) StoreParam(h.param_type, t.param_out, i, w);
      new0[k] = s0;
      new1[k] = s1;
      max0 = max0 > AbsBits(s0) ? max0 : AbsBits(s0);
      max1 = max1 > AbsBits(s1) ? max1 : AbsBits(s1);
    }
    if (writes0) EncodeBlock(max0, new0, count, codes0 + begin, t.state0_scales + b);
    if (kTwo) EncodeBlock(max1, new1, count, codes1 + begin, t.state1_scales + b);
  }
}

template <FusedOptimizerKind K, typename G>
void StepTensor(const FusedOptimizerHyper& h, const FusedStepConstants& c,
                const FusedOptimizerTensor& t) {
  if (h.state_type == FusedStateType::kInt8) {
    StepInt8Blocks<K, G>(h, c, t);
  } else {
    StepElements<K, G>(h, c, t);
  }
}

template <typename G>
void StepTensorFor(const FusedOptimizerHyper& h, const FusedStepConstants& c,
                   const FusedOptimizerTensor& t) {
  switch (h.kind) {
    case FusedOptimizerKind::kAdamW:
      return StepTensor<FusedOptimizerKind::kAdamW, G>(h, c, t);
    case FusedOptimizerKind::kAdam:
      return StepTensor<FusedOptimizerKind::kAdam, G>(h, c, t);
    case FusedOptimizerKind::kSgd:
      return StepTensor<FusedOptimizerKind::kSgd, G>(h, c, t);
    case FusedOptimizerKind::kAdagrad:
      return StepTensor<FusedOptimizerKind::kAdagrad, G>(h, c, t);
    case FusedOptimizerKind::kLion:
      return StepTensor<FusedOptimizerKind::kLion, G>(h, c, t);
  }
}

}  // namespace

bool FusedOptimizerStepReference(const FusedOptimizerHyper& hyper,
                                 const FusedOptimizerTensor* tensors, size_t num_tensors) {
  if (FusedOptimizerArgsError(hyper, tensors, num_tensors) != nullptr) return false;
  const FusedStepConstants c = MakeFusedStepConstants(hyper);
  for (size_t i = 0; i < num_tensors; ++i) {
    const FusedOptimizerTensor& t = tensors[i];
    if (t.n == 0) continue;
    switch (hyper.grad_type) {
      case FusedGradType::kF32:
        StepTensorFor<F32Element>(hyper, c, t);
        break;
      case FusedGradType::kBF16:
        StepTensorFor<BF16Element>(hyper, c, t);
        break;
      case FusedGradType::kF16:
        StepTensorFor<F16Element>(hyper, c, t);
        break;
    }
  }
  return true;
}

}  // namespace zs::kernels

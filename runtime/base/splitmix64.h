// SplitMix64: splitmix64's finalizer (Steele, Lea, Flood 2014), a bijection on 64 bits with
// good avalanche. Hashing a counter with it gives independent-looking values without any state
// to carry, which is how zerostack makes data orders, initializations and rounding streams that
// depend only on (seed, step, index) and never on the rank, the thread or the split.
#pragma once

#include <cstdint>

namespace zs {

inline constexpr uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace zs

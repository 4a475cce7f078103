#include "runtime/nn/param_init.h"

#include <cmath>
#include <numbers>
#include <random>

#include "runtime/base/splitmix64.h"

namespace zs::nn {
namespace {

// A uniform double in (0, 1] from the top 53 bits.
double Uniform(std::mt19937_64& gen) {
  return (static_cast<double>(gen() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

}  // namespace

void FillNormal(uint64_t seed, int unit, int param, float stddev, std::span<float> values) {
  const uint64_t key = SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(unit)) ^
                                  (static_cast<uint64_t>(param) << 32));
  std::mt19937_64 gen(key);
  for (size_t i = 0; i < values.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(Uniform(gen)));
    const double theta = 2.0 * std::numbers::pi * Uniform(gen);
    values[i] = static_cast<float>(stddev * r * std::cos(theta));
    if (i + 1 < values.size()) values[i + 1] = static_cast<float>(stddev * r * std::sin(theta));
  }
}

}  // namespace zs::nn

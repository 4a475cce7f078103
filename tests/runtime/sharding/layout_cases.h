// Shared test inputs for the sharding tests: a deterministic spread of small parameter lists
// (empty lists, zeros, ones, primes, alignment-sized and random sizes).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace zs::testing {

inline std::vector<std::vector<int64_t>> ParamSizeCases() {
  std::vector<std::vector<int64_t>> cases = {
      {}, {0}, {1}, {0, 0, 0}, {1, 0, 1}, {2, 3, 5, 7, 11, 13}, {64}, {63, 65}, {97, 0, 31},
      {128, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {200},
  };
  std::mt19937_64 rng(20261202);
  const int64_t kPicks[] = {0, 1, 2, 3, 5, 7, 13, 17, 31, 64, 97, 127};
  for (int i = 0; i < 40; ++i) {
    std::vector<int64_t> sizes(rng() % 7);
    for (int64_t& s : sizes) s = (rng() % 2) ? kPicks[rng() % std::size(kPicks)] : rng() % 150;
    cases.push_back(sizes);
  }
  return cases;
}

}  // namespace zs::testing

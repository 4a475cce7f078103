// Median: the middle of a sample, the one statistic every benchmark and measured cost here
// reports (robust to the outliers of a shared host).
//
// Contract
// - The middle value of an odd count, the mean of the two middle values of an even count, 0 for
//   none. Deterministic: the same values in any order give the same bits, so ranks that
//   all-gathered the same samples agree on the result.
// - Takes its argument by value (it sorts a copy); pure, any thread.
#pragma once

#include <algorithm>
#include <vector>

namespace zs {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace zs

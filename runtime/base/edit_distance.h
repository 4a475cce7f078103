// EditDistance: the Levenshtein distance between two strings, for "did you mean ...?" hints in
// error messages (config keys, field names). Pure; O(|a| * |b|) time, O(|b|) memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace zs {

inline size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace zs

// Device lists for meshes, in the relations the reference benchmarks use:
//
//   mesh_a m({4}, devices::first_half(8));                 // 0 1 2 3
//   mesh_b s({8}, devices::concat(devices::second_half(8),  // 4 5 6 7 0 1 2 3
//                                 devices::first_half(8)));
//   mesh_c i({8}, devices::interleave(devices::first_half(8), devices::second_half(8)));  // 0 4 1 5 ...
#pragma once

#include <cstddef>
#include <numeric>
#include <vector>

#include "typemesh/core/error.hpp"

namespace typemesh::devices {

// first, first + 1, ..., first + count - 1.
inline std::vector<int> range(int first, int count) {
  if (first < 0 || count < 0) {
    throw device_error(detail::cat("devices::range(", first, ", ", count, "): first and count must not be negative"));
  }
  if (int last; count > 0 && __builtin_add_overflow(first, count - 1, &last)) {
    throw device_error(detail::cat("devices::range(", first, ", ", count, "): the last device id, ", first, " + ",
                                   count - 1, ", overflows an int"));
  }
  std::vector<int> v(count);
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline std::vector<int> all(int n) { return range(0, n); }

inline std::vector<int> first_half(int n) {
  if (n % 2) throw device_error(detail::cat("devices::first_half(", n, "): ", n, " devices do not halve"));
  return range(0, n / 2);
}

inline std::vector<int> second_half(int n) {
  if (n % 2) throw device_error(detail::cat("devices::second_half(", n, "): ", n, " devices do not halve"));
  return range(n / 2, n / 2);
}

inline std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// a[0] b[0] a[1] b[1] ...
inline std::vector<int> interleave(const std::vector<int>& a, const std::vector<int>& b) {
  if (a.size() != b.size()) {
    throw device_error(detail::cat("devices::interleave: lists of ", a.size(), " and ", b.size(),
                                   " devices; they must be equally long"));
  }
  std::vector<int> v;
  v.reserve(2 * a.size());
  for (std::size_t i = 0; i < a.size(); ++i) v.push_back(a[i]), v.push_back(b[i]);
  return v;
}

}  // namespace typemesh::devices

// Configurations of a layer: one split count per iteration dim. The search
// considers, for every dim of size d, the divisors e of d with d / e >= cutoff
// (just 1 when there is none, or when the dim is not splittable), and every
// combination whose product is at most p. Reshapes (ravel/unravel) keep only
// contiguous splits: dims fully split, then one partly split dim, then
// unsplit dims.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "typemesh/plan/graph.hpp"

namespace typemesh::plan {

using split_t = std::int32_t;

// A compact table of configurations: row i is splits[i*rank .. i*rank+rank).
struct config_table {
  int rank = 0;
  std::vector<split_t> splits;

  std::size_t size() const { return rank == 0 ? 0 : splits.size() / static_cast<std::size_t>(rank); }
  const split_t* row(std::size_t i) const { return splits.data() + i * static_cast<std::size_t>(rank); }
  std::vector<split_t> at(std::size_t i) const { return {row(i), row(i) + rank}; }
  std::int64_t procs(std::size_t i) const {
    std::int64_t p = 1;
    for (int d = 0; d < rank; ++d) p *= row(i)[d];
    return p;
  }
};

// Divisors of n in increasing order.
inline std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> lo, hi;
  for (std::int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      lo.push_back(i);
      if (i != n / i) hi.push_back(n / i);
    }
  lo.insert(lo.end(), hi.rbegin(), hi.rend());
  return lo;
}

// The split counts the search tries for one dim.
inline std::vector<std::int64_t> dim_splits(const dim& d, std::int64_t procs, double cutoff) {
  std::vector<std::int64_t> r;
  if (d.splittable)
    for (auto e : divisors(d.size))
      if (e <= procs && static_cast<double>(d.size) / static_cast<double>(e) >= cutoff) r.push_back(e);
  if (r.empty()) r.push_back(1);
  return r;
}

inline bool contiguous_split(const layer& l, const split_t* c) {
  std::size_t i = 0;
  const std::size_t n = l.dims.size();
  while (i < n && l.dims[i].size == c[i]) ++i;
  if (i < n) ++i;  // the partly split dim
  for (; i < n; ++i)
    if (c[i] != 1) return false;
  return true;
}

inline config_table enumerate_configs(const layer& l, std::int64_t procs, double cutoff) {
  if (procs < 1) throw plan_error(detail::cat("layer ", l.name, ": processor count ", procs, " must be positive"));
  const int rank = static_cast<int>(l.dims.size());
  std::vector<std::vector<std::int64_t>> choice(rank);
  for (int d = 0; d < rank; ++d) choice[d] = dim_splits(l.dims[d], procs, cutoff);
  config_table t;
  t.rank = rank;
  const bool reshape = l.kind == layer_kind::ravel || l.kind == layer_kind::unravel;
  std::vector<split_t> cur(rank, 1);
  // Depth-first over the dims, first dim slowest, pruning on the product.
  auto rec = [&](auto&& self, int d, std::int64_t prod) -> void {
    if (d == rank) {
      if (!reshape || contiguous_split(l, cur.data())) t.splits.insert(t.splits.end(), cur.begin(), cur.end());
      return;
    }
    for (auto e : choice[d]) {
      if (prod * e > procs) break;  // choices are increasing
      cur[d] = static_cast<split_t>(e);
      self(self, d + 1, prod * e);
    }
  };
  rec(rec, 0, 1);
  if (t.size() == 0)
    throw plan_error(detail::cat("layer ", l.name, " has no configuration on ", procs, " processors"));
  return t;
}

// The split of each dim of a tensor under one layer configuration.
inline void tensor_splits(const tensor_map& m, const split_t* cfg, split_t* out) {
  for (std::size_t i = 0; i < m.size(); ++i) {
    std::int64_t s = 1;
    for (int d : m[i]) s *= cfg[d];
    out[i] = static_cast<split_t>(s);
  }
}

// Renders a configuration as the tool prints it, e.g. "(4, 1, 2)".
inline std::string config_string(const split_t* c, int rank) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(c[i]);
  }
  if (rank == 1) s += ",";
  return s + ")";
}

}  // namespace typemesh::plan

// Configurations of a layer: one split count per iteration dim. The search
// considers, for every dim of size d, the divisors e <= p of d with d / e >= cutoff
// (just 1 when there is none, or when the dim is not splittable), and every
// combination whose product is at most p. Reshapes (ravel/unravel) keep only
// contiguous splits: dims fully split, then one partly split dim, then
// unsplit dims.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
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
    for (int d = 0; d < rank; ++d) p = graph_detail::checked_mul(p, row(i)[d], "the processors of a configuration");
    return p;
  }
};

// The most processors a search may target: a split count is a split_t.
inline constexpr std::int64_t max_procs = std::numeric_limits<split_t>::max();

// The most configurations enumerate_configs builds for one layer unless told
// otherwise (at most 16 dims of 4 bytes each, plus a cost, per configuration).
inline constexpr std::uint64_t default_max_configs = std::uint64_t{1} << 22;

namespace config_detail {

using u64 = std::uint64_t;

inline u64 mul_mod(u64 a, u64 b, u64 m) { return static_cast<u64>(static_cast<unsigned __int128>(a) * b % m); }

inline u64 pow_mod(u64 a, u64 e, u64 m) {
  u64 r = 1 % m;
  a %= m;
  for (; e; e >>= 1) {
    if (e & 1) r = mul_mod(r, a, m);
    a = mul_mod(a, a, m);
  }
  return r;
}

// Miller-Rabin with the first twelve primes as bases: exact below 3.3e24.
inline bool is_prime(u64 n) {
  static constexpr u64 bases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return false;
  for (u64 p : bases)
    if (n % p == 0) return n == p;
  u64 d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  for (u64 a : bases) {
    u64 x = pow_mod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int i = 1; i < s && composite; ++i) {
      x = mul_mod(x, x, n);
      if (x == n - 1) composite = false;
    }
    if (composite) return false;
  }
  return true;
}

// A non-trivial factor of an odd composite n (Pollard's rho, Floyd cycles).
inline u64 rho_factor(u64 n) {
  for (u64 c = 1;; ++c) {
    auto f = [&](u64 v) { return (mul_mod(v, v, n) + c) % n; };
    u64 x = 2, y = 2, d = 1;
    while (d == 1) {
      x = f(x);
      y = f(f(y));
      d = std::gcd(x > y ? x - y : y - x, n);
    }
    if (d != n) return d;
  }
}

inline void prime_factors(u64 n, std::vector<u64>& out) {
  if (n == 1) return;
  if (is_prime(n)) {
    out.push_back(n);
    return;
  }
  const u64 d = rho_factor(n);
  prime_factors(d, out);
  prime_factors(n / d, out);
}

}  // namespace config_detail

// Divisors of n that are at most `limit`, in increasing order. Factors n
// first (trial division, then Pollard's rho), so that sizes near 2^63 cost
// microseconds rather than a loop up to their square root.
inline std::vector<std::int64_t> divisors(std::int64_t n, std::int64_t limit = std::numeric_limits<std::int64_t>::max()) {
  using config_detail::u64;
  if (n < 1) throw plan_error(detail::cat("divisors of ", n, ": the size must be positive"));
  std::vector<u64> primes;
  u64 rest = static_cast<u64>(n);
  for (u64 p = 2; p < 1000 && p * p <= rest; ++p)
    while (rest % p == 0) {
      primes.push_back(p);
      rest /= p;
    }
  config_detail::prime_factors(rest, primes);
  std::sort(primes.begin(), primes.end());
  std::vector<std::int64_t> r{1};
  for (std::size_t i = 0; i < primes.size();) {
    std::size_t j = i;
    while (j < primes.size() && primes[j] == primes[i]) ++j;
    const std::size_t before = r.size();
    for (std::size_t k = 0; k < before; ++k) {
      std::int64_t x = r[k];
      for (std::size_t e = i; e < j; ++e) {
        x *= static_cast<std::int64_t>(primes[i]);  // a divisor of n: no overflow
        if (x > limit) break;
        r.push_back(x);
      }
    }
    i = j;
  }
  std::sort(r.begin(), r.end());
  return r;
}

// The split counts the search tries for one dim.
inline std::vector<std::int64_t> dim_splits(const dim& d, std::int64_t procs, double cutoff) {
  std::vector<std::int64_t> r;
  if (d.splittable)
    for (auto e : divisors(d.size, procs))
      if (static_cast<double>(d.size) / static_cast<double>(e) >= cutoff) r.push_back(e);
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

inline void check_procs(std::int64_t procs, const std::string& who) {
  if (procs < 1 || procs > max_procs)
    throw plan_error(detail::cat(who, ": processor count ", procs, " must be between 1 and ", max_procs));
}

// Every configuration of l on `procs` processors; throws plan_error when there
// would be more than max_configs of them (checked before they are stored).
inline config_table enumerate_configs(const layer& l, std::int64_t procs, double cutoff,
                                      std::uint64_t max_configs = default_max_configs) {
  check_procs(procs, "layer " + l.name);
  validate_layer(l);
  const int rank = static_cast<int>(l.dims.size());
  std::vector<std::vector<std::int64_t>> choice(rank);
  for (int d = 0; d < rank; ++d) choice[d] = dim_splits(l.dims[d], procs, cutoff);
  config_table t;
  t.rank = rank;
  const bool reshape = l.kind == layer_kind::ravel || l.kind == layer_kind::unravel;
  std::vector<split_t> cur(rank, 1);
  std::uint64_t count = 0;
  // Depth-first over the dims, first dim slowest, pruning on the product (and
  // for a reshape on contiguity: once a dim is split partly, the rest are 1),
  // so that every node visited leads to a stored configuration.
  auto rec = [&](auto&& self, int d, std::int64_t prod, bool partial) -> void {
    if (d == rank) {
      if (++count > max_configs)
        throw plan_error(detail::cat("layer ", l.name, " has more than ", max_configs, " configurations on ", procs,
                                     " processors (the memory limit); use fewer processors or a larger cutoff"));
      t.splits.insert(t.splits.end(), cur.begin(), cur.end());
      return;
    }
    for (auto e : choice[d]) {
      if (prod * e > procs) break;  // choices are increasing; both at most 2^31
      if (reshape && partial && e != 1) break;
      cur[d] = static_cast<split_t>(e);
      self(self, d + 1, prod * e, partial || e != l.dims[d].size);
    }
    cur[d] = 1;
  };
  rec(rec, 0, 1, false);
  if (t.size() == 0)
    throw plan_error(detail::cat("layer ", l.name, " has no configuration on ", procs, " processors"));
  return t;
}

// The split of each dim of a tensor under one layer configuration.
inline void tensor_splits(const tensor_map& m, const split_t* cfg, split_t* out) {
  for (std::size_t i = 0; i < m.size(); ++i) {
    std::int64_t s = 1;
    for (int d : m[i]) s = graph_detail::checked_mul(s, cfg[d], "the split of a flattened tensor dim");
    if (s > max_procs) throw plan_error(detail::cat("the split ", s, " of a flattened tensor dim exceeds ", max_procs));
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

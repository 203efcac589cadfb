// Fills of a device's slice of a tensor computed from each element's global
// index (where it sits in the whole tensor, so the values never depend on the
// layout or the device count): counter-based random numbers keyed by (seed,
// name hash, step, use) as uniform, normal and dropout-mask fills, and any
// value a kernel function computes from the index. The RNG functions are
// plain functions that kernels call.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/parallel.hpp"

namespace typemesh::backend {

// The splitmix64 finaliser: a bijection that scrambles every bit.
TYPEMESH_KERNEL constexpr std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The bits a stream is keyed by; `use` keeps streams of different purposes
// (dropout, initialisation) apart under the same key.
TYPEMESH_KERNEL constexpr std::uint64_t random_base(std::uint64_t seed, std::uint64_t name_hash, std::uint64_t step,
                                                    std::uint64_t use) {
  return splitmix64(splitmix64(seed) ^ name_hash ^ splitmix64(step + 0x632be59bd9b4e019ull) ^
                    splitmix64(use + 0x2545f4914f6cdd1dull));
}

// Uniform in [0, 1) with 53 random bits, for element i of the stream `base`
// (two lanes per element, for draws that need two numbers).
TYPEMESH_KERNEL inline double random_uniform(std::uint64_t base, std::uint64_t i, std::uint64_t lane = 0) {
  return static_cast<double>(splitmix64(base ^ splitmix64(2 * i + lane)) >> 11) * 0x1.0p-53;
}

// Standard normal for element i (Box-Muller on its two lanes).
TYPEMESH_KERNEL inline double random_normal(std::uint64_t base, std::uint64_t i) {
  const double u = 1.0 - random_uniform(base, i, 0), v = random_uniform(base, i, 1);
  return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
}

// Where a local slice sits in the whole tensor: its extents (the local
// elements are row-major over them), its first global coordinate per dim,
// and each dim's step in the global index the values are keyed by (the
// row-major strides of the whole tensor, or another order of the dims).
// Rank >= 1; a scalar is one dim of extent 1.
template <std::size_t Rank>
struct slice_geometry {
  static_assert(Rank >= 1);
  std::int64_t extent[Rank];
  std::int64_t begin[Rank];
  std::int64_t stride[Rank];
};

// out[local offset] = value(global index) for every element of the slice;
// value is a kernel function of the index (std::uint64_t).
template <class Space, class T, std::size_t Rank, class F>
void fill_by_global_index(Space s, T* out, const slice_geometry<Rank>& g, F value) {
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < Rank; ++d) rows *= g.extent[d];
  const std::int64_t width = g.extent[Rank - 1];
  if (rows <= 0 || width <= 0) return;
  // One index per innermost row: the row's first global index is computed
  // once, then stepped along the last dim.
  parallel_for(
      s, rows,
      [=] TYPEMESH_KERNEL(std::int64_t row) {
        std::int64_t index = g.begin[Rank - 1] * g.stride[Rank - 1];
        std::int64_t rest = row;
        for (std::size_t d = Rank - 1; d-- > 0;) {
          index += (g.begin[d] + rest % g.extent[d]) * g.stride[d];
          rest /= g.extent[d];
        }
        T* o = out + row * width;
        const std::int64_t step = g.stride[Rank - 1];
        for (std::int64_t j = 0; j < width; ++j) o[j] = value(static_cast<std::uint64_t>(index + j * step));
      },
      grain_for(width));
}

namespace random_fill_detail {
template <class T>
struct uniform_value {
  std::uint64_t base;
  double low, scale;
  TYPEMESH_KERNEL T operator()(std::uint64_t i) const { return static_cast<T>(low + scale * random_uniform(base, i)); }
};
template <class T>
struct normal_value {
  std::uint64_t base;
  double mean, stddev;
  TYPEMESH_KERNEL T operator()(std::uint64_t i) const { return static_cast<T>(mean + stddev * random_normal(base, i)); }
};
template <class T>
struct dropout_value {
  std::uint64_t base;
  double rate;
  T keep;
  TYPEMESH_KERNEL T operator()(std::uint64_t i) const { return random_uniform(base, i) < rate ? T{0} : keep; }
};
}  // namespace random_fill_detail

// low + scale * uniform.
template <class Space, class T, std::size_t Rank>
void random_uniform_fill(Space s, T* out, const slice_geometry<Rank>& g, std::uint64_t base, double low, double scale) {
  fill_by_global_index(s, out, g, random_fill_detail::uniform_value<T>{base, low, scale});
}

// mean + stddev * normal.
template <class Space, class T, std::size_t Rank>
void random_normal_fill(Space s, T* out, const slice_geometry<Rank>& g, std::uint64_t base, double mean,
                        double stddev) {
  fill_by_global_index(s, out, g, random_fill_detail::normal_value<T>{base, mean, stddev});
}

// A dropout mask: 0 where uniform < rate (dropped), else keep.
template <class Space, class T, std::size_t Rank>
void dropout_mask_fill(Space s, T* out, const slice_geometry<Rank>& g, std::uint64_t base, double rate, T keep) {
  fill_by_global_index(s, out, g, random_fill_detail::dropout_value<T>{base, rate, keep});
}

}  // namespace typemesh::backend

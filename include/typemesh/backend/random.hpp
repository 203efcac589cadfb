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
#include <type_traits>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/host/random_kernels.hpp"
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

// The 53 random bits of element i of the stream `base` (two lanes per
// element, for draws that need two numbers).
TYPEMESH_KERNEL constexpr std::uint64_t random_bits53(std::uint64_t base, std::uint64_t i, std::uint64_t lane = 0) {
  return splitmix64(base ^ splitmix64(2 * i + lane)) >> 11;
}

// Uniform in [0, 1): random_bits53 * 2^-53.
TYPEMESH_KERNEL inline double random_uniform(std::uint64_t base, std::uint64_t i, std::uint64_t lane = 0) {
  return static_cast<double>(random_bits53(base, i, lane)) * 0x1.0p-53;
}

// The integer form of `random_uniform(base, i) < rate`: it holds iff
// random_bits53(base, i) < dropout_threshold(rate). For n = random_bits53
// (below 2^53, so n and n * 2^-53 are exact doubles) and x = rate * 2^53
// (exact: a power-of-two scaling), n * 2^-53 < rate iff n < x iff n < ceil(x).
// rate <= 0 and NaN compare false for every n (threshold 0, keep all);
// rate >= 1 is above every n * 2^-53 (threshold 2^53, drop all).
TYPEMESH_KERNEL inline std::uint64_t dropout_threshold(double rate) {
  if (!(rate > 0.0)) return 0;
  if (rate >= 1.0) return std::uint64_t(1) << 53;
  return static_cast<std::uint64_t>(std::ceil(rate * 0x1.0p53));
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

// The slice's innermost rows: their number (the product of every extent but
// the last) and the global index of a row's first element. A row's elements
// then step by stride[Rank - 1].
template <std::size_t Rank>
TYPEMESH_KERNEL inline std::int64_t slice_rows(const slice_geometry<Rank>& g) {
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < Rank; ++d) rows *= g.extent[d];
  return rows;
}
template <std::size_t Rank>
TYPEMESH_KERNEL inline std::int64_t row_first_index(const slice_geometry<Rank>& g, std::int64_t row) {
  std::int64_t index = g.begin[Rank - 1] * g.stride[Rank - 1];
  std::int64_t rest = row;
  for (std::size_t d = Rank - 1; d-- > 0;) {
    index += (g.begin[d] + rest % g.extent[d]) * g.stride[d];
    rest /= g.extent[d];
  }
  return index;
}

// out[local offset] = value(global index) for every element of the slice;
// value is a kernel function of the index (std::uint64_t).
template <class Space, class T, std::size_t Rank, class F>
void fill_by_global_index(Space s, T* out, const slice_geometry<Rank>& g, F value) {
  const std::int64_t rows = slice_rows(g);
  const std::int64_t width = g.extent[Rank - 1];
  if (rows <= 0 || width <= 0) return;
  // One index per innermost row: the row's first global index is computed
  // once, then stepped along the last dim.
  parallel_for(
      s, rows,
      [=] TYPEMESH_KERNEL(std::int64_t row) {
        const std::int64_t index = row_first_index(g, row);
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
// threshold from dropout_threshold(rate).
template <class T>
struct dropout_value {
  std::uint64_t base, threshold;
  T keep;
  TYPEMESH_KERNEL T operator()(std::uint64_t i) const { return random_bits53(base, i) < threshold ? T{0} : keep; }
};

#if TYPEMESH_HOST_SIMD
// A host mask's rows in vector lanes (host/random_kernels.hpp), with the
// row geometry of fill_by_global_index.
template <class T, std::size_t Rank>
struct dropout_rows {
  T* out;
  slice_geometry<Rank> g;
  std::int64_t width;
  std::uint64_t base, threshold;
  T keep;
  host::simd_isa isa;
  void operator()(std::int64_t row) const {
    host::dropout_mask_row(isa, out + row * width, static_cast<std::uint64_t>(row_first_index(g, row)),
                           static_cast<std::uint64_t>(g.stride[Rank - 1]), width, base, threshold, keep);
  }
};
#endif
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

// A dropout mask: 0 where uniform < rate (dropped), else keep. Float and
// double masks on the host go through the vector kernels where the CPU has
// them; they give the scalar formula's bits.
template <class Space, class T, std::size_t Rank>
void dropout_mask_fill(Space s, T* out, const slice_geometry<Rank>& g, std::uint64_t base, double rate, T keep) {
  const std::uint64_t threshold = dropout_threshold(rate);
#if TYPEMESH_HOST_SIMD
  if constexpr (std::is_same_v<Space, host_space> && (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
    const host::simd_isa isa = host::random_simd_isa();
    if (isa != host::simd_isa::none) {
      const std::int64_t rows = slice_rows(g), width = g.extent[Rank - 1];
      if (rows <= 0 || width <= 0) return;
      parallel_for(s, rows, random_fill_detail::dropout_rows<T, Rank>{out, g, width, base, threshold, keep, isa},
                   grain_for(width));
      return;
    }
  }
#endif
  fill_by_global_index(s, out, g, random_fill_detail::dropout_value<T>{base, threshold, keep});
}

}  // namespace typemesh::backend

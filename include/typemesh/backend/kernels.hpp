// Local kernels on a device's elements: fills, elementwise maps, sums and
// box copies between dense row-major arrays, for any space (the first
// argument). They never communicate.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/functors.hpp"
#include "typemesh/backend/parallel.hpp"
#include "typemesh/backend/storage.hpp"

namespace typemesh::backend {

template <class Space, class T>
void fill(Space s, T* out, std::int64_t n, T value) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { out[i] = value; });
}

// out[i] = f(i).
namespace detail {
// Kernels that call a function the caller passes are named structs: nvcc's
// extended lambdas may not capture the caller's own lambdas.
template <class T, class F>
struct generate_kernel {
  T* out;
  F f;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t i) const { out[i] = f(i); }
};
template <class T, class U, class F>
struct map_kernel {
  const T* in;
  U* out;
  F f;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t i) const { out[i] = f(in[i]); }
};
template <class T, class U, class V, class F>
struct zip_kernel {
  const T* a;
  const U* b;
  V* out;
  F f;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t i) const { out[i] = f(a[i], b[i]); }
};
template <class T, class F>
struct zip3_kernel {
  const T* a;
  const T* b;
  const T* c;
  T* out;
  F f;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t i) const { out[i] = f(a[i], b[i], c[i]); }
};
template <class Pred>
struct index_if {
  Pred pred;
  std::int64_t none;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL std::int64_t operator()(std::int64_t i) const { return pred(i) ? i : none; }
};
}  // namespace detail

template <class Space, class T, class F>
void generate(Space s, T* out, std::int64_t n, F f) {
  parallel_for(s, n, detail::generate_kernel<T, F>{out, f});
}

template <class Space, class T>
void copy(Space s, const T* src, T* dst, std::int64_t n) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { dst[i] = src[i]; });
}

// out[i] = f(in[i]); out may be in.
template <class Space, class T, class U, class F>
void map(Space s, const T* in, U* out, std::int64_t n, F f) {
  parallel_for(s, n, detail::map_kernel<T, U, F>{in, out, f});
}

// out[i] = f(a[i], b[i]); out may be a or b.
template <class Space, class T, class U, class V, class F>
void zip(Space s, const T* a, const U* b, V* out, std::int64_t n, F f) {
  parallel_for(s, n, detail::zip_kernel<T, U, V, F>{a, b, out, f});
}

// out[i] = f(a[i], b[i], c[i]); out may be any of them.
template <class Space, class T, class F>
void zip3(Space s, const T* a, const T* b, const T* c, T* out, std::int64_t n, F f) {
  parallel_for(s, n, detail::zip3_kernel<T, F>{a, b, c, out, f});
}

// dst[i] += src[i].
template <class Space, class T>
void add_into(Space s, T* dst, const T* src, std::int64_t n) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { dst[i] += src[i]; });
}


template <class Space, class T>
T sum(Space s, const T* x, std::int64_t n) {
  return parallel_sum(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { return x[i]; }, T{0}, plus<T>{});
}

template <class Space, class T>
T max(Space s, const T* x, std::int64_t n, T lowest) {
  return parallel_sum(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { return x[i]; }, lowest, maximum<T>{});
}


// The smallest i in [0, n) where pred(i) holds, or n: for checks that find
// the first bad element before a kernel runs.
template <class Space, class Pred>
std::int64_t first_where(Space s, std::int64_t n, Pred pred) {
  return parallel_sum(s, n, detail::index_if<Pred>{pred, n}, n, minimum<std::int64_t>{});
}

// One element, read from the space's memory into the host's.
template <class Space, class T>
T read_one(Space s, const T* p) {
  T value;
  copy_elements(host_space{}, &value, s, p, 1);
  return value;
}

// A box of a dense row-major array: the array's extents and the box's corner.
template <std::size_t Rank>
struct region {
  std::array<std::int64_t, Rank> array_extent{};
  std::array<std::int64_t, Rank> begin{};
};

namespace detail {
// Copies one innermost row of the box per call.
template <class T, std::size_t Rank>
struct copy_rows {
  const T* src;
  T* dst;
  std::int64_t rows_extent[Rank];  // box extents; the last is the row length
  std::int64_t src_stride[Rank];
  std::int64_t dst_stride[Rank];
  std::int64_t src_offset;
  std::int64_t dst_offset;

  TYPEMESH_HOST_DEVICE void operator()(std::int64_t row) const {
    std::int64_t s = src_offset, d = dst_offset;
    for (std::size_t i = Rank - 1; i-- > 0;) {
      std::int64_t c = row % rows_extent[i];
      row /= rows_extent[i];
      s += c * src_stride[i];
      d += c * dst_stride[i];
    }
#if defined(__CUDA_ARCH__)
    for (std::int64_t j = 0; j < rows_extent[Rank - 1]; ++j) dst[d + j] = src[s + j];
#else
    std::memcpy(dst + d, src + s, rows_extent[Rank - 1] * sizeof(T));
#endif
  }
};

template <std::size_t Rank>
std::array<std::int64_t, Rank> strides(const std::array<std::int64_t, Rank>& extent) {
  std::array<std::int64_t, Rank> st{};
  std::int64_t n = 1;
  for (std::size_t i = Rank; i-- > 0;) {
    st[i] = n;
    n *= extent[i];
  }
  return st;
}
}  // namespace detail

// Copies a box of `extent` from src (at from.begin) into dst (at to.begin),
// both in memory of the space.
template <class Space, class T, std::size_t Rank>
void copy_box(Space space, const T* src, const region<Rank>& from, T* dst, const region<Rank>& to,
              const std::array<std::int64_t, Rank>& extent) {
  std::int64_t rows = 1;
  for (std::size_t i = 0; i < Rank; ++i) {
    if (extent[i] == 0) return;
    if (i + 1 < Rank) rows *= extent[i];
  }
  if constexpr (Rank == 0) {
    parallel_for(space, 1, [=] TYPEMESH_KERNEL(std::int64_t) { *dst = *src; });
  } else {
    detail::copy_rows<T, Rank> k{src, dst, {}, {}, {}, 0, 0};
    auto ss = detail::strides(from.array_extent), ds = detail::strides(to.array_extent);
    for (std::size_t i = 0; i < Rank; ++i) {
      k.rows_extent[i] = extent[i];
      k.src_stride[i] = ss[i];
      k.dst_stride[i] = ds[i];
      k.src_offset += from.begin[i] * ss[i];
      k.dst_offset += to.begin[i] * ds[i];
    }
    parallel_for(space, rows, k, grain_for(extent[Rank - 1]));
  }
}

}  // namespace typemesh::backend

#if defined(TYPEMESH_CUDA)
#include "typemesh/backend/cuda/kernels.hpp"
#endif

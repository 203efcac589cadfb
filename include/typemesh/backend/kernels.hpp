// Local kernels on a device's storage: elementwise maps, reductions and box
// copies between dense row-major arrays. They run through Thrust on the
// build's device system and never communicate.
#pragma once

#include "typemesh/backend/config.hpp"

#include <thrust/copy.h>
#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/reduce.h>
#include <thrust/transform.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "typemesh/backend/storage.hpp"

namespace typemesh::backend {

template <class T>
void fill(storage<T>& s, T value) {
  thrust::fill(s.begin(), s.end(), value);
}

// out[i] = f(in[i]); out may be in.
template <class T, class U, class F>
void map(const storage<T>& in, storage<U>& out, F f) {
  thrust::transform(in.begin(), in.end(), out.begin(), f);
}

// out[i] = f(a[i], b[i]); out may be a or b.
template <class T, class U, class V, class F>
void zip(const storage<T>& a, const storage<U>& b, storage<V>& out, F f) {
  thrust::transform(a.begin(), a.end(), b.begin(), out.begin(), f);
}

// dst[i] += src[i].
template <class T>
void add_into(storage<T>& dst, const storage<T>& src) {
  thrust::transform(dst.begin(), dst.end(), src.begin(), dst.begin(), thrust::plus<T>());
}

template <class T>
T sum(const storage<T>& s) {
  return thrust::reduce(s.begin(), s.end(), T{0}, thrust::plus<T>());
}

template <class T>
T max(const storage<T>& s, T lowest) {
  return thrust::reduce(s.begin(), s.end(), lowest, thrust::maximum<T>());
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

// Copies a box of `extent` from src (at from.begin) into dst (at to.begin).
// Both pointers address memory of the build's device system.
template <class T, std::size_t Rank>
void copy_box(const T* src, const region<Rank>& from, T* dst, const region<Rank>& to,
              const std::array<std::int64_t, Rank>& extent) {
  std::int64_t rows = 1;
  for (std::size_t i = 0; i < Rank; ++i) {
    if (extent[i] == 0) return;
    if (i + 1 < Rank) rows *= extent[i];
  }
  if constexpr (Rank == 0) {
    thrust::copy_n(thrust::device, src, 1, dst);
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
    thrust::for_each(thrust::device, thrust::counting_iterator<std::int64_t>(0),
                     thrust::counting_iterator<std::int64_t>(rows), k);
  }
}

}  // namespace typemesh::backend

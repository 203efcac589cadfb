// copy_box (backend/kernels.hpp) on the CUDA space: one thread per element,
// so neighbouring threads copy neighbouring elements. The host's version
// gives each thread a whole row to memcpy; on a GPU that leaves a row's
// copy to one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "typemesh/backend/cuda/parallel.hpp"

namespace typemesh::backend {

namespace detail {
template <class T, std::size_t Rank>
struct copy_box_elements {
  const T* src;
  T* dst;
  std::int64_t extent[Rank];
  std::int64_t src_stride[Rank];
  std::int64_t dst_stride[Rank];
  std::int64_t src_offset, dst_offset;
  __device__ void operator()(std::int64_t i) const {
    std::int64_t s = src_offset, d = dst_offset;
    for (std::size_t k = Rank; k-- > 0;) {
      const std::int64_t c = i % extent[k];
      i /= extent[k];
      s += c * src_stride[k];
      d += c * dst_stride[k];
    }
    dst[d] = src[s];
  }
};
}  // namespace detail

template <class T, std::size_t Rank>
void copy_box(cuda_space space, const T* src, const region<Rank>& from, T* dst, const region<Rank>& to,
              const std::array<std::int64_t, Rank>& extent) {
  if constexpr (Rank == 0) {  // a scalar
    parallel_for(space, 1, [=] TYPEMESH_KERNEL(std::int64_t) { *dst = *src; });
  } else {
    std::int64_t n = 1;
    for (std::size_t i = 0; i < Rank; ++i) n *= extent[i];
    if (n == 0) return;
    detail::copy_box_elements<T, Rank> k{src, dst, {}, {}, {}, 0, 0};
    const auto ss = detail::strides(from.array_extent), ds = detail::strides(to.array_extent);
    for (std::size_t i = 0; i < Rank; ++i) {
      k.extent[i] = extent[i];
      k.src_stride[i] = ss[i];
      k.dst_stride[i] = ds[i];
      k.src_offset += from.begin[i] * ss[i];
      k.dst_offset += to.begin[i] * ds[i];
    }
    parallel_for(space, n, k);
  }
}

}  // namespace typemesh::backend

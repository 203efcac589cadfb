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
// One element of a box copy (detail::box_copy, backend/kernels.hpp) per call.
template <class T, std::size_t Rank>
struct copy_box_elements : box_copy<T, Rank> {
  __device__ void operator()(std::int64_t i) const {
    std::int64_t s = this->src_offset, d = this->dst_offset;
    for (std::size_t k = Rank; k-- > 0;) {
      const std::int64_t c = i % this->extent[k];
      i /= this->extent[k];
      s += c * this->src_stride[k];
      d += c * this->dst_stride[k];
    }
    this->dst[d] = this->src[s];
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
    const detail::copy_box_elements<T, Rank> k{detail::box_copy_of(src, from, dst, to, extent)};
    parallel_for(space, n, k);
  }
}

}  // namespace typemesh::backend

// The softmax cross-entropy kernels of backend/softmax_cross_entropy.hpp on
// the CUDA space: a row's maximum and sum on one block
// (parallel_for_blocks and cuda::block_fold), the gradient a block per row
// too where rows fill a block (else a thread per element). Same formulas
// as the host's; sums in the block's fixed order.
#pragma once

#include <cmath>
#include <cstdint>

#include "typemesh/backend/cuda/parallel.hpp"
#include "typemesh/backend/functors.hpp"

namespace typemesh::backend {

namespace cuda {
template <class T>
struct softmax_row_max_row {
  const T* x;
  T* top;
  softmax_rows g;
  T lowest;
  __device__ void operator()(std::int64_t r) const {
    const T* row = x + r * g.held;
    const T m = block_fold<T>(g.held, [=](std::int64_t v) { return row[v]; }, lowest, maximum<T>{});
    if (threadIdx.x == 0) top[r] = m;
  }
};

template <class T, class I>
struct softmax_shifted_sums_row {
  const T* x;
  const I* label;
  const T* top;
  T* sums;
  softmax_rows g;
  __device__ void operator()(std::int64_t r) const {
    const T* row = x + r * g.held;
    const T shift = top[r];
    const T sum = block_fold<T>(g.held, [=](std::int64_t v) { return std::exp(row[v] - shift); }, T{0}, plus<T>{});
    if (threadIdx.x == 0) {
      sums[r] = sum;
      const std::int64_t c = static_cast<std::int64_t>(label[r]) - g.first;
      sums[g.rows + r] = c >= 0 && c < g.held ? row[c] - shift : T{0};
    }
  }
};

template <class T, class I>
struct softmax_cross_entropy_gradient_element {
  const T* x;
  const I* label;
  const T* lse;
  const T* dy;
  T* dx;
  softmax_rows g;
  __device__ void operator()(std::int64_t i) const {
    const std::int64_t r = i / g.held, v = i % g.held;
    const T p = std::exp(x[i] - lse[r]);
    dx[i] = dy[r] * (v == static_cast<std::int64_t>(label[r]) - g.first ? p - T{1} : p);
  }
};

// A row on one block: the row's label, lse and dy read once, the threads
// walking its columns side by side (no division per element).
template <class T, class I>
struct softmax_cross_entropy_gradient_row {
  const T* x;
  const I* label;
  const T* lse;
  const T* dy;
  T* dx;
  softmax_rows g;
  __device__ void operator()(std::int64_t r) const {
    const std::int64_t c = static_cast<std::int64_t>(label[r]) - g.first;
    const T shift = lse[r], d = dy[r];
    const T* row = x + r * g.held;
    T* out = dx + r * g.held;
#pragma unroll 4
    for (std::int64_t v = threadIdx.x; v < g.held; v += blockDim.x) {
      const T p = std::exp(row[v] - shift);
      out[v] = d * (v == c ? p - T{1} : p);
    }
  }
};
}  // namespace cuda

template <class T>
void softmax_row_max(cuda_space s, const T* x, T* top, softmax_rows g, T lowest) {
  parallel_for_blocks(s, g.rows, cuda::softmax_row_max_row<T>{x, top, g, lowest});
}

template <class T, class I>
void softmax_shifted_sums(cuda_space s, const T* x, const I* label, const T* top, T* sums, softmax_rows g) {
  parallel_for_blocks(s, g.rows, cuda::softmax_shifted_sums_row<T, I>{x, label, top, sums, g});
}

template <class T, class I>
void softmax_cross_entropy_gradient(cuda_space s, const T* x, const I* label, const T* lse, const T* dy, T* dx,
                                    softmax_rows g) {
  // Rows shorter than a block would leave most of its threads idle: a
  // thread per element there.
  if (g.held >= cuda::threads_per_block) {
    parallel_for_blocks(s, g.rows, cuda::softmax_cross_entropy_gradient_row<T, I>{x, label, lse, dy, dx, g});
  } else {
    parallel_for(s, g.rows * g.held, cuda::softmax_cross_entropy_gradient_element<T, I>{x, label, lse, dy, dx, g});
  }
}

}  // namespace typemesh::backend

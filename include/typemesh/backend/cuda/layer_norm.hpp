// The layer norm kernels of backend/layer_norm.hpp on the CUDA space: one
// block per row (parallel_for_blocks), whose threads fold the row's sums
// together (cuda::block_fold) and then write its elements, neighbouring
// threads neighbouring elements. Same formulas as the host's; the sums run
// in the block's fixed order instead of the host's lanes, so the results agree
// with the host's to rounding and are the same bits on every run. The
// backward's two row sums (dy and dy * x_hat) share one pass; the
// forward's mean and variance cannot (the variance's pass needs the mean).
#pragma once

#include <cmath>
#include <cstdint>

#include "typemesh/backend/cuda/parallel.hpp"
#include "typemesh/backend/functors.hpp"

namespace typemesh::backend {

namespace cuda {
// Two sums folded in one pass over a row: each component sees the same
// additions in the same order as a block_fold of its own, so the bits are
// those of two folds, for one read of the row instead of two.
template <class T>
struct sum_pair {
  T first, second;
};
template <class T>
struct plus_pairs {
  __device__ sum_pair<T> operator()(sum_pair<T> a, sum_pair<T> b) const {
    return {a.first + b.first, a.second + b.second};
  }
};

// A row's sum(dy) and sum(dy * x_hat), in one pass.
template <class T>
__device__ sum_pair<T> gradient_row_sums(const T* gr, const T* xr, std::int64_t held) {
  return block_fold<sum_pair<T>>(
      held, [=](std::int64_t v) { return sum_pair<T>{gr[v], gr[v] * xr[v]}; }, sum_pair<T>{T{0}, T{0}},
      plus_pairs<T>{});
}

template <class T>
struct layer_norm_partial_sums_row {
  const T* x;
  T* sums;
  layer_norm_rows g;
  __device__ void operator()(std::int64_t r) const {
    const T* row = x + r * g.held;
    const T sum = block_fold<T>(g.held, [=](std::int64_t v) { return row[v]; }, T{0}, plus<T>{});
    const T local_mean = g.held > 0 ? sum / static_cast<T>(g.held) : T{0};
    const T squares = block_fold<T>(
        g.held, [=](std::int64_t v) { return (row[v] - local_mean) * (row[v] - local_mean); }, T{0}, plus<T>{});
    if (threadIdx.x == 0) {
      sums[r] = sum;
      sums[g.rows + r] = squares + static_cast<T>(g.held) * local_mean * local_mean;
    }
  }
};

template <class T>
struct layer_norm_forward_row {
  const T* x;
  const T* sums;
  T* x_hat;
  T* inv_sigma;
  layer_norm_rows g;
  T epsilon;
  __device__ void operator()(std::int64_t r) const {
    const T* row = x + r * g.held;
    const T n = static_cast<T>(g.size);
    T mean, variance;
    if (sums == nullptr) {
      mean = block_fold<T>(g.held, [=](std::int64_t v) { return row[v]; }, T{0}, plus<T>{}) / n;
      variance = block_fold<T>(
                     g.held, [=](std::int64_t v) { return (row[v] - mean) * (row[v] - mean); }, T{0}, plus<T>{}) /
                 n;
    } else {
      mean = sums[r] / n;
      variance = sums[g.rows + r] / n - mean * mean;
      if (variance < T{0}) variance = T{0};
    }
    const T inv = T{1} / std::sqrt(variance + epsilon);
    if (threadIdx.x == 0) inv_sigma[r] = inv;
    T* out = x_hat + r * g.held;
    for (std::int64_t v = threadIdx.x; v < g.held; v += blockDim.x) out[v] = (row[v] - mean) * inv;
  }
};

template <class T>
struct layer_norm_gradient_sums_row {
  const T* dy;
  const T* x_hat;
  T* sums;
  layer_norm_rows g;
  __device__ void operator()(std::int64_t r) const {
    const T* gr = dy + r * g.held;
    const T* xr = x_hat + r * g.held;
    const sum_pair<T> both = gradient_row_sums(gr, xr, g.held);
    if (threadIdx.x == 0) {
      sums[r] = both.first;
      sums[g.rows + r] = both.second;
    }
  }
};

template <class T>
struct layer_norm_gradient_row {
  const T* dy;
  const T* x_hat;
  const T* inv_sigma;
  const T* sums;
  T* dx;
  layer_norm_rows g;
  __device__ void operator()(std::int64_t r) const {
    const T* gr = dy + r * g.held;
    const T* xr = x_hat + r * g.held;
    T sum, dot;
    if (sums == nullptr) {
      const sum_pair<T> both = gradient_row_sums(gr, xr, g.held);
      sum = both.first;
      dot = both.second;
    } else {
      sum = sums[r];
      dot = sums[g.rows + r];
    }
    const T n = static_cast<T>(g.size);
    const T mean_g = sum / n, mean_gx = dot / n, inv = inv_sigma[r];
    T* out = dx + r * g.held;
    for (std::int64_t v = threadIdx.x; v < g.held; v += blockDim.x) out[v] = (gr[v] - mean_g - xr[v] * mean_gx) * inv;
  }
};
}  // namespace cuda

template <class T>
void layer_norm_partial_sums(cuda_space s, const T* x, T* sums, layer_norm_rows g) {
  parallel_for_blocks(s, g.rows, cuda::layer_norm_partial_sums_row<T>{x, sums, g});
}

template <class T>
void layer_norm_forward(cuda_space s, const T* x, const T* sums, T* x_hat, T* inv_sigma, layer_norm_rows g,
                        T epsilon) {
  parallel_for_blocks(s, g.rows, cuda::layer_norm_forward_row<T>{x, sums, x_hat, inv_sigma, g, epsilon});
}

template <class T>
void layer_norm_gradient_sums(cuda_space s, const T* dy, const T* x_hat, T* sums, layer_norm_rows g) {
  parallel_for_blocks(s, g.rows, cuda::layer_norm_gradient_sums_row<T>{dy, x_hat, sums, g});
}

template <class T>
void layer_norm_gradient(cuda_space s, const T* dy, const T* x_hat, const T* inv_sigma, const T* sums, T* dx,
                         layer_norm_rows g) {
  parallel_for_blocks(s, g.rows, cuda::layer_norm_gradient_row<T>{dy, x_hat, inv_sigma, sums, dx, g});
}

}  // namespace typemesh::backend

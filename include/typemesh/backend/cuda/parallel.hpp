// The CUDA space's patterns (see backend/parallel.hpp), as two kernels of
// its own on the thread's stream (cuda::stream()), which cuBLAS and the
// copies also use:
//
// - parallel_for: a grid-stride loop calling f(i) for each index.
// - parallel_sum: a fixed grid (blocks x threads never depend on timing),
//   each thread folding a strided run of indices, each block folding its
//   threads as a tree, the host folding the block results in block order.
//   So a GPU sum is the same bits on every run of the same size, and agrees
//   with the host's sequential order to rounding.
// - parallel_for_blocks: f(item) called by every thread of one block, an
//   item per block; inside, cuda::block_fold folds over the item's elements
//   with all the block's threads. The row kernels (a sum over a dim, a row of
//   layer norm or softmax) use it: a thread per row would read its row alone,
//   uncoalesced, with too few threads to hide the latency.
//
// Thrust's algorithms are not used here: nvcc's host stubs cannot spell the
// accumulator types its reductions instantiate for typemesh's functors.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "typemesh/backend/cuda/runtime.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/core/space.hpp"

namespace typemesh::backend {

namespace cuda {
inline constexpr int threads_per_block = 256;
inline constexpr int sum_blocks = 256;

template <class F>
__global__ void for_each_index(std::int64_t n, F f) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

template <class T, class F, class Combine>
__global__ void fold_blocks(std::int64_t n, F f, T init, Combine combine, T* block_results) {
  __shared__ T partial[threads_per_block];
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  T acc = init;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) acc = combine(acc, f(i));
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int width = threads_per_block / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) partial[threadIdx.x] = combine(partial[threadIdx.x], partial[threadIdx.x + width]);
    __syncthreads();
  }
  if (threadIdx.x == 0) block_results[blockIdx.x] = partial[0];
}

// Folds value(i) for i in [0, n) with all threads of the calling block, which
// must all call it with the same n: thread t folds i = t, t + blockDim.x, ...
// in order, then the threads fold as a tree. A fixed order, so the same bits
// on every run. Every thread gets the result.
template <class T, class Value, class Combine>
__device__ T block_fold(std::int64_t n, const Value& value, T init, const Combine& combine) {
  __shared__ T partial[threads_per_block];
  T acc = init;
  // Unrolled so that several loads are in flight per thread; the folds
  // still run in index order.
#pragma unroll 4
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = combine(acc, value(i));
  __syncthreads();  // an earlier call's readers of partial[0] are done
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int width = threads_per_block / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) partial[threadIdx.x] = combine(partial[threadIdx.x], partial[threadIdx.x + width]);
    __syncthreads();
  }
  return partial[0];
}

template <class F>
__global__ void for_each_block_item(std::int64_t n, F f) {
  for (std::int64_t item = blockIdx.x; item < n; item += gridDim.x) f(item);
}

inline int blocks_for(std::int64_t n) {
  const std::int64_t wanted = (n + threads_per_block - 1) / threads_per_block;
  return static_cast<int>(std::min<std::int64_t>(wanted, 65535));
}
}  // namespace cuda

template <class F>
void parallel_for(cuda_space, std::int64_t n, const F& f, std::int64_t = 0) {
  if (n <= 0) return;
  cuda::for_each_index<<<cuda::blocks_for(n), cuda::threads_per_block, 0, cuda::stream()>>>(n, f);
  cuda::check(cudaGetLastError(), "a typemesh kernel launch");
}

// f(item) for each item in [0, n), each on one block of threads_per_block
// threads, all of which call f (see block_fold).
template <class F>
void parallel_for_blocks(cuda_space, std::int64_t n, const F& f) {
  if (n <= 0) return;
  const int blocks = static_cast<int>(std::min<std::int64_t>(n, 65535));
  cuda::for_each_block_item<<<blocks, cuda::threads_per_block, 0, cuda::stream()>>>(n, f);
  cuda::check(cudaGetLastError(), "a typemesh block kernel launch");
}

template <class T, class F, class Combine>
T parallel_sum(cuda_space, std::int64_t n, const F& f, T init, Combine combine) {
  if (n <= 0) return init;
  const int blocks = std::min(cuda::sum_blocks, cuda::blocks_for(n));
  scratch<T, cuda_space> results(static_cast<std::size_t>(blocks));
  cuda::fold_blocks<<<blocks, cuda::threads_per_block, 0, cuda::stream()>>>(n, f, init, combine, results.data());
  cuda::check(cudaGetLastError(), "a typemesh sum kernel launch");
  std::vector<T> host(static_cast<std::size_t>(blocks));
  cuda::copy_bytes(host.data(), results.data(), sizeof(T) * host.size());
  T total = init;
  for (const T& b : host) total = combine(total, b);
  return total;
}

}  // namespace typemesh::backend

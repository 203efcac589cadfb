// The CUDA space's patterns (see backend/parallel.hpp): Thrust's CUDA system
// on the default stream. parallel_sum here folds in Thrust's tree order, so
// GPU sums agree with the host's to rounding, not bit for bit.
#pragma once

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/transform_reduce.h>

#include <cstdint>

#include "typemesh/core/space.hpp"

namespace typemesh::backend {

template <class F>
void parallel_for(cuda_space, std::int64_t n, const F& f, std::int64_t = 0) {
  if (n <= 0) return;
  thrust::for_each(thrust::cuda::par, thrust::counting_iterator<std::int64_t>(0),
                   thrust::counting_iterator<std::int64_t>(n), f);
}

template <class T, class F, class Combine>
T parallel_sum(cuda_space, std::int64_t n, const F& f, T init, Combine combine) {
  if (n <= 0) return init;
  return thrust::transform_reduce(thrust::cuda::par, thrust::counting_iterator<std::int64_t>(0),
                                  thrust::counting_iterator<std::int64_t>(n), f, init, combine);
}

}  // namespace typemesh::backend

// The two patterns every kernel is written in, per space:
//
//   parallel_for(space, n, f)      calls f(i) for each i in [0, n), in any
//                                  order and at once; f writes only what
//                                  index i owns.
//   parallel_sum(space, n, f, init, combine)
//                                  folds f(i) over [0, n) in a fixed order
//                                  of fixed blocks, so the result does not
//                                  depend on how many threads ran it.
//
// A kernel body is a lambda marked TYPEMESH_KERNEL so that nvcc compiles it
// for the GPU as well; on the host it runs on the cores the device owns
// (host::kernel_threads()), split into contiguous ranges. Bodies do not
// throw.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/host/thread_pool.hpp"
#include "typemesh/core/space.hpp"

namespace typemesh::backend {

// Indices below this many per thread are not worth handing to a helper:
// about 10 microseconds of elementwise work. Helpers watch for the next
// kernel for 2 ms before they sleep (host/thread_pool.hpp), so one is usually
// awake and takes its part within a few microseconds; 65536 was the grain
// while they slept after 200 us (the seed Transformer's step at 2 threads:
// 45.0 ms at this grain against 49.7 ms, best of five each).
inline constexpr std::int64_t default_grain = std::int64_t(1) << 14;

// A grain for kernels whose index does `work` elements' worth of work (a
// row of a softmax, a pixel of a convolution).
inline constexpr std::int64_t grain_for(std::int64_t work) {
  return std::max<std::int64_t>(1, default_grain / std::max<std::int64_t>(1, work));
}

namespace host {
inline bool& inside_kernel() {
  thread_local bool inside = false;
  return inside;
}

// part(p) for each p in [0, parts), on this thread and the pool's helpers,
// each taking the next part not yet started; in order on this thread where
// there is one thread or this is already inside a kernel.
template <class Part>
void run_parts(int parts, const Part& part) {
  if (parts <= 1 || kernel_threads() <= 1 || inside_kernel()) {
    for (int p = 0; p < parts; ++p) part(p);
    return;
  }
  inside_kernel() = true;
  struct reset {
    ~reset() { inside_kernel() = false; }
  } on_exit;
  pool().run(parts, part);
}
}  // namespace host

template <class F>
void parallel_for(host_space, std::int64_t n, const F& f, std::int64_t grain = default_grain) {
  if (n <= 0) return;
  const std::int64_t most = std::max<std::int64_t>(1, n / std::max<std::int64_t>(1, grain));
  const int parts = static_cast<int>(std::min<std::int64_t>(host::kernel_threads(), most));
  host::run_parts(parts, [&](int p) {
    const std::int64_t begin = n * p / parts, end = n * (p + 1) / parts;
    for (std::int64_t i = begin; i < end; ++i) f(i);
  });
}

// f(i) for each i in [0, n), each index a task for the next free thread: for
// a few large pieces of work of uneven cost (the blocks of a BLAS product).
template <class F>
void parallel_tasks(host_space, int n, const F& f) {
  host::run_parts(n, [&](int i) { f(i); });
}

// The block that parallel_sum folds sequentially; blocks are then folded in
// order. Fixed, so sums are the same bits at any thread count.
inline constexpr std::int64_t sum_block = 4096;

template <class T, class F, class Combine>
T parallel_sum(host_space s, std::int64_t n, const F& f, T init, Combine combine) {
  if (n <= 0) return init;
  const std::int64_t blocks = (n + sum_block - 1) / sum_block;
  if (blocks == 1) {
    T acc = init;
    for (std::int64_t i = 0; i < n; ++i) acc = combine(acc, f(i));
    return acc;
  }
  std::vector<T> partial(static_cast<std::size_t>(blocks));
  parallel_for(
      s, blocks,
      [&](std::int64_t b) {
        const std::int64_t end = std::min(n, (b + 1) * sum_block);
        T acc = f(b * sum_block);
        for (std::int64_t i = b * sum_block + 1; i < end; ++i) acc = combine(acc, f(i));
        partial[static_cast<std::size_t>(b)] = acc;
      },
      grain_for(sum_block));
  T acc = init;
  for (const T& p : partial) acc = combine(acc, p);
  return acc;
}

}  // namespace typemesh::backend

#if defined(TYPEMESH_CUDA)
#include "typemesh/backend/cuda/parallel.hpp"
#endif

// The strided kernels of backend/strided.hpp on the CUDA space. The host's
// give each thread a whole row (or a whole output's sum), which a CPU core
// walks at full speed; on a GPU a thread per row reads its row alone, so
// neighbouring threads touch addresses a row apart, and a sum to one scalar
// would run on one thread. Here:
//
// - broadcast and binary: one thread per output element, so neighbouring
//   threads write neighbouring elements, offsets in 32-bit arithmetic where
//   the sizes allow;
// - fold_into: one block per output element where the sum is long enough
//   to fill a block (cuda::block_fold), else one thread per output as on the
//   host. A long sum is cut into fixed chunks of fold_chunk elements, a
//   block each, whose results one thread per output then folds in chunk
//   order: a sum to one scalar would otherwise run on one block, one of the
//   GPU's 132 multiprocessors. Chunks and blocks are fixed by the sizes, so
//   a sum is the same bits on every run.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "typemesh/backend/cuda/parallel.hpp"

namespace typemesh::backend {

namespace detail {

// Operand offsets at a flat index, as strided_space::offsets_at, in 32-bit
// arithmetic when Narrow (the whole space under 2^31 elements): a GPU
// divides 32-bit integers several times faster than 64-bit ones, and these
// kernels do little else.
template <bool Narrow, std::size_t K>
__device__ void offsets_at(const strided_space<K>& sp, std::int64_t flat, std::int64_t (&off)[K]) {
  if constexpr (Narrow) {
    std::uint32_t f = static_cast<std::uint32_t>(flat), o[K] = {};
    for (int d = sp.rank; d-- > 0;) {
      const std::uint32_t e = static_cast<std::uint32_t>(sp.extent[d]), c = f % e;
      f /= e;
      for (std::size_t j = 0; j < K; ++j) o[j] += c * static_cast<std::uint32_t>(sp.stride[j][d]);
    }
    for (std::size_t j = 0; j < K; ++j) off[j] = o[j];
  } else {
    sp.offsets_at(flat, off, sp.rank);
  }
}

template <bool Narrow, class T>
struct copy_elements_kernel {
  strided_space<2> sp;
  const T* x;
  T* out;
  __device__ void operator()(std::int64_t i) const {
    std::int64_t o[2];
    offsets_at<Narrow>(sp, i, o);
    out[o[1]] = x[o[0]];
  }
};

template <bool Narrow, class TA, class TB, class TO, class F>
struct binary_elements_kernel {
  strided_space<3> sp;
  const TA* a;
  const TB* b;
  TO* out;
  F f;
  __device__ void operator()(std::int64_t i) const {
    std::int64_t o[3];
    offsets_at<Narrow>(sp, i, o);
    out[o[2]] = f(a[o[0]], b[o[1]]);
  }
};

// Whether a space of n elements fits the 32-bit offsets (every operand is
// dense over at most the space's elements, so its offsets do too).
inline bool narrow(std::int64_t n) { return n < (std::int64_t{1} << 31); }

inline constexpr std::int64_t fold_chunk = std::int64_t{1} << 16;

// Chunk c of output o's fold on one block (item o * chunks + c): the block's
// threads walk the summed space by flat index, each offset computed from
// its index.
template <class T, std::size_t K, class Value, class Combine>
struct fold_block_kernel {
  T* out;
  strided_space<K> kept, summed;
  std::int64_t summed_elements, chunks;
  T init;
  Value value;
  Combine combine;

  __device__ void operator()(std::int64_t item) const {
    const std::int64_t o = item / chunks, first = (item % chunks) * fold_chunk;
    const std::int64_t n = summed_elements - first < fold_chunk ? summed_elements - first : fold_chunk;
    std::int64_t base[K];
    kept.offsets_at(o, base, kept.rank);
    const T acc = cuda::block_fold<T>(
        n,
        [&](std::int64_t i) {
          std::int64_t off[K];
          summed.offsets_at(first + i, off, summed.rank);
          for (std::size_t j = 0; j < K; ++j) off[j] += base[j];
          return value(off);
        },
        init, combine);
    if (threadIdx.x == 0) out[item] = acc;
  }
};

// out[o] = the chunks' results of output o folded in chunk order.
template <class T, class Combine>
struct fold_chunks_kernel {
  const T* partial;
  T* out;
  std::int64_t chunks;
  T init;
  Combine combine;
  __device__ void operator()(std::int64_t o) const {
    T acc = init;
    for (std::int64_t c = 0; c < chunks; ++c) acc = combine(acc, partial[o * chunks + c]);
    out[o] = acc;
  }
};

template <class T, std::size_t K, class Value, class Combine>
void fold_into(cuda_space s, T* out, const dims& od, const strided_space<K>& kept, const strided_space<K>& summed,
               std::int64_t summed_elements, T init, Value value, Combine combine) {
  const std::int64_t outputs = od.elements();
  if (summed_elements >= cuda::threads_per_block / 4 || outputs < 4096) {
    const std::int64_t chunks = std::max<std::int64_t>(1, (summed_elements + fold_chunk - 1) / fold_chunk);
    using block_kernel = fold_block_kernel<T, K, Value, Combine>;
    if (chunks == 1) {
      parallel_for_blocks(s, outputs, block_kernel{out, kept, summed, summed_elements, 1, init, value, combine});
      return;
    }
    scratch<T, cuda_space> partial(static_cast<std::size_t>(outputs * chunks));
    parallel_for_blocks(s, outputs * chunks,
                        block_kernel{partial.data(), kept, summed, summed_elements, chunks, init, value, combine});
    parallel_for(s, outputs, fold_chunks_kernel<T, Combine>{partial.data(), out, chunks, init, combine});
  } else {
    parallel_for(s, outputs,
                 fold_kernel<T, K, Value, Combine>{out, kept, summed, summed_elements, init, value, combine});
  }
}

}  // namespace detail

template <class T>
void broadcast(cuda_space s, const T* x, const dims& xd, T* out, const dims& od) {
  const auto sp = detail::strided<2>(od, {&xd, &od});
  if (detail::narrow(od.elements())) parallel_for(s, od.elements(), detail::copy_elements_kernel<true, T>{sp, x, out});
  else parallel_for(s, od.elements(), detail::copy_elements_kernel<false, T>{sp, x, out});
}

template <class TA, class TB, class TO, class F>
void binary(cuda_space s, const TA* a, const dims& ad, const TB* b, const dims& bd, TO* out, const dims& od, F f) {
  const auto sp = detail::strided<3>(od, {&ad, &bd, &od});
  if (detail::narrow(od.elements())) {
    parallel_for(s, od.elements(), detail::binary_elements_kernel<true, TA, TB, TO, F>{sp, a, b, out, f});
  } else {
    parallel_for(s, od.elements(), detail::binary_elements_kernel<false, TA, TB, TO, F>{sp, a, b, out, f});
  }
}

}  // namespace typemesh::backend

// The strided kernels of backend/strided.hpp on the CUDA space. The host's
// give each thread a whole row (or a whole output's sum), which a CPU core
// walks at full speed; on a GPU a thread per row reads its row alone, so
// neighbouring threads touch addresses a row apart, and a sum to one scalar
// would run on one thread. Here:
//
// - broadcast and binary: one thread per output element, so neighbouring
//   threads write neighbouring elements, offsets in 32-bit arithmetic where
//   the sizes allow;
// - fold_into: the kept (output) and summed spaces first merged (dims of
//   extent 1 dropped, dims every operand walks as one merged into one), so
//   most reductions see one summed dim and step by its stride instead of
//   dividing per element; offsets in 32-bit arithmetic where they fit. Then
//   one of three paths, chosen by the sizes and strides only:
//   (a) the summed dim runs along contiguous memory and the sum is long
//       enough to fill a block (>= 64): a block per output, cut into chunks
//       of fold_chunk elements, a block each. Order: in a chunk, thread t
//       folds flat indices t, t + 256, ... in order, then the block's
//       threads fold as a tree (cuda::block_fold); then a block per output
//       folds its chunks' results the same way. Without this a sum to one
//       scalar would run on one block, one of the GPU's 132 multiprocessors.
//   (b) else, the outputs run along contiguous memory (a column sum, as a
//       bias's gradient over batch and length): a thread per output and
//       chunk, neighbouring threads neighbouring outputs, so each load of a
//       warp is whole sectors. The summed flat indices are cut into at most
//       column_chunks_max chunks of equal length; each thread folds its
//       chunk in flat order, then one thread per output folds the chunks in
//       chunk order.
//   (c) else as (a) where the sum is >= 64 long or the outputs are few, and
//       otherwise a thread per output folding in flat order, the host's
//       kernel.
//   The chunk counts and lengths depend only on the sizes, so a sum is the
//   same bits on every run.
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

// Short enough that a sum to one scalar of 32M elements fills the GPU
// (2048 blocks), long enough that a block's threads fold 64 elements each.
inline constexpr std::int64_t fold_chunk = std::int64_t{1} << 14;

// `sp` with its dims of extent 1 dropped and each dim merged into the one
// before it where every operand steps through both as through one dim (the
// outer stride is the inner one times the inner extent). Flat indices map
// to the same offsets, in the same row-major order, so a fold over the
// merged space is the same fold; most reductions become one dim here.
template <std::size_t K>
strided_space<K> merged_dims(const strided_space<K>& sp) {
  strided_space<K> r;
  for (int d = 0; d < sp.rank; ++d) {
    if (sp.extent[d] == 1) continue;
    bool merges = r.rank > 0;
    for (std::size_t j = 0; j < K && merges; ++j) merges = r.stride[j][r.rank - 1] == sp.stride[j][d] * sp.extent[d];
    if (merges) {
      r.extent[r.rank - 1] *= sp.extent[d];
      for (std::size_t j = 0; j < K; ++j) r.stride[j][r.rank - 1] = sp.stride[j][d];
    } else {
      r.extent[r.rank] = sp.extent[d];
      for (std::size_t j = 0; j < K; ++j) r.stride[j][r.rank] = sp.stride[j][d];
      ++r.rank;
    }
  }
  return r;
}

// Whether offsets_at<true> is exact over `sp`: the flat indices and every
// operand's largest offset under 2^31.
template <std::size_t K>
bool fits_narrow(const strided_space<K>& sp) {
  std::int64_t n = 1;
  for (int d = 0; d < sp.rank; ++d) n *= sp.extent[d];
  if (!narrow(n)) return false;
  for (std::size_t j = 0; j < K; ++j) {
    std::int64_t top = 0;
    for (int d = 0; d < sp.rank; ++d) top += (sp.extent[d] > 0 ? sp.extent[d] - 1 : 0) * sp.stride[j][d];
    if (!narrow(top)) return false;
  }
  return true;
}

// Whether neighbouring indices of sp's last dim are neighbouring (or the
// same) elements of every operand, and neighbouring elements of one: threads
// walking that dim side by side read whole sectors.
template <std::size_t K>
bool unit_inner(const strided_space<K>& sp) {
  if (sp.rank == 0) return false;
  bool one = false;
  for (std::size_t j = 0; j < K; ++j) {
    const std::int64_t st = sp.stride[j][sp.rank - 1];
    if (st != 0 && st != 1) return false;
    one = one || st == 1;
  }
  return one;
}

template <std::size_t K>
__device__ void offsets_either(bool narrow, const strided_space<K>& sp, std::int64_t flat, std::int64_t (&off)[K]) {
  if (narrow) offsets_at<true>(sp, flat, off);
  else offsets_at<false>(sp, flat, off);
}

// Chunk c of output o's fold on one block (item o * chunks + c): the block's
// threads walk the summed space by flat index (thread t: t, t + 256, ...,
// then a tree over the threads, cuda::block_fold). A one-dim summed space
// (the usual case once merged) steps by its stride, no division.
template <class T, std::size_t K, class Value, class Combine>
struct fold_block_kernel {
  T* out;
  strided_space<K> kept, summed;
  std::int64_t summed_elements, chunks;
  bool narrow;
  T init;
  Value value;
  Combine combine;

  __device__ void operator()(std::int64_t item) const {
    const std::int64_t o = item / chunks, first = (item % chunks) * fold_chunk;
    const std::int64_t n = summed_elements - first < fold_chunk ? summed_elements - first : fold_chunk;
    std::int64_t base[K];
    offsets_either(narrow, kept, o, base);
    const T acc = cuda::block_fold<T>(
        n,
        [&](std::int64_t i) {
          std::int64_t off[K];
          if (summed.rank == 1) {
            for (std::size_t j = 0; j < K; ++j) off[j] = base[j] + (first + i) * summed.stride[j][0];
          } else {
            offsets_either(narrow, summed, first + i, off);
            for (std::size_t j = 0; j < K; ++j) off[j] += base[j];
          }
          return value(off);
        },
        init, combine);
    if (threadIdx.x == 0) out[item] = acc;
  }
};

// out[o] = the chunks' results of output o folded on one block
// (cuda::block_fold's fixed order): a scalar's thousands of chunks would be
// a long chain of dependent loads on one thread.
template <class T, class Combine>
struct fold_chunks_kernel {
  const T* partial;
  T* out;
  std::int64_t chunks;
  T init;
  Combine combine;
  __device__ void operator()(std::int64_t o) const {
    const T* mine = partial + o * chunks;
    const T acc = cuda::block_fold<T>(chunks, [=](std::int64_t c) { return mine[c]; }, init, combine);
    if (threadIdx.x == 0) out[o] = acc;
  }
};

// Thread i = c * outputs + o folds chunk c (summed flat indices [c * length,
// (c + 1) * length)) of output o in flat order, into out[i]: neighbouring
// threads take neighbouring outputs, whose elements are neighbours in
// memory (unit_inner(kept)). Along the summed space's last dim the offsets
// step by the stride; a division only where a row of it ends.
template <class T, std::size_t K, class Value, class Combine>
struct fold_columns_kernel {
  T* out;
  strided_space<K> kept, summed;
  std::int64_t outputs, summed_elements, length;
  bool narrow;
  T init;
  Value value;
  Combine combine;

  __device__ void operator()(std::int64_t i) const {
    const std::int64_t o = i % outputs, first = (i / outputs) * length;
    std::int64_t left = summed_elements - first < length ? summed_elements - first : length;
    T acc = init;
    if (left > 0) {
      std::int64_t base[K], off[K], step[K];
      offsets_either(narrow, kept, o, base);
      offsets_either(narrow, summed, first, off);
      const int last = summed.rank - 1;
      const std::int64_t inner = last < 0 ? 1 : summed.extent[last];
      for (std::size_t j = 0; j < K; ++j) {
        off[j] += base[j];
        step[j] = last < 0 ? 0 : summed.stride[j][last];
      }
      std::int64_t flat = first, col = first % inner;
      for (;;) {
        const std::int64_t run = inner - col < left ? inner - col : left;
#pragma unroll 4
        for (std::int64_t r = 0; r < run; ++r) {
          acc = combine(acc, value(off));
          for (std::size_t j = 0; j < K; ++j) off[j] += step[j];
        }
        left -= run;
        if (left == 0) break;
        flat += run;
        col = 0;
        offsets_either(narrow, summed, flat, off);
        for (std::size_t j = 0; j < K; ++j) off[j] += base[j];
      }
    }
    out[i] = acc;
  }
};

// out[o] = partial[c * outputs + o] folded over c in chunk order.
template <class T, class Combine>
struct fold_column_chunks_kernel {
  const T* partial;
  T* out;
  std::int64_t outputs, chunks;
  T init;
  Combine combine;
  __device__ void operator()(std::int64_t o) const {
    T acc = init;
#pragma unroll 8
    for (std::int64_t c = 0; c < chunks; ++c) acc = combine(acc, partial[c * outputs + o]);
    out[o] = acc;
  }
};

// The column path's threads: enough loads in flight (4 each, unrolled) to
// cover a whole GPU's memory latency, in at most column_chunks_max chunks
// (their fold is one thread per output, sequential) of at least
// column_chunk_min elements; with fewer than column_outputs_min outputs a
// warp would not fill a sector, and the block path runs instead.
inline constexpr std::int64_t column_threads = std::int64_t{1} << 18;
inline constexpr std::int64_t column_chunks_max = 256;
inline constexpr std::int64_t column_chunk_min = 16;
inline constexpr std::int64_t column_outputs_min = 32;

template <class T, std::size_t K, class Value, class Combine>
void fold_into(cuda_space s, T* out, const dims& od, const strided_space<K>& kept_dims,
               const strided_space<K>& summed_dims, std::int64_t summed_elements, T init, Value value,
               Combine combine) {
  const std::int64_t outputs = od.elements();
  if (outputs == 0) return;
  const strided_space<K> kept = merged_dims(kept_dims), summed = merged_dims(summed_dims);
  const bool narrow = fits_narrow(kept) && fits_narrow(summed);
  const bool block_path = unit_inner(summed) && summed_elements >= cuda::threads_per_block / 4;
  if (!block_path && unit_inner(kept) && outputs >= column_outputs_min) {
    // (b) a thread per output and chunk; chunks fixed by the sizes.
    std::int64_t chunks = std::clamp<std::int64_t>(column_threads / outputs, 1, column_chunks_max);
    chunks = std::min(chunks, std::max<std::int64_t>(1, summed_elements / column_chunk_min));
    const std::int64_t length = std::max<std::int64_t>(1, (summed_elements + chunks - 1) / chunks);
    chunks = std::max<std::int64_t>(1, (summed_elements + length - 1) / length);
    using column_kernel = fold_columns_kernel<T, K, Value, Combine>;
    if (chunks == 1) {
      parallel_for(s, outputs,
                   column_kernel{out, kept, summed, outputs, summed_elements, length, narrow, init, value, combine});
      return;
    }
    scratch<T, cuda_space> partial(static_cast<std::size_t>(outputs * chunks));
    parallel_for(s, outputs * chunks,
                 column_kernel{partial.data(), kept, summed, outputs, summed_elements, length, narrow, init, value,
                               combine});
    parallel_for(s, outputs, fold_column_chunks_kernel<T, Combine>{partial.data(), out, outputs, chunks, init, combine});
    return;
  }
  if (block_path || summed_elements >= cuda::threads_per_block / 4 || outputs < 4096) {
    // (a) a block per output and chunk of fold_chunk elements.
    const std::int64_t chunks = std::max<std::int64_t>(1, (summed_elements + fold_chunk - 1) / fold_chunk);
    using block_kernel = fold_block_kernel<T, K, Value, Combine>;
    if (chunks == 1) {
      parallel_for_blocks(s, outputs,
                          block_kernel{out, kept, summed, summed_elements, 1, narrow, init, value, combine});
      return;
    }
    scratch<T, cuda_space> partial(static_cast<std::size_t>(outputs * chunks));
    parallel_for_blocks(s, outputs * chunks,
                        block_kernel{partial.data(), kept, summed, summed_elements, chunks, narrow, init, value,
                                     combine});
    parallel_for_blocks(s, outputs, fold_chunks_kernel<T, Combine>{partial.data(), out, chunks, init, combine});
  } else {
    // (c) short sums over outputs that are not neighbours: a thread per
    // output in flat order, the host's kernel.
    parallel_for(s, outputs,
                 fold_kernel<T, K, Value, Combine>{out, kept_dims, summed_dims, summed_elements, init, value, combine});
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

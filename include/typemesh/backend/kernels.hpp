// Local kernels on a device's elements: fills, elementwise maps, sums and
// box copies between dense row-major arrays, for any space (the first
// argument). They never communicate.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/functors.hpp"
#include "typemesh/backend/host/copy_bytes.hpp"
#include "typemesh/backend/parallel.hpp"
#include "typemesh/backend/storage.hpp"

#if defined(__SSE2__) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#endif
#if TYPEMESH_HOST_SIMD
#include <immintrin.h>
#endif

namespace typemesh::backend {

template <class Space, class T>
void fill(Space s, T* out, std::int64_t n, T value) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { out[i] = value; });
}

// out[i] = f(i).
namespace detail {
// Kernels that call a function the caller passes are named structs: nvcc's
// extended lambdas may not capture the caller's own lambdas.
template <class T, class F>
struct generate_kernel {
  T* out;
  F f;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t i) const { out[i] = f(i); }
};
template <class T, class U, class F>
struct map_kernel {
  const T* in;
  U* out;
  F f;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t i) const { out[i] = f(in[i]); }
};
template <class T, class U, class V, class F>
struct zip_kernel {
  const T* a;
  const U* b;
  V* out;
  F f;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t i) const { out[i] = f(a[i], b[i]); }
};
template <class T, class F>
struct zip3_kernel {
  const T* a;
  const T* b;
  const T* c;
  T* out;
  F f;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t i) const { out[i] = f(a[i], b[i], c[i]); }
};
template <class Pred>
struct index_if {
  Pred pred;
  std::int64_t none;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL std::int64_t operator()(std::int64_t i) const { return pred(i) ? i : none; }
};
}  // namespace detail

template <class Space, class T, class F>
void generate(Space s, T* out, std::int64_t n, F f) {
  parallel_for(s, n, detail::generate_kernel<T, F>{out, f});
}

template <class Space, class T>
void copy(Space s, const T* src, T* dst, std::int64_t n) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { dst[i] = src[i]; });
}

// out[i] = f(in[i]); out may be in.
template <class Space, class T, class U, class F>
void map(Space s, const T* in, U* out, std::int64_t n, F f) {
  parallel_for(s, n, detail::map_kernel<T, U, F>{in, out, f});
}

// out[i] = f(a[i], b[i]); out may be a or b.
template <class Space, class T, class U, class V, class F>
void zip(Space s, const T* a, const U* b, V* out, std::int64_t n, F f) {
  parallel_for(s, n, detail::zip_kernel<T, U, V, F>{a, b, out, f});
}

// out[i] = f(a[i], b[i], c[i]); out may be any of them.
template <class Space, class T, class F>
void zip3(Space s, const T* a, const T* b, const T* c, T* out, std::int64_t n, F f) {
  parallel_for(s, n, detail::zip3_kernel<T, F>{a, b, c, out, f});
}

// dst[i] += src[i].
template <class Space, class T>
void add_into(Space s, T* dst, const T* src, std::int64_t n) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { dst[i] += src[i]; });
}


template <class Space, class T>
T sum(Space s, const T* x, std::int64_t n) {
  return parallel_sum(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { return x[i]; }, T{0}, plus<T>{});
}

template <class Space, class T>
T max(Space s, const T* x, std::int64_t n, T lowest) {
  return parallel_sum(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { return x[i]; }, lowest, maximum<T>{});
}


// The smallest i in [0, n) where pred(i) holds, or n: for checks that find
// the first bad element before a kernel runs.
template <class Space, class Pred>
std::int64_t first_where(Space s, std::int64_t n, Pred pred) {
  return parallel_sum(s, n, detail::index_if<Pred>{pred, n}, n, minimum<std::int64_t>{});
}

// One element, read from the space's memory into the host's.
template <class Space, class T>
T read_one(Space s, const T* p) {
  T value;
  copy_elements(host_space{}, &value, s, p, 1);
  return value;
}

// A box of a dense row-major array: the array's extents and the box's corner.
template <std::size_t Rank>
struct region {
  std::array<std::int64_t, Rank> array_extent{};
  std::array<std::int64_t, Rank> begin{};
};

namespace detail {
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

// A box copy between two row-major arrays (Rank >= 1): the box's extent,
// each array's strides, and where the box starts in each. The host's rows
// (copy_rows) and the GPU's elements (backend/cuda/kernels.hpp) walk it.
template <class T, std::size_t Rank>
struct box_copy {
  const T* src;
  T* dst;
  std::int64_t extent[Rank];
  std::int64_t src_stride[Rank];
  std::int64_t dst_stride[Rank];
  std::int64_t src_offset;
  std::int64_t dst_offset;
};

template <class T, std::size_t Rank>
box_copy<T, Rank> box_copy_of(const T* src, const region<Rank>& from, T* dst, const region<Rank>& to,
                              const std::array<std::int64_t, Rank>& extent) {
  box_copy<T, Rank> b{src, dst, {}, {}, {}, 0, 0};
  const auto ss = strides(from.array_extent), ds = strides(to.array_extent);
  for (std::size_t i = 0; i < Rank; ++i) {
    b.extent[i] = extent[i];
    b.src_stride[i] = ss[i];
    b.dst_stride[i] = ds[i];
    b.src_offset += from.begin[i] * ss[i];
    b.dst_offset += to.begin[i] * ds[i];
  }
  return b;
}

// The rows of a host box copy (extent's last entry is the row length):
// where each starts in src and in dst.
template <class T, std::size_t Rank>
struct copy_rows : box_copy<T, Rank> {
  // Where row `row` starts in src and in dst, and (if asked) its
  // coordinate in each outer dim.
  void locate(std::int64_t row, std::int64_t& s, std::int64_t& d, std::int64_t* index = nullptr) const {
    s = this->src_offset, d = this->dst_offset;
    for (std::size_t i = Rank - 1; i-- > 0;) {
      std::int64_t c = row % this->extent[i];
      row /= this->extent[i];
      s += c * this->src_stride[i];
      d += c * this->dst_stride[i];
      if (index) index[i] = c;
    }
  }
};

// The rows of a host box copy (Rank >= 1, no zero extent) and how many
// there are. Trailing dims the box spans whole in both arrays join the row,
// up to default_grain elements (more rows are left for the kernel threads):
// few long copies instead of many short ones. The joined dims become ones.
template <class T, std::size_t Rank>
copy_rows<T, Rank> rows_of(const T* src, const region<Rank>& from, T* dst, const region<Rank>& to,
                           const std::array<std::int64_t, Rank>& extent, std::int64_t& rows) {
  copy_rows<T, Rank> k{box_copy_of(src, from, dst, to, extent)};
  rows = 1;
  for (std::size_t i = 0; i + 1 < Rank; ++i) rows *= extent[i];
  std::size_t last = Rank - 1;
  while (last > 0 && extent[last] == from.array_extent[last] &&
         extent[last] == to.array_extent[last] && k.extent[last - 1] * k.extent[last] <= default_grain) {
    k.extent[last - 1] *= k.extent[last];
    k.extent[last] = 1;
    rows /= extent[last - 1];
    --last;
  }
  if (last != Rank - 1) {
    // Move the joined row to the last place, where copy_rows expects it.
    k.extent[Rank - 1] = k.extent[last];
    k.extent[last] = 1;
    k.src_stride[last] = k.dst_stride[last] = 0;
  }
  return k;
}

#if defined(__SANITIZE_THREAD__)
#define TYPEMESH_STREAM_STORES 0  // the race detector does not see them
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TYPEMESH_STREAM_STORES 0
#endif
#endif
#if !defined(TYPEMESH_STREAM_STORES)
#if defined(__SSE2__) && !defined(__CUDA_ARCH__)
#define TYPEMESH_STREAM_STORES 1
#else
#define TYPEMESH_STREAM_STORES 0
#endif
#endif

#if TYPEMESH_STREAM_STORES && TYPEMESH_HOST_SIMD
// Non-temporal copies in blocks of four 32-byte (AVX) or 64-byte (AVX-512)
// stores, to a destination aligned to the store's width: copy_in_blocks'
// loop, its store a lambda that carries the function's target (so that the
// intrinsic inlines into it). A 64-byte store fills a cache line at once:
// on a Zen 4 EPYC a receiver gathering 512 B rows from 4 KiB apart (case 2r
// of the conversions benchmark, 32 MiB) took 1.4-1.8x less time than with
// 16-byte stores; the other cases were level (docs/performance.md).
__attribute__((target("avx"))) inline void stream_avx(std::byte* d, const std::byte* s, std::size_t n) {
  host::detail::copy_in_blocks<__m256i>(d, s, n, [](std::byte* at, const __m256i& v) __attribute__((target("avx"))) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(at), v);
  });
}
__attribute__((target("avx512f"))) inline void stream_avx512(std::byte* d, const std::byte* s, std::size_t n) {
  host::detail::copy_in_blocks<__m512i>(d, s, n, [](std::byte* at, const __m512i& v) __attribute__((target("avx512f"))) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(at), v);
  });
}
#endif

#if TYPEMESH_STREAM_STORES
// stream_bytes' loop for one instruction set (SSE2 for none); tests call it
// with each the CPU has.
inline void stream_vectors(std::byte* d, const std::byte* s, std::size_t n, host::simd_isa isa) {
  const std::size_t width = isa == host::simd_isa::avx512 ? 64 : isa == host::simd_isa::avx2 ? 32 : 16;
  const std::size_t head = std::min(n, (width - (reinterpret_cast<std::uintptr_t>(d) & (width - 1))) & (width - 1));
  if (head > 0) {  // a call per row showed in copies of 512 B rows
    std::memcpy(d, s, head);
    d += head, s += head, n -= head;
  }
#if TYPEMESH_HOST_SIMD
  if (isa == host::simd_isa::avx512) return stream_avx512(d, s, n);
  if (isa == host::simd_isa::avx2) return stream_avx(d, s, n);
#endif
  host::detail::copy_in_blocks<__m128i>(d, s, n, [](std::byte* at, const __m128i& v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(at), v);
  });
}
#endif

// Copies n bytes with stores that bypass the caches where the machine has
// them (x86's non-temporal stores, as wide as the CPU has), else memcpy.
// Such stores are ordered only by stream_fence, which the copying thread
// must call before another thread may read what it wrote.
inline void stream_bytes(std::byte* d, const std::byte* s, std::size_t n) {
#if TYPEMESH_STREAM_STORES
  stream_vectors(d, s, n, host::detected_simd_isa());
#else
  if (n > 0) std::memcpy(d, s, n);
#endif
}
inline void stream_fence() {
#if TYPEMESH_STREAM_STORES
  _mm_sfence();
#endif
}

// Walks the rows of a copy_rows in order from a given row, adding strides
// where locate divides once per dim: rows of 512 B are short enough for the
// divisions to show.
template <class T, std::size_t Rank>
struct row_walk {
  const copy_rows<T, Rank>& rows;
  std::int64_t index[Rank]{};  // the row's coordinate in each outer dim
  std::int64_t s = 0, d = 0;   // where it starts in src and in dst

  row_walk(const copy_rows<T, Rank>& r, std::int64_t row) : rows(r) { rows.locate(row, s, d, index); }
  void next() {
    for (std::size_t i = Rank - 1; i-- > 0;) {
      s += rows.src_stride[i], d += rows.dst_stride[i];
      if (++index[i] < rows.extent[i]) return;
      s -= index[i] * rows.src_stride[i], d -= index[i] * rows.dst_stride[i];
      index[i] = 0;
    }
  }
};

// Copies a box's rows a block at a time, walking from row to row (one
// locate per block): with rows of 512 B, a locate per row took a quarter of
// a copy's time within the L2 cache. Streamed blocks (stream_box) write
// with stream_bytes and end with one fence. Rows shorter than a page (a
// receiver's 512 B out of every 4 KiB of a sender's rows) each start in a
// new 4 KiB page, where the hardware prefetchers stop, so a streamed block
// prefetches the sources of the rows about 8 KiB ahead, into the L2 cache
// only (into L1 made the conversion benchmark's 1r and 2r 1.2-1.5x slower;
// plain blocks, whose sources are in a cache, ran slower with it).
template <class T, std::size_t Rank>
struct copy_row_blocks {
  copy_rows<T, Rank> rows;
  std::int64_t per_block, count;
  bool streamed;

  void operator()(std::int64_t block) const {
    const std::int64_t first = block * per_block, end = std::min(count, first + per_block);
    const auto bytes = static_cast<std::size_t>(rows.extent[Rank - 1]) * sizeof(T);
    row_walk<T, Rank> at(rows, first);
    if (!streamed) {
      for (std::int64_t row = first; row < end; ++row, at.next()) host::copy_bytes(rows.dst + at.d, rows.src + at.s, bytes);
      return;
    }
    constexpr std::size_t page_bytes = 4096, prefetch_bytes = 8192;
    const std::int64_t ahead = bytes < page_bytes ? std::int64_t(prefetch_bytes / bytes) : 0;
    row_walk<T, Rank> soon(rows, std::min(first + ahead, count - 1));
    for (std::int64_t row = first; row < end; ++row, at.next()) {
      if (ahead > 0 && row + ahead < count) {
        const char* p = reinterpret_cast<const char*>(rows.src + soon.s);
        for (std::size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 1);
        soon.next();
      }
      stream_bytes(reinterpret_cast<std::byte*>(rows.dst + at.d), reinterpret_cast<const std::byte*>(rows.src + at.s),
                   bytes);
    }
    stream_fence();
  }
};

// A box copy on the host: copy_row_blocks over the box's rows, a block of
// about 64 KiB for each index of the parallel loop.
template <class T, std::size_t Rank>
void copy_box_in_blocks(host_space space, const T* src, const region<Rank>& from, T* dst, const region<Rank>& to,
                        const std::array<std::int64_t, Rank>& extent, bool streamed) {
  for (std::size_t i = 0; i < Rank; ++i)
    if (extent[i] == 0) return;
  if constexpr (Rank == 0) {
    *dst = *src;
  } else {
    std::int64_t rows = 0;
    const auto k = rows_of(src, from, dst, to, extent, rows);
    const std::int64_t row_bytes = k.extent[Rank - 1] * std::int64_t(sizeof(T));
    const std::int64_t per_block = std::max<std::int64_t>(1, (std::int64_t(64) << 10) / row_bytes);
    const std::int64_t blocks = (rows + per_block - 1) / per_block;
    parallel_for(space, blocks, copy_row_blocks<T, Rank>{k, per_block, rows, streamed},
                 grain_for(per_block * k.extent[Rank - 1]));
  }
}
}  // namespace detail

// Copies a box of `extent` from src (at from.begin) into dst (at to.begin),
// both in host memory (backend/cuda/kernels.hpp has the GPU's).
template <class T, std::size_t Rank>
void copy_box(host_space space, const T* src, const region<Rank>& from, T* dst, const region<Rank>& to,
              const std::array<std::int64_t, Rank>& extent) {
  detail::copy_box_in_blocks(space, src, from, dst, to, extent, false);
}

// copy_box for a large target that is not read again soon (a transfer's
// target slice of megabytes): on the host its stores bypass the caches, which
// spares reading each target line in before it is overwritten, a third of the
// copy's memory traffic. Every element is written and visible to other threads
// when it returns, as with copy_box.
template <class T, std::size_t Rank>
void stream_box(host_space space, const T* src, const region<Rank>& from, T* dst, const region<Rank>& to,
                const std::array<std::int64_t, Rank>& extent) {
  detail::copy_box_in_blocks(space, src, from, dst, to, extent, TYPEMESH_STREAM_STORES != 0);
}

}  // namespace typemesh::backend

#if defined(TYPEMESH_CUDA)
#include "typemesh/backend/cuda/kernels.hpp"
#endif

// host::copy_bytes: std::memcpy for the library's host copies (box rows,
// tensor copies, host collectives, MPI message copies), without one trap.
//
// glibc 2.36 (Debian 12) copies from 4 KiB up with `rep movsb`, which on AMD
// Zen 3 runs at about 1.6 GB/s instead of 25-50 GB/s when the destination
// lies 1 to 31 bytes past the source modulo 64 (measured from 4 KiB to
// 256 KiB; 1 KiB and 1 MiB copies were unaffected; newer glibc versions avoid
// `rep movsb` on such CPUs). Blocks from malloc are only 16-byte aligned, so
// about half of all pairs of buffers met it, and a conversion, a collective or
// the memcpy reference of a benchmark ran up to 20x slower by the luck of its
// buffers' addresses (docs/performance.md). From 4 KiB, a copy whose ends are
// not aligned alike modulo 64 runs the loop here instead: vector loads and
// aligned stores, 26-35 GB/s with SSE2 and 31-52 GB/s with AVX in L1 to L3,
// where glibc gave 24-49 GB/s for buffers aligned alike.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "typemesh/backend/host/simd.hpp"

namespace typemesh::backend::host {

// Copies of fewer bytes always go to std::memcpy (below glibc's threshold
// for `rep movsb`).
inline constexpr std::size_t own_copy_min_bytes = 4096;

namespace detail {
// Copies n bytes in blocks of four vectors of type V (loaded unaligned, each
// written with store(at, v)), then the rest with memcpy. Written once for
// copy_bytes' loops and stream_bytes (backend/kernels.hpp), inlined into
// each with its vector type and store.
template <class V, class Store>
[[gnu::always_inline]] inline void copy_in_blocks(std::byte* d, const std::byte* s, std::size_t n, Store store) {
  constexpr std::size_t w = sizeof(V), step = 4 * w;
  for (; n >= step; n -= step, d += step, s += step) {
    V a, b, c, e;
    std::memcpy(&a, s, w);
    std::memcpy(&b, s + w, w);
    std::memcpy(&c, s + 2 * w, w);
    std::memcpy(&e, s + 3 * w, w);
    store(d, a);
    store(d + w, b);
    store(d + 2 * w, c);
    store(d + 3 * w, e);
  }
  if (n) std::memcpy(d, s, n);
}

#if TYPEMESH_HOST_SIMD
// The copy_bytes loop with vectors of V: the bytes up to the destination's
// next 64-byte boundary with memcpy, then aligned stores.
template <class V>
[[gnu::always_inline]] inline void copy_aligning(std::byte* d, const std::byte* s, std::size_t n) {
  const std::size_t head = std::min(n, (64 - (reinterpret_cast<std::uintptr_t>(d) & 63)) & 63);
  std::memcpy(d, s, head);
  copy_in_blocks<V>(d + head, s + head, n - head, [](std::byte* at, const V& v) { *reinterpret_cast<V*>(at) = v; });
}

typedef char bytes16 __attribute__((vector_size(16)));
typedef char bytes32 __attribute__((vector_size(32)));
inline void copy_sse2(std::byte* d, const std::byte* s, std::size_t n) { copy_aligning<bytes16>(d, s, n); }
__attribute__((target("avx"))) inline void copy_avx(std::byte* d, const std::byte* s, std::size_t n) {
  copy_aligning<bytes32>(d, s, n);
}

// copy_bytes' own loop: AVX for any isa but none (a CPU with AVX2 has AVX),
// else SSE2. Tests call it with each.
inline void copy_vectors(void* dst, const void* src, std::size_t n, simd_isa isa) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  if (isa != simd_isa::none) copy_avx(d, s, n);
  else copy_sse2(d, s, n);
}
#endif
}  // namespace detail

// Copies n bytes from src to dst, which do not overlap, as std::memcpy does.
inline void copy_bytes(void* dst, const void* src, std::size_t n) {
#if TYPEMESH_HOST_SIMD
  const auto apart = reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src);
  if (n >= own_copy_min_bytes && (apart & 63) != 0) return detail::copy_vectors(dst, src, n, detected_simd_isa());
#endif
  if (n) std::memcpy(dst, src, n);
}

}  // namespace typemesh::backend::host

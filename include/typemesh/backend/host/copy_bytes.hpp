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

#if TYPEMESH_HOST_SIMD
#include <immintrin.h>
#endif

namespace typemesh::backend::host {

// Copies of fewer bytes always go to std::memcpy (below glibc's threshold
// for `rep movsb`).
inline constexpr std::size_t own_copy_min_bytes = 4096;

namespace detail {
#if TYPEMESH_HOST_SIMD
// Bytes up to the destination's next 64-byte boundary, with memcpy.
inline std::size_t copy_head(std::byte*& d, const std::byte*& s, std::size_t n) {
  const std::size_t head = std::min(n, (64 - (reinterpret_cast<std::uintptr_t>(d) & 63)) & 63);
  std::memcpy(d, s, head);
  d += head, s += head;
  return n - head;
}

inline void copy_sse2(std::byte* d, const std::byte* s, std::size_t n) {
  n = copy_head(d, s, n);
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_store_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_store_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_store_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_store_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, n);
}

__attribute__((target("avx"))) inline void copy_avx(std::byte* d, const std::byte* s, std::size_t n) {
  n = copy_head(d, s, n);
  for (; n >= 128; n -= 128, d += 128, s += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_store_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + 96), e);
  }
  std::memcpy(d, s, n);
}
#endif
}  // namespace detail

// Copies n bytes from src to dst, which do not overlap, as std::memcpy does.
// `isa` picks the loop for copies that need one (tests try each); any value
// but none means the CPU runs AVX.
inline void copy_bytes(void* dst, const void* src, std::size_t n, simd_isa isa = detected_simd_isa()) {
#if TYPEMESH_HOST_SIMD
  const auto apart = reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src);
  if (n >= own_copy_min_bytes && (apart & 63) != 0) {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    if (isa != simd_isa::none) detail::copy_avx(d, s, n);
    else detail::copy_sse2(d, s, n);
    return;
  }
#else
  (void)isa;
#endif
  if (n) std::memcpy(dst, src, n);
}

}  // namespace typemesh::backend::host

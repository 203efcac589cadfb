// Float GEMMs whose second operand fits the L1 cache, on the host: C [m, n] =
// alpha * op(A) [m, k] . op(B) [k, n] + beta * C, row-major, for k x n at
// most 8 Ki floats (32 KiB) and n whole vectors. Attention's per-head
// products are such: 128 x 128 x 64 and 128 x 64 x 128 for each batch entry
// and head, 768 calls a step in the peer Transformer. A BLAS packs both
// operands and zero-fills C on every call, which at these sizes weighs:
// OpenBLAS ran them at 70-90 GFLOP/s where these kernels ran at 110-125 on
// the same operands (docs/performance.md).
//
// op(B) is copied once per call into a contiguous [k, n] buffer (read in
// place where it already is one), so it stays in L1 while C's rows pass in
// blocks of 6 (AVX2: 4) rows by 4 (AVX2: 3) vectors: for each p, those
// vectors of the buffer's row p times op(A)[i, p] broadcast. A is read
// where it lies, as stored or transposed. Each C element is the sum over p
// in order in one lane, whatever the blocks, so its bits do not depend on
// the thread count.
#pragma once

#include <algorithm>
#include <cstdint>

#include "typemesh/backend/host/simd.hpp"
#include "typemesh/backend/host/small_gemm.hpp"
#include "typemesh/backend/parallel.hpp"

// The AVX-512 transpose is written with __builtin_shufflevector (GCC 12,
// Clang); without it B is transposed by a plain loop.
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define TYPEMESH_NARROW_GEMM_SHUFFLES 1
#endif
#endif
#ifndef TYPEMESH_NARROW_GEMM_SHUFFLES
#define TYPEMESH_NARROW_GEMM_SHUFFLES 0
#endif

namespace typemesh::backend::host {

// The most floats of op(B) the kernels take: 32 KiB, two thirds of the L1
// data cache of recent x86 cores, leaving room for C's and A's lines.
inline constexpr std::int64_t narrow_gemm_b_floats = 8192;
// The most rows they take: larger products are BLAS's, which blocks A for
// the caches (these kernels were measured up to 512 rows).
inline constexpr std::int64_t narrow_gemm_rows = 512;

// The instruction set the kernels run this product with, or none: m at most
// narrow_gemm_rows, n a multiple of 16, k at least 16 and, with B
// transposed, a multiple of 16, k x n at most narrow_gemm_b_floats.
inline simd_isa narrow_gemm_suits(bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (m < 1 || m > narrow_gemm_rows || n < 16 || n % 16 != 0 || k < 16 || (trans_b && k % 16 != 0)) {
    return simd_isa::none;
  }
  return k * n <= narrow_gemm_b_floats ? detected_simd_isa() : simd_isa::none;
}

#if TYPEMESH_HOST_SIMD
namespace narrow_gemm_kernels {

using simd::lanes;
using simd::load;
using simd::store;

// One product (small_gemm's operands), B already in its [k, n] buffer.
using small_gemm_kernels::operands;

// Rows [i0, i0 + MR) and columns [j0, j0 + NV lanes) of C. C is not read
// where beta is 0 (it may be uninitialised).
template <class V, bool TransA, int MR, int NV>
[[gnu::always_inline]] inline void block(const operands& o, std::int64_t i0, std::int64_t j0) {
  constexpr int w = lanes<V>;
  V acc[MR][NV] = {};
  const float* b = o.b + j0;
  for (std::int64_t p = 0; p < o.k; ++p, b += o.ldb) {
    V bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) load(bv[v], b + v * w);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float s = TransA ? o.a[p * o.lda + i0 + r] : o.a[(i0 + r) * o.lda + p];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += bv[v] * s;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float* c = o.c + (i0 + r) * o.ldc + j0 + v * w;
      V out = acc[r][v] * o.alpha;
      if (o.beta != 0.0f) {
        V old;
        load(old, c);
        out += old * o.beta;
      }
      store(c, out);
    }
  }
}

// Register blocking per vector width: the accumulators (MR x NV), the
// loaded vectors and a broadcast fit the registers (32 for AVX-512, 16 for
// AVX2).
template <class V>
struct blocking;
template <>
struct blocking<simd::v16> {
  static constexpr int rows = 6, vectors = 4;  // 24 accumulators
};
template <>
struct blocking<simd::v8> {
  static constexpr int rows = 4, vectors = 3;  // 12 accumulators
};

// `count` (< MR) rows from i0 as one block.
template <class V, bool TransA, int NV, int MR>
[[gnu::always_inline]] inline void short_block(const operands& o, std::int64_t i0, std::int64_t count,
                                               std::int64_t j0) {
  if constexpr (MR > 1) {
    if (count == MR - 1) return block<V, TransA, MR - 1, NV>(o, i0, j0);
    short_block<V, TransA, NV, MR - 1>(o, i0, count, j0);
  }
}

// Rows [i0, i1) of C, columns [j0, j0 + NV lanes).
template <class V, bool TransA, int NV>
[[gnu::always_inline]] inline void panel(const operands& o, std::int64_t i0, std::int64_t i1, std::int64_t j0) {
  constexpr int mr = blocking<V>::rows;
  std::int64_t i = i0;
  for (; i + mr <= i1; i += mr) block<V, TransA, mr, NV>(o, i, j0);
  if (i < i1) short_block<V, TransA, NV, mr>(o, i, i1 - i, j0);
}

// Rows [i0, i1) of C, every column: panels of the blocking's vectors, then
// the rest of the columns (fewer vectors) in one panel. Plain calls, not a
// generic lambda: a lambda's body would be compiled for the plain target,
// not the calling function's.
template <class V, bool TransA>
[[gnu::always_inline]] inline void rows(const operands& o, std::int64_t i0, std::int64_t i1) {
  constexpr int w = lanes<V>, nv = blocking<V>::vectors;
  static_assert(nv <= 4, "the switch below goes up to 4 vectors");
  std::int64_t j = 0;
  for (; j + nv * w <= o.n; j += nv * w) panel<V, TransA, nv>(o, i0, i1, j);
  switch ((o.n - j) / w) {
    case 1: panel<V, TransA, 1>(o, i0, i1, j); break;
    case 2: panel<V, TransA, 2>(o, i0, i1, j); break;
    case 3: panel<V, TransA, 3>(o, i0, i1, j); break;
    default: break;
  }
}

// The instruction-set-specific entry points: rows [i0, i1) of C.
__attribute__((target("avx512f,fma"))) inline void rows_avx512(const operands& o, bool trans_a, std::int64_t i0,
                                                               std::int64_t i1) {
  if (trans_a) rows<simd::v16, true>(o, i0, i1);
  else rows<simd::v16, false>(o, i0, i1);
}
__attribute__((target("avx2,fma"))) inline void rows_avx2(const operands& o, bool trans_a, std::int64_t i0,
                                                          std::int64_t i1) {
  if (trans_a) rows<simd::v8, true>(o, i0, i1);
  else rows<simd::v8, false>(o, i0, i1);
}

#if TYPEMESH_NARROW_GEMM_SHUFFLES
// The steps of a 16 x 16 transpose in registers. Within each 128-bit
// quarter: elements 0 and 1 (or 2 and 3) of a and b interleaved; pairs of
// elements likewise. Across quarters: the even (odd) quarters of a, then of
// b. Functions, not lambdas: a lambda's body would be compiled for the plain
// target.
#define TYPEMESH_NARROW_GEMM_SHUFFLE(name, ...)                                               \
  __attribute__((target("avx512f"), always_inline)) inline simd::v16 name(const simd::v16& a, \
                                                                          const simd::v16& b) { \
    return __builtin_shufflevector(a, b, __VA_ARGS__);                                        \
  }
TYPEMESH_NARROW_GEMM_SHUFFLE(elements_lo, 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29)
TYPEMESH_NARROW_GEMM_SHUFFLE(elements_hi, 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31)
TYPEMESH_NARROW_GEMM_SHUFFLE(pairs_lo, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29)
TYPEMESH_NARROW_GEMM_SHUFFLE(pairs_hi, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31)
TYPEMESH_NARROW_GEMM_SHUFFLE(quarters_even, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
TYPEMESH_NARROW_GEMM_SHUFFLE(quarters_odd, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31)
#undef TYPEMESH_NARROW_GEMM_SHUFFLE

// dst [k, n] (row stride n) = the transpose of src [n, k] (row stride lds),
// n and k multiples of 16, in 16 x 16 tiles. Per head of the peer
// Transformer (a 128 x 64 block of K, rows 2 KiB apart): 2.2 us, against
// 3.6 us for a plain loop over src's rows and 9.3 us over dst's.
__attribute__((target("avx512f"))) inline void transpose_avx512(const float* src, std::int64_t lds, float* dst,
                                                                std::int64_t n, std::int64_t k) {
  for (std::int64_t j0 = 0; j0 < n; j0 += 16) {
    for (std::int64_t p0 = 0; p0 < k; p0 += 16) {
      simd::v16 r[16], t[16];
      for (int i = 0; i < 16; ++i) load(r[i], src + (j0 + i) * lds + p0);
      for (int i = 0; i < 8; ++i) {
        t[2 * i] = elements_lo(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = elements_hi(r[2 * i], r[2 * i + 1]);
      }
      // Now quarter q of r[4i + c] is column 4q + c of rows 4i to 4i + 3.
      for (int i = 0; i < 4; ++i) {
        r[4 * i] = pairs_lo(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = pairs_hi(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = pairs_lo(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = pairs_hi(t[4 * i + 1], t[4 * i + 3]);
      }
      for (int i = 0; i < 4; ++i) {
        t[i] = quarters_even(r[i], r[4 + i]);
        t[4 + i] = quarters_odd(r[i], r[4 + i]);
        t[8 + i] = quarters_even(r[8 + i], r[12 + i]);
        t[12 + i] = quarters_odd(r[8 + i], r[12 + i]);
      }
      // And now r[c] is column c.
      for (int i = 0; i < 4; ++i) {
        r[i] = quarters_even(t[i], t[8 + i]);
        r[8 + i] = quarters_odd(t[i], t[8 + i]);
        r[4 + i] = quarters_even(t[4 + i], t[12 + i]);
        r[12 + i] = quarters_odd(t[4 + i], t[12 + i]);
      }
      for (int c = 0; c < 16; ++c) store(dst + (p0 + c) * n + j0, r[c]);
    }
  }
}
#endif

}  // namespace narrow_gemm_kernels
#endif

// C = alpha * op(A) . op(B) + beta * C with the kernels of `isa`, which
// narrow_gemm_suits gave for these sizes. Blocks of C's rows go to the
// kernel threads (inside another kernel, all on this thread).
inline void narrow_gemm(simd_isa isa, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                        float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                        float* c, std::int64_t ldc) {
#if TYPEMESH_HOST_SIMD
  using namespace narrow_gemm_kernels;
  alignas(64) float buffer[narrow_gemm_b_floats];
  const float* packed = b;
  std::int64_t ld = ldb;
  if (trans_b) {
    // B's rows are C's columns. Without AVX-512, a loop over B's rows
    // (reading in order) beat one over the buffer's by 2.6x.
    if (TYPEMESH_NARROW_GEMM_SHUFFLES && isa == simd_isa::avx512) {
#if TYPEMESH_NARROW_GEMM_SHUFFLES
      transpose_avx512(b, ldb, buffer, n, k);
#endif
    } else {
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t p = 0; p < k; ++p) buffer[p * n + j] = b[j * ldb + p];
    }
    packed = buffer, ld = n;
  } else if (ldb != n) {
    for (std::int64_t p = 0; p < k; ++p) std::copy_n(b + p * ldb, n, buffer + p * n);
    packed = buffer, ld = n;
  }
  const operands o{a, lda, packed, ld, c, ldc, m, n, k, alpha, beta};
  const bool wide = isa == simd_isa::avx512;
  const std::int64_t block = wide ? blocking<simd::v16>::rows : blocking<simd::v8>::rows;
  const std::int64_t blocks = (m + block - 1) / block;
  parallel_for(
      host_space{}, blocks,
      [=](std::int64_t item) {
        const std::int64_t i0 = item * block, i1 = std::min(m, i0 + block);
        if (wide) rows_avx512(o, trans_a, i0, i1);
        else rows_avx2(o, trans_a, i0, i1);
      },
      grain_for(2 * block * n * k));
#else
  (void)isa, (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
  (void)ldb, (void)beta, (void)c, (void)ldc;
#endif
}

}  // namespace typemesh::backend::host

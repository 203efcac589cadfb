// Float GEMMs with few rows on the host, without packing: C [m, n] = alpha *
// A [m, k] . op(B) + beta * C, row-major, for m <= 32. An LSTM step's
// recurrent products are such: 32 rows of h against the 512 x 2048 hidden
// half of the weight, forward, and the step's gate gradients against its
// transpose, backward. A BLAS packs all of B on every call, which for 32
// rows costs about a third of the product; these kernels read B where it
// lies (host/simd.hpp: AVX-512 or AVX2, chosen at run time).
//
//   B as stored ([k, n]): C's rows in blocks of 8 (AVX2: 4), its columns in
//     blocks of 3 vectors; for each p, those vectors of B's row p times
//     A[i, p] broadcast, B's rows in chunks that stay in the L1 cache while
//     every block of rows passes. Each C element is the sum over p in order.
//   B transposed ([n, k], C[i, j] = A's row i . B's row j): blocks of 4
//     (AVX2: 2) rows of A and 4 rows of B, a vector accumulator per pair over
//     p in vector steps, then its lanes added in order.
//
// Threads take blocks of C's columns; every element's sum is computed by one
// thread in one fixed order, so the bits do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>

#include "typemesh/backend/host/simd.hpp"
#include "typemesh/backend/parallel.hpp"

namespace typemesh::backend::host {

// The largest m the kernels take, and the most bytes of B they expect one
// column block (as stored, at most 64 columns) or of A (transposed) to keep
// in cache.
inline constexpr std::int64_t small_gemm_rows = 32;
inline constexpr std::int64_t small_gemm_panel_bytes = std::int64_t{512} << 10;
// The most bytes of B as stored the kernels take: walking a larger B column
// panel by column panel ran at half of sgemm's rate (32 x 1024 x 4096, 16 MiB:
// 63 against 120 GFLOP/s in the ops benchmark at 2 threads, where the 4 MiB of
// an LSTM step of 512 units ran at 1.7 times sgemm's).
inline constexpr std::int64_t small_gemm_stored_bytes = std::int64_t{4} << 20;

// The instruction set the kernels run this product with, or none: m at most
// small_gemm_rows, A as stored; with B as stored, n a multiple of 16, a
// 64-column panel of B within small_gemm_panel_bytes and all of B within
// small_gemm_stored_bytes; with B transposed, k a
// multiple of 16 and A within small_gemm_panel_bytes.
inline simd_isa small_gemm_suits(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (trans_a || m < 1 || m > small_gemm_rows || n < 1 || k < 16) return simd_isa::none;
  const std::int64_t panel = trans_b ? m * k * 4 : k * 64 * 4;
  const bool fits = trans_b ? k % 16 == 0 : n % 16 == 0 && k * n * 4 <= small_gemm_stored_bytes;
  return fits && panel <= small_gemm_panel_bytes ? detected_simd_isa() : simd_isa::none;
}

#if TYPEMESH_HOST_SIMD
namespace small_gemm_kernels {

using simd::lanes;
using simd::load;
using simd::store;

// The operands of one product.
struct operands {
  const float* a;
  std::int64_t lda;
  const float* b;
  std::int64_t ldb;
  float* c;
  std::int64_t ldc;
  std::int64_t m, n, k;
  float alpha, beta;
};

// c = alpha * acc + beta * c, not reading c where beta is 0 (it may be
// uninitialised).
[[gnu::always_inline]] inline void finish(float* c, float acc, float alpha, float beta) {
  *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

// Rows [i0, i0 + MR) and columns [j0, j0 + NV lanes) of C, B as stored,
// over B's rows [p0, p1): the sums start from `partial` (rows of NV lanes,
// row i0 first) unless p0 is 0, and go back there unless p1 is k, where C
// is written. Each C element's sum runs over p in order in one lane
// whatever the chunks, so its bits do not depend on them.
template <class V, int MR, int NV>
[[gnu::always_inline]] inline void stored_block(const operands& o, std::int64_t i0, std::int64_t j0, std::int64_t p0,
                                                std::int64_t p1, float* partial) {
  constexpr int w = lanes<V>;
  V acc[MR][NV] = {};
  if (p0 > 0) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) load(acc[r][v], partial + (i0 + r) * NV * w + v * w);
  }
  const float* b = o.b + p0 * o.ldb + j0;
  for (std::int64_t p = p0; p < p1; ++p, b += o.ldb) {
    V bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) load(bv[v], b + v * w);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float s = o.a[(i0 + r) * o.lda + p];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += bv[v] * s;
    }
  }
  if (p1 < o.k) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) store(partial + (i0 + r) * NV * w + v * w, acc[r][v]);
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* c = o.c + (i0 + r) * o.ldc + j0;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float sums[w];
      store(sums, acc[r][v]);
      for (int l = 0; l < w; ++l) finish(c + v * w + l, sums[l], o.alpha, o.beta);
    }
  }
}

// Rows [i0, i0 + MR) of A against rows [j0, j0 + JR) of B (B transposed).
template <class V, int MR, int JR>
[[gnu::always_inline]] inline void transposed_block(const operands& o, std::int64_t i0, std::int64_t j0) {
  constexpr int w = lanes<V>;
  V acc[MR][JR] = {};
  for (std::int64_t p = 0; p < o.k; p += w) {
    V av[MR], bv[JR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) load(av[r], o.a + (i0 + r) * o.lda + p);
#pragma GCC unroll 8
    for (int q = 0; q < JR; ++q) load(bv[q], o.b + (j0 + q) * o.ldb + p);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int q = 0; q < JR; ++q) acc[r][q] += av[r] * bv[q];
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < JR; ++q) {
      float lane_values[w];
      store(lane_values, acc[r][q]);
      float sum = 0.0f;
      for (int l = 0; l < w; ++l) sum += lane_values[l];
      finish(o.c + (i0 + r) * o.ldc + j0 + q, sum, o.alpha, o.beta);
    }
}

// Register blocking per vector width: rows of A (MR) by vectors of C's
// columns (NV, B as stored) or rows of B (JR, transposed), so that the
// accumulators and the loaded vectors fit the registers (32 for AVX-512, 16
// for AVX2).
template <class V>
struct blocking;
template <>
struct blocking<simd::v16> {
  static constexpr int stored_rows = 8, stored_vectors = 3;  // 24 accumulators
  static constexpr int transposed_rows = 4, transposed_columns = 4;
};
template <>
struct blocking<simd::v8> {
  static constexpr int stored_rows = 4, stored_vectors = 3;  // 12 accumulators
  static constexpr int transposed_rows = 2, transposed_columns = 4;
};

// B as stored is walked in chunks of this many rows: a chunk of a column
// block (24 KiB with AVX-512) stays in the L1 cache while every block of
// C's rows passes over it. Unchunked, each block of rows read the column
// block (k x 48 floats, strided) from L2 again, and for an LSTM step's
// 32 x 2048 x 512 product the kernel ran at 0.6 of OpenBLAS's rate on an
// Emerald Rapids Xeon; chunked, at 1.1 (docs/performance.md).
inline constexpr std::int64_t stored_chunk = 128;

// C's columns per index of the parallel loop: NV vectors (B as stored) or JR
// rows of B (transposed).
template <class V, bool Transposed>
constexpr std::int64_t column_block_width() {
  return Transposed ? blocking<V>::transposed_columns : blocking<V>::stored_vectors * lanes<V>;
}

// Every row of C for NV vectors of its columns from j0, B as stored, in
// chunks of stored_chunk rows of B; the sums between chunks wait in
// `partial` (at most small_gemm_rows rows).
template <class V, int NV>
[[gnu::always_inline]] inline void stored_columns(const operands& o, std::int64_t j0) {
  constexpr int mr = blocking<V>::stored_rows;
  alignas(64) float partial[small_gemm_rows * NV * lanes<V>];
  for (std::int64_t p0 = 0; p0 < o.k; p0 += stored_chunk) {
    const std::int64_t p1 = std::min(o.k, p0 + stored_chunk);
    std::int64_t i = 0;
    for (; i + mr <= o.m; i += mr) stored_block<V, mr, NV>(o, i, j0, p0, p1, partial);
    for (; i < o.m; ++i) stored_block<V, 1, NV>(o, i, j0, p0, p1, partial);
  }
}

// Every row of C for one block of its columns: [j0, j0 + width), width at
// most column_block_width; a block cut short goes a vector (or a column)
// at a time, as do the rows after the last whole block of rows.
template <class V, bool Transposed>
[[gnu::always_inline]] inline void column_block(const operands& o, std::int64_t j0, std::int64_t width) {
  using B = blocking<V>;
  constexpr int w = lanes<V>;
  const bool whole = width == column_block_width<V, Transposed>();
  if constexpr (Transposed) {
    constexpr int mr = B::transposed_rows;
    std::int64_t i = 0;
    for (; i + mr <= o.m; i += mr) {
      if (whole) transposed_block<V, mr, B::transposed_columns>(o, i, j0);
      else
        for (std::int64_t j = j0; j < j0 + width; ++j) transposed_block<V, mr, 1>(o, i, j);
    }
    for (; i < o.m; ++i)
      for (std::int64_t j = j0; j < j0 + width; ++j) transposed_block<V, 1, 1>(o, i, j);
  } else {
    if (whole) stored_columns<V, B::stored_vectors>(o, j0);
    else
      for (std::int64_t j = j0; j < j0 + width; j += w) stored_columns<V, 1>(o, j);
  }
}

// The instruction-set-specific entry points, one column block each.
__attribute__((target("avx512f,fma"))) inline void stored_avx512(const operands& o, std::int64_t j0,
                                                                 std::int64_t width) {
  column_block<simd::v16, false>(o, j0, width);
}
__attribute__((target("avx2,fma"))) inline void stored_avx2(const operands& o, std::int64_t j0, std::int64_t width) {
  column_block<simd::v8, false>(o, j0, width);
}
__attribute__((target("avx512f,fma"))) inline void transposed_avx512(const operands& o, std::int64_t j0,
                                                                     std::int64_t width) {
  column_block<simd::v16, true>(o, j0, width);
}
__attribute__((target("avx2,fma"))) inline void transposed_avx2(const operands& o, std::int64_t j0,
                                                                std::int64_t width) {
  column_block<simd::v8, true>(o, j0, width);
}

}  // namespace small_gemm_kernels
#endif

// C = alpha * A . op(B) + beta * C with the kernels of `isa`, which
// small_gemm_suits gave for these sizes.
inline void small_gemm(simd_isa isa, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                       const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                       std::int64_t ldc) {
#if TYPEMESH_HOST_SIMD
  using namespace small_gemm_kernels;
  const operands o{a, lda, b, ldb, c, ldc, m, n, k, alpha, beta};
  const bool wide = isa == simd_isa::avx512;
  const std::int64_t block = trans_b ? (wide ? column_block_width<simd::v16, true>()
                                            : column_block_width<simd::v8, true>())
                                     : (wide ? column_block_width<simd::v16, false>()
                                             : column_block_width<simd::v8, false>());
  const std::int64_t blocks = (n + block - 1) / block;
  parallel_for(
      host_space{}, blocks,
      [=](std::int64_t item) {
        const std::int64_t j0 = item * block, width = std::min(block, n - j0);
        if (trans_b && wide) transposed_avx512(o, j0, width);
        else if (trans_b) transposed_avx2(o, j0, width);
        else if (wide) stored_avx512(o, j0, width);
        else stored_avx2(o, j0, width);
      },
      grain_for(2 * m * k * block));
#else
  (void)isa, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
  (void)beta, (void)c, (void)ldc;
#endif
}

}  // namespace typemesh::backend::host

// Max pooling's inner step on the host, in AVX-512 or AVX2 lanes (chosen at
// run time, host/simd.hpp): one input element of a window against the
// running maxima of all channels of an output. A compare and two selects per
// channel; written as a plain loop, compilers without -mavx2 keep a branch
// per element, which mispredicts on half of them. Lanes and the scalar tail
// do the same select, so the result does not depend on where a channel lies.
#pragma once

#include <cstdint>
#include <type_traits>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/host/simd.hpp"

#if TYPEMESH_HOST_SIMD
#include <immintrin.h>
#endif

namespace typemesh::backend::host {

// For each channel k < c: where top[k] < v[k] (so the first maximum in
// window order stays on ties), top[k] = v[k] and at[k] = offset + k. The
// plain loop, which CUDA kernels call too.
template <class T>
TYPEMESH_HOST_DEVICE void max_pool_step_plain(T* top, std::int64_t* at, const T* v, std::int64_t c,
                                              std::int64_t offset) {
  for (std::int64_t k = 0; k < c; ++k) {
    if (top[k] < v[k]) {
      top[k] = v[k];
      at[k] = offset + k;
    }
  }
}

#if TYPEMESH_HOST_SIMD
namespace pool_simd {

// Written with intrinsics: the offsets are 64-bit lanes, twice as many bytes
// as the floats whose comparison picks them, and GCC turned a select of such
// vectors into a scalar conditional move per lane (the step took about 40
// cycles a vector).
__attribute__((target("avx512f"))) inline void max_step_avx512(float* top, std::int64_t* at, const float* v,
                                                                std::int64_t c, std::int64_t offset) {
  const __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), eight = _mm512_set1_epi64(8);
  std::int64_t k = 0;
  for (; k + 16 <= c; k += 16) {
    const __m512 t = _mm512_loadu_ps(top + k), x = _mm512_loadu_ps(v + k);
    const __mmask16 larger = _mm512_cmp_ps_mask(t, x, _CMP_LT_OQ);  // false on NaN, as t < x
    _mm512_storeu_ps(top + k, _mm512_mask_mov_ps(t, larger, x));
    const __m512i first = _mm512_add_epi64(_mm512_set1_epi64(offset + k), lanes);
    _mm512_mask_storeu_epi64(at + k, static_cast<__mmask8>(larger), first);
    _mm512_mask_storeu_epi64(at + k + 8, static_cast<__mmask8>(larger >> 8), _mm512_add_epi64(first, eight));
  }
  max_pool_step_plain(top + k, at + k, v + k, c - k, offset + k);
}

__attribute__((target("avx2"))) inline void max_step_avx2(float* top, std::int64_t* at, const float* v,
                                                           std::int64_t c, std::int64_t offset) {
  const __m256i lanes = _mm256_set_epi64x(3, 2, 1, 0), four = _mm256_set1_epi64x(4);
  std::int64_t k = 0;
  for (; k + 8 <= c; k += 8) {
    const __m256 t = _mm256_loadu_ps(top + k), x = _mm256_loadu_ps(v + k);
    const __m256 larger = _mm256_cmp_ps(t, x, _CMP_LT_OQ);
    _mm256_storeu_ps(top + k, _mm256_blendv_ps(t, x, larger));
    // Each 32-bit mask lane widened to the two 64-bit lanes of its offset.
    const __m256i bits = _mm256_castps_si256(larger);
    const __m256i low = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(bits));
    const __m256i high = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(bits, 1));
    const __m256i first = _mm256_add_epi64(_mm256_set1_epi64x(offset + k), lanes);
    auto* a = reinterpret_cast<__m256i*>(at + k);
    _mm256_storeu_si256(a, _mm256_blendv_epi8(_mm256_loadu_si256(a), first, low));
    _mm256_storeu_si256(a + 1, _mm256_blendv_epi8(_mm256_loadu_si256(a + 1), _mm256_add_epi64(first, four), high));
  }
  max_pool_step_plain(top + k, at + k, v + k, c - k, offset + k);
}

}  // namespace pool_simd
#endif

// max_pool_step_plain, in vector lanes for float where the CPU has them.
template <class T>
inline void max_pool_step(T* top, std::int64_t* at, const T* v, std::int64_t c, std::int64_t offset) {
#if TYPEMESH_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    switch (detected_simd_isa()) {
      case simd_isa::avx512: return pool_simd::max_step_avx512(top, at, v, c, offset);
      case simd_isa::avx2: return pool_simd::max_step_avx2(top, at, v, c, offset);
      case simd_isa::none: break;
    }
  }
#endif
  max_pool_step_plain(top, at, v, c, offset);
}

}  // namespace typemesh::backend::host

// The counter-based RNG of backend/random.hpp in vector lanes on the host:
// a row of a dropout mask, AVX-512 (64-bit lanes, vpmullq from AVX512DQ) or
// AVX2 (the 64-bit multiply built from 32-bit ones), chosen at run time like
// the other host kernels (host/simd.hpp).
//
// Element i of a row is dropped iff (splitmix64(base ^ splitmix64(2 i)) >> 11)
// < threshold, the integer form of random_uniform(base, i) < rate (see
// dropout_threshold in random.hpp). Each lane runs the same integer
// instructions as the scalar formula, and the last partial vector is computed
// in full and only its first lanes stored, so every element gets the scalar
// path's bits wherever it lies in its row.
#pragma once

#include <cstdint>
#include <type_traits>

#include "typemesh/backend/host/simd.hpp"

namespace typemesh::backend::host {

// The instruction set the mask kernels run with on this CPU: AVX-512 needs
// AVX512DQ besides (its 64-bit multiply); AVX2 otherwise; none where the
// kernels are compiled out or the CPU has neither.
inline simd_isa random_simd_isa() {
#if TYPEMESH_HOST_SIMD
  static const simd_isa isa = [] {
    const simd_isa cpu = detected_simd_isa();
    if (cpu == simd_isa::avx512 && __builtin_cpu_supports("avx512dq")) return simd_isa::avx512;
    return cpu == simd_isa::none ? simd_isa::none : simd_isa::avx2;
  }();
  return isa;
#else
  return simd_isa::none;
#endif
}

#if TYPEMESH_HOST_SIMD
namespace rng_simd {

typedef std::uint64_t u64x8 __attribute__((vector_size(64)));
typedef std::uint64_t u64x4 __attribute__((vector_size(32)));

// For a vector U of 64-bit counters and an output element T: the signed
// vector of U's lanes, the integer of T's width, and vectors of those
// integers and of T with U's lane count.
template <class U, class T>
struct lanes_of {
  static constexpr int width = sizeof(U) / sizeof(std::uint64_t);
  using bit = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  typedef std::int64_t signed_type __attribute__((vector_size(sizeof(U))));
  typedef bit bits __attribute__((vector_size(width * sizeof(T))));
  typedef T out __attribute__((vector_size(width * sizeof(T))));
};

// backend::splitmix64 lane by lane (the constants are the same; the tests
// hold both to the same bits). A copy rather than one template for both: the
// scalar one is also a CUDA kernel function, and this one must inline into
// the target-attributed callers, its vectors by reference. Where the target
// has no 64-bit vector multiply (AVX2), GCC builds each product from three
// 32 x 32 -> 64 ones.
template <class U>
[[gnu::always_inline]] inline void splitmix64(U& z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
}

// The mask of one row: out[j] = 0 if element first + j * step is dropped,
// else keep, for j < count.
template <class U, class T>
[[gnu::always_inline]] inline void dropout_row(T* out, std::uint64_t first, std::uint64_t step, std::int64_t count,
                                               std::uint64_t base, std::uint64_t threshold, T keep) {
  using S = typename lanes_of<U, T>::signed_type;
  using B = typename lanes_of<U, T>::bits;
  using V = typename lanes_of<U, T>::out;
  constexpr int w = lanes_of<U, T>::width;
  static_assert(sizeof(V) == w * sizeof(T));
  U index;
  for (int l = 0; l < w; ++l) index[l] = first + static_cast<std::uint64_t>(l) * step;
  const U advance = U{} + static_cast<std::uint64_t>(w) * step;
  // Both sides of the comparison are at most 2^53, so the signed compare
  // (the one AVX2 has) orders them as unsigned.
  const S limit = S{} + static_cast<std::int64_t>(threshold);
  typename lanes_of<U, T>::bit keep_bits;
  static_assert(sizeof keep_bits == sizeof keep);
  __builtin_memcpy(&keep_bits, &keep, sizeof keep);
  const B keep_lanes = B{} + keep_bits;
  std::int64_t j = 0;
  for (;; j += w) {
    U z = index + index;
    splitmix64(z);
    z ^= base;
    splitmix64(z);
    const S dropped = (S)(z >> 11) < limit;
    // A dropped lane (all ones) gives +0, a kept one keep's bits.
    const V values = (V)(~__builtin_convertvector(dropped, B) & keep_lanes);
    if (j + w > count) {
      if (j < count) {
        T part[w];
        __builtin_memcpy(part, &values, sizeof values);
        for (std::int64_t k = 0; k < count - j; ++k) out[j + k] = part[k];
      }
      return;
    }
    __builtin_memcpy(out + j, &values, sizeof values);
    index += advance;
  }
}

// The instruction-set-specific entry points: the template above is inlined
// into them and compiled for their target.
#define TYPEMESH_RNG_AVX512 __attribute__((target("avx512f,avx512dq")))
#define TYPEMESH_RNG_AVX2 __attribute__((target("avx2")))
TYPEMESH_RNG_AVX512 inline void dropout_row_avx512(float* out, std::uint64_t first, std::uint64_t step,
                                                   std::int64_t count, std::uint64_t base, std::uint64_t threshold,
                                                   float keep) {
  dropout_row<u64x8>(out, first, step, count, base, threshold, keep);
}
TYPEMESH_RNG_AVX2 inline void dropout_row_avx2(float* out, std::uint64_t first, std::uint64_t step,
                                               std::int64_t count, std::uint64_t base, std::uint64_t threshold,
                                               float keep) {
  dropout_row<u64x4>(out, first, step, count, base, threshold, keep);
}
TYPEMESH_RNG_AVX512 inline void dropout_row_avx512(double* out, std::uint64_t first, std::uint64_t step,
                                                   std::int64_t count, std::uint64_t base, std::uint64_t threshold,
                                                   double keep) {
  dropout_row<u64x8>(out, first, step, count, base, threshold, keep);
}
TYPEMESH_RNG_AVX2 inline void dropout_row_avx2(double* out, std::uint64_t first, std::uint64_t step,
                                               std::int64_t count, std::uint64_t base, std::uint64_t threshold,
                                               double keep) {
  dropout_row<u64x4>(out, first, step, count, base, threshold, keep);
}
#undef TYPEMESH_RNG_AVX512
#undef TYPEMESH_RNG_AVX2

}  // namespace rng_simd
#endif

// One row of a dropout mask (float or double) with the given instruction set
// (avx2 or avx512, at most random_simd_isa()): out[j] = 0 where element
// first + j * step of the stream base is dropped, else keep.
template <class T>
inline void dropout_mask_row(simd_isa isa, T* out, std::uint64_t first, std::uint64_t step, std::int64_t count,
                             std::uint64_t base, std::uint64_t threshold, T keep) {
#if TYPEMESH_HOST_SIMD
  if (isa == simd_isa::avx512) rng_simd::dropout_row_avx512(out, first, step, count, base, threshold, keep);
  else rng_simd::dropout_row_avx2(out, first, step, count, base, threshold, keep);
#else
  (void)isa, (void)out, (void)first, (void)step, (void)count, (void)base, (void)threshold, (void)keep;
#endif
}

}  // namespace typemesh::backend::host

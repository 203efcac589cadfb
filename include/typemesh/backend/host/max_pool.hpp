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

// The 64-bit integer vector with V's lane count (the argmax offsets).
template <class V>
struct offsets_of {
  static constexpr int width = simd::lanes<V>;
  typedef std::int64_t type __attribute__((vector_size(width * sizeof(std::int64_t))));
};

template <class V>
[[gnu::always_inline]] inline void max_step(float* top, std::int64_t* at, const float* v, std::int64_t c,
                                            std::int64_t offset) {
  constexpr int w = simd::lanes<V>;
  using mask = typename simd::ints_of<V>::type;
  using wide = typename offsets_of<V>::type;
  wide index{};
  for (int l = 0; l < w; ++l) index[l] = l;
  std::int64_t k = 0;
  for (; k + w <= c; k += w) {
    V t, x;
    simd::load(t, top + k);
    simd::load(x, v + k);
    const mask larger = t < x;
    simd::store(top + k, larger ? x : t);
    wide a;
    __builtin_memcpy(&a, at + k, sizeof(wide));
    a = __builtin_convertvector(larger, wide) ? index + (offset + k) : a;
    __builtin_memcpy(at + k, &a, sizeof(wide));
  }
  max_pool_step_plain(top + k, at + k, v + k, c - k, offset + k);
}

__attribute__((target("avx512f"))) inline void max_step_avx512(float* top, std::int64_t* at, const float* v,
                                                                std::int64_t c, std::int64_t offset) {
  max_step<simd::v16>(top, at, v, c, offset);
}
__attribute__((target("avx2"))) inline void max_step_avx2(float* top, std::int64_t* at, const float* v,
                                                           std::int64_t c, std::int64_t offset) {
  max_step<simd::v8>(top, at, v, c, offset);
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

// What the host's hand-vectorised kernels (direct_conv.hpp, vector_math.hpp,
// random_kernels.hpp) share: the instruction sets they are built for, the one
// this CPU runs, and GCC/Clang vector types with unaligned loads and stores.
//
// Users compile the library with their own flags, usually without -march, so
// those kernels are written once as templates over the vector type, inlined
// into functions compiled for AVX-512 and for AVX2 with target attributes,
// and picked at run time by what the CPU reports. Where neither target exists
// (other CPUs, other compilers, nvcc), TYPEMESH_HOST_SIMD is 0 and callers
// take their plain paths.
#pragma once

#include <cstdint>

#if !defined(__CUDACC__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TYPEMESH_HOST_SIMD 1
#else
#define TYPEMESH_HOST_SIMD 0
#endif

namespace typemesh::backend::host {

// The instruction sets the vector kernels are built for, weakest first.
enum class simd_isa { none, avx2, avx512 };

// What this CPU can run (none where the kernels are compiled out).
inline simd_isa detected_simd_isa() {
#if TYPEMESH_HOST_SIMD
  static const simd_isa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) return simd_isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return simd_isa::avx2;
    return simd_isa::none;
  }();
  return isa;
#else
  return simd_isa::none;
#endif
}

#if TYPEMESH_HOST_SIMD
namespace simd {

typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef std::int32_t i16 __attribute__((vector_size(64)));
typedef std::int32_t i8 __attribute__((vector_size(32)));

// The integer vector of a float vector's lanes.
template <class V>
struct ints_of;
template <>
struct ints_of<v16> {
  using type = i16;
};
template <>
struct ints_of<v8> {
  using type = i8;
};

template <class V>
inline constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(float));

// Vectors go by reference: a 64-byte vector by value outside an AVX-512
// function would change the ABI (and GCC warns).
template <class V>
[[gnu::always_inline]] inline void load(V& v, const float* p) {
  __builtin_memcpy(&v, p, sizeof(V));
}
template <class V>
[[gnu::always_inline]] inline void store(float* p, const V& v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

}  // namespace simd
#endif

}  // namespace typemesh::backend::host

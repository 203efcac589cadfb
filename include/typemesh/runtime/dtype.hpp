// Element types that cross the wire. Communicators move untyped buffers plus a
// dtype, as MPI and NCCL do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "typemesh/core/error.hpp"

namespace typemesh {

enum class dtype { f32, f64, i32, i64, u8 };

template <class T>
inline constexpr bool has_dtype = false;
template <class T>
inline constexpr dtype dtype_of = dtype::u8;

#define TYPEMESH_DTYPE(TYPE, TAG)          \
  template <>                              \
  inline constexpr bool has_dtype<TYPE> = true; \
  template <>                              \
  inline constexpr dtype dtype_of<TYPE> = dtype::TAG
TYPEMESH_DTYPE(float, f32);
TYPEMESH_DTYPE(double, f64);
TYPEMESH_DTYPE(std::int32_t, i32);
TYPEMESH_DTYPE(std::int64_t, i64);
TYPEMESH_DTYPE(std::uint8_t, u8);
#undef TYPEMESH_DTYPE

constexpr std::size_t size_of(dtype t) {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f64: return 8;
    case dtype::i32: return 4;
    case dtype::i64: return 8;
    case dtype::u8: return 1;
  }
  return 0;
}

constexpr std::string_view name_of(dtype t) {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f64: return "f64";
    case dtype::i32: return "i32";
    case dtype::i64: return "i64";
    case dtype::u8: return "u8";
  }
  return "?";
}

// Calls f.template operator()<T>() with the C++ type of t.
template <class F>
decltype(auto) with_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::f32: return f.template operator()<float>();
    case dtype::f64: return f.template operator()<double>();
    case dtype::i32: return f.template operator()<std::int32_t>();
    case dtype::i64: return f.template operator()<std::int64_t>();
    case dtype::u8: break;
  }
  return f.template operator()<std::uint8_t>();
}

}  // namespace typemesh

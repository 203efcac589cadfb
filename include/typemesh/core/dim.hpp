// Named dimension tags and mesh axis tags.
//
//   struct batch : typemesh::dim<"batch"> {};
//   struct axis0 : typemesh::axis<"axis0"> {};
//
// Deriving a struct (rather than a using-alias) keeps the short name in every
// compiler message.
#pragma once

#include <string_view>
#include <type_traits>

#include "typemesh/core/name.hpp"

namespace typemesh {

struct dim_tag {};
struct axis_tag {};

template <fixed_name Name>
struct dim : dim_tag {
  static constexpr std::string_view name = Name.view();
};

template <fixed_name Name>
struct axis : axis_tag {
  static constexpr std::string_view name = Name.view();
};

template <class T>
concept Dim = std::is_base_of_v<dim_tag, T> && !std::is_same_v<T, dim_tag>;

template <class T>
concept Axis = std::is_base_of_v<axis_tag, T> && !std::is_same_v<T, axis_tag>;

}  // namespace typemesh

// Compile-time lists of tags: the one list type of the library and the
// queries over a pack that shapes, meshes and layouts are built on.
//
// These are plain fold expressions rather than Boost.Hana calls: they are
// instantiated for every shape, mesh and layout, and folds compile fastest.
// Hana stays where it pays (iterating a layout's entries with type_c).
#pragma once

#include <boost/hana/type.hpp>

#include <cstddef>
#include <type_traits>

namespace typemesh {

// A list of types, e.g. the dims of a shape: type_list<batch, k>.
template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};

namespace detail {

namespace hana = boost::hana;

// Whether T is one of Ts.
template <class T, class... Ts>
inline constexpr bool contains = (std::is_same_v<T, Ts> || ...);

// How often T appears in Ts.
template <class T, class... Ts>
inline constexpr std::size_t count = (std::size_t{std::is_same_v<T, Ts>} + ... + 0);

// Position of T in Ts; sizeof...(Ts) when absent.
template <class T, class... Ts>
inline constexpr std::size_t index_of = [] {
  constexpr bool same[] = {std::is_same_v<T, Ts>..., false};
  std::size_t i = 0;
  while (i < sizeof...(Ts) && !same[i]) ++i;
  return i;
}();

}  // namespace detail

}  // namespace typemesh

// Small compile-time queries over lists of tags, on Boost.Hana.
#pragma once

#include <boost/hana/contains.hpp>
#include <boost/hana/count.hpp>
#include <boost/hana/equal.hpp>
#include <boost/hana/find_if.hpp>
#include <boost/hana/index_if.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <cstddef>

namespace typemesh::detail {

namespace hana = boost::hana;

template <class... Ts>
inline constexpr auto types = hana::tuple_t<Ts...>;

// Whether T is one of Ts.
template <class T, class... Ts>
inline constexpr bool contains = hana::contains(types<Ts...>, hana::type_c<T>);

// How often T appears in Ts.
template <class T, class... Ts>
inline constexpr std::size_t count = hana::count(types<Ts...>, hana::type_c<T>);

// Position of T in Ts; sizeof...(Ts) when absent.
template <class T, class... Ts>
inline constexpr std::size_t index_of = [] {
  auto found = hana::index_if(types<Ts...>, hana::equal.to(hana::type_c<T>));
  if constexpr (found == hana::nothing) {
    return sizeof...(Ts);
  } else {
    return std::size_t{found.value()};
  }
}();

}  // namespace typemesh::detail

// The shape algebra: new shapes from old ones, at compile time. Layers
// written by users are built with these, as the library's own are:
//
//   using SX = shape<batch, len, d_model>;
//   shape_without<SX, len>                         // shape<batch, d_model>
//   shape_union<shape<batch, len>, shape<len, n>>   // shape<batch, len, n>
//   shape_minus<SX, shape<d_model, heads>>          // shape<batch, len>  (SX's dims the other lacks)
//   shape_common<SX, shape<d_model, heads>>         // shape<d_model>     (SX's dims the other has)
//   shape_replace<SX, len, memory_len>              // shape<batch, memory_len, d_model>
//   shape_prepend<SX, heads>                        // shape<heads, batch, len, d_model>
//   shape_append<SX, heads>                         // shape<batch, len, d_model, heads>
//   shape_contains<SX, batch, len>                  // true
//   shape_index_of<SX, d_model>                     // 2
//   same_dims<SX, shape<d_model, batch, len>>       // true: the same dims in any order
//
// and at run time, the sizes of a new shape taken from shapes that have its dims:
//
//   auto s = shape_from<shape<batch, n>>(x.shape(), w.shape());
//
// Results keep the order of the first operand: nothing here (or in any layer)
// matches dims by position, but the order a shape lists its dims in is the
// order its elements are stored in, so it is kept wherever it can be.
#pragma once

#include <cstddef>
#include <type_traits>

#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/shape.hpp"
#include "typemesh/core/type_list.hpp"

namespace typemesh {

namespace diagnostic {
TYPEMESH_DIAGNOSTIC(dim_in_no_source_shape, (class Dim, class Sources), (Dim, Sources),
                    "a shape's size is taken from shapes that lack one of its dims; the dim and the "
                    "source shapes are the arguments above");
TYPEMESH_DIAGNOSTIC(replaced_dim_not_in_shape, (class Dim, class Shape), (Dim, Shape),
                    "shape_replace names a dim that the shape does not have; the dim and the shape are the "
                    "arguments above");
}  // namespace diagnostic

namespace detail {

template <class S>
struct shape_traits;
template <class... Ds>
struct shape_traits<shape<Ds...>> {
  using dims = type_list<Ds...>;
  template <class... Extra>
  using prepend = shape<Extra..., Ds...>;
  template <class... Extra>
  using append = shape<Ds..., Extra...>;
};

// Ds filtered by Keep<D>::value, in order.
template <template <class> class Keep, class... Ds>
struct filter_dims {
  using type = shape<>;
};
template <template <class> class Keep, class D, class... Rest>
struct filter_dims<Keep, D, Rest...> {
  using rest = typename filter_dims<Keep, Rest...>::type;
  using type = std::conditional_t<Keep<D>::value, typename shape_traits<rest>::template prepend<D>, rest>;
};

template <class S, class... Drop>
struct without;
template <class... Ds, class... Drop>
struct without<shape<Ds...>, Drop...> {
  template <class D>
  using keep = std::bool_constant<!contains<D, Drop...>>;
  using type = typename filter_dims<keep, Ds...>::type;
};

template <class A, class B>
struct minus;
template <class A, class... Bs>
struct minus<A, shape<Bs...>> : without<A, Bs...> {};

template <class A, class B>
struct common;
template <class... As, class B>
struct common<shape<As...>, B> {
  template <class D>
  using keep = std::bool_constant<B::template has<D>>;
  using type = typename filter_dims<keep, As...>::type;
};

template <class S, class From, class To>
struct replace;
template <class... Ds, class From, class To>
struct replace<shape<Ds...>, From, To> {
  static_assert(sizeof(diagnostic::replaced_dim_not_in_shape<From, shape<Ds...>, !contains<From, Ds...>>));
  using type = shape<std::conditional_t<std::is_same_v<Ds, From>, To, Ds>...>;
};

template <class A, class B>
struct concat;
template <class... As, class... Bs>
struct concat<shape<As...>, shape<Bs...>> {
  using type = shape<As..., Bs...>;
};

template <class A, class B>
inline constexpr bool same_dims = false;
template <class... As, class... Bs>
inline constexpr bool same_dims<shape<As...>, shape<Bs...>> =
    sizeof...(As) == sizeof...(Bs) && (contains<As, Bs...> && ...);

}  // namespace detail

// The list of S's dims: type_list<Ds...>.
template <class S>
using dims_of = typename detail::shape_traits<S>::dims;

// S with Ds before its own dims / after them.
template <class S, class... Ds>
using shape_prepend = typename detail::shape_traits<S>::template prepend<Ds...>;
template <class S, class... Ds>
using shape_append = typename detail::shape_traits<S>::template append<Ds...>;

// S without the dims Ds (those it lacks are ignored).
template <class S, class... Ds>
using shape_without = typename detail::without<S, Ds...>::type;

// A's dims that B lacks / that B has, in A's order.
template <class A, class B>
using shape_minus = typename detail::minus<A, B>::type;
template <class A, class B>
using shape_common = typename detail::common<A, B>::type;

// A's dims, then B's dims that A lacks.
template <class A, class B>
using shape_union = typename detail::concat<A, shape_minus<B, A>>::type;

// S with dim From renamed To, in place.
template <class S, class From, class To>
using shape_replace = typename detail::replace<S, From, To>::type;

// Whether S has every one of Ds.
template <class S, class... Ds>
inline constexpr bool shape_contains = (S::template has<Ds> && ...);

// The position of D in S (S::rank when absent).
template <class S, class D>
inline constexpr std::size_t shape_index_of = S::template index_of<D>;

// Whether A and B have the same dims, in any order.
template <class A, class B>
inline constexpr bool same_dims = detail::same_dims<A, B>;

// Out's sizes, each dim's from the first of `sources` that has it.
template <class Out, class... Sources>
Out shape_from(const Sources&... sources) {
  auto size_of = [&]<class D>() {
    static_assert(sizeof(diagnostic::dim_in_no_source_shape<D, type_list<Sources...>,
                                                            !(Sources::template has<D> || ...)>));
    std::int64_t size = -1;
    auto take = [&](const auto& s) {
      using S = std::remove_cvref_t<decltype(s)>;
      if constexpr (S::template has<D>) {
        if (size < 0) size = s.template size<D>();
      }
    };
    (take(sources), ...);
    return size < 0 ? 0 : size;
  };
  return [&]<class... Ds>(type_list<Ds...>) {
    if constexpr (sizeof...(Ds) == 0) return Out{};
    else return Out{size_of.template operator()<Ds>()...};
  }(dims_of<Out>{});
}

}  // namespace typemesh

// A layout maps dims to mesh axes. Each entry reads "dim on axis":
//
//   typemesh::layout<batch(axis0), k(axis2)>
//
// (the design's Layout<batch→axis0, k→axis2>; the arrow spelling
// `auto(batch)->axis0` is accepted too). A dim the layout does not name is
// whole on every device; a mesh axis it does not use holds replicas.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/dim.hpp"
#include "typemesh/core/type_list.hpp"

namespace typemesh {

namespace detail {

// What a malformed entry maps: checks on dims and axes skip these.
struct malformed_dim {};
struct malformed_axis {};

// One entry of a layout, normalised to (dim, axis).
template <class Entry, class Layout>
struct layout_entry {
  static_assert(sizeof(diagnostic::not_a_layout_entry<Entry, Layout>));
  using dim = malformed_dim;  // not void: other members form dim(axis) function types
  using axis = malformed_axis;
};
template <class R, class A, class Layout>
  requires(Dim<R> && Axis<A>)
struct layout_entry<R(A), Layout> {
  using dim = R;
  using axis = A;
};
template <class R, class A, class Layout>
  requires(Axis<R> && Dim<A>)
struct layout_entry<R(A), Layout> {
  using dim = A;
  using axis = R;
};

template <class D, class... Entries>
struct axis_lookup {
  using type = void;
};
template <class D, class E, class... Rest>
struct axis_lookup<D, E, Rest...>
    : std::conditional_t<std::is_same_v<D, typename E::dim>, std::type_identity<typename E::axis>,
                         axis_lookup<D, Rest...>> {};

template <class A, class... Entries>
struct dim_lookup {
  using type = void;
};
template <class A, class E, class... Rest>
struct dim_lookup<A, E, Rest...>
    : std::conditional_t<std::is_same_v<A, typename E::axis>, std::type_identity<typename E::dim>,
                         dim_lookup<A, Rest...>> {};

template <class D, class Kept, class... Entries>
struct layout_without {
  using type = Kept;
};
template <class D, template <class...> class L, class... Kept, class R, class A, class... Rest>
struct layout_without<D, L<Kept...>, R(A), Rest...>
    : layout_without<D, std::conditional_t<std::is_same_v<D, R>, L<Kept...>, L<Kept..., R(A)>>, Rest...> {};

template <class... Layouts>
struct concat_layouts;
template <template <class...> class L, class... E>
struct concat_layouts<L<E...>> {
  using type = L<E...>;
};
template <template <class...> class L, class... A, class... B, class... Rest>
struct concat_layouts<L<A...>, L<B...>, Rest...> : concat_layouts<L<A..., B...>, Rest...> {};

// layout<D(axis)> when layout L splits D, else layout<> (defined below layout).
template <class D, class L>
struct entry_of;

}  // namespace detail

template <class... Entries>
struct layout {
 private:
  template <class E>
  using dim_of_entry = typename detail::layout_entry<E, layout>::dim;
  template <class E>
  using axis_of_entry = typename detail::layout_entry<E, layout>::axis;

 public:
  static constexpr std::size_t size = sizeof...(Entries);

  // Whether the layout splits dim D.
  template <class D>
  static constexpr bool splits = detail::contains<D, dim_of_entry<Entries>...>;

  // Whether the layout uses mesh axis A.
  template <class A>
  static constexpr bool uses = detail::contains<A, axis_of_entry<Entries>...>;

  // The axis that splits D (void when D is whole).
  template <class D>
  using axis_of = typename detail::axis_lookup<D, detail::layout_entry<Entries, layout>...>::type;

  // The dim that axis A splits (void when A holds replicas).
  template <class A>
  using dim_on = typename detail::dim_lookup<A, detail::layout_entry<Entries, layout>...>::type;

  // This layout with D made whole.
  template <class D>
  using without = typename detail::layout_without<D, layout<>, dim_of_entry<Entries>(axis_of_entry<Entries>)...>::type;

  // This layout with D split over A as well.
  template <class D, class A>
  using with = layout<Entries..., D(A)>;

  // The same mapping with its entries in the order of Dims, spelled dim(axis);
  // entries for dims not in Dims are dropped. Tensors compare layouts in this
  // form: layout<k(axis2), batch(axis0)> and layout<batch(axis0), k(axis2)>
  // say the same thing.
  template <class... Dims>
  using ordered = typename detail::concat_layouts<layout<>, typename detail::entry_of<Dims, layout>::type...>::type;

  // "layout<batch(axis0), k(axis2)>", for messages.
  static std::string describe() {
    std::string out = "layout<";
    bool first = true;
    for_each([&](auto d, auto a) {
      out += std::string(first ? "" : ", ") + std::string(decltype(d)::type::name) + "(" +
             std::string(decltype(a)::type::name) + ")";
      first = false;
    });
    return out + ">";
  }

  // Calls f(type_c<dim>, type_c<axis>) for each entry, in order.
  template <class F>
  static constexpr void for_each(F&& f) {
    (f(detail::hana::type_c<dim_of_entry<Entries>>, detail::hana::type_c<axis_of_entry<Entries>>), ...);
  }

 private:
  static_assert((sizeof(diagnostic::dim_mapped_twice<dim_of_entry<Entries>, layout,
                                                     (detail::count<dim_of_entry<Entries>, dim_of_entry<Entries>...> > 1)>) &&
                 ...));
  static_assert((sizeof(diagnostic::axis_used_twice<axis_of_entry<Entries>, layout,
                                                    (detail::count<axis_of_entry<Entries>, axis_of_entry<Entries>...> > 1)>) &&
                 ...));
};

template <class T>
inline constexpr bool is_layout = false;
template <class... E>
inline constexpr bool is_layout<layout<E...>> = true;

namespace detail {
template <class D, class... E>
struct entry_of<D, layout<E...>> {
  using type = layout<>;
};
template <class D, class... E>
  requires(layout<E...>::template splits<D>)
struct entry_of<D, layout<E...>> {
  using type = layout<D(typename layout<E...>::template axis_of<D>)>;
};
}  // namespace detail

// Everything whole: each device holds the full tensor.
using replicated = layout<>;

}  // namespace typemesh

// How operations derive their output's shape and layout from their inputs'
// at compile time, as Mesh-TensorFlow does when it lowers a graph:
//
// - A dim that several inputs have must sit on the same mesh axis in each
//   (or be whole in each); anything else is a compile error that asks for an
//   explicit relayout.
// - A mesh axis may split only one dim across all inputs.
// - An output dim keeps the axis an input splits it over.
// - A dim that is summed away while split over axis A leaves partial sums on
//   the devices along A: the operation allreduces over A, and the output is
//   replicated along it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "typemesh/backend/strided.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/layout.hpp"
#include "typemesh/core/placement.hpp"
#include "typemesh/core/shape.hpp"
#include "typemesh/core/shape_algebra.hpp"
#include "typemesh/core/type_list.hpp"

namespace typemesh {

namespace diagnostic {
TYPEMESH_DIAGNOSTIC(axis_splits_two_dims, (class Axis, class DimA, class DimB), (Axis, DimA, DimB),
                    "one mesh axis splits a different dim in each input, so no device holds matching "
                    "parts; relayout one input first; the axis and the two dims are the arguments above");
TYPEMESH_DIAGNOSTIC(dim_not_in_inputs, (class Dim, class Shapes), (Dim, Shapes),
                    "the output names a dim that no input has; the dim and the input shapes are the "
                    "arguments above");
}  // namespace diagnostic

namespace ops_detail {

// --- Layouts -----------------------------------------------------------------

// layout<D(A)> from the first layout that splits D, else layout<>.
template <class D, class... Ls>
struct entry_from {
  using type = layout<>;
};
template <class D, class L, class... Ls>
struct entry_from<D, L, Ls...>
    : std::conditional_t<L::template splits<D>, detail::entry_of<D, L>, entry_from<D, Ls...>> {};

// The layout of an output of shape Out whose dims take their axes from Ls.
template <class Out, class... Ls>
struct output_layout;
template <class... Ds, class... Ls>
struct output_layout<shape<Ds...>, Ls...> {
  using type = typename detail::concat_layouts<layout<>, typename entry_from<Ds, Ls...>::type...>::type;
};

// output_layout when the inputs passed their checks, else layout<> (the
// failed check has already said why; this keeps a second error away).
template <bool Ok, class Out, class LA, class LB>
struct checked_output_layout {
  using type = layout<>;
};
template <class Out, class LA, class LB>
struct checked_output_layout<true, Out, LA, LB> {
  using type = typename output_layout<Out, LA, LB>::type;
};

// Dim D sits on the same axis (or none) in both layouts.
template <class D, class LA, class LB>
consteval bool same_axis() {
  return diagnostic::conflicting_layouts<
                D, LA, LB, !std::is_same_v<typename LA::template axis_of<D>, typename LB::template axis_of<D>>>::passed;
}

// The dims two inputs share sit on the same axes, and no axis splits one dim
// in A and another in B.
template <class SA, class LA, class SB, class LB>
consteval bool compatible() {
  bool ok = true;
  LA::for_each([&](auto d, auto a) {
    using D = typename decltype(d)::type;
    using A = typename decltype(a)::type;
    if constexpr (SB::template has<D>) ok = ok && same_axis<D, LA, LB>();
    if constexpr (LB::template uses<A>) {
      using E = typename LB::template dim_on<A>;
      ok = ok && diagnostic::axis_splits_two_dims<A, D, E, !std::is_same_v<D, E>>::passed;
    }
  });
  LB::for_each([&](auto d, auto) {
    using D = typename decltype(d)::type;
    if constexpr (SA::template has<D> && !LA::template splits<D>) ok = ok && same_axis<D, LA, LB>();
  });
  return ok;
}

// Every dim of Out is in A or B.
template <class Out, class SA, class SB>
struct dims_come_from;
template <class... Ds, class SA, class SB>
struct dims_come_from<shape<Ds...>, SA, SB> {
  static constexpr bool value =
      (diagnostic::dim_not_in_inputs<Ds, type_list<SA, SB>, !SA::template has<Ds> && !SB::template has<Ds>>::passed &&
       ...);
};

// For each mesh axis, whether a dim of S that Out lacks is split over it.
template <class S, class L, class Out, class Mesh>
constexpr std::array<bool, Mesh::rank> summed_axes() {
  std::array<bool, Mesh::rank> axes{};
  L::for_each([&](auto d, auto a) {
    using D = typename decltype(d)::type;
    using A = typename decltype(a)::type;
    if constexpr (!Out::template has<D> && Mesh::template has<A>) axes[Mesh::template index_of<A>] = true;
  });
  return axes;
}

template <std::size_t N>
constexpr bool any(const std::array<bool, N>& a) {
  for (bool b : a)
    if (b) return true;
  return false;
}
template <std::size_t N>
constexpr std::array<bool, N> either(const std::array<bool, N>& a, const std::array<bool, N>& b) {
  std::array<bool, N> o{};
  for (std::size_t i = 0; i < N; ++i) o[i] = a[i] || b[i];
  return o;
}

// --- Run-time descriptors ----------------------------------------------------

// A tensor's local slice as a kernel operand: ids are positions in the call's
// dim list U.
template <class... U, class... Ds>
backend::dims local_dims(type_list<U...>, shape<Ds...>*, const std::array<std::int64_t, sizeof...(Ds)>& extent) {
  backend::dims d;
  d.rank = static_cast<int>(sizeof...(Ds));
  static_assert(sizeof...(Ds) <= backend::max_rank, "typemesh: tensors have at most 8 dims");
  std::size_t i = 0;
  ((d.id[i] = static_cast<int>(detail::index_of<Ds, U...>), d.extent[i] = extent[i], ++i), ...);
  return d;
}
template <class List, class Tensor>
backend::dims local_dims_of(const Tensor& t) {
  return local_dims(List{}, static_cast<typename Tensor::shape_type*>(nullptr), t.local_extent());
}

// The size of dim D taken from whichever of the shapes has it.
template <class D, class SA, class SB>
std::int64_t size_from(const SA& a, const SB& b) {
  if constexpr (SA::template has<D>) return a.template size<D>();
  else return b.template size<D>();
}

// Every dim both shapes have is as large in each.
template <class SA, class SB>
void check_common_sizes(const char* op, const SA& a, const SB& b) {
  auto one = [&]<class D>() {
    if constexpr (SB::template has<D>) {
      if (a.template size<D>() != b.template size<D>()) {
        throw shape_error(detail::cat(op, ": dim ", D::name, " has size ", a.template size<D>(), " in ", a.describe(),
                                      " but ", b.template size<D>(), " in ", b.describe()));
      }
    }
  };
  [&]<class... Ds>(type_list<Ds...>) { (one.template operator()<Ds>(), ...); }(dims_of<SA>{});
}

}  // namespace ops_detail

}  // namespace typemesh

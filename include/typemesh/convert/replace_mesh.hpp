// Mesh replacement: moving a tensor onto another mesh, with a new layout.
//
//   auto y = typemesh::replace_mesh<layout<batch(axis0)>>(x, lstm0);
//   auto z = typemesh::replace_mesh<layout<k(axis2)>, typemesh::independent_axes>(x, lstm0);
//
// Without a kind, any (mesh, layout) goes to any (mesh, layout): meshes that
// overlap or not, in any device order. A kind names what the reference
// benchmarks' dedicated operations did, and checks that the move is of that
// kind: at compile time what the layouts decide, at run time what the sizes
// and device lists decide. Every kind moves exactly the elements each device
// lacks. The reverse of replace_mesh<NewLayout, Kind>(x, to) is
// replace_mesh<OldLayout, Kind>(y, from): the gradient of a replacement.
#pragma once

#include <algorithm>
#include <type_traits>

#include "typemesh/convert/transfer.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

// Any placement to any placement.
struct any_kind {
  template <class S, class Old, class New>
  static constexpr bool fits = true;
  template <class Y, class X>
  static void check(const X&, const typename Y::mesh_type&) {}
};

// Same devices in the same order, and every device holds the same slice in
// both: no data moves (the reference's ReplaceMesh).
struct same_slices {
  template <class S, class Old, class New>
  static constexpr bool fits = true;
  template <class Y, class X>
  static void check(const X& x, const typename Y::mesh_type& target) {
    if (x.mesh().devices() != target.devices()) {
      throw device_error(detail::cat("replace_mesh<same_slices>: ", x.mesh().describe(), " and ", target.describe(),
                                     " must list the same devices in the same order"));
    }
    for (int d : x.mesh().devices()) {
      auto a = *x.slice_of(d), b = *Y::geometry::slice_of(x.shape(), target, d);
      if (!(a == b)) {
        throw shape_error(detail::cat("replace_mesh<same_slices>: device ", d, " holds different slices of ",
                                      x.shape().describe(), " under the old and the new layout (", X::layout_type::describe(),
                                      " and ", Y::layout_type::describe(), ")"));
      }
    }
  }
};

// A fully replicated tensor onto a larger mesh (a multiple in size) that
// contains the old devices, or onto a smaller one among them.
struct replication {
  template <class S, class Old, class New>
  static constexpr bool fits = [] {
    Old::for_each([](auto d, auto) {
      (void)sizeof(diagnostic::replication_of_a_split_tensor<typename decltype(d)::type, Old>);
    });
    New::for_each([](auto d, auto) {
      (void)sizeof(diagnostic::replication_of_a_split_tensor<typename decltype(d)::type, New>);
    });
    return true;
  }();
  template <class Y, class X>
  static void check(const X& x, const typename Y::mesh_type& target) {
    const int from = x.mesh().device_count(), to = target.device_count();
    if (to > from && to % from != 0) {
      throw shape_error(detail::cat("replace_mesh<replication>: replicating from ", from, " onto ", to,
                                    " devices needs a multiple of ", from));
    }
    // The smaller mesh's devices are among the larger's, so that the reverse
    // (the gradient) is a replication too.
    auto require_within = [](const auto& small, const auto& large) {
      for (int d : small.devices())
        if (!large.contains(d)) {
          throw device_error(detail::cat("replace_mesh<replication>: device ", d, " of ", small.describe(), " is not in ",
                                         large.describe(),
                                         "; replicas are added to or removed from the devices that hold one"));
        }
    };
    if (to <= from) require_within(target, x.mesh());
    else require_within(x.mesh(), target);
  }
};

// Adding or removing duplicate slices along axes that split nothing; every
// split dim stays on its axis, whose size does not change.
struct duplicates {
  template <class S, class Old, class New>
  static constexpr bool fits = [] {
    Old::for_each([](auto d, auto) {
      using D = typename decltype(d)::type;
      (void)sizeof(diagnostic::dim_changes_axis<D, Old, New,
                                                !std::is_same_v<typename Old::template axis_of<D>,
                                                                typename New::template axis_of<D>>>);
    });
    New::for_each([](auto d, auto) {
      using D = typename decltype(d)::type;
      (void)sizeof(diagnostic::dim_changes_axis<D, Old, New, !Old::template splits<D>>);
    });
    return true;
  }();
  template <class Y, class X>
  static void check(const X& x, const typename Y::mesh_type& target) {
    using MX = typename X::mesh_type;
    using MY = typename Y::mesh_type;
    static_assert(MX::rank == MY::rank, "typemesh: replace_mesh<duplicates> needs meshes with the same number of axes");
    for (std::size_t a = 0; a < MX::rank; ++a) {
      if (x.mesh().size(a) == target.size(a)) continue;
      if (X::geometry::axis_used[a] || Y::geometry::axis_used[a]) {
        throw shape_error(detail::cat("replace_mesh<duplicates>: axis ", MX::axis_names[a], " changes size from ",
                                      x.mesh().size(a), " to ", target.size(a), " but splits a dim"));
      }
      const int big = std::max(x.mesh().size(a), target.size(a)), small = std::min(x.mesh().size(a), target.size(a));
      if (big % small != 0) {
        throw shape_error(detail::cat("replace_mesh<duplicates>: axis ", MX::axis_names[a], " goes from size ",
                                      x.mesh().size(a), " to ", target.size(a), "; one must divide the other"));
      }
    }
  }
};

// Dims split in the old layout are concatenated, dims split in the new one
// are split; no dim is split in both. Mesh sizes may differ by an integer
// factor.
struct independent_axes {
  template <class S, class Old, class New>
  static constexpr bool fits = [] {
    Old::for_each([](auto d, auto) {
      using D = typename decltype(d)::type;
      (void)sizeof(diagnostic::split_in_both_layouts<D, Old, New, New::template splits<D>>);
    });
    return true;
  }();
  template <class Y, class X>
  static void check(const X& x, const typename Y::mesh_type& target) {
    const int from = x.mesh().device_count(), to = target.device_count();
    if (std::max(from, to) % std::min(from, to) != 0) {
      throw shape_error(detail::cat("replace_mesh<independent_axes>: mesh sizes ", from, " and ", to,
                                    " must differ by an integer factor"));
    }
  }
};

namespace detail {
// Exactly one dim split, on the mesh's first axis.
template <class Layout, class Mesh>
constexpr bool split_on_leading_axis() {
  bool ok = Layout::size == 1;
  Layout::for_each([&](auto, auto a) { ok = ok && Mesh::template index_of<typename decltype(a)::type> == 0; });
  return ok;
}
template <class Layout, class Mesh>
constexpr bool on_leading_axis() {
  return sizeof(diagnostic::not_split_on_leading_axis<Layout, Mesh, !split_on_leading_axis<Layout, Mesh>()>) > 0;
}
}  // namespace detail

// One dim split along the leading mesh axis in both, concatenated or split
// further as the leading axis shrinks or grows; the same devices.
struct concat_split {
  // The split dim stays the split dim; that it is on the leading axis is
  // checked with the meshes, in check_types.
  template <class S, class Old, class New>
  static constexpr bool fits = [] {
    Old::for_each([](auto d, auto) {
      using D = typename decltype(d)::type;
      (void)sizeof(diagnostic::dim_changes_axis<D, Old, New, !New::template splits<D>>);
    });
    return true;
  }();
  template <class X, class Y>
  static constexpr bool check_types() {
    return detail::on_leading_axis<typename X::layout_type, typename X::mesh_type>() &&
           detail::on_leading_axis<typename Y::layout_type, typename Y::mesh_type>();
  }
  template <class Y, class X>
  static void check(const X& x, const typename Y::mesh_type& target) {
    if (x.mesh().devices() != target.devices()) {
      throw device_error(detail::cat("replace_mesh<concat_split>: ", x.mesh().describe(), " and ", target.describe(),
                                     " must list the same devices in the same order"));
    }
    const int from = x.mesh().size(0), to = target.size(0);
    if (std::max(from, to) % std::min(from, to) != 0) {
      throw shape_error(detail::cat("replace_mesh<concat_split>: leading axes of sizes ", from, " and ", to,
                                    " must differ by an integer factor"));
    }
  }
};

// The pipeline move between a mesh and every other device of it: the new
// mesh is old[0::2] or old[1::2] (each device concatenates its pair's
// slices), or the reverse (each device keeps half of its slice or of its
// neighbour's). One dim split along the leading axis in both.
struct pipeline {
  template <class S, class Old, class New>
  static constexpr bool fits = concat_split::fits<S, Old, New>;
  template <class X, class Y>
  static constexpr bool check_types() {
    return concat_split::check_types<X, Y>();
  }
  template <class Y, class X>
  static void check(const X& x, const typename Y::mesh_type& target) {
    const auto& a = x.mesh().devices();
    const auto& b = target.devices();
    const auto& big = a.size() > b.size() ? a : b;
    const auto& small = a.size() > b.size() ? b : a;
    bool every_other = big.size() == 2 * small.size();
    for (int offset : {0, 1}) {
      bool match = every_other;
      for (std::size_t i = 0; match && i < small.size(); ++i) match = big[2 * i + offset] == small[i];
      if (match) return;
    }
    throw device_error(detail::cat("replace_mesh<pipeline>: ", target.describe(), " and ", x.mesh().describe(),
                                   " are not a mesh and every other device of it"));
  }
};

template <class NewLayout, class Kind = any_kind, class T, class S, class L, class M, class M2>
tensor<T, S, NewLayout, M2> replace_mesh(const tensor<T, S, L, M>& x, const M2& to) {
  using in_t = tensor<T, S, L, M>;
  using out_t = tensor<T, S, NewLayout, M2>;
  static_assert(Kind::template fits<S, L, NewLayout>);
  if constexpr (requires { Kind::template check_types<in_t, out_t>(); }) {
    static_assert(Kind::template check_types<in_t, out_t>());
  }
  // Between two meshes of one and the same device nothing moves, which every
  // kind describes: a strategy keeps its kinds when it runs on one device.
  const bool one_device = to.device_count() == 1 && x.mesh().devices() == to.devices();
  if (!one_device) Kind::template check<out_t>(x, to);
  return detail::transfer_as<NewLayout>(detail::transfer_description<NewLayout>("replace_mesh", x, to), x, to);
}

}  // namespace typemesh

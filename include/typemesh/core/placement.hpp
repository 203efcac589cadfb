// Where a tensor's elements live: for a (shape, layout, mesh), the slice each
// device holds. A dim split over an axis of size n is cut into n equal blocks;
// the device at coordinate c on that axis holds block c. Dims the layout does
// not split are whole on every device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/layout.hpp"
#include "typemesh/core/mesh.hpp"
#include "typemesh/core/shape.hpp"

namespace typemesh {

// A box of a tensor's global index space: begin and extent per dim.
template <std::size_t Rank>
struct box {
  std::array<std::int64_t, Rank> begin{};
  std::array<std::int64_t, Rank> extent{};

  std::int64_t elements() const {
    std::int64_t n = 1;
    for (auto e : extent) n *= e;
    return n;
  }
  friend bool operator==(const box&, const box&) = default;
};

template <class Shape, class Layout, class Mesh>
struct placement;

template <class... Dims, class Layout, class Mesh>
  requires is_mesh<Mesh>
struct placement<shape<Dims...>, Layout, Mesh> {
  using shape_type = shape<Dims...>;
  using mesh_type = Mesh;
  static constexpr std::size_t rank = sizeof...(Dims);
  static constexpr std::size_t mesh_rank = Mesh::rank;

 private:
  static_assert(is_layout<Layout>, "typemesh: the layout of a tensor must be a typemesh::layout<...>");

  static constexpr bool checked = [] {
    Layout::for_each([](auto d, auto a) {
      using D = typename decltype(d)::type;
      using A = typename decltype(a)::type;
      if constexpr (Dim<D> && Axis<A>) {  // a malformed entry has had its own error
        (void)sizeof(diagnostic::layout_dim_not_in_shape<D, shape_type, Layout, !shape_type::template has<D>>);
        (void)sizeof(diagnostic::layout_axis_not_in_mesh<A, mesh_type, Layout, !mesh_type::template has<A>>);
      }
    });
    return true;
  }();
  static_assert(checked);

  template <class D>
  static constexpr int axis_index_of() {
    if constexpr (Layout::template splits<D>) {
      constexpr std::size_t i = mesh_type::template index_of<typename Layout::template axis_of<D>>;
      return i < mesh_rank ? static_cast<int>(i) : -1;
    } else {
      return -1;
    }
  }

 public:
  // For each dim, the index of the mesh axis that splits it, or -1.
  static constexpr std::array<int, rank> axis_index{axis_index_of<Dims>()...};

  // For each mesh axis, whether it splits a dim (false: it holds replicas).
  static constexpr std::array<bool, mesh_rank> axis_used = [] {
    std::array<bool, mesh_rank> used{};
    for (int a : axis_index)
      if (a >= 0) used[a] = true;
    return used;
  }();

  // Throws when a split dim's size is not a multiple of its axis size.
  static void check(const shape_type& s, const mesh_type& m) {
    for (std::size_t i = 0; i < rank; ++i) {
      int a = axis_index[i];
      if (a < 0) continue;
      if (s[i] % m.size(a) != 0) {
        throw shape_error(detail::cat("dim ", shape_type::dim_names[i], " of size ", s[i], " is split over axis ",
                                      mesh_type::axis_names[a], " of size ", m.size(a), " (", m.describe(),
                                      "), but ", s[i], " is not divisible by ", m.size(a)));
      }
    }
  }

  // The extents of every device's slice (the same on all devices of the mesh).
  static std::array<std::int64_t, rank> local_extent(const shape_type& s, const mesh_type& m) {
    std::array<std::int64_t, rank> e{};
    for (std::size_t i = 0; i < rank; ++i) e[i] = axis_index[i] < 0 ? s[i] : s[i] / m.size(axis_index[i]);
    return e;
  }

  // The slice held by the device at mesh coordinate c.
  static box<rank> slice_at(const shape_type& s, const mesh_type& m, const typename mesh_type::coords& c) {
    box<rank> b;
    b.extent = local_extent(s, m);
    for (std::size_t i = 0; i < rank; ++i) b.begin[i] = axis_index[i] < 0 ? 0 : c[axis_index[i]] * b.extent[i];
    return b;
  }

  // The slice held by a device, or nothing for a device outside the mesh.
  static std::optional<box<rank>> slice_of(const shape_type& s, const mesh_type& m, int device) {
    check(s, m);
    auto c = m.coordinate_of(device);
    if (!c) return std::nullopt;
    return slice_at(s, m, *c);
  }
};

// The canonical form of Layout for Shape: entries in the shape's dim order.
template <class Shape, class Layout>
struct canonical_layout;
template <class... Dims, class Layout>
struct canonical_layout<shape<Dims...>, Layout> {
  using type = typename Layout::template ordered<Dims...>;
};
template <class Shape, class Layout>
using canonical = typename canonical_layout<Shape, Layout>::type;

// Convenience: slice_of<layout<batch(axis0)>>(shape, mesh, device).
template <class Layout, class Shape, class Mesh>
auto slice_of(const Shape& s, const Mesh& m, int device) {
  return placement<Shape, Layout, Mesh>::slice_of(s, m, device);
}

}  // namespace typemesh

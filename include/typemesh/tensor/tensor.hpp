// The distributed tensor. Its type is (element, shape, layout, mesh); its
// value is this device's slice plus the global extents. On a device outside
// the tensor's mesh it holds nothing, and operations on it do nothing.
//
//   using act = typemesh::tensor<float, typemesh::shape<batch, k>,
//                                typemesh::layout<batch(axis0)>, lstm_mesh>;
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "typemesh/tensor/tape_node.hpp"
#include "typemesh/backend/kernels.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/placement.hpp"
#include "typemesh/runtime/device.hpp"
#include "typemesh/runtime/dtype.hpp"

namespace typemesh {

// Asks for a tensor whose local elements are left unset, for an operation that
// writes every one of them.
struct uninitialized_t {};
inline constexpr uninitialized_t uninitialized{};

namespace detail {
// Which of a tensor's stored local elements are its own: all of them (size
// -1), or `size` from `offset` on, where a conversion shares part of its
// source's.
struct local_part {
  std::int64_t offset = 0, size = -1;
};
}  // namespace detail

template <class T, class Shape, class Layout, class Mesh>
class tensor {
  static_assert(is_shape<Shape>, "typemesh: the second argument of tensor<> must be a typemesh::shape<...>");
  static_assert(is_layout<Layout>, "typemesh: the third argument of tensor<> must be a typemesh::layout<...>");
  static_assert(is_mesh<Mesh>, "typemesh: the fourth argument of tensor<> must be a typemesh::mesh<...>");

 public:
  using value_type = T;
  using shape_type = Shape;
  using layout_type = Layout;
  using mesh_type = Mesh;
  using space_type = space_of<Mesh>;
  using geometry = placement<Shape, Layout, Mesh>;
  static_assert(sizeof(geometry) > 0);  // checks the layout against the shape and mesh
  static constexpr std::size_t rank = Shape::rank;

  // A zero-filled tensor on this thread's device.
  tensor(const Mesh& m, const Shape& s) : tensor(m, s, this_device()) {}

  // A tensor whose elements the caller writes next.
  tensor(const Mesh& m, const Shape& s, uninitialized_t) : tensor(m, s, this_device(), false) {}

  tensor(const Mesh& m, const Shape& s, device& dev, bool zero = true) : tensor(m, s, dev, placed_only{}) {
    if (!holds_data()) return;
    local_ = std::make_shared<local_storage>(static_cast<std::size_t>(slice_.elements()));
    // Zeros written by the device's kernel threads, not by the vector.
    if (zero) backend::fill(space_type{}, data(), local_size(), T{});
  }

  // A tensor of this type over x's local elements, shared until either is
  // written: for reshape and rename, which leave every element where it is.
  // x must hold as many elements on this device as this type's slice.
  template <class S2, class L2>
  static tensor sharing_elements_of(const tensor<T, S2, L2, Mesh>& x, const Shape& s) {
    tensor t(x.mesh(), s, this_device(), placed_only{});
    if (x.local_size() != t.slice_.elements()) {
      throw shape_error(detail::cat("sharing elements: ", x.describe(), " holds ", x.local_size(),
                                    " elements on device ", t.device_, ", ", t.describe(), " needs ",
                                    t.slice_.elements()));
    }
    t.local_ = x.local_;
    t.part_ = x.part_;
    return t;
  }

  // A tensor of this type on mesh m whose elements on this device are
  // consecutive elements of x's, from `offset` on, shared until either is
  // written: for a conversion whose target slice on this device is one run
  // of its source slice, which then copies nothing.
  template <class S2, class L2, class M2>
  static tensor sharing_part_of(const tensor<T, S2, L2, M2>& x, const Mesh& m, const Shape& s, std::int64_t offset) {
    static_assert(std::is_same_v<space_of<M2>, space_type>, "typemesh: a tensor shares elements within one space only");
    tensor t(m, s, this_device(), placed_only{});
    const std::int64_t n = t.slice_.elements();
    if (!x.local_ || offset < 0 || offset + n > x.local_size()) {
      throw error(detail::cat("sharing elements: ", t.describe(), " needs ", n, " elements from element ", offset,
                              " of ", x.describe(), ", which holds ", x.local_size(), " on device ", t.device_));
    }
    t.local_ = x.local_;
    t.part_ = {x.part_.offset + offset, n};
    return t;
  }

  // A tensor whose layout says the same in another order or spelling, e.g.
  // layout<k(axis2), batch(axis0)> for layout<batch(axis0), k(axis2)>.
  template <class Other>
    requires(!std::is_same_v<Other, Layout> && std::is_same_v<canonical<Shape, Other>, canonical<Shape, Layout>>)
  tensor(tensor<T, Shape, Other, Mesh> other)
      : mesh_(std::move(other.mesh_)),
        shape_(other.shape_),
        device_(other.device_),
        slice_(other.slice_),
        local_(std::move(other.local_)),
        part_(other.part_),
        node_(std::move(other.node_)) {}

  const Mesh& mesh() const { return mesh_; }
  const Shape& shape() const { return shape_; }
  int device() const { return device_; }

  // False on a device outside the mesh, which holds nothing.
  bool holds_data() const { return mesh_.contains(device_); }

  // This device's slice of the global index space (empty outside the mesh).
  const box<rank>& slice() const { return slice_; }
  const std::array<std::int64_t, rank>& local_extent() const { return slice_.extent; }

  // Where this device's slice starts along D, and how far it extends.
  template <class D>
  std::int64_t slice_begin() const {
    static_assert(sizeof(diagnostic::dim_not_in_shape<D, Shape, !Shape::template has<D>>));
    return slice_.begin[Shape::template index_of<D>];
  }
  template <class D>
  std::int64_t local_extent() const {
    static_assert(sizeof(diagnostic::dim_not_in_shape<D, Shape, !Shape::template has<D>>));
    return slice_.extent[Shape::template index_of<D>];
  }

  // "tensor<float, [batch=8 k=16], layout<batch(axis0)>, mesh 'lstm' ...>"
  std::string describe() const {
    return detail::cat("tensor<", name_of(dtype_of<T>), ", ", shape_.describe(), ", ", Layout::describe(), ", ",
                       mesh_.describe(), ">");
  }

  // The value of a scalar (a tensor of shape<>), such as a loss, on a device
  // of its mesh.
  T item() const {
    static_assert(rank == 0, "typemesh: item() reads a scalar (shape<>); reduce the tensor first, e.g. reduce_mean(x)");
    if (!holds_data()) {
      throw device_error(detail::cat("item(): device ", device_, " is outside ", mesh_.describe(),
                                     " and holds no value; read it on a device of that mesh"));
    }
    return backend::read_one(space(), data());
  }

  // Any device's slice, or nothing for a device outside the mesh.
  std::optional<box<rank>> slice_of(int dev) const { return geometry::slice_of(shape_, mesh_, dev); }

  // The local elements: a std::span on the host, a device_span (no
  // indexing from host code) on a GPU. Copies of a tensor share their
  // elements until one of them is written: the non-const accessors give this
  // tensor its own elements first (copy on write), so an op that keeps its
  // inputs for the gradient copies nothing, and a kept input never changes.
  // A pointer from them is valid for writing only until the tensor is copied.
  auto local() { return backend::span_of(space_type{}, data(), static_cast<std::size_t>(local_size())); }
  auto local() const { return backend::span_of(space_type{}, data(), static_cast<std::size_t>(local_size())); }
  T* data() { return own().data() + part_.offset; }
  const T* data() const { return shared().data() + part_.offset; }
  // Whether another tensor shares this one's elements (then writing through
  // data() copies them first).
  bool shares_elements() const { return local_ && local_.use_count() > 1; }
  // How many elements this device holds.
  std::int64_t local_size() const {
    return !local_ ? 0 : part_.size >= 0 ? part_.size : static_cast<std::int64_t>(local_->size());
  }
  static constexpr space_type space() { return {}; }

  // The local slice as a region of itself, for box copies.
  backend::region<rank> local_region() const { return {slice_.extent, {}}; }

  // --- Autodiff ---------------------------------------------------------------

  // Marks this tensor as a leaf whose gradient `backward` computes; `what`
  // names it in messages. Variables are made this way.
  tensor& requires_grad(std::string what = "tensor") {
    node_ = autodiff::make_node(std::move(what));
    return *this;
  }
  // Whether a gradient flows to or through this tensor.
  bool tracked() const { return node_ != nullptr; }
  const std::shared_ptr<autodiff::node>& node() const { return node_; }
  void set_node(std::shared_ptr<autodiff::node> n) { node_ = std::move(n); }

  // The same values, cut off from the tape.
  tensor detached() const {
    tensor t = *this;
    t.node_.reset();
    return t;
  }

  // Whether `backward` has left a gradient for this tensor.
  bool has_grad() const { return node_ && node_->grad.has_value(); }

  // The same tensor type with its layout in canonical order: the type every
  // spelling of this layout stores its gradient as, since tensors of two
  // spellings can share one node (the converting constructor above).
  using canonical_type = tensor<T, Shape, canonical<Shape, Layout>, Mesh>;

  // This tensor's gradient after `backward`: its slice of d(loss)/d(tensor),
  // as a tensor of the canonical spelling of this type (the same type when
  // the layout is written in the shape's dim order, as ops write theirs).
  const canonical_type& grad() const {
    if (!has_grad()) {
      throw error(detail::cat(node_ ? "'" + node_->what + "' " : std::string("a tensor "),
                              "has no gradient: ", node_ ? "backward has not reached it since its last reset"
                                                         : "it does not require one (call requires_grad or make it a variable)"));
    }
    return std::any_cast<const canonical_type&>(node_->grad);
  }
  void zero_grad() {
    if (node_) node_->grad.reset();
  }

 private:
  Mesh mesh_;
  Shape shape_;
  int device_;
  box<rank> slice_{};
  using local_storage = backend::storage<T, space_type>;
  // Shared between copies until written; null where the device holds nothing.
  std::shared_ptr<local_storage> local_;
  detail::local_part part_;
  std::shared_ptr<autodiff::node> node_;

  // Checked and placed on this device, with no elements yet.
  struct placed_only {};
  tensor(const Mesh& m, const Shape& s, typemesh::device& dev, placed_only) : mesh_(m), shape_(s), device_(dev.id()) {
    geometry::check(s, m);
    for (int d : m.devices()) {
      if (d >= dev.count()) {
        throw device_error(detail::cat(m.describe(), " names device ", d, ", but the run has ", dev.count(),
                                       " devices (0 to ", dev.count() - 1, ")"));
      }
    }
    if (auto c = m.coordinate_of(device_)) slice_ = geometry::slice_at(s, m, *c);
  }

  const local_storage& shared() const {
    static const local_storage none;
    return local_ ? *local_ : none;
  }
  // This tensor's own elements: copied (by the kernel threads) from the ones
  // it shares, if another tensor holds them too. A part it alone holds stays
  // where it is.
  local_storage& own() {
    if (!local_) {
      local_ = std::make_shared<local_storage>();
    } else if (local_.use_count() > 1) {
      const std::int64_t n = local_size();
      auto mine = std::make_shared<local_storage>(static_cast<std::size_t>(n));
      backend::copy(space_type{}, local_->data() + part_.offset, mine->data(), n);
      local_ = std::move(mine);
      part_ = {};
    }
    return *local_;
  }

  template <class, class, class, class>
  friend class tensor;
};

// Reduces this device's elements of t, in place, with the same elements of
// the other members of g: how an op completes the partial results it leaves
// along the axes that split a reduced dim. Ops and layers call this rather
// than handing local() to the device themselves.
template <class T, class S, class L, class M>
void allreduce_in_place(tensor<T, S, L, M>& t, const group& g, reduce_op op = reduce_op::sum) {
  this_device().allreduce(g, t.local(), op);
}

template <class T>
inline constexpr bool is_tensor = false;
template <class T, class S, class L, class M>
inline constexpr bool is_tensor<tensor<T, S, L, M>> = true;

}  // namespace typemesh

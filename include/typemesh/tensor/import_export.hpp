// Moving whole tensors in and out of a mesh.
//
//   auto x = typemesh::import_tensor<layout<batch(axis0)>>(mesh, whole);  // no traffic
//   host_tensor<float, shape<batch, k>> back = typemesh::export_tensor(x);
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "typemesh/backend/kernels.hpp"
#include "typemesh/tensor/host_tensor.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace detail {
// The group along every axis that splits a dim of the tensor: the devices
// whose slices together make the whole tensor, once.
template <class Tensor>
group splitting_group(const Tensor& t) {
  return t.mesh().group_along(t.device(), Tensor::geometry::axis_used);
}
}  // namespace detail

// Every device of the mesh keeps its slice of `whole`, which every device
// holds (as a program's inputs are); nothing is communicated.
template <class Layout, class T, class Shape, class Mesh>
tensor<T, Shape, Layout, Mesh> import_tensor(const Mesh& m, const host_tensor<T, Shape>& whole) {
  // values() is a mutable vector: a program may have resized it since the
  // host tensor was made. Checked on every device, before anything is
  // allocated, so that all of them report it.
  if (static_cast<std::uint64_t>(whole.size()) != static_cast<std::uint64_t>(whole.shape().elements())) {
    throw shape_error(detail::cat("import_tensor: the host tensor of shape ", whole.shape().describe(), " holds ",
                                  whole.size(), " values, but its shape needs ", whole.shape().elements(),
                                  " (was its values() vector resized?)"));
  }
  tensor<T, Shape, Layout, Mesh> t(m, whole.shape());
  if (t.holds_data()) {
    auto copy_slice_from = [&](const T* all) {
      backend::copy_box(t.space(), all, {whole.shape().sizes(), t.slice().begin}, t.local().data(), t.local_region(),
                        t.local_extent());
    };
    if constexpr (std::is_same_v<space_of<Mesh>, host_space>) {
      // Host memory already: the slice is copied straight out of it (a
      // staged copy of the whole tensor took 0.9% of AlexNet's step at two
      // threads, on one of them).
      copy_slice_from(whole.values().data());
    } else {
      const backend::storage<T, space_of<Mesh>> staged(whole.values().begin(), whole.values().end());
      copy_slice_from(backend::view(staged).data());
    }
  }
  return t;
}

// The whole tensor, on every device of the mesh; an empty host tensor on the
// devices outside it. Each device receives exactly the elements it lacks: an
// allgather along the axes that split the tensor, never along replica axes.
template <class T, class Shape, class Layout, class Mesh>
host_tensor<T, Shape> export_tensor(const tensor<T, Shape, Layout, Mesh>& t) {
  if (!t.holds_data()) return {};
  group g = detail::splitting_group(t);
  const std::size_t n = t.local().size();
  backend::storage<T, space_of<Mesh>> blocks(n * g.size()), gathered(t.shape().elements());
  this_device().allgather(g, t.local(), backend::view(blocks));
  for (int j = 0; j < g.size(); ++j) {
    backend::copy_box(t.space(), backend::view(blocks).data() + j * n, t.local_region(), backend::view(gathered).data(),
                      {t.shape().sizes(), t.slice_of(g.devices[j])->begin}, t.local_extent());
  }
  host_tensor<T, Shape> whole(t.shape());
  backend::copy_elements(host_space{}, whole.values().data(), t.space(), backend::view(gathered).data(),
                         gathered.size());
  return whole;
}

}  // namespace typemesh

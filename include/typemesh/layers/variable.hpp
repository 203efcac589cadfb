// Trainable variables: tensors that require a gradient, initialised from
// (seed, name, global element index), so their values are the same under
// every layout and device count.
//
//   auto w = typemesh::variable<layout<n(axis1)>>(mesh, "dense/w", shape<k, n>{512, 1024},
//                                                 typemesh::init::normal{0.02});
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "typemesh/backend/kernels.hpp"
#include "typemesh/backend/random.hpp"
#include "typemesh/ops/random.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace init {
struct zeros {};
struct constant {
  double value;
};
struct normal {
  double stddev = 1.0;
  double mean = 0.0;
};
struct uniform {
  double low = -1.0, high = 1.0;
};
// Uniform in +-sqrt(6 / (fan_in + fan_out)) (Glorot), with the fans given.
struct glorot_uniform {
  std::int64_t fan_in, fan_out;
};
using any = std::variant<zeros, constant, normal, uniform, glorot_uniform>;
}  // namespace init

// A tensor that requires a gradient, named `name`, with values from `how`.
template <class Layout, class T = float, class S, class M>
  requires is_layout<Layout>
tensor<T, S, Layout, M> variable(const M& m, std::string_view name, const S& s, init::any how = init::zeros{},
                                 std::uint64_t seed = 0) {
  tensor<T, S, Layout, M> t(m, s);
  const std::uint64_t stream = random_stream({seed, name, 0}, rng_use::initialisation).base();
  const auto where = global_index_geometry(t);
  std::visit(
      [&](const auto& h) {
        using H = std::decay_t<decltype(h)>;
        if constexpr (std::is_same_v<H, init::zeros>) {
          (void)h;  // the tensor starts zero-filled
        } else if constexpr (std::is_same_v<H, init::constant>) {
          backend::fill(t.space(), t.data(), t.local_size(), static_cast<T>(h.value));
        } else if constexpr (std::is_same_v<H, init::normal>) {
          backend::random_normal_fill(t.space(), t.data(), where, stream, h.mean, h.stddev);
        } else if constexpr (std::is_same_v<H, init::uniform>) {
          backend::random_uniform_fill(t.space(), t.data(), where, stream, h.low, h.high - h.low);
        } else {
          const double limit = std::sqrt(6.0 / static_cast<double>(h.fan_in + h.fan_out));
          backend::random_uniform_fill(t.space(), t.data(), where, stream, -limit, 2 * limit);
        }
      },
      how);
  t.requires_grad(std::string(name));
  return t;
}

// The same, named by the variable's tensor type, which says the element
// type, the dims, the layout and the mesh type once:
//   using w_t = tensor<float, shape<k, n>, layout<n(axis1)>, grid>;
//   auto w = typemesh::variable<w_t>(mesh, "w", {512, 1024}, init::normal{0.02});
template <class Tensor>
  requires is_tensor<Tensor>
Tensor variable(const typename Tensor::mesh_type& m, std::string_view name, const typename Tensor::shape_type& s,
                init::any how = init::zeros{}, std::uint64_t seed = 0) {
  return variable<typename Tensor::layout_type, typename Tensor::value_type>(m, name, s, how, seed);
}

}  // namespace typemesh

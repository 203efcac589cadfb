// A dense (fully connected) layer: y = activation(x . w + b).
//
//   auto w = typemesh::variable<layout<n(axis1)>>(mesh, "fc/w", shape<k, n>{512, 1024}, init::normal{0.02});
//   auto b = typemesh::variable<layout<n(axis1)>>(mesh, "fc/b", shape<n>{1024});
//   auto y = typemesh::dense(x, w, b, typemesh::activation::relu);   // x: [batch, k] -> y: [batch, n]
//
// The dims x and w share are the reduced dims (any number of them); the
// output has x's other dims, then w's other dims. This is the layer the PaSE
// benchmarks call as mtf.layers.dense(x, new_dims, reduced_dims): here the
// weight's shape says both. Communication comes from the layouts, as in
// einsum: a reduced dim split over axis A gives partial sums, allreduced over A.
// Gradients come from the ops the layer is made of (einsum, +, activation).
#pragma once

#include <type_traits>

#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/einsum.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/ops/unary.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace diagnostic {
TYPEMESH_DIAGNOSTIC(dense_without_reduced_dim, (class ShapeX, class ShapeW), (ShapeX, ShapeW),
                    "dense: x and w share no dim, so nothing is reduced; give w the input dims x has "
                    "(e.g. w: [k, n] for x: [batch, k]); the shapes of x and w are the arguments above");
TYPEMESH_DIAGNOSTIC(bias_dim_not_in_output, (class Dim, class Output), (Dim, Output),
                    "dense: the bias has a dim that the layer's output lacks; the bias's dims must be "
                    "output dims (usually w's new dims); the dim and the output shape are the arguments above");
}  // namespace diagnostic

// Activations to pass to dense: function objects, since an overloaded
// function template such as typemesh::relu cannot be passed by name.
namespace activation {
struct identity_t {
  template <class X>
  X operator()(const X& x) const { return x; }
};
struct relu_t {
  template <class X>
  X operator()(const X& x) const { return typemesh::relu(x); }
};
struct sigmoid_t {
  template <class X>
  X operator()(const X& x) const { return typemesh::sigmoid(x); }
};
struct tanh_t {
  template <class X>
  X operator()(const X& x) const { return typemesh::tanh(x); }
};
inline constexpr identity_t identity{};
inline constexpr relu_t relu{};
inline constexpr sigmoid_t sigmoid{};
inline constexpr tanh_t tanh{};
}  // namespace activation

namespace layers_detail {

// x's dims that w lacks, then w's dims that x lacks.
template <class SX, class SW>
using dense_output = shape_union<shape_minus<SX, SW>, shape_minus<SW, SX>>;

// einsum<Ds...>(x, w) for Out = shape<Ds...>.
template <class Out>
struct einsum_into;
template <class... Ds>
struct einsum_into<shape<Ds...>> {
  template <class X, class W>
  static auto apply(const X& x, const W& w) {
    return einsum<Ds...>(x, w);
  }
};

template <class Out, class... BiasDims>
consteval bool bias_fits(shape<BiasDims...>*) {
  return (diagnostic::bias_dim_not_in_output<BiasDims, Out, !Out::template has<BiasDims>>::passed && ...);
}

}  // namespace layers_detail

// x . w, summed over the dims they share.
template <class T, class SX, class LX, class MX, class SW, class LW, class MW>
auto dense(const tensor<T, SX, LX, MX>& x, const tensor<T, SW, LW, MW>& w) {
  constexpr bool shares_a_dim = shape_minus<SX, SW>::rank < SX::rank;
  static_assert(sizeof(diagnostic::dense_without_reduced_dim<SX, SW, !shares_a_dim>));
  return layers_detail::einsum_into<layers_detail::dense_output<SX, SW>>::apply(x, w);
}

// x . w + b, b broadcast over the output dims it lacks.
template <class T, class SX, class LX, class MX, class SW, class LW, class MW, class SB, class LB, class MB>
auto dense(const tensor<T, SX, LX, MX>& x, const tensor<T, SW, LW, MW>& w, const tensor<T, SB, LB, MB>& b) {
  if constexpr (!layers_detail::bias_fits<layers_detail::dense_output<SX, SW>>(static_cast<SB*>(nullptr))) {
    return diagnostic::after_failure<decltype(dense(x, w))>();
  } else {
    return dense(x, w) + b;
  }
}

// activation(x . w + b), e.g. dense(x, w, b, activation::relu); any callable
// from the output tensor to a tensor works.
template <class T, class SX, class LX, class MX, class SW, class LW, class MW, class SB, class LB, class MB,
          class Activation>
  requires(!is_tensor<std::remove_cvref_t<Activation>>)
auto dense(const tensor<T, SX, LX, MX>& x, const tensor<T, SW, LW, MW>& w, const tensor<T, SB, LB, MB>& b,
           Activation&& act) {
  return act(dense(x, w, b));
}

// activation(x . w), without a bias (the seed's use_bias=False).
template <class T, class SX, class LX, class MX, class SW, class LW, class MW, class Activation>
  requires(!is_tensor<std::remove_cvref_t<Activation>>)
auto dense(const tensor<T, SX, LX, MX>& x, const tensor<T, SW, LW, MW>& w, Activation&& act) {
  return act(dense(x, w));
}

}  // namespace typemesh

// Layer normalisation over one named dim, as in the Transformer:
//
//   auto y = typemesh::layer_norm<d_model>(x, scale, bias);   // scale, bias: [d_model]
//   auto z = typemesh::layer_norm<d_model>(x, scale, bias, {.epsilon = 1e-5});
//
// y = (x - mean_D(x)) / sqrt(var_D(x) + epsilon) * scale + bias, with the mean
// and variance taken over dim D for every index of x's other dims. D is named
// by the template argument; x's dims may come in any order, and y has x's.
//
// D may be split over a mesh axis A: each device then holds part of every
// normalised row, and the means are allreduced over A (reduce_mean does
// that). scale and bias must place D as x does. The layer is composed of
// recorded ops, so its gradient (which needs the same allreduces backward)
// comes from theirs.
#pragma once

#include <type_traits>

#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/shape_algebra.hpp"
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/reduce.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/ops/unary.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace diagnostic {
TYPEMESH_DIAGNOSTIC(layer_norm_dim_not_in_input, (class Dim, class Shape), (Dim, Shape),
                    "layer_norm<D> normalises over a dim that x does not have; D and x's shape are the arguments "
                    "above");
TYPEMESH_DIAGNOSTIC(layer_norm_parameter_not_over_dim, (class Dim, class ParameterShape), (Dim, ParameterShape),
                    "layer_norm<D>'s scale and bias must have exactly the dim D; D and the parameter's shape are "
                    "the arguments above");
}  // namespace diagnostic

// Options of layer_norm; the default epsilon is Mesh-TensorFlow's.
struct layer_norm_options {
  // Added to the variance before the square root; >= 0.
  double epsilon = 1e-6;
};

namespace layer_norm_detail {
template <class D, class S, class L, class M, class SS, class LS, class MS, class SB, class LB, class MB>
consteval bool check() {
  if constexpr (!diagnostic::layer_norm_dim_not_in_input<D, S, !shape_contains<S, D>>::passed) return false;
  else if constexpr (!(ops_detail::same_mesh<M, MS>() && ops_detail::same_mesh<M, MB>())) return false;
  else if constexpr (!diagnostic::layer_norm_parameter_not_over_dim<D, SS, !std::is_same_v<SS, shape<D>>>::passed)
    return false;
  else if constexpr (!diagnostic::layer_norm_parameter_not_over_dim<D, SB, !std::is_same_v<SB, shape<D>>>::passed)
    return false;
  else if constexpr (!ops_detail::compatible<S, L, SS, LS>()) return false;
  else return ops_detail::compatible<S, L, SB, LB>();
}
}  // namespace layer_norm_detail

template <class D, class T, class S, class L, class M, class SS, class LS, class MS, class SB, class LB, class MB>
auto layer_norm(const tensor<T, S, L, M>& x, const tensor<T, SS, LS, MS>& scale, const tensor<T, SB, LB, MB>& bias,
                const layer_norm_options& options = {}) {
  constexpr bool ok = layer_norm_detail::check<D, S, L, M, SS, LS, MS, SB, LB, MB>();
  if constexpr (!ok) {
    return diagnostic::after_failure<tensor<T, S, canonical<S, L>, M>>();
  } else {
    const double epsilon = options.epsilon;
    if (!(epsilon >= 0.0)) {
      throw error(detail::cat("layer_norm over ", D::name, ": epsilon must be >= 0, got ", epsilon));
    }
    if (scale.shape().template size<D>() != x.shape().template size<D>() ||
        bias.shape().template size<D>() != x.shape().template size<D>()) {
      throw shape_error(detail::cat("layer_norm over ", D::name, ": x ", x.shape().describe(), " but scale ",
                                    scale.shape().describe(), " and bias ", bias.shape().describe()));
    }
    // Qualified calls: the arguments' namespaces must not offer other overloads.
    auto centred = typemesh::sub(x, typemesh::reduce_mean<D>(x));         // broadcast over D
    auto variance = typemesh::reduce_mean<D>(typemesh::square(centred));  // x's dims without D
    auto normalised = typemesh::mul(centred, typemesh::rsqrt(typemesh::shift(variance, static_cast<T>(epsilon))));
    return typemesh::add(typemesh::mul(normalised, scale), bias);
  }
}

}  // namespace typemesh

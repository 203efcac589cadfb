// Layer normalisation over one named dim, as in the Transformer:
//
//   auto y = typemesh::layer_norm<d_model>(x, scale, bias);   // scale, bias: [d_model]
//
// y = (x - mean_D(x)) / sqrt(var_D(x) + epsilon) * scale + bias, with the mean
// and variance taken over dim D for every index of x's other dims.
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
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/reduce.hpp"
#include "typemesh/ops/unary.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

template <class D, class T, class S, class L, class M, class LS, class LB>
auto layer_norm(const tensor<T, S, L, M>& x, const tensor<T, shape<D>, LS, M>& scale,
                const tensor<T, shape<D>, LB, M>& bias, std::type_identity_t<T> epsilon = T(1e-6)) {
  static_assert(sizeof(diagnostic::dim_not_in_shape<D, S, !S::template has<D>>),
                "typemesh: layer_norm<D> normalises over a dim that x does not have");
  if (!(epsilon >= T{0})) {
    throw error(detail::cat("layer_norm over ", D::name, ": epsilon must be >= 0, got ", epsilon));
  }
  if (scale.shape().template size<D>() != x.shape().template size<D>() ||
      bias.shape().template size<D>() != x.shape().template size<D>()) {
    throw shape_error(detail::cat("layer_norm over ", D::name, ": x ", x.shape().describe(), " but scale ",
                                  scale.shape().describe(), " and bias ", bias.shape().describe()));
  }
  // Qualified calls: the arguments' namespaces must not offer other overloads.
  auto centred = typemesh::sub(x, typemesh::reduce_mean<D>(x));            // broadcast over D
  auto variance = typemesh::reduce_mean<D>(typemesh::square(centred));     // x's dims without D
  auto normalised = typemesh::mul(centred, typemesh::rsqrt(typemesh::shift(variance, epsilon)));
  return typemesh::add(typemesh::mul(normalised, scale), bias);
}

}  // namespace typemesh

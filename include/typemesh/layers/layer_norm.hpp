// Layer normalisation over one named dim, as in the Transformer:
//
//   auto y = typemesh::layer_norm<d_model>(x, scale, bias);   // scale, bias: [d_model]
//   auto z = typemesh::layer_norm<d_model>(x, scale, bias, {.epsilon = 1e-5});
//
// y = (x - mean_D(x)) / sqrt(var_D(x) + epsilon) * scale + bias, with the mean
// and variance taken over dim D for every index of x's other dims. D is named
// by the template argument; x's dims may come in any order, and y has x's.
//
// On the host, x_hat = (x - mean) / sigma and x_hat * scale + bias are one
// recorded op, a row kernel forward and backward (backend/layer_norm.hpp)
// with the parameters' gradients reduced as mul and add reduce them. On
// CUDA the normalisation is one op and x_hat * scale + bias are the
// broadcasting ops.
//
// D may be split over a mesh axis A: each device then holds part of every
// normalised row. Forward, each device sums its part of every row (x and
// x^2) and one allreduce over A of both sums gives the mean and variance;
// backward, one allreduce over A of sum(g) and sum(g * x_hat). On a split D
// the variance is E[x^2] - mean^2 (each part's squares taken about its own
// mean), which loses precision on rows whose mean is huge against their
// spread; on a whole D it is the two-pass mean of squared deviations.
// scale and bias must place D as x does.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/layer_norm.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/shape_algebra.hpp"
#include "typemesh/layers/embedding.hpp"  // the dim-order helpers
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

// The row sums of a split D, allreduced over D's axes in one message: `rows`
// first sums then `rows` second sums.
template <class Tensor, std::size_t N>
void allreduce_row_sums(const Tensor& t, const std::array<bool, N>& axes, backend::storage<typename Tensor::value_type,
                        typename Tensor::space_type>& sums) {
  this_device().allreduce(t.mesh().group_along(t.device(), axes), backend::view(sums));
}

// dx from dy, both as rows with D innermost: from the gradient g = dy of
// x_hat or, given this device's slice of the scale (host only), from dy with
// g = dy * scale computed on the fly.
template <class D, class Other, class G, class XHat, class InvSigma>
XHat gradient(const G& g, const XHat& x_hat, const InvSigma& inv_sigma, std::int64_t size,
              const typename XHat::value_type* scale = nullptr) {
  using T = typename XHat::value_type;
  using S = typename XHat::shape_type;
  using L = typename XHat::layout_type;
  using M = typename XHat::mesh_type;
  constexpr bool split = ops_detail::any(ops_detail::summed_axes<S, L, Other, M>());
  XHat dx(g.mesh(), x_hat.shape(), uninitialized);  // the kernel writes every element
  if (!g.holds_data()) return dx;
  const backend::layer_norm_rows geometry{inv_sigma.local_size(), g.template local_extent<D>(), size};
  const T* sums_data = nullptr;  // null: each row's sums come from the kernel's own pass
  backend::storage<T, space_of<M>> sums(split ? 2 * static_cast<std::size_t>(geometry.rows) : 0);
  // Only the host's kernels take a scale (on CUDA the affine step stays apart).
  constexpr bool host = std::is_same_v<space_of<M>, host_space>;
  if constexpr (split) {
    T* partial = backend::view(sums).data();
    if constexpr (host) backend::layer_norm_gradient_sums(g.space(), g.data(), x_hat.data(), partial, geometry, scale);
    else backend::layer_norm_gradient_sums(g.space(), g.data(), x_hat.data(), partial, geometry);
    allreduce_row_sums(g, ops_detail::summed_axes<S, L, Other, M>(), sums);
    sums_data = partial;
  }
  if constexpr (host) {
    backend::layer_norm_gradient(g.space(), g.data(), x_hat.data(), inv_sigma.data(), sums_data, dx.data(), geometry,
                                 scale);
  } else {
    backend::layer_norm_gradient(g.space(), g.data(), x_hat.data(), inv_sigma.data(), sums_data, dx.data(), geometry);
  }
  return dx;
}

// Calls kernel(rows, sums, geometry) with x's rows (D innermost: x itself
// when D is its last dim, else a local transpose) on a device that holds
// some, where sums are the rows' allreduced sums when D is split, else null
// (the kernels then take each row's sums in their own passes).
template <class D, class Other, class T, class S, class L, class M, class Rows, class Kernel>
void on_rows(const tensor<T, S, L, M>& x, const Rows& rows_shape, std::int64_t rows_count, Kernel kernel) {
  constexpr bool split = ops_detail::any(ops_detail::summed_axes<S, L, Other, M>());
  layers_detail::visit_in_dim_order(x, rows_shape, [&](const auto& rows) {
    if (!rows.holds_data()) return;
    const backend::layer_norm_rows geometry{rows_count, rows.template local_extent<D>(),
                                            x.shape().template size<D>()};
    backend::storage<T, space_of<M>> sums(split ? 2 * static_cast<std::size_t>(geometry.rows) : 0);
    if constexpr (split) {
      backend::layer_norm_partial_sums(rows.space(), rows.data(), backend::view(sums).data(), geometry);
      allreduce_row_sums(rows, ops_detail::summed_axes<S, L, Other, M>(), sums);
      kernel(rows, static_cast<const T*>(backend::view(sums).data()), geometry);
    } else {
      kernel(rows, static_cast<const T*>(nullptr), geometry);
    }
  });
}

// x_hat = (x - mean_D(x)) / sqrt(var_D(x) + epsilon), recorded as one op.
// The kernels see rows with D innermost: x itself when D is its last dim,
// else a local transpose.
template <class D, class T, class S, class L, class M>
auto normalise(const tensor<T, S, L, M>& x, T epsilon) {
  using Other = shape_without<S, D>;
  using Rows = shape_append<Other, D>;
  using OtherL = canonical<Other, L>;
  using out_t = tensor<T, S, canonical<S, L>, M>;
  using rows_t = tensor<T, Rows, canonical<Rows, L>, M>;

  const Rows rows_shape = shape_from<Rows>(x.shape(), x.shape());
  const std::int64_t size = x.shape().template size<D>();
  rows_t x_hat(x.mesh(), rows_shape, uninitialized);  // the kernel writes every element
  tensor<T, Other, OtherL, M> inv_sigma(x.mesh(), ops_detail::reduced_sizes<S, D>(x.shape()), uninitialized);
  on_rows<D, Other>(x, rows_shape, inv_sigma.local_size(), [&](const auto& rows, const T* sums, auto geometry) {
    backend::layer_norm_forward(rows.space(), rows.data(), sums, x_hat.data(), inv_sigma.data(), geometry, epsilon);
  });
  if (!autodiff::recording() || !x.tracked()) return out_t(layers_detail::in_dim_order(std::move(x_hat), x.shape()));
  // Backward keeps x_hat in rows; the output is a copy in x's dim order.
  out_t out = [&] {
    if constexpr (std::is_same_v<Rows, S>) return out_t(x_hat);
    else return out_t(ops_detail::broadcast_to<S, canonical<S, L>>(x_hat, x.shape()));
  }();
  return record(std::move(out), "layer_norm",
                gradient_of(x, [x_hat = std::move(x_hat), inv_sigma = std::move(inv_sigma), rows_shape, size,
                                x_shape = x.shape()](const out_t& dy) {
                  if constexpr (std::is_same_v<Rows, S>) {
                    return layers_detail::in_dim_order(gradient<D, Other>(dy, x_hat, inv_sigma, size), x_shape);
                  } else {
                    return layers_detail::in_dim_order(
                        gradient<D, Other>(ops_detail::broadcast_to<Rows, canonical<Rows, L>>(dy, rows_shape), x_hat,
                                           inv_sigma, size),
                        x_shape);
                  }
                }));
}

// normalise(x) * scale + bias as one recorded op, for the host: the forward
// writes x_hat and y in one pass; backward, dx comes from dy and the scale
// without storing dy * scale, and the parameters' gradients, sum(dy * x_hat)
// and sum(dy) over everything but D, are reduced as mul's and add's are
// (sum_back_to), so they take the same allreduces over the same axes.
// Out is the composed ops' output type, which layer_norm checks is x's
// canonical tensor.
template <class D, class Out, class T, class S, class L, class M, class SS, class LS, class MS, class SB, class LB,
          class MB>
Out normalise_affine(const tensor<T, S, L, M>& x, const tensor<T, SS, LS, MS>& scale,
                     const tensor<T, SB, LB, MB>& bias, T epsilon) {
  using Other = shape_without<S, D>;
  using Rows = shape_append<Other, D>;
  using OtherL = canonical<Other, L>;
  using rows_t = tensor<T, Rows, canonical<Rows, L>, M>;

  const Rows rows_shape = shape_from<Rows>(x.shape(), x.shape());
  const std::int64_t size = x.shape().template size<D>();
  rows_t x_hat(x.mesh(), rows_shape, uninitialized), y(x.mesh(), rows_shape, uninitialized);  // written whole
  tensor<T, Other, OtherL, M> inv_sigma(x.mesh(), ops_detail::reduced_sizes<S, D>(x.shape()), uninitialized);
  on_rows<D, Other>(x, rows_shape, inv_sigma.local_size(), [&](const auto& rows, const T* sums, auto geometry) {
    backend::layer_norm_affine_forward(rows.space(), rows.data(), sums, scale.data(), bias.data(), x_hat.data(),
                                       y.data(), inv_sigma.data(), geometry, epsilon);
  });
  Out out(layers_detail::in_dim_order(std::move(y), x.shape()));
  if (!autodiff::recording() || !(x.tracked() || scale.tracked() || bias.tracked())) return out;
  // dy in rows, as the kernels read it.
  const auto in_rows = [rows_shape](const Out& dy) {
    if constexpr (std::is_same_v<Rows, S>) return dy;
    else return ops_detail::broadcast_to<Rows, canonical<Rows, L>>(dy, rows_shape);
  };
  return record(
      std::move(out), "layer_norm",
      gradient_of(x,
                  [x_hat, inv_sigma = std::move(inv_sigma), scale_values = scale.detached(), in_rows, size,
                   x_shape = x.shape()](const Out& dy) {
                    return layers_detail::in_dim_order(
                        gradient<D, Other>(in_rows(dy), x_hat, inv_sigma, size, scale_values.data()), x_shape);
                  }),
      gradient_of(scale,
                  [x_hat, x_shape = x.shape(), scale_shape = scale.shape()](const Out& dy) {
                    const Out normalised(layers_detail::in_dim_order(x_hat, x_shape));
                    Out g(dy.mesh(), dy.shape(), uninitialized);
                    if (dy.holds_data()) {
                      backend::zip(g.space(), dy.data(), normalised.data(), g.data(), g.local_size(),
                                   ops_detail::mul_value{});
                    }
                    return ops_detail::sum_back_to<SS, LS>(g, scale_shape);
                  }),
      gradient_of(bias, [bias_shape = bias.shape()](const Out& dy) {
        return ops_detail::sum_back_to<SB, LB>(dy, bias_shape);
      }));
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
    using normalised_t = tensor<T, S, canonical<S, L>, M>;
    using out_t = decltype(typemesh::add(typemesh::mul(std::declval<const normalised_t&>(), scale), bias));
    if constexpr (std::is_same_v<space_of<M>, host_space> && std::is_same_v<out_t, normalised_t>) {
      return layer_norm_detail::normalise_affine<D, out_t>(x, scale, bias, static_cast<T>(epsilon));
    } else {
      auto normalised = layer_norm_detail::normalise<D>(x, static_cast<T>(epsilon));
      return typemesh::add(typemesh::mul(normalised, scale), bias);
    }
  }
}

}  // namespace typemesh

// einsum over named dims: the output keeps the dims it names, every other dim
// of the inputs is summed.
//
//   auto y = typemesh::einsum<batch, n>(x, w);          // x: [batch, k], w: [k, n]
//   auto z = typemesh::einsum<shape<batch, n>>(x, w);   // the same, for a shape computed at compile time
//
// The output's layout comes from the inputs (see ops/rules.hpp). When a
// summed dim is split over axis A, each device computes a partial sum over
// its part and the partial sums are allreduced over A. The local product runs
// as a batch of GEMMs through BLAS whenever the dims allow.
#pragma once

#include <optional>
#include <type_traits>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/contract.hpp"
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace ops_detail {

template <class Out, class OutL, class SA, class LA, class SB, class LB>
consteval bool check_contraction() {
  // Dims of Out that no input has are broadcast (gradients of summed dims).
  bool ok = compatible<SA, LA, SB, LB>();
  // The output places the dims it shares with an input as that input does.
  [&]<class... Ds>(type_list<Ds...>) {
    auto one = [&]<class D>() {
      if constexpr (SA::template has<D>) ok = ok && same_axis<D, LA, OutL>();
      else if constexpr (SB::template has<D>) ok = ok && same_axis<D, LB, OutL>();
    };
    (one.template operator()<Ds>(), ...);
  }(dims_of<Out>{});
  return ok;
}

// a * b summed to shape Out with layout OutL; out_shape gives Out's sizes.
template <class Out, class OutL, class T, class SA, class LA, class SB, class LB, class M>
tensor<T, Out, OutL, M> contract_to(const tensor<T, SA, LA, M>& a, const tensor<T, SB, LB, M>& b,
                                    const Out& out_shape) {
  static_assert(check_contraction<Out, OutL, SA, LA, SB, LB>());
  constexpr auto axes = either(summed_axes<SA, LA, Out, M>(), summed_axes<SB, LB, Out, M>());
  tensor<T, Out, OutL, M> out(a.mesh(), out_shape, uninitialized);
  if (!a.holds_data()) return out;
  using U = dims_of<shape_union<shape_union<Out, SA>, SB>>;
  backend::contract(a.space(), a.data(), local_dims_of<U>(a), b.data(), local_dims_of<U>(b), out.data(),
                    local_dims_of<U>(out));
  if constexpr (any(axes)) {
    allreduce_in_place(out, a.mesh().group_along(a.device(), axes));
  }
  return out;
}

// The gradient edge of einsum's input `x` (dims S), whose gradient is
// other * dy summed to S (other first when other_first): contract_to, and
// the fold that adds alpha times that product to x's values in place (an
// SGD step inside the GEMM, optim::sgd::minimize). The fold declines (false)
// where the product's sum spans devices and needs an allreduce.
template <bool other_first, class S, class L, class T, class M, class Other, class Dy>
auto einsum_gradient(const tensor<T, S, L, M>& x, Other other) {
  using Lc = canonical<S, L>;
  auto f = [other, s = x.shape()](const Dy& dy) {
    if constexpr (other_first) return contract_to<S, Lc>(*other, dy, s);
    else return contract_to<S, Lc>(dy, *other, s);
  };
  auto fold = [other, extent = x.local_extent()](const Dy& dy, T* values, T alpha, T beta) {
    using O = typename Other::value_type;
    using SO = typename O::shape_type;
    using SD = typename Dy::shape_type;
    constexpr auto axes = either(summed_axes<SO, typename O::layout_type, S, M>(),
                                 summed_axes<SD, typename Dy::layout_type, S, M>());
    if constexpr (any(axes)) {
      if (dy.mesh().group_along(dy.device(), axes).size() > 1) return false;
    }
    if (!dy.holds_data()) return false;
    const O& o = *other;
    using U = dims_of<shape_union<shape_union<S, SO>, SD>>;
    const backend::dims xd = local_dims(U{}, static_cast<S*>(nullptr), extent);
    if constexpr (other_first) {
      backend::contract(dy.space(), o.data(), local_dims_of<U>(o), dy.data(), local_dims_of<U>(dy), values, xd, alpha,
                        beta);
    } else {
      backend::contract(dy.space(), dy.data(), local_dims_of<U>(dy), o.data(), local_dims_of<U>(o), values, xd, alpha,
                        beta);
    }
    return true;
  };
  return gradient_of(x, std::move(f), std::move(fold));
}

}  // namespace ops_detail

// The product of a and b summed over every dim that Out lacks:
// einsum<shape<batch, n>>(x, w), the form layers use with a computed shape.
template <class Out, class T, class SA, class LA, class MA, class SB, class LB, class MB>
  requires is_shape<Out>
auto einsum(const tensor<T, SA, LA, MA>& a, const tensor<T, SB, LB, MB>& b) {
  using M = MA;
  constexpr bool ok = ops_detail::same_mesh<MA, MB>() && ops_detail::dims_come_from<Out, SA, SB>::value &&
                      ops_detail::compatible<SA, LA, SB, LB>();
  using OutL = canonical<Out, typename ops_detail::checked_output_layout<ok, Out, LA, LB>::type>;
  using out_t = tensor<T, Out, OutL, M>;
  if constexpr (!ok) {
    return diagnostic::after_failure<out_t>();
  } else {
    ops_detail::check_same_mesh("einsum", a, b);
    ops_detail::check_common_sizes("einsum", a.shape(), b.shape());
    const Out s = shape_from<Out>(a.shape(), b.shape());
    out_t out = ops_detail::contract_to<Out, OutL>(a, b, s);
    if (!autodiff::recording() || !(a.tracked() || b.tracked())) return out;
    // Each gradient needs the other input: keep a copy only where it is used.
    std::optional<tensor<T, SB, LB, M>> bv;
    std::optional<tensor<T, SA, LA, M>> av;
    if (a.tracked()) bv = b.detached();
    if (b.tracked()) av = a.detached();
    return record(std::move(out), "einsum",
                  ops_detail::einsum_gradient<false, SA, LA, T, M, decltype(bv), out_t>(a, std::move(bv)),
                  ops_detail::einsum_gradient<true, SB, LB, T, M, decltype(av), out_t>(b, std::move(av)));
  }
}

// The same with the output's dims listed: einsum<batch, n>(x, w).
template <class... OutDims, class T, class SA, class LA, class MA, class SB, class LB, class MB>
  requires(Dim<OutDims> && ...)
auto einsum(const tensor<T, SA, LA, MA>& a, const tensor<T, SB, LB, MB>& b) {
  return einsum<shape<OutDims...>>(a, b);
}

}  // namespace typemesh

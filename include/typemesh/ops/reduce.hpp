// Reductions over named dims, and their dual, broadcasting.
//
//   auto s = typemesh::reduce_sum<k>(x);     // x without k; allreduce where k was split
//   auto m = typemesh::reduce_mean(x);       // every dim: a scalar on every device
//   auto b = typemesh::broadcast_to<shape<batch, k>, layout<batch(axis0)>>(v, s);
//
// A reduced dim that was split over axis A leaves one partial result per
// device along A: those are allreduced, so the output is replicated along A.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/strided.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/ops/unary.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace ops_detail {


// dy shared by the tied maxima of its row: dy / ties where an element is one.
struct shared_by_ties {
  template <class T>
  TYPEMESH_KERNEL T operator()(T tie, T dy, T ties) const {
    return tie != T{0} ? dy / ties : T{0};
  }
};

// x reduced to shape Out (any subset of x's dims, in any order) with layout
// OutL, which must place Out's dims as x does.
template <class Out, class OutL, class T, class S, class L, class M>
tensor<T, Out, OutL, M> reduce_to(const tensor<T, S, L, M>& x, const Out& out_shape, reduce_op op) {
  static_assert(std::is_same_v<canonical<Out, OutL>, canonical<Out, typename output_layout<Out, L>::type>>,
                "typemesh: internal: reduce_to's layout must place the kept dims as the input does");
  tensor<T, Out, OutL, M> out(x.mesh(), out_shape, uninitialized);
  if (!x.holds_data()) return out;
  using U = dims_of<S>;
  const auto xd = local_dims_of<U>(x), od = local_dims_of<U>(out);
  if (op == reduce_op::sum) {
    backend::reduce(x.space(), x.data(), xd, out.data(), od, T{0}, backend::plus<T>{});
  } else {
    backend::reduce(x.space(), x.data(), xd, out.data(), od, std::numeric_limits<T>::lowest(), backend::maximum<T>{});
  }
  constexpr auto axes = summed_axes<S, L, Out, M>();
  if constexpr (any(axes)) {
    allreduce_in_place(out, x.mesh().group_along(x.device(), axes), op);
  }
  return out;
}

// x repeated along the dims of Out it lacks (Out has all of x's dims, in any
// order). OutL places x's dims as x does; a dim x lacks may be split, and
// each device fills its own slice.
template <class Out, class OutL, class T, class S, class L, class M>
tensor<T, Out, OutL, M> broadcast_to(const tensor<T, S, L, M>& x, const Out& out_shape) {
  tensor<T, Out, OutL, M> out(x.mesh(), out_shape, uninitialized);
  if (!x.holds_data()) return out;
  using U = dims_of<Out>;
  backend::broadcast(x.space(), x.data(), local_dims_of<U>(x), out.data(), local_dims_of<U>(out));
  return out;
}

template <class S, class... Ds>
using reduced_shape = std::conditional_t<sizeof...(Ds) == 0, shape<>, shape_without<S, Ds...>>;

template <class S, class... Ds>
reduced_shape<S, Ds...> reduced_sizes(const S& s) {
  using Out = reduced_shape<S, Ds...>;
  return [&]<class... Keep>(type_list<Keep...>) {
    if constexpr (sizeof...(Keep) == 0) return Out{};
    else return Out{s.template size<Keep>()...};
  }(dims_of<Out>{});
}

template <class S, class... Ds>
consteval bool check_dims_in(type_list<Ds...>) {
  return (diagnostic::dim_not_in_shape<Ds, S, !S::template has<Ds>>::passed && ...);
}

}  // namespace ops_detail

// x repeated along the dims of out_shape that it lacks (out_shape has all of
// x's dims, in any order), placed by OutLayout. The gradient sums back.
template <class Out, class OutL, class T, class S, class L, class M>
tensor<T, Out, canonical<Out, OutL>, M> broadcast_to(const tensor<T, S, L, M>& x, const Out& out_shape) {
  using out_t = tensor<T, Out, canonical<Out, OutL>, M>;
  if constexpr (!(ops_detail::check_dims_in<Out>(dims_of<S>{}) && ops_detail::compatible<S, L, Out, OutL>())) {
    return diagnostic::after_failure<out_t>();
  } else {
    out_t out = ops_detail::broadcast_to<Out, canonical<Out, OutL>>(x, out_shape);
    return record(std::move(out), "broadcast", gradient_of(x, [s = x.shape()](const out_t& dy) {
                    return ops_detail::reduce_to<S, canonical<S, L>>(dy, s, reduce_op::sum);
                  }));
  }
}

// The sum over dims Ds (every dim when none are named).
template <class... Ds, class T, class S, class L, class M>
auto reduce_sum(const tensor<T, S, L, M>& x) {
  using Out = ops_detail::reduced_shape<S, Ds...>;
  using OutL = canonical<Out, L>;
  using out_t = tensor<T, Out, OutL, M>;
  if constexpr (!ops_detail::check_dims_in<S>(type_list<Ds...>{})) {
    return diagnostic::after_failure<out_t>();
  } else {
    out_t out = ops_detail::reduce_to<Out, OutL>(x, ops_detail::reduced_sizes<S, Ds...>(x.shape()), reduce_op::sum);
    return record(std::move(out), "reduce_sum", gradient_of(x, [s = x.shape()](const out_t& dy) {
                    return ops_detail::broadcast_to<S, canonical<S, L>>(dy, s);
                  }));
  }
}

// The mean over dims Ds (every dim when none are named).
template <class... Ds, class T, class S, class L, class M>
auto reduce_mean(const tensor<T, S, L, M>& x) {
  auto total = typemesh::reduce_sum<Ds...>(x);
  const auto kept = total.shape().elements();
  const T count = static_cast<T>(std::max<std::int64_t>(1, x.shape().elements() / (kept ? kept : 1)));
  return typemesh::scale(total, T{1} / count);
}

// The maximum over dims Ds (every dim when none are named). The gradient is
// shared equally by the elements equal to the maximum.
template <class... Ds, class T, class S, class L, class M>
auto reduce_max(const tensor<T, S, L, M>& x) {
  using Out = ops_detail::reduced_shape<S, Ds...>;
  using OutL = canonical<Out, L>;
  using out_t = tensor<T, Out, OutL, M>;
  if constexpr (!ops_detail::check_dims_in<S>(type_list<Ds...>{})) {
    return diagnostic::after_failure<out_t>();
  } else {
    const Out rows = ops_detail::reduced_sizes<S, Ds...>(x.shape());
    out_t out = ops_detail::reduce_to<Out, OutL>(x, rows, reduce_op::max);
    return record(std::move(out), "reduce_max", gradient_of(x, [xv = x.detached(), y = out.detached(), rows](const out_t& dy) {
                    using in_t = tensor<T, S, canonical<S, L>, M>;
                    // 1 where an element is a maximum; the ties per row; then dy / ties there.
                    in_t ties = ops_detail::broadcast_to<S, canonical<S, L>>(y, xv.shape());
                    backend::zip(ties.space(), xv.data(), ties.data(), ties.data(), ties.local_size(),
                                 backend::is_maximum{});
                    out_t count = ops_detail::reduce_to<Out, OutL>(ties, rows, reduce_op::sum);
                    in_t g = ops_detail::broadcast_to<S, canonical<S, L>>(dy, xv.shape());
                    in_t c = ops_detail::broadcast_to<S, canonical<S, L>>(count, xv.shape());
                    backend::zip3(g.space(), ties.data(), g.data(), c.data(), g.data(), g.local_size(),
                                  ops_detail::shared_by_ties{});
                    return g;
                  }));
  }
}

}  // namespace typemesh

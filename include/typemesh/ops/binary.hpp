// Elementwise functions of two tensors, broadcast by dim name: the output has
// a's dims followed by the dims of b that a lacks, each placed as the input
// that has it places it. Dims both inputs have must sit on the same axis.
//
//   auto y = x + bias;        // x: [batch, n], bias: [n] -> [batch, n]
//   auto z = typemesh::mul(gate, cell);
//
// Nothing is communicated forward; the gradient of a broadcast input is
// summed over the dims it lacks, with an allreduce where such a dim is split.
#pragma once

#include <optional>
#include <span>
#include <type_traits>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/strided.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/ops/reduce.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/ops/unary.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace ops_detail {

template <class SA, class SB>
using broadcast_shape = shape_union<SA, SB>;

template <class MA, class MB>
consteval bool same_mesh() {
  return diagnostic::different_meshes<MA, MB, !std::is_same_v<MA, MB>>::passed;
}

template <class A, class B>
void check_same_mesh(const char* op, const A& a, const B& b) {
  if (!(a.mesh() == b.mesh())) {
    throw device_error(detail::cat(op, ": operands on ", a.mesh().describe(), " and ", b.mesh().describe(),
                                   ": same mesh type, different devices or sizes"));
  }
}

// out = f(a, b) broadcast, as a tensor of shape Out with layout OutL.
template <class Out, class OutL, class T, class SA, class LA, class SB, class LB, class M, class F>
tensor<T, Out, OutL, M> broadcast_apply(const tensor<T, SA, LA, M>& a, const tensor<T, SB, LB, M>& b, const Out& s,
                                        F f) {
  tensor<T, Out, OutL, M> out(a.mesh(), s, uninitialized);
  if (!a.holds_data()) return out;
  if constexpr (std::is_same_v<SA, Out> && std::is_same_v<SB, Out>) {
    backend::zip(a.space(), a.data(), b.data(), out.data(), a.local_size(), f);
  } else {
    using U = dims_of<Out>;
    backend::binary(a.space(), a.data(), local_dims_of<U>(a), b.data(), local_dims_of<U>(b), out.data(),
                    local_dims_of<U>(out), f);
  }
  return out;
}

template <class Tensor>
using canonical_t = tensor<typename Tensor::value_type, typename Tensor::shape_type,
                           canonical<typename Tensor::shape_type, typename Tensor::layout_type>,
                           typename Tensor::mesh_type>;

// The gradient of an input of shape S (layout L) from a contribution g shaped
// like the output: summed over the dims the input lacks.
template <class S, class L, class G>
auto sum_back_to(const G& g, const S& input_shape) {
  if constexpr (std::is_same_v<typename G::shape_type, S>) return g.detached();
  else return reduce_to<S, canonical<S, L>>(g, input_shape, reduce_op::sum);
}

// A linear op's contribution, which depends on dy alone.
template <class D>
struct linear_contribution {
  D d;
  template <class T>
  TYPEMESH_KERNEL T operator()(T dy) const {
    return d(T{}, T{}, dy);
  }
};

// Whether a linear op's contribution is dy itself (add's both, sub's first;
// specialised below the ops): the gradient then passes dy on, sharing its
// elements, instead of copying it.
template <class D>
inline constexpr bool passes_dy_on = false;

// A binary op: its value f, and the contributions da(a, b, dy), db(a, b, dy)
// to the gradients of a and b (shaped like the output, before summing).
// Linear ops (add, sub) have contributions that do not depend on a and b, so
// they keep no copy of the operands and broadcast nothing backward.
template <bool Linear, class T, class SA, class LA, class MA, class SB, class LB, class MB, class F, class DA,
          class DB>
auto binary(const char* what, const tensor<T, SA, LA, MA>& a, const tensor<T, SB, LB, MB>& b, F f, DA da, DB db) {
  constexpr bool ok = same_mesh<MA, MB>() && compatible<SA, LA, SB, LB>();
  using M = MA;
  using Out = broadcast_shape<SA, SB>;
  using OutL = canonical<Out, typename checked_output_layout<ok, Out, LA, LB>::type>;
  using out_t = tensor<T, Out, OutL, M>;
  if constexpr (!ok) {
    return diagnostic::after_failure<out_t>();  // the check above has said why
  } else {
    check_same_mesh(what, a, b);
    check_common_sizes(what, a.shape(), b.shape());
    const Out s = shape_from<Out>(a.shape(), b.shape());
    out_t out = broadcast_apply<Out, OutL>(a, b, s, f);
    if (!autodiff::recording() || !(a.tracked() || b.tracked())) return out;
    std::optional<tensor<T, SA, LA, M>> av;
    std::optional<tensor<T, SB, LB, MB>> bv;
    if constexpr (!Linear) av = a.detached(), bv = b.detached();
    // One input's contribution d_of(a, b, dy), elementwise over the output.
    auto contribution = [s](const out_t& dy, const auto& av, const auto& bv, auto d_of) {
      if constexpr (Linear && passes_dy_on<decltype(d_of)>) return dy;
      out_t g(dy.mesh(), s, uninitialized);
      if constexpr (Linear) {
        backend::map(g.space(), dy.data(), g.data(), g.local_size(), linear_contribution<decltype(d_of)>{d_of});
      } else {
        // Each operand spread over the output's elements: itself where it is
        // already shaped and laid out as the output (x_hat in layer norm's
        // x_hat * scale), else a broadcast copy kept in `copy`.
        auto spread = [&](const auto& operand, auto pick, std::optional<out_t>& copy) -> const T* {
          using V = std::decay_t<decltype(operand)>;
          using VS = typename V::shape_type;
          if constexpr (std::is_same_v<VS, Out> && std::is_same_v<canonical<VS, typename V::layout_type>, OutL>) {
            return operand.data();
          } else {
            return copy.emplace(broadcast_apply<Out, OutL>(*av, *bv, s, pick)).data();
          }
        };
        std::optional<out_t> ab, bb;
        const T* pa = spread(*av, backend::first_of{}, ab);
        const T* pb = spread(*bv, backend::second_of{}, bb);
        backend::zip3(g.space(), pa, pb, dy.data(), g.data(), g.local_size(), d_of);
      }
      return g;
    };
    return record(std::move(out), what, gradient_of(a, [=, sa = a.shape()](const out_t& dy) {
                    return sum_back_to<SA, LA>(contribution(dy, av, bv, da), sa);
                  }),
                  gradient_of(b, [=, sb = b.shape()](const out_t& dy) {
                    return sum_back_to<SB, LB>(contribution(dy, av, bv, db), sb);
                  }));
  }
}

}  // namespace ops_detail

#define TYPEMESH_BINARY(NAME, LINEAR, F, DA, DB)                                                      \
  namespace ops_detail {                                                                              \
  struct NAME##_value {                                                                               \
    template <class T>                                                                                \
    TYPEMESH_KERNEL T operator()(T x, T y) const {                                                    \
      return F;                                                                                       \
    }                                                                                                 \
  };                                                                                                  \
  struct NAME##_da {                                                                                  \
    template <class T>                                                                                \
    TYPEMESH_KERNEL T operator()(T x, T y, T d) const {                                               \
      return DA;                                                                                      \
    }                                                                                                 \
  };                                                                                                  \
  struct NAME##_db {                                                                                  \
    template <class T>                                                                                \
    TYPEMESH_KERNEL T operator()(T x, T y, T d) const {                                               \
      return DB;                                                                                      \
    }                                                                                                 \
  };                                                                                                  \
  }                                                                                                   \
  template <class T, class SA, class LA, class MA, class SB, class LB, class MB>                      \
  auto NAME(const tensor<T, SA, LA, MA>& a, const tensor<T, SB, LB, MB>& b) {                         \
    return ops_detail::binary<LINEAR>(#NAME, a, b, ops_detail::NAME##_value{}, ops_detail::NAME##_da{}, \
                                      ops_detail::NAME##_db{});                                       \
  }

// Each line: whether the op is linear, the value of x op y, and the
// contributions d * df/dx and d * df/dy.
TYPEMESH_BINARY(add, true, x + y, ((void)x, (void)y, d), ((void)x, (void)y, d))
TYPEMESH_BINARY(sub, true, x - y, ((void)x, (void)y, d), ((void)x, (void)y, -d))
TYPEMESH_BINARY(mul, false, x* y, ((void)x, d * y), ((void)y, d * x))
TYPEMESH_BINARY(div, false, x / y, ((void)x, d / y), -d * x / (y * y))
TYPEMESH_BINARY(maximum, false, x < y ? y : x, x < y ? T{0} : d, x < y ? d : T{0})
TYPEMESH_BINARY(minimum, false, y < x ? y : x, y < x ? T{0} : d, y < x ? d : T{0})
#undef TYPEMESH_BINARY

namespace ops_detail {
template <>
inline constexpr bool passes_dy_on<add_da> = true;
template <>
inline constexpr bool passes_dy_on<add_db> = true;
template <>
inline constexpr bool passes_dy_on<sub_da> = true;
}  // namespace ops_detail

template <class T, class SA, class LA, class MA, class SB, class LB, class MB>
auto operator+(const tensor<T, SA, LA, MA>& a, const tensor<T, SB, LB, MB>& b) {
  return typemesh::add(a, b);
}
template <class T, class SA, class LA, class MA, class SB, class LB, class MB>
auto operator-(const tensor<T, SA, LA, MA>& a, const tensor<T, SB, LB, MB>& b) {
  return typemesh::sub(a, b);
}
template <class T, class SA, class LA, class MA, class SB, class LB, class MB>
auto operator*(const tensor<T, SA, LA, MA>& a, const tensor<T, SB, LB, MB>& b) {
  return typemesh::mul(a, b);
}
template <class T, class SA, class LA, class MA, class SB, class LB, class MB>
auto operator/(const tensor<T, SA, LA, MA>& a, const tensor<T, SB, LB, MB>& b) {
  return typemesh::div(a, b);
}

}  // namespace typemesh

// The Transformer's layers on named dims, in the style of Mesh-TensorFlow:
//
//   auto p = typemesh::softmax<memory_length>(logits);
//   auto y = typemesh::multihead_attention(x, memory, wq, wk, wv, wo);
//   auto s = typemesh::self_attention<memory_length>(x, wq, wk, wv, wo, {.causal = true});
//   auto z = typemesh::dense_relu_dense(y, w1, w2);
//   auto pe = typemesh::positional_encoding<layout<>, float>(mesh, shape<length, d_model>{256, 512});
//
// Weights are variables the caller makes; their layouts choose the strategy.
// Splitting batch needs no communication; splitting heads (or d_ff) needs
// none until the output projection, whose contraction over heads (d_ff)
// allreduces; splitting memory_length makes softmax allreduce its max and sum
// and the weighted sum over memory positions allreduce.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/layers/dropout.hpp"
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/einsum.hpp"
#include "typemesh/ops/random.hpp"
#include "typemesh/ops/reduce.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/ops/shape_ops.hpp"
#include "typemesh/ops/unary.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

// --- softmax ----------------------------------------------------------------------

// exp(x) / sum_D exp(x), computed as exp(x - max_D x) so that it never
// overflows. D may be split over an axis: the max and the sum are then
// allreduced over it (forward), and so is the sum in the gradient
// dx = y * (dy - sum_D(dy * y)).
template <class D, class T, class S, class L, class M>
tensor<T, S, L, M> softmax(const tensor<T, S, L, M>& x) {
  static_assert(sizeof(diagnostic::dim_not_in_shape<D, S, !S::template has<D>>),
                "typemesh: softmax<D> normalises over a dim that x does not have");
  using t = tensor<T, S, L, M>;
  using R = shape_without<S, D>;  // one value per row
  using RL = canonical<R, L>;
  const R rows = ops_detail::reduced_sizes<S, D>(x.shape());
  const auto largest = ops_detail::reduce_to<R, RL>(x, rows, reduce_op::max);
  const t e = ops_detail::broadcast_apply<S, L>(x, largest, x.shape(), [](T v, T m) -> T { return std::exp(v - m); });
  const auto total = ops_detail::reduce_to<R, RL>(e, rows, reduce_op::sum);
  t y = ops_detail::broadcast_apply<S, L>(e, total, x.shape(), [](T v, T s) -> T { return v / s; });
  return record(std::move(y), "softmax", gradient_of(x, [yv = y.detached(), rows](const t& dy) {
                  const t dy_y = ops_detail::apply2(dy, yv, [](T a, T b) -> T { return a * b; });
                  const auto row_dot = ops_detail::reduce_to<R, RL>(dy_y, rows, reduce_op::sum);
                  const t y_dot = ops_detail::broadcast_apply<S, L>(yv, row_dot, yv.shape(),
                                                                    [](T a, T b) -> T { return a * b; });
                  return ops_detail::apply2(dy_y, y_dot, [](T a, T b) -> T { return a - b; });
                }));
}

// --- multihead attention ----------------------------------------------------------

struct attention_options {
  // Query position l attends only to memory positions m <= l (decoder
  // self-attention).
  bool causal = false;
  // Dropout on the attention weights; 0 for none.
  double dropout_rate = 0.0;
  rng_key dropout_key{};
};

namespace attention_detail {

// What masked logits get added: large enough that exp() of it is 0, small
// enough to stay finite in float.
inline constexpr double masked_logit = -1e9;

// A [Len, MLen] tensor placed as `logits` places those dims: masked_logit
// where the memory position is after the query position, else 0. Positions
// are global indices, so the bias is the same under every layout.
template <class Len, class MLen, class Logits>
auto causal_bias(const Logits& logits) {
  using T = typename Logits::value_type;
  using S = shape<Len, MLen>;
  using L = canonical<S, typename ops_detail::output_layout<S, typename Logits::layout_type>::type>;
  const std::int64_t memory_length = logits.shape().template size<MLen>();
  tensor<T, S, L, typename Logits::mesh_type> bias(logits.mesh(),
                                                   S{logits.shape().template size<Len>(), memory_length});
  auto b = bias.local();
  for_each_element(bias, [&](std::int64_t off, std::uint64_t i) {
    const auto query_pos = static_cast<std::int64_t>(i) / memory_length;
    const auto memory_pos = static_cast<std::int64_t>(i) % memory_length;
    b[off] = memory_pos > query_pos ? static_cast<T>(masked_logit) : T{0};
  });
  return bias;
}

}  // namespace attention_detail

// Attention of query_input [B, Len, DM] over memory_input [B, MLen, DM] with
// H heads: q = x.wq, k = m.wk, v = m.wv (weights [DM, H, DK], [DM, H, DK],
// [DM, H, DV]); logits [B, H, Len, MLen] = q.k / sqrt(DK); weights =
// softmax over MLen; output [B, Len, DM] = (weights.v).wo (wo [H, DV, DM]).
// Self-attention passes the same values as memory under a length dim of its
// own (MLen must differ from Len, so that the logits have both).
template <class T, class B, class Len, class DM, class MLen, class H, class DK, class DV, class M, class LQ,
          class LM, class LWQ, class LWK, class LWV, class LWO>
auto multihead_attention(const tensor<T, shape<B, Len, DM>, LQ, M>& query_input,
                         const tensor<T, shape<B, MLen, DM>, LM, M>& memory_input,
                         const tensor<T, shape<DM, H, DK>, LWQ, M>& wq, const tensor<T, shape<DM, H, DK>, LWK, M>& wk,
                         const tensor<T, shape<DM, H, DV>, LWV, M>& wv, const tensor<T, shape<H, DV, DM>, LWO, M>& wo,
                         const attention_options& options = {}) {
  static_assert(!std::is_same_v<Len, MLen>,
                "typemesh: multihead_attention needs the memory's length dim to be another tag than the query's "
                "(rename it for self-attention), so the logits [batch, heads, length, memory_length] have both");
  // 1/sqrt(d_k) scales q rather than the logits: the same product, on the
  // smaller tensor when the memory is long.
  const T scale_q = static_cast<T>(1.0 / std::sqrt(static_cast<double>(wq.shape().template size<DK>())));
  auto q = typemesh::scale(typemesh::einsum<B, Len, H, DK>(query_input, wq), scale_q);
  auto k = typemesh::einsum<B, MLen, H, DK>(memory_input, wk);
  auto v = typemesh::einsum<B, MLen, H, DV>(memory_input, wv);
  auto logits = typemesh::einsum<B, H, Len, MLen>(q, k);
  using logits_t = decltype(logits);
  auto weights = [&]() -> logits_t {
    if (options.causal) {
      return typemesh::softmax<MLen>(typemesh::add(logits, attention_detail::causal_bias<Len, MLen>(logits)));
    }
    return typemesh::softmax<MLen>(logits);
  }();
  if (options.dropout_rate != 0.0) weights = typemesh::dropout(weights, options.dropout_rate, options.dropout_key);
  auto heads_out = typemesh::einsum<B, Len, H, DV>(weights, v);
  return typemesh::einsum<B, Len, DM>(heads_out, wo);  // sums heads: allreduce where they are split
}

// Self-attention: x attends over itself, its length dim renamed MLen for the
// memory side (the rename moves nothing). x's length dim must be whole (or
// the renamed copy would put both length dims of the logits on one axis).
template <class MLen, class T, class B, class Len, class DM, class H, class DK, class DV, class M, class LX,
          class LWQ, class LWK, class LWV, class LWO>
auto self_attention(const tensor<T, shape<B, Len, DM>, LX, M>& x, const tensor<T, shape<DM, H, DK>, LWQ, M>& wq,
                    const tensor<T, shape<DM, H, DK>, LWK, M>& wk, const tensor<T, shape<DM, H, DV>, LWV, M>& wv,
                    const tensor<T, shape<H, DV, DM>, LWO, M>& wo, const attention_options& options = {}) {
  return typemesh::multihead_attention(x, typemesh::rename<Len, MLen>(x), wq, wk, wv, wo, options);
}

// --- dense_relu_dense -------------------------------------------------------------

namespace attention_detail {
template <class S, class From, class To>
struct replace_dim;
template <class... Ds, class From, class To>
struct replace_dim<shape<Ds...>, From, To> {
  using type = shape<std::conditional_t<std::is_same_v<Ds, From>, To, Ds>...>;
};
// einsum whose output dims are those of shape Out.
template <class... Out, class A, class W>
auto einsum_to(shape<Out...>*, const A& a, const W& w) {
  return typemesh::einsum<Out...>(a, w);
}
}  // namespace attention_detail

// The Transformer's feed-forward block: relu(x.w1).w2, with x [..., DM],
// w1 [DM, DFF], w2 [DFF, DM]; the output has x's dims. Dropout (rate, key)
// on the hidden activations when rate > 0. Splitting DFF needs no
// communication until the second product, which sums DFF: an allreduce.
template <class T, class S, class L, class M, class DM, class DFF, class L1, class L2>
auto dense_relu_dense(const tensor<T, S, L, M>& x, const tensor<T, shape<DM, DFF>, L1, M>& w1,
                      const tensor<T, shape<DFF, DM>, L2, M>& w2, double dropout_rate = 0.0,
                      const rng_key& dropout_key = {}) {
  static_assert(sizeof(diagnostic::dim_not_in_shape<DM, S, !S::template has<DM>>),
                "typemesh: dense_relu_dense: x lacks w1's input dim");
  static_assert(!S::template has<DFF>, "typemesh: dense_relu_dense: x already has w1's hidden dim");
  using hidden_shape = typename attention_detail::replace_dim<S, DM, DFF>::type;
  auto hidden = typemesh::relu(attention_detail::einsum_to(static_cast<hidden_shape*>(nullptr), x, w1));
  if (dropout_rate != 0.0) hidden = typemesh::dropout(hidden, dropout_rate, dropout_key);
  return attention_detail::einsum_to(static_cast<S*>(nullptr), hidden, w2);
}

// --- positional encoding ----------------------------------------------------------

// The sinusoidal table [Len, DM] of "Attention is all you need": at position
// p, channel 2i holds sin(p / max_timescale^(2i / d)) and channel 2i + 1 the
// cos of the same angle. Computed from global indices (the same under every
// layout); a constant, so no gradient.
template <class Layout, class T = float, class Len, class DM, class M>
tensor<T, shape<Len, DM>, Layout, M> positional_encoding(const M& m, const shape<Len, DM>& s,
                                                         double max_timescale = 10000.0) {
  tensor<T, shape<Len, DM>, Layout, M> table(m, s);
  const std::int64_t d = s.template size<DM>();
  auto v = table.local();
  for_each_element(table, [&](std::int64_t off, std::uint64_t i) {
    const auto pos = static_cast<double>(static_cast<std::int64_t>(i) / d);
    const std::int64_t channel = static_cast<std::int64_t>(i) % d;
    const double angle = pos / std::pow(max_timescale, static_cast<double>(channel - channel % 2) / d);
    v[off] = static_cast<T>(channel % 2 == 0 ? std::sin(angle) : std::cos(angle));
  });
  return table;
}

}  // namespace typemesh

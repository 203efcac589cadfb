// The Transformer's layers on named dims, in the style of Mesh-TensorFlow:
//
//   auto p = typemesh::softmax<memory_length>(logits);
//   auto y = typemesh::multihead_attention<length, memory_length>(x, memory, wq, wk, wv, wo);
//   auto s = typemesh::self_attention<length, memory_length>(x, wq, wk, wv, wo, {.causal = true});
//   auto z = typemesh::dense_relu_dense(y, w1, w2, {.dropout_rate = 0.1, .dropout_key = key});
//   auto pe = typemesh::positional_encoding<length, d_model, layout<>>(mesh, shape<length, d_model>{256, 512});
//
// Every dim is found by its role, never by its position: the length dims are
// named by template arguments; d_model, heads, d_k and d_v are what the
// weights share with the input and with each other (see multihead_attention);
// every other dim of the input is batch-like and passes through, in any
// number and any position.
//
// Weights are variables the caller makes; their layouts choose the strategy.
// Splitting batch needs no communication; splitting heads (or d_ff) needs
// none until the output projection, whose contraction over heads (d_ff)
// allreduces; splitting memory_length makes softmax allreduce its max and sum
// and the weighted sum over memory positions allreduce.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/config.hpp"
#include "typemesh/backend/functors.hpp"
#include "typemesh/backend/random.hpp"
#include "typemesh/backend/softmax.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/shape_algebra.hpp"
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

namespace diagnostic {

TYPEMESH_DIAGNOSTIC(softmax_dim_not_in_input, (class Dim, class Shape), (Dim, Shape),
                    "softmax<D> normalises over a dim that x does not have; D and x's shape are the arguments "
                    "above");

// What a length dim (or heads) that the call did not name stands for in the
// messages.
struct unnamed_length_dim {};
struct unnamed_heads_dim {};

TYPEMESH_DIAGNOSTIC(attention_length_dims_not_named, (class Len, class MemoryLen), (Len, MemoryLen),
                    "multihead_attention and self_attention take the query's and the memory's length dims as "
                    "template arguments, as in self_attention<length, memory_length>(x, wq, wk, wv, wo); "
                    "the dims given are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_same_length_dim, (class Len), (Len),
                    "multihead_attention needs the memory's length dim to be another tag than the query's "
                    "(self_attention renames it), so that the logits have both; the dim is the argument above");
TYPEMESH_DIAGNOSTIC(attention_length_dim_not_in_input, (class Len, class Shape), (Len, Shape),
                    "attention's input lacks the length dim named as the first template argument; the dim and "
                    "the input's shape are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_memory_length_dim_not_in_memory, (class MemoryLen, class Shape), (MemoryLen, Shape),
                    "multihead_attention's memory lacks the length dim named as the second template argument; "
                    "the dim and the memory's shape are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_other_length_dim_in_input, (class Dim, class Shape), (Dim, Shape),
                    "the query has the memory's length dim, or the memory the query's (self_attention's input "
                    "must not have the memory length dim it renames its length dim to); the dim and the "
                    "shape are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_d_model_not_found, (class InputShape, class WqShape), (InputShape, WqShape),
                    "attention finds d_model as the one dim that the input shares with wq, but they share none "
                    "or several; the input's and wq's shapes are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_heads_not_found, (class WqShape, class WoShape, class DModel),
                    (WqShape, WoShape, DModel),
                    "attention finds heads as the one dim besides d_model that wq shares with wo, but they share "
                    "none or several (where d_k and d_v are one dim, wq and wo share it too: then name heads as "
                    "the third template argument, as in self_attention<length, memory_length, heads>); wq's and "
                    "wo's shapes and d_model are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_named_heads_not_in_weights, (class Heads, class WqShape, class WoShape),
                    (Heads, WqShape, WoShape),
                    "the dim named as heads (the third template argument) must be a dim of wq and of wo other "
                    "than d_model; heads and wq's and wo's shapes are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_wq_not_three_dims, (class WqShape), (WqShape),
                    "wq must have three dims: d_model (shared with the input), heads (shared with wo) and d_k; "
                    "wq's shape is the argument above");
TYPEMESH_DIAGNOSTIC(attention_wk_unlike_wq, (class WkShape, class WqShape), (WkShape, WqShape),
                    "wk must have wq's dims (d_model, heads, d_k), in any order; wk's and wq's shapes are the "
                    "arguments above");
TYPEMESH_DIAGNOSTIC(attention_wv_dims, (class WvShape, class DModel, class Heads), (WvShape, DModel, Heads),
                    "wv must have d_model, heads and one more dim, d_v; wv's shape, d_model and heads are the "
                    "arguments above");
TYPEMESH_DIAGNOSTIC(attention_wo_dims, (class WoShape, class Expected), (WoShape, Expected),
                    "wo must have the dims heads, d_v and d_model, in any order; wo's shape and those dims are "
                    "the arguments above");
TYPEMESH_DIAGNOSTIC(attention_memory_lacks_d_model, (class DModel, class MemoryShape), (DModel, MemoryShape),
                    "the memory lacks d_model (the dim the query shares with wq); d_model and the memory's shape "
                    "are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_input_has_weight_dim, (class Dim, class Shape), (Dim, Shape),
                    "attention's input already has a dim that the weights use for heads, d_k or d_v; the dim and "
                    "the input's shape are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_batch_dims_differ, (class QueryBatch, class MemoryBatch), (QueryBatch, MemoryBatch),
                    "the query's and the memory's batch-like dims (all but the length dim and d_model) must be "
                    "the same dims; the two sets are the arguments above");
TYPEMESH_DIAGNOSTIC(attention_self_length_split, (class Len, class Layout), (Len, Layout),
                    "self_attention needs its input's length dim whole: the memory is the input with that dim "
                    "renamed, and the logits cannot have both length dims on one mesh axis; the dim and the "
                    "input's layout are the arguments above");

TYPEMESH_DIAGNOSTIC(dense_relu_dense_no_input_dim, (class InputShape, class W1Shape), (InputShape, W1Shape),
                    "dense_relu_dense sums the dims that x shares with w1, but they share none; x's and w1's "
                    "shapes are the arguments above");
TYPEMESH_DIAGNOSTIC(dense_relu_dense_no_hidden_dim, (class InputShape, class W1Shape), (InputShape, W1Shape),
                    "dense_relu_dense's hidden dims are w1's dims that x lacks, but w1 has none; x's and w1's "
                    "shapes are the arguments above");
TYPEMESH_DIAGNOSTIC(dense_relu_dense_w2_dims, (class W2Shape, class Expected), (W2Shape, Expected),
                    "dense_relu_dense's w2 must have exactly the hidden dims it shares with w1 and the dims x "
                    "shares with w1, in any order, so that the output has x's dims; w2's shape and those dims "
                    "are the arguments above");

TYPEMESH_DIAGNOSTIC(positional_encoding_shape, (class Len, class DModel, class Shape), (Len, DModel, Shape),
                    "positional_encoding<Len, DModel, Layout> makes a table of exactly the dims Len and DModel "
                    "(in either order); the two dims and the shape given are the arguments above");

}  // namespace diagnostic

// --- softmax ----------------------------------------------------------------------

// exp(x) / sum_D exp(x), computed as exp(x - max_D x) so that it never
// overflows. Where D is x's last dim and whole on every device (the
// attention logits' MLen unless it is split), forward and backward are one
// row kernel each (backend/softmax.hpp). Otherwise D may be split over an
// axis: the max and the sum are then allreduced over it (forward), and so
// is the sum in the gradient dx = y * (dy - sum_D(dy * y)).
template <class D, class T, class S, class L, class M>
tensor<T, S, L, M> softmax(const tensor<T, S, L, M>& x) {
  using t = tensor<T, S, L, M>;
  constexpr bool ok = diagnostic::softmax_dim_not_in_input<D, S, !shape_contains<S, D>>::passed;
  if constexpr (!ok) {
    return diagnostic::after_failure<t>();
  } else {
    using R = shape_without<S, D>;  // one value per row
    using RL = canonical<R, L>;
    constexpr bool rows_of_d = std::is_same_v<shape_append<R, D>, S> &&
                               !ops_detail::any(ops_detail::summed_axes<S, L, R, M>());
    if constexpr (rows_of_d) {
      t y(x.mesh(), x.shape(), uninitialized);  // the kernel writes every element
      const std::int64_t width = x.template local_extent<D>();
      if (x.holds_data() && width > 0) {
        backend::softmax_forward(x.space(), x.data(), y.data(), x.local_size() / width, width);
      }
      return record(std::move(y), "softmax", gradient_of(x, [yv = y.detached(), width](const t& dy) {
                      t dx(dy.mesh(), dy.shape(), uninitialized);
                      if (dy.holds_data() && width > 0) {
                        backend::softmax_gradient(dy.space(), yv.data(), dy.data(), dx.data(),
                                                  dy.local_size() / width, width);
                      }
                      return dx;
                    }));
    } else {
      const R rows = ops_detail::reduced_sizes<S, D>(x.shape());
      const auto largest = ops_detail::reduce_to<R, RL>(x, rows, reduce_op::max);
      const t e = ops_detail::broadcast_apply<S, L>(x, largest, x.shape(), backend::exp_of_difference{});
      const auto total = ops_detail::reduce_to<R, RL>(e, rows, reduce_op::sum);
      t y = ops_detail::broadcast_apply<S, L>(e, total, x.shape(), backend::divides{});
      return record(std::move(y), "softmax", gradient_of(x, [yv = y.detached(), rows](const t& dy) {
                      const t dy_y = ops_detail::apply2(dy, yv, backend::multiplies{});
                      const auto row_dot = ops_detail::reduce_to<R, RL>(dy_y, rows, reduce_op::sum);
                      const t y_dot =
                          ops_detail::broadcast_apply<S, L>(yv, row_dot, yv.shape(), backend::multiplies{});
                      return ops_detail::apply2(dy_y, y_dot, backend::minus{});
                    }));
    }
  }
}

// --- multihead attention ----------------------------------------------------------

// Options of multihead_attention and self_attention; the defaults are those
// of Mesh-TensorFlow's attention (no mask, no dropout).
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

// The one dim of S (void unless S has exactly one).
template <class S>
struct sole_dim {
  using type = void;
};
template <class D>
struct sole_dim<shape<D>> {
  using type = D;
};

// The dims' roles, found from the dims the operands share: d_model is what
// the query shares with wq; heads is what wq shares with wo besides d_model
// (unless the call names it: where d_k and d_v are one dim, wo shares that
// too); d_k and d_v are wq's and wv's remaining dims. void where not found (a
// check then says why).
template <class SQ, class SWQ, class SWV, class SWO, class Heads>
struct roles {
  using d_model = typename sole_dim<shape_common<SWQ, SQ>>::type;
  using heads = std::conditional_t<std::is_same_v<Heads, diagnostic::unnamed_heads_dim>,
                                   typename sole_dim<shape_common<shape_without<SWQ, d_model>, SWO>>::type, Heads>;
  using d_k = typename sole_dim<shape_without<SWQ, d_model, heads>>::type;
  using d_v = typename sole_dim<shape_without<SWV, d_model, heads>>::type;
};

// The shapes of the steps, each keeping the input's order for the dims it
// takes from the input: q, k, v [input without d_model, heads, d_k or d_v];
// logits [batch-like dims, heads, length, memory length]; the heads' outputs
// [query without d_model, heads, d_v].
template <class Len, class MLen, class SQ, class SM, class R>
struct steps {
  using DM = typename R::d_model;
  using H = typename R::heads;
  using DK = typename R::d_k;
  using DV = typename R::d_v;
  using q = shape_append<shape_without<SQ, DM>, H, DK>;
  using k = shape_append<shape_without<SM, DM>, H, DK>;
  using v = shape_append<shape_without<SM, DM>, H, DV>;
  using batch = shape_without<SQ, Len, DM>;
  using logits = shape_append<batch, H, Len, MLen>;
  using heads_out = shape_append<shape_without<SQ, DM>, H, DV>;
};

// The layout einsum gives a product of shape Out.
template <class Out, class LA, class LB>
using product_layout = canonical<Out, typename ops_detail::output_layout<Out, LA, LB>::type>;

template <class Len, class MLen>
consteval bool check_length_dims_named() {
  constexpr bool unnamed = std::is_same_v<Len, diagnostic::unnamed_length_dim> ||
                           std::is_same_v<MLen, diagnostic::unnamed_length_dim>;
  return diagnostic::attention_length_dims_not_named<Len, MLen, unnamed>::passed;
}

// Each check runs only when those before it passed, so one mistake gives one
// error.
template <class Len, class MLen, class Heads, class SQ, class LQ, class MQ, class SM, class LM, class MM, class SWQ,
          class LWQ, class MWQ, class SWK, class LWK, class MWK, class SWV, class LWV, class MWV, class SWO,
          class LWO, class MWO>
consteval bool check_attention() {
  using R = roles<SQ, SWQ, SWV, SWO, Heads>;
  constexpr bool heads_named = !std::is_same_v<Heads, diagnostic::unnamed_heads_dim>;
  using DM = typename R::d_model;
  using H = typename R::heads;
  using DK = typename R::d_k;
  using DV = typename R::d_v;
  if constexpr (!check_length_dims_named<Len, MLen>()) {
    return false;
  } else if constexpr (!(ops_detail::same_mesh<MQ, MM>() && ops_detail::same_mesh<MQ, MWQ>() &&
                         ops_detail::same_mesh<MQ, MWK>() && ops_detail::same_mesh<MQ, MWV>() &&
                         ops_detail::same_mesh<MQ, MWO>())) {
    return false;
  } else if constexpr (!diagnostic::attention_same_length_dim<Len, std::is_same_v<Len, MLen>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_length_dim_not_in_input<Len, SQ, !shape_contains<SQ, Len>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_memory_length_dim_not_in_memory<MLen, SM,
                                                                              !shape_contains<SM, MLen>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_other_length_dim_in_input<MLen, SQ, shape_contains<SQ, MLen>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_other_length_dim_in_input<Len, SM, shape_contains<SM, Len>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_d_model_not_found<SQ, SWQ, std::is_void_v<DM>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_heads_not_found<SWQ, SWO, DM,
                                                              !heads_named && std::is_void_v<H>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_named_heads_not_in_weights<
                           Heads, SWQ, SWO,
                           heads_named && !(shape_contains<SWQ, Heads> && shape_contains<SWO, Heads> &&
                                            !std::is_same_v<Heads, DM>)>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_wq_not_three_dims<SWQ, SWQ::rank != 3>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_wk_unlike_wq<SWK, SWQ, !same_dims<SWK, SWQ>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_wv_dims<SWV, DM, H,
                                                      !(SWV::rank == 3 && shape_contains<SWV, DM, H>)>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_wo_dims<SWO, shape<H, DV, DM>,
                                                      !same_dims<SWO, shape<H, DV, DM>>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_memory_lacks_d_model<DM, SM, !shape_contains<SM, DM>>::passed) {
    return false;
  } else if constexpr (!(diagnostic::attention_input_has_weight_dim<H, SQ, shape_contains<SQ, H>>::passed &&
                         diagnostic::attention_input_has_weight_dim<DK, SQ, shape_contains<SQ, DK>>::passed &&
                         diagnostic::attention_input_has_weight_dim<DV, SQ, shape_contains<SQ, DV>>::passed &&
                         diagnostic::attention_input_has_weight_dim<H, SM, shape_contains<SM, H>>::passed &&
                         diagnostic::attention_input_has_weight_dim<DK, SM, shape_contains<SM, DK>>::passed &&
                         diagnostic::attention_input_has_weight_dim<DV, SM, shape_contains<SM, DV>>::passed)) {
    return false;
  } else if constexpr (!diagnostic::attention_batch_dims_differ<
                           shape_without<SQ, Len, DM>, shape_without<SM, MLen, DM>,
                           !same_dims<shape_without<SQ, Len, DM>, shape_without<SM, MLen, DM>>>::passed) {
    return false;
  } else {
    // The layouts of each product, in the order the layer computes them: a
    // conflict is reported once, at the first product it reaches.
    using P = steps<Len, MLen, SQ, SM, R>;
    using LQP = product_layout<typename P::q, LQ, LWQ>;
    using LKP = product_layout<typename P::k, LM, LWK>;
    using LVP = product_layout<typename P::v, LM, LWV>;
    using LLogits = product_layout<typename P::logits, LQP, LKP>;
    using LHeadsOut = product_layout<typename P::heads_out, LLogits, LVP>;
    if constexpr (!ops_detail::compatible<SQ, LQ, SWQ, LWQ>()) return false;
    else if constexpr (!ops_detail::compatible<SM, LM, SWK, LWK>()) return false;
    else if constexpr (!ops_detail::compatible<SM, LM, SWV, LWV>()) return false;
    else if constexpr (!ops_detail::compatible<typename P::q, LQP, typename P::k, LKP>()) return false;
    else if constexpr (!ops_detail::compatible<typename P::logits, LLogits, typename P::v, LVP>()) return false;
    else return ops_detail::compatible<typename P::heads_out, LHeadsOut, SWO, LWO>();
  }
}

// What self_attention checks before it renames the length dim; the rest is
// multihead_attention's.
template <class Len, class MLen, class SX, class LX>
consteval bool check_self_attention() {
  if constexpr (!check_length_dims_named<Len, MLen>()) {
    return false;
  } else if constexpr (!diagnostic::attention_same_length_dim<Len, std::is_same_v<Len, MLen>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_length_dim_not_in_input<Len, SX, !shape_contains<SX, Len>>::passed) {
    return false;
  } else if constexpr (!diagnostic::attention_other_length_dim_in_input<MLen, SX, shape_contains<SX, MLen>>::passed) {
    return false;
  } else {
    return diagnostic::attention_self_length_split<Len, LX, LX::template splits<Len>>::passed;
  }
}

// The causal bias at a global row-major index of the [Len, MLen] table:
// masked_logit where the memory position is after the query position, else 0.
template <class T>
struct causal_bias_value {
  std::int64_t memory_length;
  TYPEMESH_KERNEL T operator()(std::uint64_t i) const {
    const auto query_pos = static_cast<std::int64_t>(i) / memory_length;
    const auto memory_pos = static_cast<std::int64_t>(i) % memory_length;
    return memory_pos > query_pos ? static_cast<T>(masked_logit) : T{0};
  }
};

// A [Len, MLen] tensor placed as `logits` places those dims: masked_logit
// where the memory position is after the query position, else 0. Positions
// are global indices, so the bias is the same under every layout.
template <class Len, class MLen, class Logits>
auto causal_bias(const Logits& logits) {
  using T = typename Logits::value_type;
  using S = shape<Len, MLen>;
  using L = canonical<S, typename ops_detail::output_layout<S, typename Logits::layout_type>::type>;
  const std::int64_t memory_length = logits.shape().template size<MLen>();
  tensor<T, S, L, typename Logits::mesh_type> bias(
      logits.mesh(), S{logits.shape().template size<Len>(), memory_length}, uninitialized);
  backend::fill_by_global_index(bias.space(), bias.data(), global_index_geometry(bias),
                                causal_bias_value<T>{memory_length});
  return bias;
}

}  // namespace attention_detail

// Attention of the query over the memory, with dims found by their roles:
//
//   d_model  the dim the query shares with wq (the memory has it too)
//   heads    the dim wq shares with wo, other than d_model; where d_k and
//            d_v are one dim (as in Mesh-TensorFlow's kv_channels), wo shares
//            that too, and heads is named as the third template argument
//   d_k      wq's remaining dim (wk has wq's dims)
//   d_v      wv's remaining dim (wv has d_model, heads and d_v; wo heads, d_v
//            and d_model)
//   Len      the query's length dim, MLen the memory's: template arguments
//
// Every other dim of the query is batch-like (any number, in any position);
// the memory must have the same ones. q = query.wq / sqrt(d_k), k = memory.wk,
// v = memory.wv; logits [batch-like, heads, Len, MLen] = q.k; weights =
// softmax over MLen; the output = (weights.v).wo, which has the query's dims
// in the query's order. Self-attention passes the same values as memory under
// a length dim of its own (MLen must differ from Len, so that the logits have
// both).
template <class Len = diagnostic::unnamed_length_dim, class MLen = diagnostic::unnamed_length_dim,
          class Heads = diagnostic::unnamed_heads_dim, class T, class SQ, class LQ, class MQ, class SM, class LM,
          class MM, class SWQ, class LWQ, class MWQ, class SWK, class LWK, class MWK, class SWV, class LWV, class MWV,
          class SWO, class LWO, class MWO>
auto multihead_attention(const tensor<T, SQ, LQ, MQ>& query, const tensor<T, SM, LM, MM>& memory,
                         const tensor<T, SWQ, LWQ, MWQ>& wq, const tensor<T, SWK, LWK, MWK>& wk,
                         const tensor<T, SWV, LWV, MWV>& wv, const tensor<T, SWO, LWO, MWO>& wo,
                         const attention_options& options = {}) {
  constexpr bool ok = attention_detail::check_attention<Len, MLen, Heads, SQ, LQ, MQ, SM, LM, MM, SWQ, LWQ, MWQ, SWK,
                                                        LWK, MWK, SWV, LWV, MWV, SWO, LWO, MWO>();
  if constexpr (!ok) {
    return diagnostic::after_failure<tensor<T, SQ, canonical<SQ, LQ>, MQ>>();
  } else {
    using R = attention_detail::roles<SQ, SWQ, SWV, SWO, Heads>;
    using P = attention_detail::steps<Len, MLen, SQ, SM, R>;
    using DK = typename R::d_k;
    // 1/sqrt(d_k) scales q rather than the logits: the same product, on the
    // smaller tensor when the memory is long.
    const T scale_q = static_cast<T>(1.0 / std::sqrt(static_cast<double>(wq.shape().template size<DK>())));
    auto q = typemesh::scale(typemesh::einsum<typename P::q>(query, wq), scale_q);
    auto k = typemesh::einsum<typename P::k>(memory, wk);
    auto v = typemesh::einsum<typename P::v>(memory, wv);
    auto logits = typemesh::einsum<typename P::logits>(q, k);
    using logits_t = decltype(logits);
    auto weights = [&]() -> logits_t {
      if (options.causal) {
        return typemesh::softmax<MLen>(typemesh::add(logits, attention_detail::causal_bias<Len, MLen>(logits)));
      }
      return typemesh::softmax<MLen>(logits);
    }();
    if (options.dropout_rate != 0.0) {
      weights = typemesh::dropout(weights, {.rate = options.dropout_rate, .key = options.dropout_key});
    }
    auto heads_out = typemesh::einsum<typename P::heads_out>(weights, v);
    return typemesh::einsum<SQ>(heads_out, wo);  // sums heads: allreduce where they are split
  }
}

// Self-attention: x attends over itself, its length dim Len renamed MLen for
// the memory side (the rename moves nothing). The roles and the output are
// multihead_attention's. Len must be whole (or the renamed copy would put
// both length dims of the logits on one axis).
template <class Len = diagnostic::unnamed_length_dim, class MLen = diagnostic::unnamed_length_dim,
          class Heads = diagnostic::unnamed_heads_dim, class T, class SX, class LX, class MX, class SWQ, class LWQ,
          class MWQ, class SWK, class LWK, class MWK, class SWV, class LWV, class MWV, class SWO, class LWO, class MWO>
auto self_attention(const tensor<T, SX, LX, MX>& x, const tensor<T, SWQ, LWQ, MWQ>& wq,
                    const tensor<T, SWK, LWK, MWK>& wk, const tensor<T, SWV, LWV, MWV>& wv,
                    const tensor<T, SWO, LWO, MWO>& wo, const attention_options& options = {}) {
  constexpr bool ok = attention_detail::check_self_attention<Len, MLen, SX, LX>();
  if constexpr (!ok) {
    return diagnostic::after_failure<tensor<T, SX, canonical<SX, LX>, MX>>();
  } else {
    return typemesh::multihead_attention<Len, MLen, Heads>(x, typemesh::rename<Len, MLen>(x), wq, wk, wv, wo,
                                                          options);
  }
}

// --- dense_relu_dense -------------------------------------------------------------

// Options of dense_relu_dense: dropout on the hidden activations, as in
// Mesh-TensorFlow's (none by default).
struct dense_relu_dense_options {
  double dropout_rate = 0.0;
  rng_key dropout_key{};
};

namespace attention_detail {

template <class SX, class SW1>
using hidden_dims = shape_minus<SW1, SX>;  // w1's dims that x lacks
template <class SX, class SW1>
using io_dims = shape_common<SX, SW1>;  // x's dims that w1 has: summed by the first product
template <class SX, class SW1>
using hidden_shape = shape_union<shape_minus<SX, SW1>, hidden_dims<SX, SW1>>;

template <class SX, class LX, class MX, class SW1, class LW1, class MW1, class SW2, class LW2, class MW2>
consteval bool check_dense_relu_dense() {
  using io = io_dims<SX, SW1>;
  using hidden = hidden_dims<SX, SW1>;
  using w2_dims = shape_union<hidden, io>;
  if constexpr (!(ops_detail::same_mesh<MX, MW1>() && ops_detail::same_mesh<MX, MW2>())) return false;
  else if constexpr (!diagnostic::dense_relu_dense_no_input_dim<SX, SW1, io::rank == 0>::passed) return false;
  else if constexpr (!diagnostic::dense_relu_dense_no_hidden_dim<SX, SW1, hidden::rank == 0>::passed) return false;
  else if constexpr (!diagnostic::dense_relu_dense_w2_dims<SW2, w2_dims, !same_dims<SW2, w2_dims>>::passed)
    return false;
  else if constexpr (!ops_detail::compatible<SX, LX, SW1, LW1>()) return false;
  else {
    using HS = hidden_shape<SX, SW1>;
    return ops_detail::compatible<HS, product_layout<HS, LX, LW1>, SW2, LW2>();
  }
}

}  // namespace attention_detail

// The Transformer's feed-forward block: relu(x.w1).w2. The dims x shares with
// w1 (d_model) are summed by the first product; the hidden dims (d_ff) are
// those w1 and w2 share and x lacks; w2 has the hidden dims and x's summed
// ones, so the output has x's dims, in x's order. Every other dim of x passes
// through. Splitting d_ff needs no communication until the second product,
// which sums d_ff: an allreduce.
template <class T, class SX, class LX, class MX, class SW1, class LW1, class MW1, class SW2, class LW2, class MW2>
auto dense_relu_dense(const tensor<T, SX, LX, MX>& x, const tensor<T, SW1, LW1, MW1>& w1,
                      const tensor<T, SW2, LW2, MW2>& w2, const dense_relu_dense_options& options = {}) {
  constexpr bool ok = attention_detail::check_dense_relu_dense<SX, LX, MX, SW1, LW1, MW1, SW2, LW2, MW2>();
  if constexpr (!ok) {
    return diagnostic::after_failure<tensor<T, SX, canonical<SX, LX>, MX>>();
  } else {
    auto hidden = typemesh::relu(typemesh::einsum<attention_detail::hidden_shape<SX, SW1>>(x, w1));
    if (options.dropout_rate != 0.0) {
      hidden = typemesh::dropout(hidden, {.rate = options.dropout_rate, .key = options.dropout_key});
    }
    return typemesh::einsum<SX>(hidden, w2);
  }
}

// --- positional encoding ----------------------------------------------------------

struct positional_encoding_options {
  // The longest wavelength, over 2 pi: channel pairs' wavelengths run
  // geometrically from 2 pi up to this times 2 pi.
  double max_timescale = 10000.0;
};

namespace attention_detail {
// The sinusoidal encoding at a global row-major index of the table: the
// position and the channel are found from their strides.
template <class T>
struct sinusoid_value {
  std::int64_t positions, channels, position_stride, channel_stride;
  double max_timescale;
  TYPEMESH_KERNEL T operator()(std::uint64_t i) const {
    const auto index = static_cast<std::int64_t>(i);
    const auto pos = static_cast<double>(index / position_stride % positions);
    const std::int64_t channel = index / channel_stride % channels;
    const double angle = pos / std::pow(max_timescale, static_cast<double>(channel - channel % 2) / channels);
    return static_cast<T>(channel % 2 == 0 ? std::sin(angle) : std::cos(angle));
  }
};
}  // namespace attention_detail

// The sinusoidal table [Len, DM] (in the order the shape s gives them) of
// "Attention is all you need": at position p, channel 2i holds
// sin(p / max_timescale^(2i / d)) and channel 2i + 1 the cos of the same
// angle. Len and DM are named, not taken from their positions in s. Computed
// from global indices (the same under every layout); a constant, so no
// gradient.
template <class Len, class DM, class Layout, class T = float, class M, class S>
auto positional_encoding(const M& m, const S& s, const positional_encoding_options& options = {}) {
  constexpr bool ok =
      diagnostic::positional_encoding_shape<Len, DM, S,
                                            std::is_same_v<Len, DM> || !same_dims<S, shape<Len, DM>>>::passed;
  using table_t = tensor<T, S, Layout, M>;
  if constexpr (!ok) {
    return diagnostic::after_failure<table_t>();
  } else {
    table_t table(m, s, uninitialized);
    const std::int64_t positions = s.template size<Len>(), d = s.template size<DM>();
    // Strides of the two dims in the table's row-major element order.
    const std::int64_t position_stride = shape_index_of<S, Len> == 0 ? d : 1;
    const std::int64_t channel_stride = shape_index_of<S, DM> == 0 ? positions : 1;
    backend::fill_by_global_index(
        table.space(), table.data(), global_index_geometry(table),
        attention_detail::sinusoid_value<T>{positions, d, position_stride, channel_stride, options.max_timescale});
    return table;
  }
}

}  // namespace typemesh

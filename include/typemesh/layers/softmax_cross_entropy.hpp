// The softmax cross-entropy loss of logits against labels, per example.
//
//   auto loss = typemesh::softmax_cross_entropy<vocab>(logits, labels);
//   // logits: [batch, seq, vocab], labels: [batch, seq] int32 class ids -> loss: [batch, seq]
//   auto mean = typemesh::reduce_mean(loss);
//
// Labels are either integer class ids (the logits' dims without the vocab
// dim, in any order) or probabilities over the vocab dim (the logits' dims):
//   loss = logsumexp_v(logits) - logits[label]      (class ids)
//   loss = -sum_v probs * log_softmax_v(logits)      (probabilities)
// The output has the logits' dims without the vocab dim, placed as the
// logits place them.
//
// The vocab dim may be split over axis A (the seed's projection to the
// vocabulary on a model-parallel mesh), with the labels replicated along A:
// the maximum and the sum of exponentials (shifted by the global maximum, so
// nothing overflows) are allreduced over A, and the label's logit is picked by
// the one device along A that holds it and allreduced with the sum.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/softmax_cross_entropy.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/layers/embedding.hpp"  // the class-id checks and dim-order helpers
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/reduce.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/ops/unary.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace diagnostic {
TYPEMESH_DIAGNOSTIC(labels_do_not_fit_logits, (class LabelsShape, class ExpectedShape), (LabelsShape, ExpectedShape),
                    "softmax_cross_entropy: integer labels (class ids) need the logits' dims without the "
                    "vocab dim, probability labels the logits' dims (in any order); the labels' shape and the "
                    "expected dims are the arguments above");
}  // namespace diagnostic

namespace layers_detail {

template <class Labels, class Expected>
consteval bool labels_fit() {
  return diagnostic::labels_do_not_fit_logits<Labels, Expected, !typemesh::same_dims<Labels, Expected>>::passed;
}

}  // namespace layers_detail

// Integer labels: the class ids.
namespace layers_detail {
template <class VocabDim, class T, class SL, class LL, class ML, class I, class SY, class LY, class MY>
auto softmax_cross_entropy_checked(const tensor<T, SL, LL, ML>& logits, const tensor<I, SY, LY, MY>& labels);
}  // namespace layers_detail

template <class VocabDim, class T, class SL, class LL, class ML, class I, class SY, class LY, class MY>
  requires std::integral<I>
auto softmax_cross_entropy(const tensor<T, SL, LL, ML>& logits, const tensor<I, SY, LY, MY>& labels) {
  using Out = shape_without<SL, VocabDim>;
  constexpr bool ok = ops_detail::check_dims_in<SL>(type_list<VocabDim>{}) && layers_detail::labels_fit<SY, Out>() &&
                      ops_detail::same_mesh<ML, MY>() && ops_detail::compatible<SL, LL, SY, LY>();
  if constexpr (!ok) {
    return diagnostic::after_failure<tensor<T, Out, canonical<Out, LL>, ML>>();
  } else {
    return layers_detail::softmax_cross_entropy_checked<VocabDim>(logits, labels);
  }
}

// The loss of class ids, once the checks above have passed.
template <class VocabDim, class T, class SL, class LL, class ML, class I, class SY, class LY, class MY>
auto layers_detail::softmax_cross_entropy_checked(const tensor<T, SL, LL, ML>& logits,
                                                  const tensor<I, SY, LY, MY>& labels) {
  using V = VocabDim;
  using Out = shape_without<SL, V>;
  using M = ML;
  using OutL = canonical<Out, LL>;
  using out_t = tensor<T, Out, OutL, M>;
  using Rows = shape_append<Out, V>;  // each example's logits contiguous
  using rows_t = tensor<T, Rows, canonical<Rows, LL>, M>;

  ops_detail::check_same_mesh("softmax_cross_entropy", logits, labels);
  ops_detail::check_common_sizes("softmax_cross_entropy", labels.shape(), logits.shape());
  const std::int64_t vocab = logits.shape().template size<V>();
  const Out out_shape = ops_detail::reduced_sizes<SL, V>(logits.shape());
  const Rows rows_shape = shape_from<Rows>(logits.shape(), logits.shape());
  layers_detail::check_ids_in_range("softmax_cross_entropy", labels, vocab, V::name);

  // The labels in the output's dim order, placed as the output (the layouts
  // agree on every shared dim).
  const auto label = layers_detail::in_dim_order(labels.detached(), out_shape);
  out_t loss(logits.mesh(), out_shape);
  out_t lse(logits.mesh(), out_shape);  // log sum_v exp(logits): the softmax's normaliser, for the gradient

  auto forward = [&](const auto& rows) {
    if (!rows.holds_data()) return;
    const auto space = rows.space();
    const backend::softmax_rows geometry{loss.local_size(), rows.template local_extent<V>(),
                                         rows.template slice_begin<V>()};
    constexpr auto vocab_axes = ops_detail::summed_axes<SL, LL, Out, M>();
    // lse holds the maximum until the end.
    backend::softmax_row_max(space, rows.data(), lse.data(), geometry, std::numeric_limits<T>::lowest());
    if constexpr (ops_detail::any(vocab_axes)) {
      allreduce_in_place(lse, rows.mesh().group_along(rows.device(), vocab_axes), reduce_op::max);
    }
    // [sum_v exp(x - max) | the label's x - max, or 0 where another device holds it]
    backend::storage<T, space_of<M>> sums(2 * static_cast<std::size_t>(geometry.rows));
    backend::softmax_shifted_sums(space, rows.data(), label.data(), lse.data(), backend::view(sums).data(),
                                  geometry);
    if constexpr (ops_detail::any(vocab_axes)) {
      this_device().allreduce(rows.mesh().group_along(rows.device(), vocab_axes), backend::view(sums));
    }
    backend::softmax_loss_from_sums(space, backend::view(sums).data(), loss.data(), lse.data(), geometry.rows);
  };

  if (!autodiff::recording() || !logits.tracked()) {
    layers_detail::visit_in_dim_order(logits, rows_shape, forward);
    return loss;
  }
  rows_t rows = layers_detail::in_dim_order(logits.detached(), rows_shape);
  forward(rows);
  // The gradient is dy * (softmax - onehot(label)). Each device computes it
  // on its own vocab slice without communicating: softmax(x)_v =
  // exp(x_v - lse) needs only x_v, which the device holds, and the global
  // lse, which the forward pass allreduced over the vocab axis; the onehot
  // term is 1 only on the device that holds the label's column; dy has no
  // vocab dim and is the same along the vocab axis.
  return record(std::move(loss), "softmax_cross_entropy",
                gradient_of(logits, [rows = std::move(rows), label, lse, rows_shape,
                                     logits_shape = logits.shape()](const out_t& dy) {
                  rows_t g(dy.mesh(), rows_shape, uninitialized);  // the kernel writes every element
                  if (dy.holds_data()) {
                    backend::softmax_cross_entropy_gradient(
                        dy.space(), rows.data(), label.data(), lse.data(), dy.data(), g.data(),
                        backend::softmax_rows{dy.local_size(), g.template local_extent<V>(),
                                              g.template slice_begin<V>()});
                  }
                  return layers_detail::in_dim_order(std::move(g), logits_shape);
                }));
}

// Probability labels over the vocab dim. Made of ops, which give the
// gradients: d/d logits = softmax * sum_v probs - probs, d/d probs =
// -log_softmax.
template <class VocabDim, class T, class SL, class LL, class ML, class SP, class LP, class MP>
  requires std::floating_point<T>
auto softmax_cross_entropy(const tensor<T, SL, LL, ML>& logits, const tensor<T, SP, LP, MP>& probs) {
  using Out = shape_without<SL, VocabDim>;
  if constexpr (!(ops_detail::check_dims_in<SL>(type_list<VocabDim>{}) && layers_detail::labels_fit<SP, SL>())) {
    return diagnostic::after_failure<tensor<T, Out, canonical<Out, LL>, ML>>();
  } else {
    // Shifting by the maximum keeps exp from overflowing; log_softmax does not
    // depend on the shift, so the maximum carries no gradient.
    const auto top = ops_detail::reduce_to<Out, canonical<Out, LL>>(
        logits, ops_detail::reduced_sizes<SL, VocabDim>(logits.shape()), reduce_op::max);
    const auto shifted = logits - top;
    const auto log_softmax = shifted - typemesh::log(reduce_sum<VocabDim>(typemesh::exp(shifted)));
    return -reduce_sum<VocabDim>(log_softmax * probs);
  }
}

}  // namespace typemesh

// An embedding lookup: each integer id picks a row of a table.
//
//   auto table = typemesh::variable<layout<vocab(axis1), embed(axis2)>>(mesh, "embedding", shape<vocab, embed>{V, E},
//                                                                   init::normal{0.02});
//   auto x = typemesh::embedding<embed>(ids, table);   // ids: [batch, seq] int32 -> x: [batch, seq, embed]
//
// The template arguments name the table's embedding dims; its one other dim
// is the vocab dim. The output has the ids' dims, then the embedding dims.
//
// Layouts (the seed's mtf.layers.embedding on a model-parallel mesh):
// - The vocab dim may be split over axis A, with the ids replicated along A.
//   Each device gathers the rows it holds and writes zeros for ids outside its
//   vocab slice (a masked gather); exactly one device along A holds each id's
//   row, so an allreduce over A completes every row. This is the contraction
//   onehot(ids)[S, vocab] . table[vocab, embed] with a split vocab dim.
// - The embedding dims may be split: each device gathers its columns.
// - The ids' dims may be split (data parallelism): each device looks up its ids.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/gather.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/reduce.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace diagnostic {
TYPEMESH_DIAGNOSTIC(embedding_table_needs_one_vocab_dim, (class TableShape, class EmbedDims), (TableShape, EmbedDims),
                    "embedding<EmbedDims...>(ids, table): the table must have exactly one dim besides the "
                    "embedding dims named as template arguments (the vocab dim); the table's shape and the named "
                    "dims are the arguments above");
TYPEMESH_DIAGNOSTIC(ids_have_table_dim, (class Dim, class IdsShape), (Dim, IdsShape),
                    "embedding: the ids have a dim of the table; the output would have it twice. Rename "
                    "one of them; the dim and the ids' shape are the arguments above");
}  // namespace diagnostic

// Shared by the layers that read integer class ids (embedding,
// softmax_cross_entropy).
namespace layers_detail {

struct no_vocab_dim : dim<"(no vocab dim)"> {};

template <class S>
struct first_dim {
  using type = no_vocab_dim;
};
template <class D, class... Ds>
struct first_dim<shape<D, Ds...>> {
  using type = D;
};

// "(batch 1, seq 2)": where local element `offset` of t sits in the whole tensor.
template <class Tensor>
std::string position_of(const Tensor& t, std::int64_t offset) {
  constexpr std::size_t r = Tensor::rank;
  std::array<std::int64_t, r> index{};
  for (std::size_t i = r; i-- > 0;) {
    const std::int64_t e = t.local_extent()[i];
    index[i] = t.slice().begin[i] + offset % e;
    offset /= e;
  }
  std::string out = "(";
  for (std::size_t i = 0; i < r; ++i) {
    out += detail::cat(i ? ", " : "", Tensor::shape_type::dim_names[i], " ", index[i]);
  }
  return out + ")";
}

// Throws unless every id this device holds is in [0, classes). Devices along
// an axis the ids are replicated on hold the same ids and fail together.
template <class Tensor>
void check_ids_in_range(const char* op, const Tensor& ids, std::int64_t classes, std::string_view dim_name) {
  const backend::id_at bad = backend::first_id_outside(ids.space(), ids.data(), ids.local_size(), classes);
  if (bad.position < ids.local_size()) {
    throw shape_error(detail::cat(op, ": id ", bad.id, " at position ", position_of(ids, bad.position), " of ids ",
                                  ids.shape().describe(), " is outside dim ", dim_name, " of size ", classes,
                                  " (ids must be 0 to ", classes - 1, ")"));
  }
}

// Calls f with t or, when t's dims are not in the order of Ordered (the same
// dims), with a local transpose of t into that order. No communication: every
// dim stays on its axis.
template <class Ordered, class T, class S, class L, class M, class F>
void visit_in_dim_order(const tensor<T, S, L, M>& t, const Ordered& s, F&& f) {
  if constexpr (std::is_same_v<S, Ordered>) f(t);
  else f(ops_detail::broadcast_to<Ordered, canonical<Ordered, L>>(t, s));
}

// t with its dims in the order of Ordered: t itself (moved) when they
// already are, else a local transpose.
template <class Ordered, class T, class S, class L, class M>
auto in_dim_order(tensor<T, S, L, M> t, const Ordered& s) {
  if constexpr (std::is_same_v<S, Ordered>) {
    return tensor<T, S, canonical<S, L>, M>(std::move(t));
  } else {
    return ops_detail::broadcast_to<Ordered, canonical<Ordered, L>>(t, s);
  }
}

// The number of elements of one row of t's local slice: the product of its
// local extents after the first dim.
template <class Tensor>
std::int64_t local_row_width(const Tensor& t) {
  std::int64_t w = 1;
  for (std::size_t i = 1; i < Tensor::rank; ++i) w *= t.local_extent()[i];
  return w;
}

}  // namespace layers_detail

// The rows of `table` that `ids` pick, as a tensor of the ids' dims followed
// by EmbedDims. Ids outside the vocab dim throw shape_error (naming the id,
// where it is and the vocab size).
namespace layers_detail {
template <class... EmbedDims, class I, class SI, class LI, class MI, class T, class ST, class LT, class MT>
auto embedding_checked(const tensor<I, SI, LI, MI>& ids, const tensor<T, ST, LT, MT>& table);
}  // namespace layers_detail

template <class... EmbedDims, class I, class SI, class LI, class MI, class T, class ST, class LT, class MT>
auto embedding(const tensor<I, SI, LI, MI>& ids, const tensor<T, ST, LT, MT>& table) {
  static_assert(std::integral<I>, "typemesh: embedding: the ids must be an integer tensor (e.g. std::int32_t)");
  static_assert(sizeof...(EmbedDims) > 0,
                "typemesh: embedding<EmbedDims...>(ids, table): name the table's embedding dims, e.g. "
                "embedding<embed>(ids, table)");
  constexpr bool ok =
      std::integral<I> && sizeof...(EmbedDims) > 0 && ops_detail::check_dims_in<ST>(type_list<EmbedDims...>{}) &&
      diagnostic::embedding_table_needs_one_vocab_dim<ST, type_list<EmbedDims...>,
                                                      shape_without<ST, EmbedDims...>::rank != 1>::passed &&
      []<class... Ds>(type_list<Ds...>) {
        return (diagnostic::ids_have_table_dim<Ds, SI, SI::template has<Ds>>::passed && ...);
      }(dims_of<ST>{}) &&
      ops_detail::same_mesh<MI, MT>() && ops_detail::compatible<SI, LI, ST, LT>();
  if constexpr (!ok) {
    return diagnostic::after_failure();
  } else {
    return layers_detail::embedding_checked<EmbedDims...>(ids, table);
  }
}

// The lookup, once the checks above have passed.
template <class... EmbedDims, class I, class SI, class LI, class MI, class T, class ST, class LT, class MT>
auto layers_detail::embedding_checked(const tensor<I, SI, LI, MI>& ids, const tensor<T, ST, LT, MT>& table) {
  using vocab_dims = shape_without<ST, EmbedDims...>;
  using M = MI;
  using V = typename layers_detail::first_dim<vocab_dims>::type;
  using Rows = shape<V, EmbedDims...>;  // the table with whole rows contiguous
  using RowsL = canonical<Rows, LT>;
  using rows_t = tensor<T, Rows, RowsL, M>;
  using Out = shape_append<SI, EmbedDims...>;
  using OutL = canonical<Out, typename ops_detail::output_layout<Out, LI, LT>::type>;
  using out_t = tensor<T, Out, OutL, M>;

  ops_detail::check_same_mesh("embedding", ids, table);
  const std::int64_t vocab = table.shape().template size<V>();
  const Rows rows_shape{vocab, table.shape().template size<EmbedDims>()...};
  std::array<std::int64_t, Out::rank> out_sizes{};
  for (std::size_t i = 0; i < SI::rank; ++i) out_sizes[i] = ids.shape()[i];
  for (std::size_t i = 1; i < Rows::rank; ++i) out_sizes[SI::rank + i - 1] = rows_shape[i];
  out_t out(ids.mesh(), Out(out_sizes), uninitialized);

  layers_detail::check_ids_in_range("embedding", ids, vocab, V::name);
  if (ids.holds_data()) {
    layers_detail::visit_in_dim_order(table, rows_shape, [&](const auto& rows) {
      const std::int64_t first = rows.template slice_begin<V>(), held = rows.template local_extent<V>();
      // The masked gather: rows this device does not hold are zeros.
      backend::gather_rows(rows.space(), ids.data(), ids.local_size(), rows.data(), first, held,
                           layers_detail::local_row_width(rows), out.data());
    });
    constexpr auto vocab_axes = ops_detail::summed_axes<ST, LT, Out, M>();
    if constexpr (ops_detail::any(vocab_axes)) {
      allreduce_in_place(out, ids.mesh().group_along(ids.device(), vocab_axes));
    }
  }
  if (!autodiff::recording() || !table.tracked()) return out;

  // The gradient is the scatter-add of dy into the rows of the table, i.e.
  // onehot(ids)^T . dy, summed over the ids' dims. Per axis:
  // - the vocab axis A: dy is replicated along A (the output was allreduced
  //   over A), and each device adds into the rows it holds: no communication;
  // - an axis splitting an embedding dim: dy's columns there are the table's
  //   columns there: no communication;
  // - an axis splitting an ids dim: each device sees only its ids, so its sums
  //   are partial; the table is replicated along that axis, and an allreduce
  //   over it gives each replica the whole sum (as einsum does for a split
  //   summed dim);
  // - an axis nothing splits: every device computes the same sums.
  constexpr bool ids_split = ops_detail::any(ops_detail::summed_axes<SI, LI, ST, M>());
  // into's held rows (in [vocab, embed...] order) += alpha * the sums of dy's
  // rows over the ids that pick them.
  const std::int64_t held = table.template local_extent<V>();
  auto scatter = [idv = ids.detached(), first = table.template slice_begin<V>(), held,
                  width = held > 0 ? table.local_size() / held : 0](const out_t& dy, T alpha, T* into) {
    backend::scatter_add_rows(dy.space(), idv.data(), idv.local_size(), dy.data(), first, held, width, alpha, into);
  };
  auto gradient = [scatter, rows_shape, table_shape = table.shape()](const out_t& dy) {
    rows_t g(dy.mesh(), rows_shape);
    if (dy.holds_data()) {
      scatter(dy, T{1}, g.data());
      if constexpr (ids_split) {
        constexpr auto ids_axes = ops_detail::summed_axes<SI, LI, ST, M>();
        allreduce_in_place(g, dy.mesh().group_along(dy.device(), ids_axes));
      }
    }
    return layers_detail::in_dim_order(std::move(g), table_shape);
  };
  // An SGD step inside the scatter (optim::sgd::minimize): the table's rows
  // that the ids pick take alpha times their sums, the others stay; where
  // the table is in the scatter's order and the sums need no allreduce.
  auto step_in_scatter = [scatter](const out_t& dy, T* values, T alpha, T beta) {
    if constexpr (ids_split || !std::is_same_v<ST, Rows>) {
      return false;
    } else {
      if (beta != T{1}) return false;
      if (dy.holds_data()) scatter(dy, alpha, values);
      return true;
    }
  };
  return record(std::move(out), "embedding", gradient_of(table, std::move(gradient), std::move(step_in_scatter)));
}

}  // namespace typemesh

// Shape operations: renaming, reshaping, concatenating, slicing, splitting
// and stacking tensors along named dims, and one-hot encoding.
//
//   auto y = typemesh::rename<k, k2>(x);                      // dim k is now called k2, same axis
//   auto t = typemesh::reshape(x, shape<batch, hd>{8, 512});  // [batch, heads, d] -> [batch, hd]
//   auto c = typemesh::concat<seq>(a, b);                    // seq whole in a and b
//   auto s = typemesh::slice<seq>(x, 2, 5);                  // seq elements 2 .. 6
//   auto [p, q] = typemesh::split<seq>(x, 3);                // seq 0 .. 2 and 3 .. end
//   auto st = typemesh::stack<layer>(h0, h1, h2);            // [layer=3, ...h0's dims]
//   auto oh = typemesh::one_hot<vocab, axis1>(labels, 1000); // [...labels' dims, vocab], vocab over axis1
//
// None of these communicates. Each moves elements only along dims that every
// device holds whole, so each device works on its own slice; where an op
// would need a split dim, a compile error names the dim and asks for an
// allconcat first. The differentiable ones record a gradient that is again
// local: rename back, reshape back, slices of the gradient, zero padding,
// unstacking.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>


#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/kernels.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

// --- Compile-time checks ---------------------------------------------------------
// As in core/diagnostics.hpp: each check is instantiated only when it fails,
// so the compiler's first error names the check and the dims involved.
namespace diagnostic {

TYPEMESH_DIAGNOSTIC(rename_target_already_in_shape, (class Dim, class Shape), (Dim, Shape),
                    "rename's new name is already a dim of the tensor, and a shape names each dim once; "
                    "the new name and the shape are the arguments above");

TYPEMESH_DIAGNOSTIC(reshape_regroups_a_split_dim, (class Dim, class OldShape, class NewShape), (Dim, OldShape, NewShape),
                    "reshape regroups a dim that the layout splits; only the dims both shapes start or end "
                    "with stay in place and may stay split; make this dim whole first (allconcat<dim>(x)); the dim and "
                    "the old and new shapes are the arguments above");

TYPEMESH_DIAGNOSTIC(reshape_reuses_a_regrouped_dim, (class Dim, class OldShape, class NewShape), (Dim, OldShape, NewShape),
                    "both shapes of the reshape name this dim, but not at the start or end of both, so "
                    "the reshape would give its name to other elements; to reorder dims use einsum, to regroup "
                    "give the new dim a new name; the dim and the old and new shapes are the arguments above");

TYPEMESH_DIAGNOSTIC(reshape_moves_a_split_dim, (class StatedLayout, class ReshapeLayout), (StatedLayout, ReshapeLayout),
                    "reshape keeps every split dim on its axis, so its output has the input's layout; "
                    "the stated output layout differs (relayout before or after the reshape); the stated layout and "
                    "the one reshape gives are the arguments above");

TYPEMESH_DIAGNOSTIC(shape_op_needs_a_whole_dim, (class Dim, class Layout), (Dim, Layout),
                    "concat, slice and split work along a dim that every device holds whole, but the "
                    "layout splits this dim over a mesh axis; allconcat<dim>(x) first; the dim and the layout are "
                    "the arguments above");

TYPEMESH_DIAGNOSTIC(concat_shapes_differ, (class ShapeA, class ShapeB), (ShapeA, ShapeB),
                    "concat needs both tensors to have the same dims in the same order; the two shapes "
                    "are the arguments above");

TYPEMESH_DIAGNOSTIC(concat_layouts_differ, (class LayoutA, class LayoutB), (LayoutA, LayoutB),
                    "concat needs both tensors placed alike, every dim on the same axis in both; relayout "
                    "one of them first; the two layouts are the arguments above");

TYPEMESH_DIAGNOSTIC(stack_needs_one_tensor_type, (class FirstTensor, class OtherTensor), (FirstTensor, OtherTensor),
                    "stack needs tensors of one type (element, shape, layout, mesh); the first tensor's "
                    "type and a different one are the arguments above");

TYPEMESH_DIAGNOSTIC(new_dim_already_in_shape, (class Dim, class Shape), (Dim, Shape),
                    "stack and one_hot add a new dim, but the tensor already has a dim of that name; "
                    "the dim and the shape are the arguments above");

TYPEMESH_DIAGNOSTIC(one_hot_axis_splits_the_indices, (class Axis, class Layout), (Axis, Layout),
                    "one_hot can split the vocab dim only over an axis that holds replicas of the indices, "
                    "but the indices' layout splits a dim over this axis; the axis and the layout are the arguments "
                    "above");

TYPEMESH_DIAGNOSTIC(one_hot_needs_a_floating_type, (class Element), (Element),
                    "one_hot makes float or double tensors; pass on and off as floating values "
                    "(1.0f, 0.0f or 1.0, 0.0); the element type given is the argument above");

}  // namespace diagnostic

namespace shape_ops_detail {

template <std::size_t I, class... Ds>
using nth = std::tuple_element_t<I, std::tuple<Ds...>>;

// "(batch=3, seq=1)": a global position, for messages.
template <class S>
std::string describe_position(const std::array<std::int64_t, S::rank>& at) {
  std::string out = "(";
  for (std::size_t i = 0; i < S::rank; ++i) out += detail::cat(i ? ", " : "", S::dim_names[i], "=", at[i]);
  return out + ")";
}

// The global position of the element at local offset `off` of t's slice.
template <class Tensor>
std::array<std::int64_t, Tensor::rank> global_position(const Tensor& t, std::int64_t off) {
  std::array<std::int64_t, Tensor::rank> at{};
  for (std::size_t i = Tensor::rank; i-- > 0;) {
    const std::int64_t e = t.slice().extent[i];
    at[i] = t.slice().begin[i] + off % e;
    off /= e;
  }
  return at;
}

// S's sizes with the size of D replaced.
template <class D, class S>
S with_size(const S& s, std::int64_t size) {
  auto sizes = s.sizes();
  sizes[S::template index_of<D>] = size;
  return S(sizes);
}

// Copies src's local slice into dst's at `offset` along D (whole in both):
// the slices agree on every other dim.
template <class D, class Src, class Dst>
void place_along(const Src& src, Dst& dst, std::int64_t offset) {
  if (!src.holds_data()) return;
  using S = typename Src::shape_type;
  backend::region<S::rank> to{dst.local_extent(), {}};
  to.begin[S::template index_of<D>] = offset;
  backend::copy_box(src.space(), src.data(), src.local_region(), dst.data(), to, src.local_extent());
}

// The part of src's local slice from `offset` along D (whole), as a tensor of
// type Out and shape out_shape.
template <class D, class Out, class Src>
Out take_along(const Src& src, const typename Out::shape_type& out_shape, std::int64_t offset) {
  Out out(src.mesh(), out_shape);
  if (!src.holds_data()) return out;
  using S = typename Src::shape_type;
  backend::region<S::rank> from{src.local_extent(), {}};
  from.begin[S::template index_of<D>] = offset;
  backend::copy_box(src.space(), src.data(), from, out.data(), out.local_region(), out.local_extent());
  return out;
}

// --- rename ---

template <class Old, class New, class S>
consteval bool check_rename() {
  return diagnostic::dim_not_in_shape<Old, S, !S::template has<Old>>::passed &&
         diagnostic::rename_target_already_in_shape<New, S,
                                                           S::template has<New> && !std::is_same_v<Old, New>>::passed;
}


// L with Old's axis given to New.
template <class Old, class New, class L>
struct renamed_layout {
  using type = L;
};
template <class Old, class New, class L>
  requires(L::template splits<Old>)
struct renamed_layout<Old, New, L> {
  using type = typename L::template without<Old>::template with<New, typename L::template axis_of<Old>>;
};

template <class Old, class New, class T, class S, class L, class M>
using renamed_t = tensor<T, shape_replace<S, Old, New>,
                         canonical<shape_replace<S, Old, New>, typename renamed_layout<Old, New, L>::type>,
                         M>;

// The same local elements under the new name (no record).
template <class Old, class New, class T, class S, class L, class M>
renamed_t<Old, New, T, S, L, M> rename_values(const tensor<T, S, L, M>& x) {
  using out_t = renamed_t<Old, New, T, S, L, M>;
  return out_t::sharing_elements_of(x, typename out_t::shape_type(x.shape().sizes()));
}

// --- reshape ---

// Which dims of a reshape keep their place: those that both shapes start
// with (the longest common prefix of dim names) and those both end with (the
// longest common suffix of what remains). Everything in between is regrouped.
// A device's slice, whole along the regrouped dims, is then the row-major
// block [kept prefix part, regrouped dims, kept suffix part] in both shapes,
// so a reshape of it alone is the reshape of the whole.
template <class From, class To>
struct regrouping;
template <class... A, class... B>
struct regrouping<shape<A...>, shape<B...>> {
  static constexpr std::size_t ra = sizeof...(A), rb = sizeof...(B);
  static constexpr std::size_t shorter = ra < rb ? ra : rb;

  template <std::size_t... I>
  static consteval std::size_t common_prefix(std::index_sequence<I...>) {
    std::size_t n = 0;
    bool same = true;
    ((same = same && std::is_same_v<nth<I, A...>, nth<I, B...>>, n += same ? 1 : 0), ...);
    return n;
  }
  static constexpr std::size_t prefix = common_prefix(std::make_index_sequence<shorter>{});

  template <std::size_t... I>
  static consteval std::size_t common_suffix(std::index_sequence<I...>) {
    std::size_t n = 0;
    bool same = true;
    ((same = same && std::is_same_v<nth<ra - 1 - I, A...>, nth<rb - 1 - I, B...>>, n += same ? 1 : 0), ...);
    return n;
  }
  static constexpr std::size_t suffix = common_suffix(std::make_index_sequence<shorter - prefix>{});

  // Whether the dim at position i of a shape of rank r keeps its place.
  static constexpr bool kept_at(std::size_t i, std::size_t r) { return i < prefix || i >= r - suffix; }

  template <class D>
  static constexpr bool kept = shape<A...>::template has<D> && kept_at(shape<A...>::template index_of<D>, ra);

  // Reports the first dim that cannot be reshaped (one error, however many dims).
  static consteval bool check(auto layout_tag) {
    using L = typename decltype(layout_tag)::type;
    constexpr bool regroups[] = {(L::template splits<A> && !kept<A>)..., false};
    constexpr bool reuses[] = {(shape<B...>::template has<A> && !kept<A>)..., false};
    constexpr std::size_t first = [&] {
      std::size_t i = 0;
      while (i < ra && !regroups[i] && !reuses[i]) ++i;
      return i;
    }();
    if constexpr (first == ra) {
      return true;
    } else {
      using D = nth<first, A...>;
      return diagnostic::reshape_regroups_a_split_dim<D, shape<A...>, shape<B...>, regroups[first]>::passed &&
             diagnostic::reshape_reuses_a_regrouped_dim<D, shape<A...>, shape<B...>,
                                                        !regroups[first] && reuses[first]>::passed;
    }
  }
};

// The sizes of the dims that keep their place agree, and the element counts.
template <class From, class To>
void check_reshape_sizes(const From& from, const To& to) {
  using R = regrouping<From, To>;
  if (from.elements() != to.elements()) {
    throw shape_error(detail::cat("reshape from ", from.describe(), " (", from.elements(), " elements) to ",
                                  to.describe(), " (", to.elements(), " elements): the element counts differ"));
  }
  for (std::size_t i = 0; i < From::rank; ++i) {
    if (!R::kept_at(i, From::rank)) continue;
    const std::size_t j = i < R::prefix ? i : i + To::rank - From::rank;
    if (from[i] != to[j]) {
      throw shape_error(detail::cat("reshape from ", from.describe(), " to ", to.describe(), ": dim ",
                                    From::dim_names[i], " keeps its place but changes size from ", from[i], " to ",
                                    to[j], "; a regrouped dim needs a new name"));
    }
  }
}

template <class NewShape, class L>
using reshaped_layout = canonical<NewShape, L>;

// The same local elements under the new shape (no record).
template <class NewShape, class T, class S, class L, class M>
tensor<T, NewShape, reshaped_layout<NewShape, L>, M> reshape_values(const tensor<T, S, L, M>& x,
                                                                    const NewShape& new_shape) {
  check_reshape_sizes(x.shape(), new_shape);
  return tensor<T, NewShape, reshaped_layout<NewShape, L>, M>::sharing_elements_of(x, new_shape);
}

// --- concat, slice ---

template <class D, class SA, class LA, class SB, class LB>
consteval bool check_concat() {
  return diagnostic::dim_not_in_shape<D, SA, !SA::template has<D>>::passed &&
         diagnostic::concat_shapes_differ<SA, SB, !std::is_same_v<SA, SB>>::passed &&
         diagnostic::shape_op_needs_a_whole_dim<D, LA, LA::template splits<D>>::passed &&
         diagnostic::shape_op_needs_a_whole_dim<D, LB, LB::template splits<D>>::passed &&
         diagnostic::concat_layouts_differ<LA, LB, !std::is_same_v<canonical<SA, LA>, canonical<SA, LB>>>::passed;
}

template <class D, class S, class L>
consteval bool check_whole_dim() {
  return diagnostic::dim_not_in_shape<D, S, !S::template has<D>>::passed &&
         diagnostic::shape_op_needs_a_whole_dim<D, L, L::template splits<D>>::passed;
}

// The slice [begin, begin + size) of D fits in s.
template <class D, class S>
void check_range(const char* op, const S& s, std::int64_t begin, std::int64_t size) {
  const std::int64_t n = s.template size<D>();
  if (begin < 0 || size < 0 || begin > n || size > n - begin) {
    throw shape_error(detail::cat(op, "<", D::name, ">: begin ", begin, " and size ", size,
                                  " do not fit in dim ", D::name, " of size ", n, " (", s.describe(),
                                  "); need 0 <= begin, 0 <= size, begin + size <= ", n));
  }
}

// --- stack ---


// --- one_hot ---

template <class I>
struct out_of_range {
  const I* indices;
  std::int64_t vocab;
  TYPEMESH_KERNEL bool operator()(std::int64_t at) const {
    const auto i = static_cast<std::int64_t>(indices[at]);
    return i < 0 || i >= vocab;
  }
};

// Output element e of a [..., vocab_part] slice: on where the index of its
// row names its vocab entry.
template <class I, class U>
struct one_hot_fill {
  const I* indices;
  std::int64_t vocab_begin, vocab_part;
  U on, off;
  TYPEMESH_HOST_DEVICE U operator()(std::int64_t e) const {
    return static_cast<std::int64_t>(indices[e / vocab_part]) == vocab_begin + e % vocab_part ? on : off;
  }
};

template <class VocabDim, class VocabAxis, class S, class L, class M>
consteval bool check_one_hot() {
  bool ok = diagnostic::new_dim_already_in_shape<VocabDim, S, S::template has<VocabDim>>::passed;
  if constexpr (!std::is_void_v<VocabAxis>) {
    ok = ok && diagnostic::axis_not_in_mesh<VocabAxis, M, !M::template has<VocabAxis>>::passed &&
         diagnostic::one_hot_axis_splits_the_indices<VocabAxis, L, L::template uses<VocabAxis>>::passed;
  }
  return ok;
}

// The output layout: the indices' layout, plus VocabDim over VocabAxis.
template <class VocabDim, class VocabAxis, class L>
struct vocab_layout {
  using type = typename L::template with<VocabDim, VocabAxis>;
};
template <class VocabDim, class L>
struct vocab_layout<VocabDim, void, L> {
  using type = L;
};

// --- The operations, once their checks have passed -----------------------------
// Each public function below static_asserts its checks and calls one of
// these only when they hold, so a failed check is the only error.

template <class Old, class New, class T, class S, class L, class M>
auto rename_op(const tensor<T, S, L, M>& x) {
  using out_t = renamed_t<Old, New, T, S, L, M>;
  out_t out = rename_values<Old, New>(x);
  return record(std::move(out), "rename", gradient_of(x, [](const out_t& dy) { return rename_values<New, Old>(dy); }));
}

template <class NewShape, class T, class S, class L, class M>
auto reshape_op(const tensor<T, S, L, M>& x, const NewShape& new_shape) {
  using out_t = tensor<T, NewShape, reshaped_layout<NewShape, L>, M>;
  out_t out = reshape_values(x, new_shape);
  return record(std::move(out), "reshape",
                gradient_of(x, [s = x.shape()](const out_t& dy) { return reshape_values(dy, s); }));
}

template <class D, class T, class S, class LA, class LB, class M>
tensor<T, S, LA, M> concat_op(const tensor<T, S, LA, M>& a, const tensor<T, S, LB, M>& b) {
  using a_t = tensor<T, S, LA, M>;
  using b_t = tensor<T, S, LB, M>;
  ops_detail::check_same_mesh("concat", a, b);
  const std::int64_t na = a.shape().template size<D>(), nb = b.shape().template size<D>();
  if (!(with_size<D>(a.shape(), 0) == with_size<D>(b.shape(), 0))) {
    throw shape_error(detail::cat("concat<", D::name, ">: ", a.shape().describe(), " and ", b.shape().describe(),
                                  " differ in a dim other than ", D::name));
  }
  a_t out(a.mesh(), with_size<D>(a.shape(), na + nb));
  place_along<D>(a, out, 0);
  place_along<D>(b, out, na);
  return record(std::move(out), "concat",
                gradient_of(a, [sa = a.shape()](const a_t& dy) { return take_along<D, a_t>(dy, sa, 0); }),
                gradient_of(b, [sb = b.shape(), na](const a_t& dy) { return take_along<D, b_t>(dy, sb, na); }));
}

template <class D, class T, class S, class L, class M>
tensor<T, S, L, M> slice_op(const tensor<T, S, L, M>& x, std::int64_t begin, std::int64_t size) {
  using t = tensor<T, S, L, M>;
  check_range<D>("slice", x.shape(), begin, size);
  t out = take_along<D, t>(x, with_size<D>(x.shape(), size), begin);
  return record(std::move(out), "slice", gradient_of(x, [s = x.shape(), begin](const t& dy) {
                  t dx(dy.mesh(), s);  // zeros outside the slice
                  place_along<D>(dy, dx, begin);
                  return dx;
                }));
}

template <class NewDim, class T, class S, class L, class M, class... Rest>
auto stack_op(const tensor<T, S, L, M>& first, const Rest&... rest) {
  using in_t = tensor<T, S, L, M>;
  using Out = shape_prepend<S, NewDim>;
  using out_t = tensor<T, Out, canonical<Out, L>, M>;
  constexpr std::size_t count = 1 + sizeof...(Rest);
  const std::array<const in_t*, count> xs{&first, &rest...};
  for (std::size_t i = 1; i < count; ++i) {
    ops_detail::check_same_mesh("stack", first, *xs[i]);
    if (!(xs[i]->shape() == first.shape())) {
      throw shape_error(detail::cat("stack<", NewDim::name, ">: tensor ", i, " has shape ", xs[i]->shape().describe(),
                                    " but tensor 0 has ", first.shape().describe()));
    }
  }
  std::array<std::int64_t, Out::rank> sizes{static_cast<std::int64_t>(count)};
  for (std::size_t d = 0; d < S::rank; ++d) sizes[d + 1] = first.shape()[d];
  out_t out(first.mesh(), Out(sizes), uninitialized);
  // NewDim leads and is whole: this device's slice of the result is its
  // slices of the inputs one after the other.
  const std::int64_t part = first.local_size();
  for (std::size_t i = 0; i < count; ++i) backend::copy(out.space(), xs[i]->data(), out.data() + i * part, part);
  auto unstack = [s = first.shape(), part](std::size_t i) {
    return [s, part, i](const out_t& dy) {
      in_t dx(dy.mesh(), s, uninitialized);
      backend::copy(dx.space(), dy.data() + i * part, dx.data(), part);
      return dx;
    };
  };
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return record(std::move(out), "stack", gradient_of(*xs[I], unstack(I))...);
  }(std::make_index_sequence<count>{});
}

template <class VocabDim, class VocabAxis, class U, class I, class S, class L, class M>
auto one_hot_op(const tensor<I, S, L, M>& indices, std::int64_t vocab_size, U on, U off) {
  using Out = shape_append<S, VocabDim>;
  using OutL = canonical<Out, typename vocab_layout<VocabDim, VocabAxis, L>::type>;
  using out_t = tensor<U, Out, OutL, M>;
  std::array<std::int64_t, Out::rank> sizes{};
  for (std::size_t d = 0; d < S::rank; ++d) sizes[d] = indices.shape()[d];
  sizes[S::rank] = vocab_size;
  out_t out(indices.mesh(), Out(sizes));
  if (!indices.holds_data()) return out;
  // The first index out of range on this device, if any.
  const I* idx = indices.data();
  const std::int64_t n = indices.local_size();
  const std::int64_t bad = backend::first_where(indices.space(), n, out_of_range<I>{idx, vocab_size});
  if (bad < n) {
    const I value = backend::read_one(indices.space(), idx + bad);
    throw shape_error(detail::cat("one_hot<", VocabDim::name, ">: index ", static_cast<std::int64_t>(value), " at ",
                                  describe_position<S>(global_position(indices, bad)), " of ",
                                  indices.shape().describe(), " is outside [0, ", vocab_size, "), the vocab_size"));
  }
  // VocabDim is last: output element e belongs to index e / part.
  const std::int64_t part = out.template local_extent<VocabDim>();
  if (part == 0) return out;
  backend::generate(out.space(), out.data(), n * part,
                    one_hot_fill<I, U>{idx, out.template slice_begin<VocabDim>(), part, on, off});
  return out;
}

}  // namespace shape_ops_detail

// --- rename ----------------------------------------------------------------------

// Dim Old called New: the same elements in the same places; if Old is split
// over axis A, New is split over A. rename<D, D> is the identity.
// Gradient: the rename back.
template <class Old, class New, class T, class S, class L, class M>
auto rename(const tensor<T, S, L, M>& x) {
  if constexpr (shape_ops_detail::check_rename<Old, New, S>()) return shape_ops_detail::rename_op<Old, New>(x);
}

// --- reshape ---------------------------------------------------------------------

// The same elements in row-major order under the dims of NewShape:
//
//   auto y = typemesh::reshape(x, shape<batch, hd>{8, 512});     // x: [batch, heads, d]
//   auto z = typemesh::reshape<shape<batch, hd>, layout<batch(axis0)>>(x, {8, 512});
//
// The dims both shapes start with, and those both end with, keep their place
// (and their size: a run-time check); the dims between are regrouped. x may
// split only dims that keep their place, and the output places them on the
// same axes, so the reshape is local and the output's layout is x's.
// NewLayout, when given, states that layout (a compile error when it
// differs). A dim name that both shapes use must keep its place: reordering
// dims is einsum's job. Gradient: the reshape back.
template <class NewShape, class NewLayout = void, class T, class S, class L, class M>
auto reshape(const tensor<T, S, L, M>& x, const NewShape& new_shape) {
  static_assert(is_shape<NewShape>, "typemesh: reshape's first template argument must be a typemesh::shape<...>");
  using R = shape_ops_detail::regrouping<S, NewShape>;
  using OutL = shape_ops_detail::reshaped_layout<NewShape, L>;
  constexpr bool stated_differs = [] {
    if constexpr (std::is_void_v<NewLayout>) return false;
    else return !std::is_same_v<canonical<NewShape, NewLayout>, OutL>;
  }();
  if constexpr (R::check(detail::hana::type_c<L>) &&
                diagnostic::reshape_moves_a_split_dim<NewLayout, OutL, stated_differs>::passed) {
    return shape_ops_detail::reshape_op(x, new_shape);
  }
}

// --- concat, slice, split ----------------------------------------------------------

// a and b joined along D, a's elements first, as a tensor of a's type. D must
// be whole in both; the other dims are the same, in the same order, placed
// alike (layouts equal up to order), of equal sizes; D's sizes may differ.
// Gradient: the two slices of the result's gradient.
template <class D, class T, class SA, class LA, class MA, class SB, class LB, class MB>
auto concat(const tensor<T, SA, LA, MA>& a, const tensor<T, SB, LB, MB>& b) {
  if constexpr (ops_detail::same_mesh<MA, MB>() && shape_ops_detail::check_concat<D, SA, LA, SB, LB>()) {
    return shape_ops_detail::concat_op<D>(a, b);
  }
}

// Elements [begin, begin + size) of dim D (whole), as a tensor of x's type.
// Gradient: the slice's gradient padded with zeros.
template <class D, class T, class S, class L, class M>
auto slice(const tensor<T, S, L, M>& x, std::int64_t begin, std::int64_t size) {
  if constexpr (shape_ops_detail::check_whole_dim<D, S, L>()) return shape_ops_detail::slice_op<D>(x, begin, size);
}

// Dim D (whole) cut in two: a std::pair of the first `first_size` elements
// and the rest, each of x's type. A pair rather than N equal parts, since the
// parts of a sequence or a vocab rarely have one size; each part is a slice
// (and records as one).
template <class D, class T, class S, class L, class M>
auto split(const tensor<T, S, L, M>& x, std::int64_t first_size) {
  if constexpr (shape_ops_detail::check_whole_dim<D, S, L>()) {
    const std::int64_t n = x.shape().template size<D>();
    if (first_size < 0 || first_size > n) {
      throw shape_error(detail::cat("split<", D::name, ">: first_size ", first_size, " is outside [0, ", n,
                                    "], the size of dim ", D::name, " in ", x.shape().describe()));
    }
    auto first = shape_ops_detail::slice_op<D>(x, 0, first_size);
    auto rest = shape_ops_detail::slice_op<D>(x, first_size, n - first_size);
    return std::pair{std::move(first), std::move(rest)};
  }
}

// --- stack -----------------------------------------------------------------------

// The tensors (of one type: element, shape, layout, mesh) as the entries of a
// new leading dim NewDim, whole:
//
//   auto s = typemesh::stack<step>(h0, h1, h2);   // h: [batch, n] -> s: [step=3, batch, n]
//
// Nothing is communicated. Gradient: each input gets its entry of the
// result's gradient (an unstack).
template <class NewDim, class T, class S, class L, class M, class... Rest>
auto stack(const tensor<T, S, L, M>& first, const Rest&... rest) {
  using in_t = tensor<T, S, L, M>;
  if constexpr ((diagnostic::stack_needs_one_tensor_type<in_t, Rest, !std::is_same_v<in_t, Rest>>::passed && ... &&
                 diagnostic::new_dim_already_in_shape<NewDim, S, S::template has<NewDim>>::passed)) {
    return shape_ops_detail::stack_op<NewDim>(first, rest...);
  }
}

// --- one_hot ---------------------------------------------------------------------

// For integer indices of shape S, a float or double tensor of shape
// S + [VocabDim] (VocabDim last, of size vocab_size): `on` where the vocab
// entry is the index, `off` elsewhere.
//
//   auto y = typemesh::one_hot<vocab>(labels, 1000);                  // float, vocab whole
//   auto z = typemesh::one_hot<vocab, axis1>(labels, 1000, 1.0, 0.0);  // double, vocab over axis1
//
// VocabAxis (void: whole) may split VocabDim over an axis that holds replicas
// of the indices; each device then fills only its part of the vocab, and
// nothing is communicated. The element type is on's (float by default). An
// index outside [0, vocab_size) is a shape_error naming it and its position.
// No gradient flows to integer indices, so nothing is recorded.
template <class VocabDim, class VocabAxis = void, class U = float, std::integral I, class S, class L, class M>
auto one_hot(const tensor<I, S, L, M>& indices, std::int64_t vocab_size, U on = U{1},
             std::type_identity_t<U> off = U{0}) {
  if constexpr (diagnostic::one_hot_needs_a_floating_type<U, !std::is_floating_point_v<U>>::passed &&
                shape_ops_detail::check_one_hot<VocabDim, VocabAxis, S, L, M>()) {
    return shape_ops_detail::one_hot_op<VocabDim, VocabAxis>(indices, vocab_size, on, off);
  }
}

}  // namespace typemesh

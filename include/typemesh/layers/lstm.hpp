// The LSTM: one fused step of the cell on one mesh, a stack of layers over a
// time dim, and the conversion of standard weight matrices.
//
//   // x_t: [batch, k] with k the units u; w: [k = 2u, n = 4u]; h like x_t, c: [batch, n = u]
//   auto [h1, c1] = typemesh::lstm_step(x_t, h, c, w);
//
//   // x: [batch, time, k] (the dims in any order); one weight per layer, on x's mesh
//   auto y = typemesh::lstm<time>(x, std::vector{w0, w1, w2});   // y: x's type, the top layer's h
//   // (k and n whole: one operation per layer over all steps; else step by step)
//
//   // a [x | h] x [i | f | g | o] matrix (rows: u input units then u hidden units;
//   // columns: the i, f, g, o blocks of u units each) to the layout below, and back
//   auto w_host = typemesh::lstm_weight_from_standard<k>(standard);
//
// Dims by role. The dim x_t and w share is k: units in x_t and h, input and
// hidden rows in w. w's other dim is n: gate columns in w, units in c. Every
// other dim of x_t (batch-like dims, any number, in any order) passes
// through. h has x_t's type; c has x_t's shape with k replaced by n, and
// x_t's layout with n on w's axis for n. The time dim of lstm<Time> and
// time_step<Time> is named, and may sit anywhere in x's shape.
//
// Layouts (as in the reference's RNNOperation): the batch-like dims may be
// split, n (gate columns, hidden units out) over one axis, k (input and
// hidden units in) over another. Time is never split. The number of units
// must be divisible by the sizes of the k and n axes.
//
// What the weights' rows and columns mean. Every device must find in its own
// block of w exactly the rows for its own x and h units and the columns of
// all four gates of its own hidden units, so that the gate nonlinearities
// need no communication and the layout never changes the result. So, for a
// hidden unit v and a gate q in i, f, g, o (in that order):
//   row 2*u     multiplies input unit u,  row 2*u + 1 multiplies hidden unit u;
//   column 4*v + q is the pre-activation of gate q of hidden unit v.
// Splitting k (or n) into equal blocks then hands each device whole units
// with both of their rows (all four of their gate columns). This is the
// reference's "i1|f1|g1|o1||i2|f2|g2|o2" arrangement taken down to single
// units, which makes it the same for every number of blocks. A standard
// [x | h] x [i | f | g | o] matrix is a fixed permutation of it:
// lstm_weight_from_standard and lstm_weight_to_standard apply it. As there,
// input and hidden units are equally many, and the cell has no bias.
//
// One step, with k over axis K and n over axis N:
//   xh = x_t and h interleaved by unit          (local)
//   z  = xh . w, partial over k                 -> allreduce over K
//   c' = f*c + i*g, h' = o*tanh(c')             (local: gates of a unit sit together)
//   h' leaves the cell split along N (it is indexed by n) but the next step
//   multiplies it along k, so it must end up split along K and replicated
//   along N. That is a relayout of one dim from axis N to axis K. The
//   reference does it as allconcat over N then allsplit over K; here it is
//   the point-to-point transfer plan (convert/transfer.hpp), which moves
//   only what each device lacks: with N and K of equal size it is a
//   transpose of the (N, K) grid, where a device receives its 1/|K| of the
//   units (nothing on the diagonal) instead of the allgather's (|N|-1)/|N|.
//   With K of size 1 it is that allgather, with N of size 1 a local slice.
// The kernel wants k (and n) last in memory: dims in another order are
// permuted locally, on the way in and out, without communication.
//
// The sequence path. When k and n are both whole (only batch-like dims
// split: data parallelism), a step needs no communication, so lstm<Time>
// runs each layer as ONE recorded operation over the whole sequence,
// layer after layer, on x permuted to [time, batch..., k] (time-major):
//   P   = X . W_x                  all steps' input parts in one GEMM
//   z_t = P_t + h_{t-1} . W_h      per step, a GEMM of the batch's rows
//   (h_t, c_t) = gates(z_t, c_{t-1})
// W_x (rows 2u of w) and W_h (rows 2u + 1) are read in place as w with
// twice its row stride. Backward walks the steps in reverse with one
// gate-gradient pass and dh_{t-1} = dz_t . W_h^T each, then takes
// dX = DZ . W_x^T, dW_x = X^T . DZ and dW_h = H_prev^T . DZ as one GEMM
// each over all steps, the last two added straight into the weight's
// gradient rows. Per step and layer that saves the interleave, a GEMM
// against the whole weight with few rows (whose cost is mostly packing the
// weight), and a weight-sized gradient per step. With k or n split, every
// step communicates (below), and lstm<Time> runs step by step on
// lstm_step; so do the pipelines that programs write from lstm_step.
//
// Gradients. A step is one fused operation with its own gradient (GEMM,
// allreduce, gates): composed of einsum and elementwise ops, a step would
// need a dozen nodes and gate slices that the ops lack, and store every
// intermediate. Its three gradients (xh, c, w) share one d(pre-activations)
// pass, made by whichever runs first. A step's weight gradient is a sum over
// the batch. Steps (and sequence-path layers) that share an lstm_weight add
// their partial sums over this device's part of the batch in place into the
// lstm_weight's gradient, which allreduces them over the batch's axes once,
// after the last step (as the reference's RNNGradOperation does), not once
// per step. A step given a plain weight tensor allreduces its own weight
// gradient.
//
// Pipelines. Every device runs every step; a device outside a mesh skips
// that mesh's work (its tensors are empty and collectives on it return at
// once), and moves between meshes are buffered point-to-point sends. Layers
// on disjoint meshes, joined by replace_mesh after every step, therefore
// form a pipeline over time steps (see examples/rnnlm.cpp and docs/layers.md):
// forward, layer 0's devices never wait for layer 1's; backward runs the
// tape in reverse, so layer 1's devices never wait for layer 0's.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/blas.hpp"
#include "typemesh/backend/lstm.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/convert/replace_mesh.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/layout.hpp"
#include "typemesh/core/shape_algebra.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/tensor/host_tensor.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace diagnostic {
TYPEMESH_DIAGNOSTIC(lstm_weight_not_two_dims, (class WeightShape), (WeightShape),
                    "lstm: the weight must have two dims, k (shared with the input: input and hidden units) "
                    "and n (the gate columns); the weight's shape is the argument above");
TYPEMESH_DIAGNOSTIC(lstm_input_shares_no_dim_with_weight, (class InputShape, class WeightShape),
                    (InputShape, WeightShape),
                    "lstm: the input and the weight share no dim; the dim they share is k, the units in (e.g. "
                    "x_t: [batch, k], w: [k, n]); the input's and the weight's shapes are the arguments above");
TYPEMESH_DIAGNOSTIC(lstm_input_has_both_weight_dims, (class InputShape, class WeightShape),
                    (InputShape, WeightShape),
                    "lstm: the input has both dims of the weight; it must share exactly one (k, the units in) "
                    "and lack the other (n, the gate columns); the shapes are the arguments above");
TYPEMESH_DIAGNOSTIC(lstm_element_types_differ, (class InputElement, class WeightElement),
                    (InputElement, WeightElement),
                    "lstm: the input and the weight have different element types; the two are the arguments above");
TYPEMESH_DIAGNOSTIC(lstm_state_type_mismatch, (class Which, class Given, class Expected), (Which, Given, Expected),
                    "lstm_step: a state has the wrong type: h must have x_t's type, and c x_t's shape with k "
                    "replaced by n, laid out as x_t's batch-like dims plus n on the weight's axis for n; the "
                    "state (h or c), its type and the type it must have are the arguments above");
TYPEMESH_DIAGNOSTIC(lstm_time_not_in_input, (class Time, class InputShape), (Time, InputShape),
                    "lstm<Time>: the input lacks the time dim named; name one of the input's dims; the dim and "
                    "the input's shape are the arguments above");
TYPEMESH_DIAGNOSTIC(lstm_time_split, (class Time, class Layout), (Time, Layout),
                    "lstm<Time>: the time dim is split over a mesh axis; the layers walk along it step by step, "
                    "so every device needs every step; the dim and the layout are the arguments above");
TYPEMESH_DIAGNOSTIC(stack_steps_adds_not_one_dim, (class Shape, class StepShape), (Shape, StepShape),
                    "stack_steps<Shape>: Shape must have every dim of the steps and exactly one more (the time "
                    "dim); Shape and the steps' shape are the arguments above");
}  // namespace diagnostic

// A layer's hidden and cell state: h laid out as the step's input, c as the gates.
template <class H, class C>
struct lstm_state {
  H h;
  C c;
};

namespace lstm_detail {

// A step's output holds h and c of each unit side by side: [..., n, part].
struct part : dim<"lstm_part"> {};

// L with D over A (void: L, D whole).
template <class L, class D, class A>
struct with_entry {
  using type = typename L::template with<D, A>;
};
template <class L, class D>
struct with_entry<L, D, void> {
  using type = L;
};
template <class L, class D, class A>
using with_entry_t = typename with_entry<L, D, A>::type;

template <class S>
struct first_dim {
  using type = void;
};
template <class D, class... Ds>
struct first_dim<shape<D, Ds...>> {
  using type = D;
};

// The checks of a step on input X with weight W, first failure only.
template <class X, class W>
consteval bool check_roles() {
  using SX = typename X::shape_type;
  using SW = typename W::shape_type;
  constexpr std::size_t shared = shape_common<SX, SW>::rank;
  if constexpr (!diagnostic::lstm_weight_not_two_dims<SW, SW::rank != 2>::passed) return false;
  else if constexpr (!diagnostic::lstm_input_shares_no_dim_with_weight<SX, SW, shared == 0>::passed) return false;
  else if constexpr (!diagnostic::lstm_input_has_both_weight_dims<SX, SW, shared == 2>::passed) return false;
  else if constexpr (!diagnostic::lstm_element_types_differ<typename X::value_type, typename W::value_type,
                                                            !std::is_same_v<typename X::value_type,
                                                                            typename W::value_type>>::passed)
    return false;
  else if constexpr (!diagnostic::different_meshes<typename X::mesh_type, typename W::mesh_type,
                                                   !std::is_same_v<typename X::mesh_type,
                                                                   typename W::mesh_type>>::passed)
    return false;
  else return ops_detail::compatible<SX, typename X::layout_type, SW, typename W::layout_type>();
}

// Every type one step involves, from the types of its input X and weight W
// (whose checks have passed).
template <class X, class W>
struct roles {
  using T = typename X::value_type;
  using M = typename X::mesh_type;
  using SX = typename X::shape_type;
  using LX = typename X::layout_type;
  using k = typename first_dim<shape_common<typename W::shape_type, SX>>::type;
  using n = typename first_dim<shape_minus<typename W::shape_type, SX>>::type;
  using k_axis = typename LX::template axis_of<k>;                       // void: whole
  using n_axis = typename W::layout_type::template axis_of<n>;           // void: whole
  using batch_shape = shape_without<SX, k>;                             // the dims that pass through
  using batch_layout = typename LX::template without<k>;
  using c_layout = with_entry_t<batch_layout, n, n_axis>;               // c, the gates: units along n
  using hn_layout = with_entry_t<batch_layout, k, n_axis>;              // h' as the cell makes it

  using h_t = X;
  using c_t = tensor<T, shape_replace<SX, k, n>, c_layout, M>;
  // The kernel's order: k (or n) last.
  using x_kernel = tensor<T, shape_append<batch_shape, k>, LX, M>;
  using c_kernel = tensor<T, shape_append<batch_shape, n>, c_layout, M>;
  using hn_kernel = tensor<T, shape_append<batch_shape, k>, hn_layout, M>;
  using state_kernel = tensor<T, shape_append<batch_shape, n, part>, c_layout, M>;
  using state_t = lstm_state<h_t, c_t>;

  // The mesh axes that split batch-like dims: the weight's gradient is a sum over them.
  static constexpr std::array<bool, M::rank> batch_axes() {
    std::array<bool, M::rank> axes{};
    LX::for_each([&](auto d, auto a) {
      using D = typename decltype(d)::type;
      using A = typename decltype(a)::type;
      if constexpr (!std::is_same_v<D, k>) axes[M::template index_of<A>] = true;
    });
    return axes;
  }
};

// Whether Given is Expected up to the spelling of its layout.
template <class Given, class Expected>
inline constexpr bool same_tensor_type = false;
template <class T, class S, class L1, class L2, class M>
inline constexpr bool same_tensor_type<tensor<T, S, L1, M>, tensor<T, S, L2, M>> =
    std::is_same_v<canonical<S, L1>, canonical<S, L2>>;

struct h_state {};
struct c_state {};

template <class X, class W, class H, class C>
consteval bool check_step() {
  if constexpr (!check_roles<X, W>()) return false;
  else {
    using r = roles<X, W>;
    return diagnostic::lstm_state_type_mismatch<h_state, H, typename r::h_t,
                                                !same_tensor_type<H, typename r::h_t>>::passed &&
           diagnostic::lstm_state_type_mismatch<c_state, C, typename r::c_t,
                                                !same_tensor_type<C, typename r::c_t>>::passed;
  }
}

template <class Time, class X>
consteval bool check_time() {
  using SX = typename X::shape_type;
  if constexpr (!diagnostic::lstm_time_not_in_input<Time, SX, !shape_contains<SX, Time>>::passed) return false;
  else return diagnostic::lstm_time_split<Time, typename X::layout_type, X::layout_type::template splits<Time>>::passed;
}

// x as type Want (the same tensor type up to the spelling of the layout):
// a reference when it already is one.
template <class Want, class Got>
decltype(auto) as_type(const Got& x) {
  if constexpr (std::is_same_v<Want, Got>) return (x);
  else return Want(x);
}

// --- Checks at run time ----------------------------------------------------------

// Units must split into whole blocks over axis A of the mesh (as k or n).
template <class A, class M>
void check_units_split(std::int64_t units, const M& m, std::string_view dim_role) {
  if constexpr (!std::is_void_v<A>) {
    const int parts = m.template size<A>();
    if (units % parts != 0) {
      throw shape_error(detail::cat("lstm_step: ", units, " units do not split over axis ", A::name, " of size ",
                                    parts, " (which splits ", dim_role, ") on ", m.describe(),
                                    "; each device needs whole units"));
    }
  }
}

// A step's sizes and meshes, from x_t's shape and mesh (the sequence path
// checks each layer before its first step exists).
template <class R, class W>
void check_step_sizes(const typename R::SX& x_shape, const typename R::M& x_mesh, const typename R::h_t& h,
                      const typename R::c_t& c, const W& w) {
  using K = typename R::k;
  using N = typename R::n;
  const std::int64_t units = x_shape.template size<K>();
  if (w.shape().template size<K>() != 2 * units || w.shape().template size<N>() != 4 * units) {
    throw shape_error(detail::cat("lstm_step: the weight has shape ", w.shape().describe(), "; with x_t of shape ",
                                  x_shape.describe(), " (", units, " units) it must have ", K::name, "=",
                                  2 * units, " (input and hidden units) and ", N::name, "=", 4 * units,
                                  " (four gates per unit)"));
  }
  if (!(h.shape() == x_shape)) {
    throw shape_error(detail::cat("lstm_step: h has shape ", h.shape().describe(), "; it must have x_t's shape ",
                                  x_shape.describe()));
  }
  const typename R::c_t::shape_type c_shape(x_shape.sizes());  // units along n instead of k
  if (!(c.shape() == c_shape)) {
    throw shape_error(detail::cat("lstm_step: c has shape ", c.shape().describe(), "; it must be ",
                                  c_shape.describe(), " (x_t's shape with ", K::name, " named ", N::name, ")"));
  }
  auto check_mesh = [&](const char* what, const auto& m) {
    if (!(m == w.mesh())) {
      throw device_error(detail::cat("lstm_step: ", what, " lives on ", m.describe(), " but the weight on ",
                                     w.mesh().describe(), "; the step runs where its weight lives"));
    }
  };
  check_mesh("x_t", x_mesh);
  check_mesh("h", h.mesh());
  check_mesh("c", c.mesh());
  check_units_split<typename R::k_axis>(units, w.mesh(), K::name);
  check_units_split<typename R::n_axis>(units, w.mesh(), N::name);
}

template <class R, class W>
void check_step_sizes(const typename R::h_t& x, const typename R::h_t& h, const typename R::c_t& c, const W& w) {
  check_step_sizes<R>(x.shape(), x.mesh(), h, c, w);
}

// --- Small recorded operations -----------------------------------------------------

// Sums over axis A (void: nothing to sum).
template <class A, class Tensor>
void allreduce_along(Tensor& t) {
  if constexpr (!std::is_void_v<A>) {
    if (!t.holds_data()) return;
    group g = t.mesh().template group_along<A>(t.device());
    if (g.size() > 1) allreduce_in_place(t, g);
  }
}

// Records `out` as made from `input`; in backward, add_into(dy, grad) adds
// this node's contribution straight into the input's gradient (made zero
// first if it has none yet). For outputs that are a small part of their
// input: no input-sized temporary per use.
template <class Out, class In, class AddInto>
void add_in_place_edge(autodiff::node& n, const In& input, AddInto add_into) {
  if (!input.tracked()) return;
  n.edges.push_back({input.node(), [add_into = std::move(add_into), m = input.mesh(), s = input.shape()](
                                       const std::any& g, autodiff::node& in) {
                       // Held in the canonical spelling, as autodiff::accumulate holds gradients.
                       using held_t = typename In::canonical_type;
                       if (!in.grad.has_value()) in.grad = held_t(m, s);
                       add_into(autodiff::held_gradient<Out>(g), std::any_cast<held_t&>(in.grad));
                     }});
}

// x's local elements with its dims in Out's order (the same dims): a local
// transpose, no communication.
template <class Out, class T, class S, class L, class M>
tensor<T, Out, L, M> permuted_values(const tensor<T, S, L, M>& x) {
  tensor<T, Out, L, M> out(x.mesh(), shape_from<Out>(x.shape()), uninitialized);
  if (x.holds_data()) {
    using U = dims_of<Out>;
    backend::broadcast(x.space(), x.data(), ops_detail::local_dims_of<U>(x), out.data(),
                       ops_detail::local_dims_of<U>(out));
  }
  return out;
}

template <class Out, class T, class S, class L, class M>
tensor<T, Out, L, M> permute(const tensor<T, S, L, M>& x) {
  using Y = tensor<T, Out, L, M>;
  return record(permuted_values<Out>(x), "lstm dims in the kernel's order",
                gradient_of(x, [](const Y& dy) { return permuted_values<S>(dy); }));
}

// x (type From) as type To, where To has the same dims in another order and
// the same layout up to its spelling: x itself when it is of type To.
template <class To, class From>
decltype(auto) in_order(const From& x) {
  using TS = typename To::shape_type;
  if constexpr (std::is_same_v<To, From>) return (x);
  else if constexpr (std::is_same_v<TS, typename From::shape_type>) return To(x);
  else return To(permute<TS>(x));
}
template <class To, class From>
To to_order(From x) {
  if constexpr (std::is_same_v<To, From>) return x;
  else return To(in_order<To>(x));
}

// The size of D in s, or 0 when s lacks D.
template <class D, class S>
std::int64_t size_or_zero(const S& s) {
  if constexpr (S::template has<D>) return s.template size<D>();
  else return 0;
}

// The local slice of a tensor of shape S as [outer, D, inner].
template <class D, class S, std::size_t R>
std::array<std::int64_t, 3> around(const std::array<std::int64_t, R>& extent) {
  constexpr std::size_t at = shape_index_of<S, D>;
  std::array<std::int64_t, 3> e{1, extent[at], 1};
  for (std::size_t i = 0; i < R; ++i) {
    if (i < at) e[0] *= extent[i];
    if (i > at) e[2] *= extent[i];
  }
  return e;
}

// [x_t, h] interleaved by unit: column 2u is x_t's unit u, 2u + 1 is h's.
// Both are split along k alike, so each device interleaves its own units.
template <class K, class H>
H interleave(const H& x, const H& h) {
  using S = typename H::shape_type;
  auto sizes = x.shape().sizes();
  sizes[S::template index_of<K>] *= 2;
  H out(x.mesh(), S(sizes), uninitialized);
  backend::lstm_interleave(x.space(), x.data(), h.data(), out.data(), x.local_size());
  auto half = [s = x.shape()](std::int64_t which) {
    return [which, s](const H& dxh) {
      H g(dxh.mesh(), s, uninitialized);
      backend::lstm_take_part(g.space(), dxh.data(), which, g.data(), g.local_size());
      return g;
    };
  };
  return record(std::move(out), "lstm input and hidden", gradient_of(x, half(0)), gradient_of(h, half(1)));
}

// Part p (0: h, 1: c) of each unit of a state, as type Out (h with its unit
// dim named k but still split as n is: the input of the relayout to k's axis).
template <class Out, std::size_t P, class State>
Out part_of(const State& s) {
  using S = typename Out::shape_type;
  auto sizes = std::array<std::int64_t, S::rank>{};
  for (std::size_t i = 0; i < S::rank; ++i) sizes[i] = s.shape()[i];  // [..., n, part] -> [..., n]
  Out out(s.mesh(), S(sizes), uninitialized);
  backend::lstm_take_part(s.space(), s.data(), std::int64_t{P}, out.data(), out.local_size());
  return record(std::move(out), P == 0 ? "lstm hidden state" : "lstm cell state",
                gradient_of(s, [ss = s.shape()](const Out& dy) {
                  State g(dy.mesh(), ss, uninitialized);  // both halves of every pair are written
                  backend::lstm_put_part(g.space(), dy.data(), std::int64_t{P}, g.data(), dy.local_size());
                  return g;
                }));
}

template <class State, class C>
typename State::shape_type state_shape(const C& c) {
  using S = typename State::shape_type;
  auto sizes = std::array<std::int64_t, S::rank>{};
  for (std::size_t i = 0; i + 1 < S::rank; ++i) sizes[i] = c.shape()[i];
  sizes[S::rank - 1] = 2;
  return S(sizes);
}

// --- The fused cell ------------------------------------------------------------------

// What a step keeps for its gradient, per local (row, unit): the four gate
// activations i, f, g, o, and c (before) and tanh(c') (after).
// In backward, the first of the step's gradients to run computes the
// d(pre-activations) dz (and d(c)) once for all three; they go with the
// step's recorded node once backward has passed it.
template <class T, class Space>
struct step_memory {
  backend::storage<T, Space> gates;  // [r, u, 4]
  backend::storage<T, Space> cells;  // [r, u, 2]: c, tanh(c')
  bool want_dc = false;
  bool have_dz = false;
  backend::storage<T, Space> dz;  // [r, u, 4]
  backend::storage<T, Space> dc;  // [r, u]: d(c), when c wants it

  template <class State>
  const T* dz_of(const State& dy) {
    if (!have_dz) {
      have_dz = true;
      dz.resize(gates.size());
      if (want_dc) dc.resize(cells.size() / 2);
      backend::lstm_gate_gradients(Space{}, backend::view(gates).data(), backend::view(cells).data(), dy.data(),
                                   backend::view(dz).data(), want_dc ? backend::view(dc).data() : nullptr,
                                   dy.local_size() / 2);
    }
    return backend::view(dz).data();
  }
};

// The weight's gradient over the batch: which axes split the batch, learnt
// from the first step that uses the weight.
template <std::size_t Rank>
struct batch_sum {
  bool known = false;
  std::array<bool, Rank> axes{};
};

// One cell: (h', c') = cell(xh, c, w), in the kernel's order, with KA the axis
// splitting k and NA the one splitting n (void: whole). The weight's gradient
// is left as this device's partial sum over the batch.
template <class KA, class NA, class State, class XH, class C, class W>
State cell(const XH& xh, const C& c, const std::shared_ptr<const W>& w) {
  using T = typename State::value_type;
  using Space = typename State::space_type;
  State out(c.mesh(), state_shape<State>(c), uninitialized);
  auto mem = std::make_shared<step_memory<T, Space>>();
  const auto xe = xh.local_extent();
  const std::int64_t kl = xe[XH::rank - 1];
  const std::int64_t rows = kl == 0 ? 0 : xh.local_size() / kl;
  const std::int64_t units = c.local_extent()[C::rank - 1], nl = 4 * units;
  if (xh.holds_data()) {
    // z = xh . w: partial sums over this device's k, then over all of k.
    mem->gates.resize(static_cast<std::size_t>(rows * nl));
    T* z = backend::view(mem->gates).data();
    backend::gemm(Space{}, false, false, rows, nl, kl, T{1}, xh.data(), kl, w->data(), nl, T{0}, z, nl);
    if constexpr (!std::is_void_v<KA>) {
      group g = xh.mesh().template group_along<KA>(xh.device());
      if (g.size() > 1) this_device().allreduce(g, backend::span_of(Space{}, z, mem->gates.size()));
    }
    // The four gates of each unit sit together, on this device.
    mem->cells.resize(static_cast<std::size_t>(rows * units * 2));
    backend::lstm_cell_forward(Space{}, z, c.data(), backend::view(mem->cells).data(), out.data(), rows * units);
  }
  if (!autodiff::recording() || !(xh.tracked() || c.tracked() || w->tracked())) return out;
  mem->want_dc = c.tracked();
  auto n = autodiff::make_node("lstm step");
  // d(xh) = dz . w^T: partial sums over this device's n, then over all of n.
  if (xh.tracked()) {
    n->edges.push_back({xh.node(), [mem, w, xs = xh.shape(), rows, kl, nl](const std::any& g, autodiff::node& in) {
                          const State& dy = autodiff::held_gradient<State>(g);
                          XH dxh(dy.mesh(), xs, uninitialized);
                          if (dy.holds_data()) {
                            const T* dz = mem->dz_of(dy);
                            backend::gemm(Space{}, false, true, rows, kl, nl, T{1}, dz, nl, w->data(), nl, T{0},
                                          dxh.data(), kl);
                            allreduce_along<NA>(dxh);
                          }
                          autodiff::accumulate<XH>(in, std::move(dxh));
                        }});
  }
  // d(c) = dc * f, from the same pass as dz.
  if (c.tracked()) {
    n->edges.push_back({c.node(), [mem, cs = c.shape()](const std::any& g, autodiff::node& in) {
                          const State& dy = autodiff::held_gradient<State>(g);
                          C dc(dy.mesh(), cs, uninitialized);
                          if (dy.holds_data()) {
                            mem->dz_of(dy);
                            backend::copy(Space{}, backend::view(mem->dc).data(), dc.data(), dc.local_size());
                          }
                          autodiff::accumulate<C>(in, std::move(dc));
                        }});
  }
  // d(w) += xh^T . dz over this device's part of the batch only, added into
  // the weight's gradient in place: the partial sums of all steps are
  // allreduced once (lstm_weight).
  if (w->tracked()) {
    add_in_place_edge<State>(*n, *w, [mem, xv = xh.detached(), rows, kl, nl](const State& dy, auto& dw) {
      if (!dy.holds_data()) return;
      const T* dz = mem->dz_of(dy);
      backend::gemm(Space{}, true, false, kl, nl, rows, T{1}, xv.data(), kl, dz, nl, T{1}, dw.data(), nl);
    });
  }
  out.set_node(std::move(n));
  return out;
}

// --- The whole-sequence path --------------------------------------------------------

// Whether a layer of roles R with weight W runs as one operation over the
// whole sequence: k and n whole on the mesh (only batch-like dims split,
// so a step needs no communication) and the weight's rows (k) first in
// memory, which the strided views of its input and hidden rows assume.
template <class R, class W>
inline constexpr bool sequence_path = std::is_void_v<typename R::k_axis> && std::is_void_v<typename R::n_axis> &&
                                      shape_index_of<typename W::shape_type, typename R::k> == 0;

// What a layer over the sequence keeps for its gradient, per step and local
// (row, unit): the gate activations and (c, tanh(c')).
template <class T, class Space>
struct sequence_memory {
  backend::storage<T, Space> gates;  // [steps, r, u, 4]
  backend::storage<T, Space> cells;  // [steps, r, u, 2]
};

// The local sizes of a layer over the sequence: steps x rows x units; the
// gate columns; and the stride between the weight's input rows (or its
// hidden rows), which alternate: two rows of 4u columns.
struct sequence_sizes {
  std::int64_t steps = 0, rows = 0, units = 0;
  std::int64_t gates() const { return 4 * units; }
  std::int64_t weight_stride() const { return 8 * units; }
};

// The gradients of a layer over the sequence, shared by its edges: the first
// edge that runs computes d(pre-activations) of every step, and with them
// d(h0) and d(c0); each edge then takes its part.
template <class Seq, class HK, class CK, class W>
struct sequence_backward {
  using T = typename Seq::value_type;
  using Space = typename Seq::space_type;

  sequence_backward(std::shared_ptr<sequence_memory<T, Space>> m, std::shared_ptr<const W> weight,
                    sequence_sizes sizes, const HK& h, typename CK::shape_type c_shape)
      : mem(std::move(m)),
        w(std::move(weight)),
        e(sizes),
        h0(h.detached()),
        c0_shape(c_shape),
        want_h0(h.tracked()) {}

  std::shared_ptr<sequence_memory<T, Space>> mem;
  std::shared_ptr<const W> w;
  sequence_sizes e;
  HK h0;  // detached; h0, x and y are kept for the weight's gradient
  typename CK::shape_type c0_shape;
  bool want_h0;
  std::optional<Seq> xs, ys;

  bool done = false;
  backend::storage<T, Space> dz;  // [steps, r, u, 4]
  std::optional<HK> dh0;
  std::optional<CK> dc0;

  // Backward through time: per step, one gate-gradient pass and the
  // recurrent d(h) = dz_t . W_h^T.
  void run(const Seq& dy) {
    if (done) return;
    done = true;
    dh0.emplace(dy.mesh(), h0.shape());  // the recurrent d(h), zero after the last step
    dc0.emplace(dy.mesh(), c0_shape);  // d(c), likewise
    if (!dy.holds_data()) return;
    const std::int64_t per_step = e.rows * e.units, ng = e.gates(), ldw = e.weight_stride();
    dz.resize(static_cast<std::size_t>(e.steps * per_step * 4));
    T* d = backend::view(dz).data();
    const T* gates = backend::view(mem->gates).data();
    const T* cells = backend::view(mem->cells).data();
    for (std::int64_t t = e.steps; t-- > 0;) {
      T* dz_t = d + t * per_step * 4;
      backend::lstm_sequence_gate_gradients(Space{}, gates + t * per_step * 4, cells + t * per_step * 2,
                                            dy.data() + t * per_step, dh0->data(), dc0->data(), dz_t, per_step);
      if (t > 0 || want_h0) {
        backend::gemm(Space{}, false, true, e.rows, e.units, ng, T{1}, dz_t, ng, w->data() + ng, ldw, T{0},
                      dh0->data(), e.units);
      }
    }
  }

  // d(x) = DZ . W_x^T over all steps at once.
  Seq input_gradient(const Seq& dy) {
    run(dy);
    Seq dx(dy.mesh(), dy.shape(), uninitialized);
    if (dy.holds_data()) {
      backend::gemm(Space{}, false, true, e.steps * e.rows, e.units, e.gates(), T{1}, backend::view(dz).data(),
                    e.gates(), w->data(), e.weight_stride(), T{0}, dx.data(), e.units);
    }
    return dx;
  }

  // d(W_x) += X^T . DZ and d(W_h) += H_prev^T . DZ, into the weight's
  // gradient rows in place: this device's partial sum over the batch.
  template <class DW>
  void add_weight_gradient(const Seq& dy, DW& dw) {
    run(dy);
    if (!dy.holds_data()) return;
    const std::int64_t ng = e.gates(), ldw = e.weight_stride(), per_step = e.rows * e.units;
    const T* d = backend::view(dz).data();
    backend::gemm(Space{}, true, false, e.units, ng, e.steps * e.rows, T{1}, xs->data(), e.units, d, ng, T{1},
                  dw.data(), ldw);
    // H_prev: h0, then the outputs of all steps but the last.
    backend::gemm(Space{}, true, false, e.units, ng, e.rows, T{1}, h0.data(), e.units, d, ng, T{1},
                  dw.data() + ng, ldw);
    if (e.steps > 1) {
      backend::gemm(Space{}, true, false, e.units, ng, (e.steps - 1) * e.rows, T{1}, ys->data(), e.units,
                    d + per_step * 4, ng, T{1}, dw.data() + ng, ldw);
    }
  }
};

// One layer over the whole sequence xs ([time, batch..., k], time-major),
// from the state (h0, c0), as one recorded operation: ys, the h of every
// step, of xs's type. W_x (rows 2u of w) and W_h (rows 2u + 1) are read in
// place with twice the weight's row stride. The weight's gradient is left
// as this device's partial sum over the batch (lstm_weight sums it).
template <class Seq, class HK, class CK, class W>
Seq sequence_layer(const Seq& xs, const HK& h0, const CK& c0, const std::shared_ptr<const W>& w) {
  using T = typename Seq::value_type;
  using Space = typename Seq::space_type;
  Seq ys(xs.mesh(), xs.shape(), uninitialized);
  auto mem = std::make_shared<sequence_memory<T, Space>>();
  sequence_sizes e;
  const auto ext = xs.local_extent();
  e.steps = ext[0];
  e.units = ext[Seq::rank - 1];
  e.rows = e.steps * e.units == 0 ? 0 : xs.local_size() / (e.steps * e.units);
  const std::int64_t per_step = e.rows * e.units, ng = e.gates(), ldw = e.weight_stride();
  if (xs.holds_data() && per_step > 0) {
    mem->gates.resize(static_cast<std::size_t>(e.steps * per_step * 4));
    mem->cells.resize(static_cast<std::size_t>(e.steps * per_step * 2));
    T* z = backend::view(mem->gates).data();
    T* cells = backend::view(mem->cells).data();
    // The input's part of every step's pre-activations in one product.
    backend::gemm(Space{}, false, false, e.steps * e.rows, ng, e.units, T{1}, xs.data(), e.units, w->data(), ldw,
                  T{0}, z, ng);
    backend::storage<T, Space> c(static_cast<std::size_t>(per_step));
    backend::copy(Space{}, c0.data(), backend::view(c).data(), per_step);
    for (std::int64_t t = 0; t < e.steps; ++t) {
      T* z_t = z + t * per_step * 4;
      const T* h_prev = t == 0 ? h0.data() : ys.data() + (t - 1) * per_step;
      backend::gemm(Space{}, false, false, e.rows, ng, e.units, T{1}, h_prev, e.units, w->data() + ng, ldw, T{1},
                    z_t, ng);
      backend::lstm_sequence_cell_forward(Space{}, z_t, backend::view(c).data(), cells + t * per_step * 2,
                                          ys.data() + t * per_step, per_step);
    }
  }
  if (!autodiff::recording() || !(xs.tracked() || h0.tracked() || c0.tracked() || w->tracked())) return ys;
  auto back = std::make_shared<sequence_backward<Seq, HK, CK, W>>(std::move(mem), w, e, h0, c0.shape());
  if (w->tracked()) back->xs = xs.detached(), back->ys = ys.detached();
  auto n = autodiff::make_node("lstm layer over the sequence");
  if (xs.tracked()) {
    n->edges.push_back({xs.node(), [back](const std::any& g, autodiff::node& in) {
                          autodiff::accumulate<Seq>(in, back->input_gradient(autodiff::held_gradient<Seq>(g)));
                        }});
  }
  if (h0.tracked()) {
    n->edges.push_back({h0.node(), [back](const std::any& g, autodiff::node& in) {
                          back->run(autodiff::held_gradient<Seq>(g));
                          autodiff::accumulate<HK>(in, std::move(*back->dh0));
                        }});
  }
  if (c0.tracked()) {
    n->edges.push_back({c0.node(), [back](const std::any& g, autodiff::node& in) {
                          back->run(autodiff::held_gradient<Seq>(g));
                          autodiff::accumulate<CK>(in, std::move(*back->dc0));
                        }});
  }
  add_in_place_edge<Seq>(*n, *w, [back](const Seq& dy, auto& dw) { back->add_weight_gradient(dy, dw); });
  ys.set_node(std::move(n));
  return ys;
}

}  // namespace lstm_detail

// A weight as a sequence of steps uses it. Make it once, before the first
// step: the steps' gradients add up in it as partial sums over each
// device's part of the batch, and backward allreduces them over the batch's
// axes once, after the last step, instead of once per step.
//
//   const typemesh::lstm_weight w0_steps(w0);
//   for (...) state = typemesh::lstm_step(x_t, state.h, state.c, w0_steps);
template <class W>
  requires is_tensor<W>
class lstm_weight {
 public:
  using tensor_type = W;

  explicit lstm_weight(const W& w) : sum_(std::make_shared<sum_t>()) {
    used_ = std::make_shared<const W>(
        record(w.detached(), "lstm weight (steps' gradients summed over the batch)",
               gradient_of(w, [sum = sum_](const W& partial) {
                 W g = partial.detached();
                 if (sum->known && g.holds_data()) {
                   group grp = g.mesh().group_along(g.device(), sum->axes);
                   if (grp.size() > 1) allreduce_in_place(g, grp);
                 }
                 return g;
               })));
  }

  const W& value() const { return *used_; }
  const std::shared_ptr<const W>& shared() const { return used_; }

  // The weight with K (its rows: the dim it shares with the input) first in
  // memory, as the cell's GEMMs read it: the weight itself when it is
  // declared [K, N], else a transposed copy made at the first step and
  // recorded, so every step's gradient reaches the weight through it.
  template <class K, class N>
  auto k_first() const {
    if constexpr (shape_index_of<typename W::shape_type, K> == 0) {
      return used_;
    } else {
      using kn_t = decltype(lstm_detail::permute<shape<K, N>>(std::declval<const W&>()));
      if (!k_first_) k_first_ = std::make_shared<const kn_t>(lstm_detail::permute<shape<K, N>>(*used_));
      return std::static_pointer_cast<const kn_t>(k_first_);
    }
  }

  // A step whose batch-like dims are split over `axes` uses the weight.
  void used_with(const std::array<bool, W::mesh_type::rank>& axes) const {
    if (!sum_->known) {
      sum_->known = true;
      sum_->axes = axes;
    } else if (sum_->axes != axes) {
      throw error(detail::cat("lstm_weight: steps whose inputs split their batch-like dims over different mesh "
                              "axes use one weight on ", used_->mesh().describe(),
                              "; its gradient is summed over one set of axes, so lay the inputs out alike"));
    }
  }

 private:
  using sum_t = lstm_detail::batch_sum<W::mesh_type::rank>;
  std::shared_ptr<const W> used_;
  std::shared_ptr<sum_t> sum_;
  mutable std::shared_ptr<const void> k_first_;  // k_first()'s copy, when W is [N, K]
};

template <class T>
inline constexpr bool is_lstm_weight = false;
template <class W>
inline constexpr bool is_lstm_weight<lstm_weight<W>> = true;

namespace lstm_detail {
template <class W>
struct weight_tensor {
  using type = W;
};
template <class W>
struct weight_tensor<lstm_weight<W>> {
  using type = W;
};
template <class W>
using weight_tensor_t = typename weight_tensor<W>::type;
}  // namespace lstm_detail

// One LSTM step on the weight's mesh: (h', c') from the input x_t, the state
// (h, c) and the weight w (a tensor, or an lstm_weight shared by the steps of
// a sequence). h' has x_t's type, c' c's; a recorded operation with its own
// gradient.
template <class X, class H, class C, class WArg>
  requires is_tensor<X>
auto lstm_step(const X& x_t, const H& h, const C& c, const WArg& w) {
  using W = lstm_detail::weight_tensor_t<WArg>;
  constexpr bool ok = lstm_detail::check_step<X, W, H, C>();
  if constexpr (!ok) {
    return diagnostic::after_failure<lstm_state<X, X>>();
  } else if constexpr (!is_lstm_weight<WArg>) {
    return lstm_step(x_t, h, c, lstm_weight<W>(w));
  } else {
    using r = lstm_detail::roles<X, W>;
    using h_t = typename r::h_t;
    using c_t = typename r::c_t;
    const h_t& hx = lstm_detail::as_type<h_t>(h);
    const c_t& cx = lstm_detail::as_type<c_t>(c);
    lstm_detail::check_step_sizes<r>(x_t, hx, cx, w.value());
    w.used_with(r::batch_axes());

    using xk = typename r::x_kernel;
    const auto xh = lstm_detail::interleave<typename r::k>(lstm_detail::in_order<xk>(x_t),
                                                           lstm_detail::in_order<xk>(hx));
    const auto state = lstm_detail::cell<typename r::k_axis, typename r::n_axis, typename r::state_kernel>(
        xh, lstm_detail::in_order<typename r::c_kernel>(cx), w.template k_first<typename r::k, typename r::n>());
    // h' from n's axis to k's, on the same mesh (see the top of this file).
    auto h_new = replace_mesh<typename r::LX>(lstm_detail::part_of<typename r::hn_kernel, 0>(state), x_t.mesh());
    return lstm_state<h_t, c_t>{lstm_detail::to_order<h_t>(std::move(h_new)),
                                lstm_detail::to_order<c_t>(lstm_detail::part_of<typename r::c_kernel, 1>(state))};
  }
}

// x at time step t: x without its Time dim. Its gradient is added into x's
// in place (no x-sized temporary per step).
template <class Time, class T, class S, class L, class M>
auto time_step(const tensor<T, S, L, M>& x, std::int64_t t) {
  using X = tensor<T, S, L, M>;
  using Y = tensor<T, shape_without<S, Time>, L, M>;
  if constexpr (!lstm_detail::check_time<Time, X>()) {
    return diagnostic::after_failure<X>();
  } else {
    const std::int64_t steps = x.shape().template size<Time>();
    if (t < 0 || t >= steps) {
      throw shape_error(detail::cat("time_step: step ", t, " of ", Time::name, "=", steps, " in ",
                                    x.shape().describe()));
    }
    Y out(x.mesh(), shape_from<shape_without<S, Time>>(x.shape()), uninitialized);
    const auto e = lstm_detail::around<Time, S>(x.local_extent());
    if (x.holds_data()) {
      backend::copy_box(x.space(), x.data(), backend::region<3>{e, {0, t, 0}}, out.data(),
                        backend::region<3>{{e[0], 1, e[2]}, {}}, {e[0], 1, e[2]});
    }
    if (!autodiff::recording() || !x.tracked()) return out;
    auto n = autodiff::make_node("lstm time step");
    lstm_detail::add_in_place_edge<Y>(*n, x, [t](const Y& dy, auto& dx) {
      const auto e = lstm_detail::around<Time, S>(dx.local_extent());
      backend::lstm_add_step_into_sequence(dx.space(), dy.data(), dx.data(), backend::lstm_sequence{e[0], e[1], e[2]},
                                           t);
    });
    out.set_node(std::move(n));
    return out;
  }
}

// The steps stacked along the one dim of Shape that they lack (the time
// dim, of size steps.size()), in Shape's order; laid out as the steps.
template <class Shape, class T, class SH, class L, class M>
auto stack_steps(const std::vector<tensor<T, SH, L, M>>& steps) {
  using H = tensor<T, SH, L, M>;
  using Y = tensor<T, Shape, L, M>;
  constexpr bool adds_one_dim = Shape::rank == SH::rank + 1 && shape_minus<SH, Shape>::rank == 0;
  constexpr bool ok = diagnostic::stack_steps_adds_not_one_dim<Shape, SH, !adds_one_dim>::passed;
  if constexpr (!ok) {
    return diagnostic::after_failure<H>();
  } else {
    using Time = typename lstm_detail::first_dim<shape_minus<Shape, SH>>::type;
    if (steps.empty()) throw shape_error(detail::cat("stack_steps: no steps to stack along ", Time::name));
    auto sizes = std::array<std::int64_t, Shape::rank>{};
    const auto step_shape = steps.front().shape();
    [&]<class... Ds>(type_list<Ds...>) {
      std::size_t i = 0;
      ((sizes[i++] = std::is_same_v<Ds, Time> ? static_cast<std::int64_t>(steps.size())
                                              : lstm_detail::size_or_zero<Ds>(step_shape)),
       ...);
    }(dims_of<Shape>{});
    for (const auto& h : steps) {
      if (!(h.shape() == step_shape) || !(h.mesh() == steps.front().mesh())) {
        throw shape_error(detail::cat("stack_steps: a step of shape ", h.shape().describe(), " on ",
                                      h.mesh().describe(), " among steps of shape ", step_shape.describe(), " on ",
                                      steps.front().mesh().describe()));
      }
    }
    Y out(steps.front().mesh(), Shape(sizes), uninitialized);
    const auto e = lstm_detail::around<Time, Shape>(out.local_extent());
    if (out.holds_data()) {
      for (std::size_t t = 0; t < steps.size(); ++t) {
        backend::copy_box(out.space(), steps[t].data(), backend::region<3>{{e[0], 1, e[2]}, {}}, out.data(),
                          backend::region<3>{e, {0, static_cast<std::int64_t>(t), 0}}, {e[0], 1, e[2]});
      }
    }
    bool any_tracked = false;
    for (const auto& h : steps) any_tracked = any_tracked || h.tracked();
    if (!autodiff::recording() || !any_tracked) return out;
    auto n = autodiff::make_node("lstm steps stacked");
    for (std::size_t t = 0; t < steps.size(); ++t) {
      lstm_detail::add_in_place_edge<Y>(*n, steps[t], [t = static_cast<std::int64_t>(t)](const Y& dy, auto& dh) {
        const auto e = lstm_detail::around<Time, Shape>(dy.local_extent());
        backend::lstm_add_sequence_into_step(dh.space(), dy.data(), dh.data(),
                                             backend::lstm_sequence{e[0], e[1], e[2]}, t);
      });
    }
    out.set_node(std::move(n));
    return out;
  }
}

// A zero state for a layer with weight w (a tensor or an lstm_weight) over
// the sequence x, whose time dim is Time: h and c on w's mesh.
template <class Time, class X, class WArg>
  requires is_tensor<X>
auto lstm_zero_state(const X& x, const WArg& w_arg) {
  using W = lstm_detail::weight_tensor_t<WArg>;
  using T = typename X::value_type;
  if constexpr (!lstm_detail::check_time<Time, X>()) {
    return diagnostic::after_failure<lstm_state<X, X>>();
  } else {
    using XT = tensor<T, shape_without<typename X::shape_type, Time>, typename X::layout_type, typename W::mesh_type>;
    if constexpr (!lstm_detail::check_roles<XT, W>()) {
      return diagnostic::after_failure<lstm_state<X, X>>();
    } else {
      using r = lstm_detail::roles<XT, W>;
      const W& w = [&]() -> const W& {
        if constexpr (is_lstm_weight<WArg>) return w_arg.value();
        else return w_arg;
      }();
      // c has h's sizes: units along n instead of k.
      const auto h_shape = shape_from<typename r::SX>(x.shape());
      const std::int64_t units = h_shape.template size<typename r::k>();
      lstm_detail::check_units_split<typename r::k_axis>(units, w.mesh(), r::k::name);
      lstm_detail::check_units_split<typename r::n_axis>(units, w.mesh(), r::n::name);
      return lstm_state<typename r::h_t, typename r::c_t>{
          typename r::h_t(w.mesh(), h_shape), typename r::c_t(w.mesh(), typename r::c_t::shape_type(h_shape.sizes()))};
    }
  }
}

namespace lstm_detail {

// The layers of lstm<Time>, time step by time step.
template <class Time, class XT, class W, class X, class Weights, class States>
X stack(const X& x, const Weights& weights, const States& initial) {
  const std::size_t layers = std::ranges::size(weights);
  if (layers == 0) throw shape_error("lstm: no weights, so no layers");
  if (std::ranges::size(initial) != layers) {
    throw shape_error(detail::cat("lstm: ", layers, " weights but ", std::ranges::size(initial),
                                  " initial states; give one state per layer"));
  }
  using r = lstm_detail::roles<XT, W>;
  // Made first, so that in backward their batch allreduces run last.
  std::vector<lstm_weight<W>> used;
  std::vector<typename r::state_t> state;
  for (const auto& w : weights) used.emplace_back(w);
  for (const auto& s : initial) state.push_back({s.h, s.c});
  if constexpr (sequence_path<r, W>) {
    // Layer by layer, each one operation over all steps, time-major.
    using seq_t = tensor<typename r::T, shape_prepend<shape_append<typename r::batch_shape, typename r::k>, Time>,
                         typename r::LX, typename r::M>;
    const auto x_t_shape = shape_from<typename r::SX>(x.shape());
    for (std::size_t l = 0; l < layers; ++l) {
      check_step_sizes<r>(x_t_shape, x.mesh(), state[l].h, state[l].c, used[l].value());
    }
    seq_t seq = in_order<seq_t>(x);
    for (std::size_t l = 0; l < layers; ++l) {
      used[l].used_with(r::batch_axes());
      seq = sequence_layer(seq, in_order<typename r::x_kernel>(state[l].h), in_order<typename r::c_kernel>(state[l].c),
                           used[l].shared());
    }
    return to_order<X>(std::move(seq));
  } else {
    // Step by step, each layer's step one operation (k or n split: every
    // step communicates).
    const std::int64_t steps = x.shape().template size<Time>();
    std::vector<XT> outputs;
    outputs.reserve(static_cast<std::size_t>(steps));
    for (std::int64_t t = 0; t < steps; ++t) {
      XT in = time_step<Time>(x, t);
      for (std::size_t l = 0; l < layers; ++l) {
        state[l] = lstm_step(in, state[l].h, state[l].c, used[l]);
        in = state[l].h;
      }
      outputs.push_back(std::move(in));
    }
    return stack_steps<typename X::shape_type>(outputs);
  }
}
}  // namespace lstm_detail

namespace lstm_detail {
// The stack after its checks; `initial()` gives the states, and is called
// only when the checks passed (so a failed check is the only error).
template <class Time, class X, class Weights, class Initial>
X checked_stack(const X& x, const Weights& weights, Initial initial) {
  using W = weight_tensor_t<std::ranges::range_value_t<Weights>>;
  using T = typename X::value_type;
  if constexpr (!check_time<Time, X>()) {
    return diagnostic::after_failure<X>();
  } else {
    using XT = tensor<T, shape_without<typename X::shape_type, Time>, typename X::layout_type, typename X::mesh_type>;
    if constexpr (!check_roles<XT, W>()) return diagnostic::after_failure<X>();
    else return stack<Time, XT, W>(x, weights, initial.template operator()<XT, W>());
  }
}
}  // namespace lstm_detail

// A stack of LSTM layers on x's mesh over the time dim Time: layer 0 reads
// x, layer l + 1 reads layer l's h; y holds the top layer's h after each
// step, as x's type. `weights` holds one weight per layer, all of one type;
// `initial` one state per layer (lstm_zero_state makes them).
template <class Time, class X, class Weights, class States>
  requires is_tensor<X> && std::ranges::range<Weights>
X lstm(const X& x, const Weights& weights, const States& initial) {
  return lstm_detail::checked_stack<Time>(x, weights, [&]<class, class>() -> const States& { return initial; });
}

// The same from zero initial states.
template <class Time, class X, class Weights>
  requires is_tensor<X> && std::ranges::range<Weights>
X lstm(const X& x, const Weights& weights) {
  return lstm_detail::checked_stack<Time>(x, weights, [&]<class XT, class W>() {
    std::vector<typename lstm_detail::roles<XT, W>::state_t> zero;
    for (const auto& w : weights) zero.push_back(lstm_zero_state<Time>(x, w));
    return zero;
  });
}

// --- Weights in the standard layout --------------------------------------------------

namespace lstm_detail {

TYPEMESH_DIAGNOSTIC(standard_weight_needs_k_and_one_more_dim, (class K, class Shape), (K, Shape),
                    "lstm_weight_from_standard<K> / lstm_weight_to_standard<K>: the weight must have two dims, "
                    "K (input then hidden units) and the gate dim; K and the weight's shape are the arguments "
                    "above");

// Maps between the standard and the interleaved weight; Interleave says which
// way. Standard: row s*u + v is unit v of x (s = 0) or h (s = 1); column
// q*u + v is gate q of unit v. Interleaved: row 2v + s, column 4v + q.
template <class K, bool Interleave, class T, class S>
host_tensor<T, S> convert_weight(const host_tensor<T, S>& in, const char* op) {
  constexpr bool ok =
      standard_weight_needs_k_and_one_more_dim<K, S, !(S::rank == 2 && shape_contains<S, K>)>::passed;
  if constexpr (!ok) {
    return diagnostic::after_failure<host_tensor<T, S>>();
  } else {
    using N = typename first_dim<shape_without<S, K>>::type;
    const std::int64_t rows = in.shape().template size<K>(), cols = in.shape().template size<N>();
    const std::int64_t u = rows / 2;
    if (rows % 2 != 0 || cols != 4 * u) {
      throw shape_error(detail::cat(op, ": the weight has shape ", in.shape().describe(), "; an LSTM of u units has ",
                                    K::name, "=2u (input then hidden units) and ", N::name,
                                    "=4u (gates i, f, g, o)"));
    }
    host_tensor<T, S> out(in.shape());
    auto at = [](std::int64_t k, std::int64_t n) {
      std::array<std::int64_t, 2> i{};
      i[S::template index_of<K>] = k;
      i[S::template index_of<N>] = n;
      return i;
    };
    for (std::int64_t s = 0; s < 2; ++s)
      for (std::int64_t v = 0; v < u; ++v)
        for (std::int64_t q = 0; q < 4; ++q)
          for (std::int64_t w = 0; w < u; ++w) {
            const auto standard = at(s * u + v, q * u + w), interleaved = at(2 * v + s, 4 * w + q);
            if constexpr (Interleave) out[interleaved] = in[standard];
            else out[standard] = in[interleaved];
          }
    return out;
  }
}

}  // namespace lstm_detail

// A standard [x | h] x [i | f | g | o] weight (the order PyTorch's and
// TensorFlow's LSTMs use, with rows the input units then the hidden units,
// and columns the i, f, g, o blocks of units; PyTorch's weight_ih and
// weight_hh stacked side by side and transposed) in the per-unit layout of
// lstm_step. K names the rows' dim, whatever its position.
template <class K, class T, class S>
host_tensor<T, S> lstm_weight_from_standard(const host_tensor<T, S>& standard) {
  return lstm_detail::convert_weight<K, true>(standard, "lstm_weight_from_standard");
}

// The reverse: lstm_step's per-unit weight as a standard [x | h] x [i | f | g | o] matrix.
template <class K, class T, class S>
host_tensor<T, S> lstm_weight_to_standard(const host_tensor<T, S>& interleaved) {
  return lstm_detail::convert_weight<K, false>(interleaved, "lstm_weight_to_standard");
}

}  // namespace typemesh

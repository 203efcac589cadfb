// The RNNLM's two-layer LSTM: layer 0 on one mesh, layer 1 on another, the
// hidden state of layer 0 moving to layer 1's mesh after every time step.
//
//   // x: [batch, time, k] on lstm0, k = units; w0 on lstm0, w1 on lstm1: [k = 2*units, n = 4*units]
//   auto y = typemesh::lstm_two_layer(x, w0, w1);                    // zero initial states
//   auto y = typemesh::lstm_two_layer(x, w0, w1, typemesh::lstm_states{h0, c0, h1, c1});
//   // y: [batch, time, k] on lstm1, laid out as x
//
// Layouts (as in the reference's RNNOperation): batch may be split over one
// axis, n (gate columns, hidden units out) over a second, k (input and hidden
// units in) over a third, each of any size including 1. Time is never split.
// The initial states are h: [batch, k = units] laid out like x, and
// c: [batch, n = units] laid out like the gates.
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
// units, which makes it the same for every number of blocks; a standard
// [x | h] x [i | f | g | o] weight matrix is a fixed permutation of it.
// The number of units must be divisible by the sizes of the k and n axes.
//
// One time step of one layer, with k over axis K and n over axis N:
//   xh = x_t and h interleaved by unit          (local)
//   z  = xh . w, partial over k                 -> allreduce over K
//   c' = f*c + i*g, h' = o*tanh(c')             (local: gates of a unit sit together)
//   h' leaves the step split along N (it is indexed by n) but the next step
//   multiplies it along k, so it must end up split along K and replicated
//   along N. That is a relayout of one dim from axis N to axis K. The
//   reference does it as allconcat over N then allsplit over K; here it is
//   the point-to-point transfer plan (convert/transfer.hpp), which moves
//   only what each device lacks: with N and K of equal size it is a
//   transpose of the (N, K) grid, where a device receives its 1/|K| of the
//   units (nothing on the diagonal) instead of the allgather's (|N|-1)/|N|.
//   With K of size 1 it is that allgather, with N of size 1 a local slice.
// Layer 0's h' is moved to layer 1's mesh from the same state (one transfer,
// in layer 1's layout), not after the relayout on layer 0's mesh.
//
// Pipelining. Every device runs the whole loop; a device outside a mesh
// skips that mesh's work (its tensors are empty and collectives on it return
// at once). Each step's collectives stay within one mesh, and the moves
// between meshes are buffered point-to-point sends. So on disjoint meshes a
// device of layer 0's mesh never waits for layer 1's: it runs ahead, and
// layer 1 works on step t while layer 0 works on step t + 1. Backward runs
// the tape in reverse, so the pipeline runs the other way: layer 1's
// devices never wait for layer 0's, and layer 0 works on step t while layer
// 1 works on t - 1. Nothing can hang: each device's receives match sends
// that the sender makes unconditionally, in the same program order.
//
// Gradients. Each step of a layer is one fused operation with its own
// gradient (GEMM, allreduce, gates): composed of einsum and elementwise ops,
// a step would need a dozen nodes and gate slices that the ops lack, store
// every intermediate, and copy the weight into each einsum's record. Steps
// are recorded one by one so that the pipeline above also holds backward.
// A step's weight gradient is left as a partial sum over this device's part
// of the batch: the steps' partial sums add up in one intermediate copy of
// the weight, which allreduces them over the batch axis once, after the
// last step (as the reference's RNNGradOperation does), not once per step.
// x's gradient is added into place step by step (no x-sized temporaries).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/blas.hpp"
#include "typemesh/convert/replace_mesh.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/layout.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

// The initial states of both layers, as the reference passes them
// (states0 + states1): h in x's layout, c in the gates' layout; layer 0's on
// its mesh, layer 1's on the other.
template <class H0, class C0, class H1, class C1>
struct lstm_states {
  H0 h0;
  C0 c0;
  H1 h1;
  C1 c1;
};

namespace lstm_detail {

// A step's output holds h and c of each unit side by side: [batch, n, part].
struct part : dim<"lstm_part"> {};

// layout<D(A)>, or layout<> when A is void (D whole).
template <class D, class A>
struct entry {
  using type = layout<D(A)>;
};
template <class D>
struct entry<D, void> {
  using type = layout<>;
};
template <class D, class A>
using entry_t = typename entry<D, A>::type;
template <class... Ls>
using join = typename detail::concat_layouts<layout<>, Ls...>::type;

// Every type one call involves, from the types of x, w0 and w1.
template <class X, class W0, class W1>
struct types {
  static_assert(diagnostic::fires<X, W0, W1>,
                "typemesh: lstm_two_layer takes x: [batch, time, k] and w0, w1: [k, n] (k of x and of the weights "
                "the same dim), with one element type; the three tensor types are the arguments above");
};

template <class T, class B, class Tm, class K, class LX, class M0, class N, class LW, class LW1, class M1>
struct types<tensor<T, shape<B, Tm, K>, LX, M0>, tensor<T, shape<K, N>, LW, M0>, tensor<T, shape<K, N>, LW1, M1>> {
  using k = K;
  using n = N;

  using batch_axis = typename LX::template axis_of<B>;  // void: whole
  using k_axis = typename LX::template axis_of<K>;
  using n_axis = typename LW::template axis_of<N>;

  static_assert(!LX::template splits<Tm>,
                "typemesh: lstm_two_layer: x's time dim (its second) must not be split; the layers walk along it");
  // k on the same axis in x and w, and no axis splitting two dims.
  static_assert(ops_detail::compatible<shape<B, Tm, K>, LX, shape<K, N>, LW>());
  static_assert(std::is_same_v<canonical<shape<K, N>, LW1>, canonical<shape<K, N>, LW>>,
                "typemesh: lstm_two_layer: w1 must place k and n on the same axes as w0 (both layers split batch, "
                "n and k over the same axes, sized per mesh)");

  using h_layout = join<entry_t<B, batch_axis>, entry_t<K, k_axis>>;   // h, x_t, xh: units along k
  using c_layout = join<entry_t<B, batch_axis>, entry_t<N, n_axis>>;   // c, gates: units along n
  using hn_layout = join<entry_t<B, batch_axis>, entry_t<K, n_axis>>;  // h' as a step makes it

  template <class M>
  using h_t = tensor<T, shape<B, K>, h_layout, M>;
  template <class M>
  using c_t = tensor<T, shape<B, N>, c_layout, M>;
  template <class M>
  using state_t = tensor<T, shape<B, N, part>, c_layout, M>;
  template <class M>
  using hn_t = tensor<T, shape<B, K>, hn_layout, M>;

  using x_t = tensor<T, shape<B, Tm, K>, LX, M0>;
  using w0_t = tensor<T, shape<K, N>, LW, M0>;
  using w1_t = tensor<T, shape<K, N>, LW1, M1>;
  using y_t = tensor<T, shape<B, Tm, K>, LX, M1>;
  using states_t = lstm_states<h_t<M0>, c_t<M0>, h_t<M1>, c_t<M1>>;
};

// --- Checks ----------------------------------------------------------------------

// Units must split into whole blocks over axis A of the mesh (as k or n).
template <class A, class M>
void check_units_split(std::int64_t units, const M& m, const char* dim_role) {
  if constexpr (!std::is_void_v<A>) {
    const int parts = m.template size<A>();
    if (units % parts != 0) {
      throw shape_error(detail::cat("lstm_two_layer: ", units, " units do not split over axis ", A::name, " of size ",
                                    parts, " (which splits ", dim_role, ") on ", m.describe(),
                                    "; each device needs whole units"));
    }
  }
}

template <class State>
void check_state(const char* what, const State& s, std::int64_t batch, std::int64_t units,
                 const typename State::mesh_type& m) {
  using S = typename State::shape_type;
  if (!(s.shape() == S{batch, units})) {
    throw shape_error(detail::cat("lstm_two_layer: initial state ", what, " has shape ", s.shape().describe(),
                                  "; it must be ", S{batch, units}.describe(), " (batch, units)"));
  }
  if (!(s.mesh() == m)) {
    throw device_error(detail::cat("lstm_two_layer: initial state ", what, " lives on ", s.mesh().describe(),
                                   ", not on its layer's mesh ", m.describe()));
  }
}

// x and the weights: sizes, meshes, and units that split into whole blocks.
template <class Ty>
void check_weights(const typename Ty::x_t& x, const typename Ty::w0_t& w0, const typename Ty::w1_t& w1) {
  using K = typename Ty::k;
  using N = typename Ty::n;
  const std::int64_t units = x.shape().template size<K>();
  auto check_w = [&](const char* name, const auto& w) {
    if (w.shape().template size<K>() != 2 * units || w.shape().template size<N>() != 4 * units) {
      throw shape_error(detail::cat("lstm_two_layer: ", name, " has shape ", w.shape().describe(), "; with x of shape ",
                                    x.shape().describe(), " (", units, " units) it must have ", K::name, "=", 2 * units,
                                    " (input and hidden units) and ", N::name, "=", 4 * units,
                                    " (four gates per unit)"));
    }
  };
  check_w("w0", w0);
  check_w("w1", w1);
  if (!(x.mesh() == w0.mesh())) {
    throw device_error(detail::cat("lstm_two_layer: x lives on ", x.mesh().describe(), " but w0 on ",
                                   w0.mesh().describe(), "; layer 0 runs where w0 lives"));
  }
  check_units_split<typename Ty::k_axis>(units, w0.mesh(), "k");
  check_units_split<typename Ty::n_axis>(units, w0.mesh(), "n");
  check_units_split<typename Ty::k_axis>(units, w1.mesh(), "k");
  check_units_split<typename Ty::n_axis>(units, w1.mesh(), "n");
}

template <class Ty>
void check_states(const typename Ty::x_t& x, const typename Ty::w0_t& w0, const typename Ty::w1_t& w1,
                  const typename Ty::states_t& s) {
  const std::int64_t units = x.shape()[2], batch = x.shape()[0];
  check_state("h0", s.h0, batch, units, w0.mesh());
  check_state("c0", s.c0, batch, units, w0.mesh());
  check_state("h1", s.h1, batch, units, w1.mesh());
  check_state("c1", s.c1, batch, units, w1.mesh());
}

// --- Small recorded operations -----------------------------------------------------

// Sums partial values over axis A (void: nothing to sum).
template <class A, class Tensor>
void allreduce_along(Tensor& t) {
  if constexpr (!std::is_void_v<A>) {
    if (!t.holds_data()) return;
    group g = t.mesh().template group_along<A>(t.device());
    if (g.size() > 1) this_device().allreduce(g, t.local());
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
                       if (!in.grad.has_value()) in.grad = In(m, s);
                       add_into(std::any_cast<const Out&>(g), std::any_cast<In&>(in.grad));
                     }});
}

// The weight as the steps use it: a copy whose gradient arrives as partial
// sums over this device's part of the batch, one from each step, and is
// allreduced over the batch axis once.
template <class BatchAxis, class W>
std::shared_ptr<const W> weight_for_steps(const W& w) {
  W used = record(w.detached(), "lstm weight (steps' gradients summed over the batch axis)",
                  gradient_of(w, [](const W& partial) {
                    W g = partial.detached();
                    allreduce_along<BatchAxis>(g);
                    return g;
                  }));
  return std::make_shared<const W>(std::move(used));
}

// x[:, t, :] as [batch, k].
template <class H, class X>
H time_step(const X& x, std::int64_t t) {
  H out(x.mesh(), typename H::shape_type{x.shape()[0], x.shape()[2]}, uninitialized);
  const auto e = x.local_extent();  // [batch, time, k] here
  if (x.holds_data()) {
    backend::copy_box(x.local().data(), backend::region<3>{e, {0, t, 0}}, out.local().data(),
                      backend::region<3>{{e[0], 1, e[2]}, {}}, {e[0], 1, e[2]});
  }
  if (!autodiff::recording() || !x.tracked()) return out;
  auto n = autodiff::make_node("lstm time step");
  add_in_place_edge<H>(*n, x, [t](const H& dy, X& dx) {
    const auto e = dx.local_extent();
    auto g = dx.local();
    auto d = dy.local();
    for (std::int64_t b = 0; b < e[0]; ++b)
      for (std::int64_t i = 0; i < e[2]; ++i) g[(b * e[1] + t) * e[2] + i] += d[b * e[2] + i];
  });
  out.set_node(std::move(n));
  return out;
}

// The steps' outputs as [batch, time, k].
template <class Y, class H>
Y stack_time(const std::vector<H>& steps, const typename Y::shape_type& s, const typename Y::mesh_type& m) {
  Y out(m, s);
  const auto e = out.local_extent();
  if (out.holds_data()) {
    for (std::size_t t = 0; t < steps.size(); ++t) {
      const std::int64_t tt = static_cast<std::int64_t>(t);
      backend::copy_box(steps[t].local().data(), backend::region<3>{{e[0], 1, e[2]}, {}}, out.local().data(),
                        backend::region<3>{e, {0, tt, 0}}, {e[0], 1, e[2]});
    }
  }
  bool any_tracked = false;
  for (const auto& h : steps) any_tracked = any_tracked || h.tracked();
  if (!autodiff::recording() || !any_tracked) return out;
  auto n = autodiff::make_node("lstm outputs over time");
  for (std::size_t t = 0; t < steps.size(); ++t) {
    add_in_place_edge<Y>(*n, steps[t], [t = static_cast<std::int64_t>(t)](const Y& dy, H& dh) {
      const auto e = dy.local_extent();
      auto g = dh.local();
      auto d = dy.local();
      for (std::int64_t b = 0; b < e[0]; ++b)
        for (std::int64_t i = 0; i < e[2]; ++i) g[b * e[2] + i] += d[(b * e[1] + t) * e[2] + i];
    });
  }
  out.set_node(std::move(n));
  return out;
}

// [x_t, h] interleaved by unit: column 2u is x_t's unit u, 2u + 1 is h's.
// Both are split along k alike, so each device interleaves its own units.
template <class H>
H interleave(const H& x, const H& h) {
  using S = typename H::shape_type;
  H out(x.mesh(), S{x.shape()[0], 2 * x.shape()[1]}, uninitialized);
  auto o = out.local();
  auto a = x.local(), b = h.local();
  for (std::size_t r = 0; r < a.size(); ++r) o[2 * r] = a[r], o[2 * r + 1] = b[r];
  auto half = [](std::size_t which) {
    return [which](const H& dxh) {
      H g(dxh.mesh(), S{dxh.shape()[0], dxh.shape()[1] / 2});
      auto gv = g.local();
      auto d = dxh.local();
      for (std::size_t r = 0; r < gv.size(); ++r) gv[r] = d[2 * r + which];
      return g;
    };
  };
  return record(std::move(out), "lstm input and hidden", gradient_of(x, half(0)), gradient_of(h, half(1)));
}

// The first state: c0 with an unused h beside it.
template <class State, class C>
State initial_state(const C& c0) {
  using S = typename State::shape_type;
  State out(c0.mesh(), S{c0.shape()[0], c0.shape()[1], 2});
  auto o = out.local();
  auto c = c0.local();
  for (std::size_t r = 0; r < c.size(); ++r) o[2 * r + 1] = c[r];
  return record(std::move(out), "lstm initial state", gradient_of(c0, [](const State& dy) {
                  C g(dy.mesh(), typename C::shape_type{dy.shape()[0], dy.shape()[1]});
                  auto gv = g.local();
                  auto d = dy.local();
                  for (std::size_t r = 0; r < gv.size(); ++r) gv[r] = d[2 * r + 1];
                  return g;
                }));
}

// h' of a state, with its unit dim named k (it multiplies k next) but still
// split as n is: the input of the relayout to the k layout.
template <class HN, class State>
HN hidden_of(const State& s) {
  HN out(s.mesh(), typename HN::shape_type{s.shape()[0], s.shape()[1]}, uninitialized);
  auto o = out.local();
  auto v = s.local();
  for (std::size_t r = 0; r < o.size(); ++r) o[r] = v[2 * r];
  return record(std::move(out), "lstm hidden state", gradient_of(s, [](const HN& dy) {
                  State g(dy.mesh(), typename State::shape_type{dy.shape()[0], dy.shape()[1], 2});
                  auto gv = g.local();
                  auto d = dy.local();
                  for (std::size_t r = 0; r < d.size(); ++r) gv[2 * r] = d[r];
                  return g;
                }));
}

// --- The fused step ------------------------------------------------------------------

template <class T>
T sigmoid(T v) {
  return T{1} / (T{1} + std::exp(-v));
}

// What a step keeps for its gradient, per local (batch row, unit): the four
// gate activations i, f, g, o, and c (before) and tanh(c') (after).
template <class T>
struct step_memory {
  backend::storage<T> gates;  // [b, u, 4]
  backend::storage<T> cells;  // [b, u, 2]: c, tanh(c')
};

// d(pre-activations) [b, u, 4] and d(c) [b, u] from d(h', c') [b, u, 2].
template <class T>
void gate_gradients(const step_memory<T>& mem, std::span<const T> dstate, T* dz, T* dc_prev) {
  const auto gates = backend::view(mem.gates), cells = backend::view(mem.cells);
  for (std::size_t r = 0; r < dstate.size() / 2; ++r) {
    const T* q = gates.data() + 4 * r;
    const T i = q[0], f = q[1], g = q[2], o = q[3];
    const T c = cells[2 * r], tc = cells[2 * r + 1];
    const T dh = dstate[2 * r];
    const T dc = dstate[2 * r + 1] + dh * o * (T{1} - tc * tc);
    T* z = dz + 4 * r;
    z[0] = dc * g * i * (T{1} - i);
    z[1] = dc * c * f * (T{1} - f);
    z[2] = dc * i * (T{1} - g * g);
    z[3] = dh * tc * o * (T{1} - o);
    if (dc_prev) dc_prev[r] = dc * f;
  }
}

// One LSTM step: state' = cell(xh, state, w), with KA the axis splitting k
// and NA the one splitting n (void: whole).
template <class KA, class NA, class XH, class State, class W>
State step(const XH& xh, const State& prev, const std::shared_ptr<const W>& w) {
  using T = typename State::value_type;
  State out(prev.mesh(), prev.shape(), uninitialized);
  auto mem = std::make_shared<step_memory<T>>();
  const std::int64_t rows = xh.local_extent()[0], kl = xh.local_extent()[1];
  const std::int64_t units = out.local_extent()[1], nl = 4 * units;
  if (xh.holds_data()) {
    // z = xh . w: partial sums over this device's k, then over all of k.
    mem->gates.resize(static_cast<std::size_t>(rows * nl));
    T* z = backend::view(mem->gates).data();
    backend::share_blas_threads(this_device().count());
    backend::gemm<T>(false, false, rows, nl, kl, T{1}, xh.local().data(), kl, w->local().data(), nl, T{0}, z, nl);
    if constexpr (!std::is_void_v<KA>) {
      group g = xh.mesh().template group_along<KA>(xh.device());
      if (g.size() > 1) this_device().allreduce(g, std::span<T>(z, mem->gates.size()));
    }
    // The four gates of each unit sit together, on this device.
    mem->cells.resize(static_cast<std::size_t>(rows * units * 2));
    auto cells = backend::view(mem->cells);
    auto o = out.local();
    auto p = prev.local();
    for (std::int64_t r = 0; r < rows * units; ++r) {
      T* q = z + 4 * r;
      const T i = sigmoid(q[0]), f = sigmoid(q[1]), g = std::tanh(q[2]), og = sigmoid(q[3]);
      const T c = p[2 * r + 1];
      const T c_new = f * c + i * g, tc = std::tanh(c_new);
      q[0] = i, q[1] = f, q[2] = g, q[3] = og;
      cells[2 * r] = c, cells[2 * r + 1] = tc;
      o[2 * r] = og * tc, o[2 * r + 1] = c_new;
    }
  }
  // Each gradient recomputes d(pre-activations) from d(h', c'): a few
  // operations per element, against a GEMM each.
  auto dz_of = [mem](const State& dy, T* dc_prev) {
    backend::storage<T> dz(mem->gates.size());
    gate_gradients<T>(*mem, dy.local(), backend::view(dz).data(), dc_prev);
    return dz;
  };
  // d(xh) = dz . w^T: partial sums over this device's n, then over all of n.
  auto grad_xh = [dz_of, w, xs = xh.shape(), rows, kl, nl](const State& dy) {
    XH dxh(dy.mesh(), xs, uninitialized);
    if (dy.holds_data()) {
      const auto dz = dz_of(dy, nullptr);
      backend::share_blas_threads(this_device().count());
      backend::gemm<T>(false, true, rows, kl, nl, T{1}, backend::view(dz).data(), nl, w->local().data(), nl, T{0},
                       dxh.local().data(), kl);
      allreduce_along<NA>(dxh);
    }
    return dxh;
  };
  // d(c) = dc * f. The previous state's h is not used here: it came in
  // through xh.
  auto grad_prev = [dz_of](const State& dy) {
    State g(dy.mesh(), dy.shape());
    if (dy.holds_data()) {
      backend::storage<T> dc(dy.local().size() / 2);
      dz_of(dy, backend::view(dc).data());
      auto gv = g.local();
      auto d = backend::view(dc);
      for (std::size_t r = 0; r < d.size(); ++r) gv[2 * r + 1] = d[r];
    }
    return g;
  };
  // d(w) = xh^T . dz over this device's part of the batch only: the
  // partial sums of all steps are allreduced once (weight_for_steps).
  std::optional<XH> xv;  // kept only when w's gradient is wanted
  if (w->tracked() && autodiff::recording()) xv = xh.detached();
  auto grad_w = [dz_of, xv = std::move(xv), ws = w->shape(), rows, kl, nl](const State& dy) {
    W g(xv->mesh(), ws, uninitialized);
    if (dy.holds_data()) {
      const auto dz = dz_of(dy, nullptr);
      backend::share_blas_threads(this_device().count());
      backend::gemm<T>(true, false, kl, nl, rows, T{1}, xv->local().data(), kl, backend::view(dz).data(), nl, T{0},
                       g.local().data(), nl);
    }
    return g;
  };
  return record(std::move(out), "lstm step", gradient_of(xh, std::move(grad_xh)),
                gradient_of(prev, std::move(grad_prev)), gradient_of(*w, std::move(grad_w)));
}

}  // namespace lstm_detail

// The states of both layers, all zero.
template <class X, class W0, class W1>
typename lstm_detail::types<X, W0, W1>::states_t lstm_zero_states(const X& x, const W0& w0, const W1& w1) {
  using ty = lstm_detail::types<X, W0, W1>;
  using M0 = typename W0::mesh_type;
  using M1 = typename W1::mesh_type;
  lstm_detail::check_weights<ty>(x, w0, w1);
  const std::int64_t batch = x.shape()[0], units = x.shape()[2];
  return {typename ty::template h_t<M0>(w0.mesh(), {batch, units}),
          typename ty::template c_t<M0>(w0.mesh(), {batch, units}),
          typename ty::template h_t<M1>(w1.mesh(), {batch, units}),
          typename ty::template c_t<M1>(w1.mesh(), {batch, units})};
}

// The two-layer LSTM over x from the given initial states: y[:, t, :] is
// layer 1's h after step t, on w1's mesh, laid out as x.
template <class X, class W0, class W1, class States>
typename lstm_detail::types<X, W0, W1>::y_t lstm_two_layer(const X& x, const W0& w0, const W1& w1,
                                                           const States& initial) {
  using ty = lstm_detail::types<X, W0, W1>;
  using M0 = typename W0::mesh_type;
  using M1 = typename W1::mesh_type;
  using KA = typename ty::k_axis;
  using NA = typename ty::n_axis;
  using h_layout = typename ty::h_layout;
  using h0_t = typename ty::template h_t<M0>;
  using h1_t = typename ty::template h_t<M1>;
  using hn0_t = typename ty::template hn_t<M0>;
  using hn1_t = typename ty::template hn_t<M1>;
  using state0_t = typename ty::template state_t<M0>;
  using state1_t = typename ty::template state_t<M1>;
  using y_t = typename ty::y_t;

  // The states in the layouts the steps use (the same up to entry order).
  const typename ty::states_t s{initial.h0, initial.c0, initial.h1, initial.c1};
  lstm_detail::check_weights<ty>(x, w0, w1);
  lstm_detail::check_states<ty>(x, w0, w1, s);
  const M0& m0 = w0.mesh();
  const M1& m1 = w1.mesh();
  const std::int64_t steps = x.shape()[1];

  // Recorded first, so that in backward their batch allreduces run last,
  // after every step has added its partial sums.
  const auto w0_steps = lstm_detail::weight_for_steps<typename ty::batch_axis>(w0);
  const auto w1_steps = lstm_detail::weight_for_steps<typename ty::batch_axis>(w1);
  state0_t state0 = lstm_detail::initial_state<state0_t>(s.c0);
  state1_t state1 = lstm_detail::initial_state<state1_t>(s.c1);
  h0_t h0 = s.h0;
  h1_t h1 = s.h1;

  // One loop for both layers, in the order that lets them overlap on
  // disjoint meshes: layer 0's step t, its h sent to layer 1's mesh, then
  // layer 1's step t (which, on layer 0's devices, does nothing).
  std::vector<h1_t> outputs;
  outputs.reserve(static_cast<std::size_t>(steps));
  for (std::int64_t t = 0; t < steps; ++t) {
    const auto x_t = lstm_detail::time_step<h0_t>(x, t);
    state0 = lstm_detail::step<KA, NA>(lstm_detail::interleave(x_t, h0), state0, w0_steps);
    const auto h0_n = lstm_detail::hidden_of<hn0_t>(state0);
    // To layer 1 first, so that its devices can start on step t at once.
    const h1_t in1 = replace_mesh<h_layout>(h0_n, m1);
    if (t + 1 < steps) h0 = replace_mesh<h_layout>(h0_n, m0);  // n's axis -> k's axis

    state1 = lstm_detail::step<KA, NA>(lstm_detail::interleave(in1, h1), state1, w1_steps);
    h1 = replace_mesh<h_layout>(lstm_detail::hidden_of<hn1_t>(state1), m1);
    outputs.push_back(h1);
  }
  return lstm_detail::stack_time<y_t>(outputs, x.shape(), m1);
}

// The same from zero initial states.
template <class X, class W0, class W1>
typename lstm_detail::types<X, W0, W1>::y_t lstm_two_layer(const X& x, const W0& w0, const W1& w1) {
  return lstm_two_layer(x, w0, w1, lstm_zero_states(x, w0, w1));
}

}  // namespace typemesh

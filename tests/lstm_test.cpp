// The LSTM (layers/lstm.hpp): lstm_step, the stack lstm<Time>, and the
// seed's two-layer pipeline written on lstm_step as a program would write
// it. Their outputs equal plain step-by-step loops (one with the per-unit
// weights, one with standard [x | h] x [i | f | g | o] weights converted);
// losses and gradients under batch, n and k splits, on one mesh of devices
// for both layers or on disjoint halves, equal the one-device run and finite
// differences; dims in another order give the same values; on disjoint
// meshes the layers form a pipeline (layer 0's devices never wait for layer
// 1's going forward, nor the other way going backward); the weights'
// gradients are allreduced over the batch once, not once per step.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>
#include <typemesh/layers/lstm.hpp>
#include <utility>

#include "grad_check.hpp"

namespace {
using namespace tt;
using typemesh::import_tensor;
using typemesh::layout;
using typemesh::shape;

struct batch : typemesh::dim<"batch"> {};
struct time_ : typemesh::dim<"time"> {};
struct k : typemesh::dim<"k"> {};
struct n : typemesh::dim<"n"> {};
struct stage : typemesh::axis<"stage"> {};
struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};
struct axis2 : typemesh::axis<"axis2"> {};

using lstm0_mesh = typemesh::mesh<"lstm0", axis0, axis1, axis2>;
using lstm1_mesh = typemesh::mesh<"lstm1", axis0, axis1, axis2>;
// The devices of a run: stage 2 puts the layers on disjoint halves, stage 1
// on the same devices; the other axes are each layer's mesh shape.
using world = typemesh::mesh<"world", stage, axis0, axis1, axis2>;

// The reference's layouts: batch over axis0, n over axis1, k over axis2.
using LX = layout<batch(axis0), k(axis2)>;  // x, y, h
using LW = layout<k(axis2), n(axis1)>;      // weights
using LC = layout<batch(axis0), n(axis1)>;  // c

constexpr int B = 4, T = 3, U = 4;
using SX = shape<batch, time_, k>;
using SW = shape<k, n>;
using SH = shape<batch, k>;
using SC = shape<batch, n>;

// --- The two-layer pipeline, as a program writes it ------------------------------

// Layer 0 on w0's mesh (x's), layer 1 on w1's; layer 0's h moves to layer
// 1's mesh after every step. On disjoint meshes the layers overlap: layer 0
// never waits for layer 1 going forward, nor layer 1 for layer 0 going back.
template <class Time, class X, class W0, class W1, class S0, class S1>
auto two_layer_lstm(const X& x, const W0& w0, const W1& w1, S0 s0, S1 s1) {
  const typemesh::lstm_weight w0_steps(w0);  // gradients allreduced over the batch once
  const typemesh::lstm_weight w1_steps(w1);
  using h1_t = decltype(s1.h);
  std::vector<h1_t> ys;
  for (std::int64_t t = 0; t < x.shape().template size<Time>(); ++t) {
    s0 = typemesh::lstm_step(typemesh::time_step<Time>(x, t), s0.h, s0.c, w0_steps);
    s1 = typemesh::lstm_step(typemesh::replace_mesh<typename h1_t::layout_type>(s0.h, w1.mesh()), s1.h, s1.c,
                             w1_steps);
    ys.push_back(s1.h);
  }
  return typemesh::stack_steps<typename X::shape_type>(ys);  // y lives on w1's mesh
}

// Inputs: x, w0, w1, h0, c0, h1, c1.
std::vector<values> lstm_inputs() {
  return {random_values(B * T * U, 31),
          random_values(8 * U * U, 32, -0.6, 0.6),
          random_values(8 * U * U, 33, -0.6, 0.6),
          random_values(B * U, 34),
          random_values(B * U, 35),
          random_values(B * U, 36),
          random_values(B * U, 37)};
}

// How a case places the layers, beyond the world's sizes (which the
// one-device reference run sets to ones).
struct placement_options {
  std::optional<std::array<int, 3>> layer1_sizes;  // else layer 0's
  bool reverse_layer1 = false;                     // layer 1's devices in reverse order
};

std::pair<lstm0_mesh, lstm1_mesh> layer_meshes(const world& m, const placement_options& opt) {
  const int per_layer = m.device_count() / m.size(0);
  const std::array<int, 3> s0{m.size(1), m.size(2), m.size(3)};
  const auto first = typemesh::devices::range(0, per_layer);
  auto second = m.size(0) == 2 ? typemesh::devices::range(per_layer, per_layer) : first;
  const bool one_device = m.device_count() == 1;
  if (opt.reverse_layer1 && !one_device) std::reverse(second.begin(), second.end());
  const auto s1 = opt.layer1_sizes && !one_device ? *opt.layer1_sizes : s0;
  return {lstm0_mesh(s0, first), lstm1_mesh(s1, second)};
}

// loss = sum(y * c) for a fixed c placed like y: d loss / d y = c.
template <class Y>
auto weighted_sum(const Y& y) {
  auto c = import_tensor<typename Y::layout_type>(
      y.mesh(), host(y.shape(), random_values(static_cast<std::size_t>(y.shape().elements()), 99)));
  return typemesh::reduce_sum(y * c);
}

// The pipeline over the inputs, on the two meshes; every input requires a gradient.
template <class LXc, class LWc>
struct pipeline_run {
  typemesh::tensor<double, SX, LXc, lstm0_mesh> x;
  typemesh::tensor<double, SW, LWc, lstm0_mesh> w0;
  typemesh::tensor<double, SW, LWc, lstm1_mesh> w1;
  typemesh::tensor<double, SH, LX, lstm0_mesh> h0;
  typemesh::tensor<double, SC, LC, lstm0_mesh> c0;
  typemesh::tensor<double, SH, LX, lstm1_mesh> h1;
  typemesh::tensor<double, SC, LC, lstm1_mesh> c1;

  pipeline_run(const lstm0_mesh& m0, const lstm1_mesh& m1, const std::vector<values>& in)
      : x(import_tensor<LXc>(m0, host(SX{B, T, U}, in[0]))),
        w0(import_tensor<LWc>(m0, host(SW{2 * U, 4 * U}, in[1]))),
        w1(import_tensor<LWc>(m1, host(SW{2 * U, 4 * U}, in[2]))),
        h0(import_tensor<LX>(m0, host(SH{B, U}, in[3]))),
        c0(import_tensor<LC>(m0, host(SC{B, U}, in[4]))),
        h1(import_tensor<LX>(m1, host(SH{B, U}, in[5]))),
        c1(import_tensor<LC>(m1, host(SC{B, U}, in[6]))) {
    x.requires_grad("x"), w0.requires_grad("w0"), w1.requires_grad("w1");
    h0.requires_grad("h0"), c0.requires_grad("c0"), h1.requires_grad("h1"), c1.requires_grad("c1");
  }

  auto y() const {
    using h0_t = typemesh::tensor<double, SH, LXc, lstm0_mesh>;
    using h1_t = typemesh::tensor<double, SH, LXc, lstm1_mesh>;
    using c0_t = typemesh::tensor<double, SC, typename LXc::template without<k>::template with<n, axis1>, lstm0_mesh>;
    using c1_t = typemesh::tensor<double, SC, typename LXc::template without<k>::template with<n, axis1>, lstm1_mesh>;
    return two_layer_lstm<time_>(x, w0, w1, typemesh::lstm_state<h0_t, c0_t>{h0, c0},
                                 typemesh::lstm_state<h1_t, c1_t>{h1, c1});
  }
};

struct lstm_case {
  placement_options opt;

  template <class LXc, class LWc, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto [m0, m1] = layer_meshes(m, opt);
    pipeline_run<LXc, LWc> r(m0, m1, in);
    auto y = r.y();
    static_assert(std::is_same_v<decltype(y), typemesh::tensor<double, SX, LXc, lstm1_mesh>>);
    return finish(weighted_sum(y), r.x, r.w0, r.w1, r.h0, r.c0, r.h1, r.c1);
  }
};

// --- The plain loops --------------------------------------------------------------

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

// One layer over a [B, T, U] sequence; w's row 2i multiplies input unit i,
// row 2i + 1 hidden unit i; column 4v + q is gate q (i, f, g, o) of unit v.
values plain_layer(const values& xs, const values& w, values h, values c) {
  values out(B * T * U);
  for (int t = 0; t < T; ++t) {
    values h_new(B * U);
    for (int b = 0; b < B; ++b)
      for (int v = 0; v < U; ++v) {
        double z[4] = {0, 0, 0, 0};
        for (int q = 0; q < 4; ++q)
          for (int i = 0; i < U; ++i)
            z[q] += xs[(b * T + t) * U + i] * w[(2 * i) * 4 * U + 4 * v + q] +
                    h[b * U + i] * w[(2 * i + 1) * 4 * U + 4 * v + q];
        double& cell = c[b * U + v];
        cell = sigmoid(z[1]) * cell + sigmoid(z[0]) * std::tanh(z[2]);
        h_new[b * U + v] = sigmoid(z[3]) * std::tanh(cell);
        out[(b * T + t) * U + v] = h_new[b * U + v];
      }
    h = h_new;
  }
  return out;
}

values plain_lstm(const std::vector<values>& in) {
  return plain_layer(plain_layer(in[0], in[1], in[3], in[4]), in[2], in[5], in[6]);
}

// One cell with a standard [x | h] x [i | f | g | o] weight of u units:
// row i < u is input unit i, row u + i hidden unit i; column q*u + v is
// gate q of unit v. Updates h and c ([rows, u]) in place.
void plain_standard_cell(const values& x, const values& w, values& h, values& c, int rows, int u) {
  values h_new(h.size());
  for (int b = 0; b < rows; ++b)
    for (int v = 0; v < u; ++v) {
      double z[4] = {0, 0, 0, 0};
      for (int q = 0; q < 4; ++q)
        for (int i = 0; i < u; ++i)
          z[q] += x[b * u + i] * w[i * 4 * u + q * u + v] + h[b * u + i] * w[(u + i) * 4 * u + q * u + v];
      double& cell = c[b * u + v];
      cell = sigmoid(z[1]) * cell + sigmoid(z[0]) * std::tanh(z[2]);
      h_new[b * u + v] = sigmoid(z[3]) * std::tanh(cell);
    }
  h = h_new;
}

// y under the world's sizes, from a device of layer 1's mesh.
values lstm_output(const world::coords& sizes, const std::vector<values>& in, placement_options opt = {}) {
  int devices = 1;
  for (int s : sizes) devices *= s;
  auto per_device = typemesh::launch(devices, [&] {
    world m(sizes);
    auto [m0, m1] = layer_meshes(m, opt);
    pipeline_run<LX, LW> r(m0, m1, in);
    return typemesh::export_tensor(r.y()).values();
  });
  for (auto& v : per_device)
    if (!v.empty()) return v;
  return {};
}

TEST(Lstm, PipelineOutputEqualsPlainLoop) {
  const auto in = lstm_inputs();
  const auto want = plain_lstm(in);
  expect_close(lstm_output({1, 1, 1, 1}, in), want, 1e-12, "one device");
  expect_close(lstm_output({1, 2, 2, 2}, in), want, 1e-12, "{2,2,2}, both layers on the same 8 devices");
  expect_close(lstm_output({2, 2, 1, 2}, in), want, 1e-12, "batch and k split, disjoint halves of 8");
  expect_close(lstm_output({2, 1, 2, 2}, in, {{std::array{4, 1, 1}}, false}), want, 1e-12,
               "layer 1 batch-split on the second half");
}

TEST(Lstm, ZeroStates) {
  auto in = lstm_inputs();
  for (int i = 3; i < 7; ++i) in[i].assign(B * U, 0.0);
  const auto want = plain_lstm(in);
  auto y = typemesh::launch(4, [&] {
    world m({2, 1, 2, 1});
    auto [m0, m1] = layer_meshes(m, {});
    auto x = import_tensor<LX>(m0, host(SX{B, T, U}, in[0]));
    auto w0 = import_tensor<LW>(m0, host(SW{2 * U, 4 * U}, in[1]));
    auto w1 = import_tensor<LW>(m1, host(SW{2 * U, 4 * U}, in[2]));
    auto s0 = typemesh::lstm_zero_state<time_>(x, w0);
    auto s1 = typemesh::lstm_zero_state<time_>(x, w1);
    static_assert(std::is_same_v<decltype(s1.c), typemesh::tensor<double, SC, LC, lstm1_mesh>>);
    return typemesh::export_tensor(two_layer_lstm<time_>(x, w0, w1, s0, s1)).values();
  });
  expect_close(y[3], want, 1e-12, "zero states");
}

// --- Gradients ----------------------------------------------------------------------

TEST(Lstm, GradientsUnderStrategies) {
  const auto in = lstm_inputs();
  check_layouts<world, LX, LW>("batch split", {1, 2, 1, 1}, in, lstm_case{});
  check_layouts<world, LX, LW>("n split", {1, 1, 2, 1}, in, lstm_case{});
  check_layouts<world, LX, LW>("k split", {1, 1, 1, 2}, in, lstm_case{});
  check_layouts<world, LX, LW>("{2,2,2} per layer, same devices", {1, 2, 2, 2}, in, lstm_case{});
  check_layouts<world, LX, LW>("{2,2,2} per layer, disjoint halves of 16", {2, 2, 2, 2}, in, lstm_case{});
  check_layouts<world, LX, LW>("n and k split, disjoint halves of 8", {2, 1, 2, 2}, in, lstm_case{});
  check_layouts<world, LX, LW>("batch split 4, disjoint halves of 8", {2, 4, 1, 1}, in, lstm_case{});
  // The same 8 devices in reverse order and another shape for layer 1:
  // every move between the layers crosses devices.
  check_layouts<world, LX, LW>("same devices, reversed, layer 1 {1,4,2}", {1, 2, 2, 2}, in,
                               lstm_case{{std::array{1, 4, 2}, true}});
}

// --- A stack on one mesh --------------------------------------------------------------

using stack_mesh = typemesh::mesh<"stack", axis0, axis1, axis2>;

// Inputs: x, w0, w1, w2, then h and c of each layer.
std::vector<values> stack_inputs() {
  std::vector<values> in{random_values(B * T * U, 41)};
  for (unsigned l = 0; l < 3; ++l) in.push_back(random_values(8 * U * U, 42 + l, -0.6, 0.6));
  for (unsigned s = 0; s < 6; ++s) in.push_back(random_values(B * U, 50 + s));
  return in;
}

struct stack_case {
  template <class LXc, class LWc, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    using x_t = typemesh::tensor<double, SX, LXc, M>;
    using w_t = typemesh::tensor<double, SW, LWc, M>;
    auto x = import_tensor<LXc>(m, host(SX{B, T, U}, in[0]));
    std::vector<w_t> w;
    for (int l = 0; l < 3; ++l) w.push_back(import_tensor<LWc>(m, host(SW{2 * U, 4 * U}, in[1 + l])));
    using state_t = decltype(typemesh::lstm_zero_state<time_>(x, w[0]));
    std::vector<state_t> states;
    for (int l = 0; l < 3; ++l) {
      states.push_back({import_tensor<typename decltype(state_t::h)::layout_type>(m, host(SH{B, U}, in[4 + 2 * l])),
                        import_tensor<typename decltype(state_t::c)::layout_type>(m, host(SC{B, U}, in[5 + 2 * l]))});
    }
    x.requires_grad("x");
    for (auto& t : w) t.requires_grad("w");
    for (auto& s : states) s.h.requires_grad("h"), s.c.requires_grad("c");
    x_t y = typemesh::lstm<time_>(x, w, states);
    return finish(weighted_sum(y), x, w[0], w[1], w[2], states[0].h, states[0].c, states[1].h, states[1].c,
                  states[2].h, states[2].c);
  }
};

TEST(Lstm, StackOfThreeEqualsPlainLoop) {
  const auto in = stack_inputs();
  values want = in[0];
  for (int l = 0; l < 3; ++l) want = plain_layer(want, in[1 + l], in[4 + 2 * l], in[5 + 2 * l]);
  for (const stack_mesh::coords sizes : {stack_mesh::coords{1, 1, 1}, {2, 2, 2}, {4, 1, 2}}) {
    const auto got = typemesh::launch(sizes[0] * sizes[1] * sizes[2], [&] {
      stack_mesh m(sizes);
      auto x = import_tensor<LX>(m, host(SX{B, T, U}, in[0]));
      std::vector<typemesh::tensor<double, SW, LW, stack_mesh>> w;
      for (int l = 0; l < 3; ++l) w.push_back(import_tensor<LW>(m, host(SW{2 * U, 4 * U}, in[1 + l])));
      std::vector<decltype(typemesh::lstm_zero_state<time_>(x, w[0]))> states;
      for (int l = 0; l < 3; ++l) {
        states.push_back({import_tensor<LX>(m, host(SH{B, U}, in[4 + 2 * l])),
                          import_tensor<LC>(m, host(SC{B, U}, in[5 + 2 * l]))});
      }
      return typemesh::export_tensor(typemesh::lstm<time_>(x, w, states)).values();
    })[0];
    expect_close(got, want, 1e-12, "3 layers on mesh " + std::to_string(sizes[0]) + "x" + std::to_string(sizes[1]) +
                                       "x" + std::to_string(sizes[2]));
  }
}

TEST(Lstm, StackGradientsUnderStrategies) {
  const auto in = stack_inputs();
  check_layouts<stack_mesh, LX, LW>("3 layers, {2,2,2}", {2, 2, 2}, in, stack_case{});
  check_layouts<stack_mesh, LX, LW>("3 layers, batch split 4", {4, 1, 1}, in, stack_case{});
}

// --- Dims in another order ------------------------------------------------------------

// A whole tensor of shape From with its dims in To's order.
template <class To, class From>
values permuted(const typemesh::host_tensor<double, From>& t) {
  const auto s = typemesh::shape_from<To>(t.shape());
  typemesh::host_tensor<double, To> out(s);
  std::array<std::int64_t, From::rank> i{};
  for (std::size_t e = 0; e < t.size(); ++e) {
    std::array<std::int64_t, To::rank> j{};
    [&]<class... Ds>(typemesh::type_list<Ds...>) {
      std::size_t p = 0;
      ((j[typemesh::shape_index_of<To, Ds>] = i[p++]), ...);
    }(typemesh::dims_of<From>{});
    out[j] = t.values()[e];
    for (std::size_t d = From::rank; d-- > 0;) {
      if (++i[d] < t.shape()[d]) break;
      i[d] = 0;
    }
  }
  return out.values();
}

// y and the gradients of x, the weights and the initial states, for x of
// shape SXo (time, k and batch in any order), as [batch, time, k] etc.
template <class SXo>
std::vector<values> stack_in_order(const std::vector<values>& in) {
  using SHo = typemesh::shape_without<SXo, time_>;
  using SCo = typemesh::shape_replace<SHo, k, n>;
  return typemesh::launch(8, [&] {
    stack_mesh m({2, 2, 2});
    // A whole tensor given as [batch, time, k] etc., imported with its dims in the order of S.
    auto in_order = [&]<class S, class Canonical>(const Canonical& sizes, const values& v) {
      return host(typemesh::shape_from<S>(sizes), permuted<S>(host(sizes, v)));
    };
    auto x = import_tensor<LX>(m, in_order.template operator()<SXo>(SX{B, T, U}, in[0]));
    using w_t = typemesh::tensor<double, SW, LW, stack_mesh>;
    std::vector<w_t> w;
    for (int l = 0; l < 2; ++l) w.push_back(import_tensor<LW>(m, host(SW{2 * U, 4 * U}, in[1 + l])));
    using state_t = decltype(typemesh::lstm_zero_state<time_>(x, w[0]));
    static_assert(std::is_same_v<typename decltype(state_t::c)::shape_type, SCo>);
    std::vector<state_t> states;
    for (int l = 0; l < 2; ++l) {
      states.push_back({import_tensor<LX>(m, in_order.template operator()<SHo>(SH{B, U}, in[4 + 2 * l])),
                        import_tensor<LC>(m, in_order.template operator()<SCo>(SC{B, U}, in[5 + 2 * l]))});
    }
    x.requires_grad("x");
    for (auto& t : w) t.requires_grad("w");
    for (auto& s : states) s.h.requires_grad("h"), s.c.requires_grad("c");
    auto y = typemesh::lstm<time_>(x, w, states);
    static_assert(std::is_same_v<typename decltype(y)::shape_type, SXo>);
    auto c = import_tensor<LX>(m, host(y.shape(), permuted<SXo>(host(SX{B, T, U}, random_values(B * T * U, 99)))));
    typemesh::backward(typemesh::reduce_sum(y * c));
    return std::vector<values>{permuted<SX>(typemesh::export_tensor(y.detached())),
                               permuted<SX>(typemesh::export_tensor(x.grad())),
                               typemesh::export_tensor(w[0].grad()).values(),
                               typemesh::export_tensor(w[1].grad()).values(),
                               permuted<SH>(typemesh::export_tensor(states[0].h.grad())),
                               permuted<SC>(typemesh::export_tensor(states[1].c.grad()))};
  })[0];
}

TEST(Lstm, PermutedDimsGiveTheSameValues) {
  const auto in = stack_inputs();
  const auto want = stack_in_order<SX>(in);  // [batch, time, k]
  values plain = in[0];
  for (int l = 0; l < 2; ++l) plain = plain_layer(plain, in[1 + l], in[4 + 2 * l], in[5 + 2 * l]);
  expect_close(want[0], plain, 1e-12, "[batch, time, k] vs the plain loop");
  const char* what[] = {"y", "x's gradient", "w0's gradient", "w1's gradient", "h0's gradient", "c1's gradient"};
  const auto time_k_batch = stack_in_order<shape<time_, k, batch>>(in);
  const auto k_batch_time = stack_in_order<shape<k, batch, time_>>(in);
  for (std::size_t i = 0; i < want.size(); ++i) {
    expect_close(time_k_batch[i], want[i], 1e-12, std::string("[time, k, batch]: ") + what[i]);
    expect_close(k_batch_time[i], want[i], 1e-12, std::string("[k, batch, time]: ") + what[i]);
  }
}

// --- Standard weights -----------------------------------------------------------------

TEST(Lstm, StandardWeightsMatchAPlainCell) {
  constexpr int u = 4, rows = 4, steps = 3;
  const values standard = random_values(8 * u * u, 61, -0.5, 0.5);
  const values xs = random_values(steps * rows * u, 62), h0 = random_values(rows * u, 63),
               c0 = random_values(rows * u, 64);
  // The plain cell, step by step, on the standard weights.
  std::vector<values> want_h;
  values h = h0, c = c0;
  for (int t = 0; t < steps; ++t) {
    plain_standard_cell(values(xs.begin() + t * rows * u, xs.begin() + (t + 1) * rows * u), standard, h, c, rows, u);
    want_h.push_back(h);
  }

  // The conversion is a permutation, the same whatever the order of the dims.
  std::vector<float> sf(standard.begin(), standard.end());
  typemesh::host_tensor<float, SW> std_w(SW{2 * u, 4 * u}, sf);
  const auto per_unit = typemesh::lstm_weight_from_standard<k>(std_w);
  EXPECT_EQ(typemesh::lstm_weight_to_standard<k>(per_unit), std_w);
  EXPECT_EQ((per_unit[{2 * 1 + 1, 4 * 2 + 3}]), (std_w[{u + 1, 3 * u + 2}]));  // hidden unit 1, gate o of unit 2
  typemesh::host_tensor<float, shape<n, k>> std_nk(shape<n, k>{4 * u, 2 * u});
  for (std::int64_t r = 0; r < 2 * u; ++r)
    for (std::int64_t q = 0; q < 4 * u; ++q) std_nk[{q, r}] = std_w[{r, q}];
  const auto per_unit_nk = typemesh::lstm_weight_from_standard<k>(std_nk);
  for (std::int64_t r = 0; r < 2 * u; ++r)
    for (std::int64_t q = 0; q < 4 * u; ++q) ASSERT_EQ((per_unit_nk[{q, r}]), (per_unit[{r, q}]));

  // lstm_step with the converted weights, in float, on a split mesh.
  auto got = typemesh::launch(8, [&] {
    stack_mesh m({2, 2, 2});
    using xf = typemesh::tensor<float, shape<batch, k>, LX, stack_mesh>;
    using cf = typemesh::tensor<float, shape<batch, n>, LC, stack_mesh>;
    auto as_float = [](const values& v) { return std::vector<float>(v.begin(), v.end()); };
    auto w = import_tensor<LW>(m, per_unit);
    auto state = typemesh::lstm_state<xf, cf>{
        import_tensor<LX>(m, typemesh::host_tensor<float, shape<batch, k>>({rows, u}, as_float(h0))),
        import_tensor<LC>(m, typemesh::host_tensor<float, shape<batch, n>>({rows, u}, as_float(c0)))};
    std::vector<std::vector<float>> hs;
    for (int t = 0; t < steps; ++t) {
      auto x_t = import_tensor<LX>(m, typemesh::host_tensor<float, shape<batch, k>>(
                                          {rows, u}, as_float(values(xs.begin() + t * rows * u,
                                                                     xs.begin() + (t + 1) * rows * u))));
      state = typemesh::lstm_step(x_t, state.h, state.c, w);
      hs.push_back(typemesh::export_tensor(state.h).values());
    }
    hs.push_back(typemesh::export_tensor(state.c).values());
    // The same steps through lstm<Time>, x as [time, batch, k].
    auto x = import_tensor<LX>(m, typemesh::host_tensor<float, shape<time_, batch, k>>({steps, rows, u}, as_float(xs)));
    auto initial = typemesh::lstm_state<xf, cf>{
        import_tensor<LX>(m, typemesh::host_tensor<float, shape<batch, k>>({rows, u}, as_float(h0))),
        import_tensor<LC>(m, typemesh::host_tensor<float, shape<batch, n>>({rows, u}, as_float(c0)))};
    hs.push_back(typemesh::export_tensor(typemesh::lstm<time_>(x, std::array{w}, std::array{initial})).values());
    return hs;
  })[0];
  for (int t = 0; t < steps; ++t) {
    for (int i = 0; i < rows * u; ++i) {
      EXPECT_NEAR(got[t][i], want_h[t][i], 1e-5 * std::max(1.0, std::abs(want_h[t][i]))) << "h at step " << t;
    }
  }
  for (int i = 0; i < rows * u; ++i) EXPECT_NEAR(got[steps][i], c[i], 1e-5 * std::max(1.0, std::abs(c[i]))) << "c";
  for (int t = 0; t < steps; ++t) {
    for (int i = 0; i < rows * u; ++i) {
      EXPECT_NEAR(got[steps + 1][t * rows * u + i], want_h[t][i], 1e-5 * std::max(1.0, std::abs(want_h[t][i])))
          << "lstm<time> at step " << t;
    }
  }
}

// A weight whose dims are declared [n, k] holds the same matrix as a [k, n]
// one; the steps, the stack and the weight's gradient must not depend on
// that order (the kernels want k first: the layer transposes once).
TEST(Lstm, AWeightDeclaredGateColumnsFirstGivesTheSameResults) {
  constexpr std::int64_t u = 3, rows = 2, steps = 3;
  const values wv = random_values(8 * u * u, 71, -0.5, 0.5), xs = random_values(steps * rows * u, 72);
  typemesh::host_tensor<double, SW> w_kn(SW{2 * u, 4 * u}, wv);
  typemesh::host_tensor<double, shape<n, k>> w_nk(shape<n, k>{4 * u, 2 * u});
  for (std::int64_t r = 0; r < 2 * u; ++r)
    for (std::int64_t q = 0; q < 4 * u; ++q) w_nk[{q, r}] = w_kn[{r, q}];
  const typemesh::host_tensor<double, shape<time_, batch, k>> x_host({steps, rows, u}, xs);
  // y of the stack, y of a loop of steps, and the weight's gradient as [k, n].
  auto run = [&]<class WS>(const typemesh::host_tensor<double, WS>& w_host) {
    return typemesh::launch(1, [&] {
      stack_mesh m({1, 1, 1});
      auto w = import_tensor<layout<>>(m, w_host);
      w.requires_grad("w");
      auto x = import_tensor<layout<>>(m, x_host);
      auto y = typemesh::lstm<time_>(x, std::array{w});
      typemesh::backward(typemesh::reduce_sum(y * y));
      auto state = typemesh::lstm_zero_state<time_>(x, w);
      values looped;
      for (std::int64_t t = 0; t < steps; ++t) {
        state = typemesh::lstm_step(typemesh::time_step<time_>(x, t), state.h, state.c, w);
        const auto h = typemesh::export_tensor(state.h);  // kept: values() refers into it
        looped.insert(looped.end(), h.values().begin(), h.values().end());
      }
      const auto g = typemesh::export_tensor(w.grad());
      values grad_kn(static_cast<std::size_t>(8 * u * u));
      for (std::int64_t r = 0; r < 2 * u; ++r)
        for (std::int64_t q = 0; q < 4 * u; ++q) {
          std::array<std::int64_t, 2> at{};
          at[WS::template index_of<k>] = r;
          at[WS::template index_of<n>] = q;
          grad_kn[static_cast<std::size_t>(r * 4 * u + q)] = g[at];
        }
      return std::vector<values>{typemesh::export_tensor(y).values(), looped, grad_kn};
    })[0];
  };
  const auto want = run(w_kn), got = run(w_nk);
  expect_close(got[0], want[0], 1e-12, "lstm<time>'s y with a [n, k] weight");
  expect_close(got[1], want[1], 1e-12, "lstm_step's h with a [n, k] weight");
  expect_close(got[2], want[2], 1e-12, "the [n, k] weight's gradient");
}

// --- The pipeline -------------------------------------------------------------------

// Layer 0's devices finish the whole forward pass before layer 1's devices
// start theirs, and layer 1's devices finish the whole backward pass before
// layer 0's start theirs. That works only if a device never waits for the
// other layer's devices except for data they have already sent: what lets
// the layers overlap step by step. (A wait the other way would time out.)
TEST(Lstm, DisjointLayersFormAPipeline) {
  const auto in = lstm_inputs();
  std::atomic<int> forward_done{0}, backward_done{0};
  auto wait_for = [](const std::atomic<int>& count, int want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count.load() < want) {
      if (std::chrono::steady_clock::now() > deadline) throw typemesh::timeout_error("the other layer never finished");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  struct counts {
    bool layer0;
    std::uint64_t forward_allreduces, backward_allreduces;
    values w_grad;
  };
  auto run = [&](const world& m) {
    auto [m0, m1] = layer_meshes(m, {});
    auto x = import_tensor<LX>(m0, host(SX{B, T, U}, in[0]));
    auto w0 = import_tensor<LW>(m0, host(SW{2 * U, 4 * U}, in[1]));
    auto w1 = import_tensor<LW>(m1, host(SW{2 * U, 4 * U}, in[2]));
    w0.requires_grad("w0"), w1.requires_grad("w1");
    return std::tuple{m0, x, w0, w1};
  };
  auto got = typemesh::launch({.devices = 8, .timeout = std::chrono::seconds(5)}, [&](typemesh::device& dev) {
    auto [m0, x, w0, w1] = run(world({2, 2, 1, 2}));  // per layer: batch over 2, k over 2
    const bool layer0 = m0.contains(dev.id());
    if (!layer0) wait_for(forward_done, 4);
    auto y = two_layer_lstm<time_>(x, w0, w1, typemesh::lstm_zero_state<time_>(x, w0),
                                   typemesh::lstm_zero_state<time_>(x, w1));
    if (layer0) ++forward_done;
    const auto forward = dev.traffic()[typemesh::op_kind::allreduce].calls;
    auto loss = weighted_sum(y);
    if (layer0) wait_for(backward_done, 4);
    typemesh::backward(loss);
    if (!layer0) ++backward_done;
    const auto total = dev.traffic()[typemesh::op_kind::allreduce].calls;
    auto g0 = typemesh::export_tensor(w0.grad()).values(), g1 = typemesh::export_tensor(w1.grad()).values();
    return counts{layer0, forward, total - forward, layer0 ? g0 : g1};
  });
  for (const auto& c : got) {
    if (!c.layer0) continue;
    // One allreduce per step over k going forward; going backward none over
    // n (whole), and the weight's partial sums over the batch once.
    EXPECT_EQ(c.forward_allreduces, static_cast<std::uint64_t>(T));
    EXPECT_EQ(c.backward_allreduces, 1u);
  }
  // The gradients are those of the one-device run.
  const auto ref = typemesh::launch(1, [&] {
    auto [m0, x, w0, w1] = run(world({1, 1, 1, 1}));
    typemesh::backward(weighted_sum(two_layer_lstm<time_>(x, w0, w1, typemesh::lstm_zero_state<time_>(x, w0),
                                                          typemesh::lstm_zero_state<time_>(x, w1))));
    return std::pair{typemesh::export_tensor(w0.grad()).values(), typemesh::export_tensor(w1.grad()).values()};
  })[0];
  expect_close(got[0].w_grad, ref.first, 1e-12, "w0 gradient");
  expect_close(got[4].w_grad, ref.second, 1e-12, "w1 gradient");
}

// --- The whole-sequence path ---------------------------------------------------------

// k and n whole (only the batch split): lstm<Time> runs each layer as one
// operation over the whole sequence.
using LXd = layout<batch(axis0)>;  // x, y, h, c
using LWd = layout<>;              // weights

// The layouts pick the paths compared below: the sequence path with k and n
// whole, step by step with them split (even over axes of size 1).
template <class LXc, class LWc>
constexpr bool runs_whole_sequence() {
  using x_t = typemesh::tensor<double, SH, LXc, stack_mesh>;
  using w_t = typemesh::tensor<double, SW, LWc, stack_mesh>;
  return typemesh::lstm_detail::sequence_path<typemesh::lstm_detail::roles<x_t, w_t>, w_t>;
}
static_assert(runs_whole_sequence<LXd, LWd>());
static_assert(!runs_whole_sequence<LX, LW>());
static_assert(!runs_whole_sequence<LXd, layout<n(axis1)>>());

// The layers step by step as a program writes them with lstm_step: the
// per-step path, the reference for the sequence path.
template <class Time, class X, class W, class State>
X step_by_step(const X& x, const std::vector<W>& w, std::vector<State> s) {
  std::vector<typemesh::lstm_weight<W>> used;
  for (const auto& wl : w) used.emplace_back(wl);
  std::vector<decltype(State::h)> ys;
  for (std::int64_t t = 0; t < x.shape().template size<Time>(); ++t) {
    auto in = typemesh::time_step<Time>(x, t);
    for (std::size_t l = 0; l < w.size(); ++l) {
      s[l] = typemesh::lstm_step(in, s[l].h, s[l].c, used[l]);
      in = s[l].h;
    }
    ys.push_back(in);
  }
  return typemesh::stack_steps<typename X::shape_type>(ys);
}

// y and the gradients of x, the three weights and (given states) the initial
// states, for x of shape SXo, as [batch, time, k] etc.; by lstm<Time> or by
// the step loop, with given initial states or zero ones.
template <class SXo>
std::vector<values> sequence_run(const stack_mesh::coords& sizes, const std::vector<values>& in, bool by_steps,
                                 bool zero_states) {
  using SHo = typemesh::shape_without<SXo, time_>;
  using SCo = typemesh::shape_replace<SHo, k, n>;
  return typemesh::launch(sizes[0] * sizes[1] * sizes[2], [&] {
    stack_mesh m(sizes);
    auto in_order = [&]<class S, class Canonical>(const Canonical& sizes, const values& v) {
      return host(typemesh::shape_from<S>(sizes), permuted<S>(host(sizes, v)));
    };
    auto x = import_tensor<LXd>(m, in_order.template operator()<SXo>(SX{B, T, U}, in[0]));
    using w_t = typemesh::tensor<double, SW, LWd, stack_mesh>;
    std::vector<w_t> w;
    for (int l = 0; l < 3; ++l) w.push_back(import_tensor<LWd>(m, host(SW{2 * U, 4 * U}, in[1 + l])));
    using state_t = decltype(typemesh::lstm_zero_state<time_>(x, w[0]));
    std::vector<state_t> states;
    for (int l = 0; l < 3; ++l) {
      if (zero_states) {
        states.push_back(typemesh::lstm_zero_state<time_>(x, w[l]));
      } else {
        states.push_back({import_tensor<LXd>(m, in_order.template operator()<SHo>(SH{B, U}, in[4 + 2 * l])),
                          import_tensor<LXd>(m, in_order.template operator()<SCo>(SC{B, U}, in[5 + 2 * l]))});
        states.back().h.requires_grad("h"), states.back().c.requires_grad("c");
      }
    }
    x.requires_grad("x");
    for (auto& t : w) t.requires_grad("w");
    auto y = by_steps ? step_by_step<time_>(x, w, states)
                      : (zero_states ? typemesh::lstm<time_>(x, w) : typemesh::lstm<time_>(x, w, states));
    auto c = import_tensor<LXd>(m, host(y.shape(), permuted<SXo>(host(SX{B, T, U}, random_values(B * T * U, 99)))));
    typemesh::backward(typemesh::reduce_sum(y * c));
    std::vector<values> out{permuted<SX>(typemesh::export_tensor(y.detached())),
                            permuted<SX>(typemesh::export_tensor(x.grad()))};
    for (const auto& t : w) out.push_back(typemesh::export_tensor(t.grad()).values());
    if (!zero_states) {
      for (const auto& s : states) {
        out.push_back(permuted<SH>(typemesh::export_tensor(s.h.grad())));
        out.push_back(permuted<SC>(typemesh::export_tensor(s.c.grad())));
      }
    }
    return out;
  })[0];
}

TEST(Lstm, SequencePathEqualsStepByStep) {
  const auto in = stack_inputs();
  values plain = in[0];
  for (int l = 0; l < 3; ++l) plain = plain_layer(plain, in[1 + l], in[4 + 2 * l], in[5 + 2 * l]);
  const char* what[] = {"y",           "x's gradient", "w0's gradient", "w1's gradient", "w2's gradient",
                        "h0's gradient", "c0's gradient", "h1's gradient", "c1's gradient", "h2's gradient",
                        "c2's gradient"};
  for (const bool zero : {false, true}) {
    const auto want = sequence_run<SX>({1, 1, 1}, in, true, zero);
    ASSERT_EQ(want.size(), zero ? 5u : 11u);
    if (!zero) expect_close(want[0], plain, 1e-12, "the step loop vs the plain loop");
    auto compare = [&](const std::vector<values>& got, const std::string& where) {
      ASSERT_EQ(got.size(), want.size()) << where;
      for (std::size_t i = 0; i < want.size(); ++i) {
        // Every gradient is there: none of the inputs' gradients is missing or zero.
        ASSERT_FALSE(want[i].empty()) << what[i];
        EXPECT_TRUE(std::any_of(want[i].begin(), want[i].end(), [](double v) { return v != 0; })) << what[i];
        expect_close(got[i], want[i], 1e-12, where + (zero ? ", zero states: " : ": ") + what[i]);
      }
    };
    compare(sequence_run<SX>({1, 1, 1}, in, false, zero), "[batch, time, k], one device");
    compare(sequence_run<shape<time_, k, batch>>({1, 1, 1}, in, false, zero), "[time, k, batch], one device");
    compare(sequence_run<shape<k, batch, time_>>({2, 1, 1}, in, false, zero), "[k, batch, time], batch over 2");
    compare(sequence_run<SX>({4, 1, 1}, in, false, zero), "[batch, time, k], batch over 4");
  }
}

// Finite differences, and the batch split over 2 and over 4 devices (the
// weights' partial sums allreduced) against one device.
TEST(Lstm, SequencePathGradients) {
  const auto in = stack_inputs();
  check_layouts<stack_mesh, LXd, LWd>("sequence path, batch split 2", {2, 1, 1}, in, stack_case{});
  check_layouts<stack_mesh, LXd, LWd>("sequence path, batch split 4", {4, 1, 1}, in, stack_case{});
}

// One allreduce of each weight's gradient over the batch, and nothing else
// communicated inside the layers.
TEST(Lstm, SequencePathAllreducesEachWeightOnce) {
  const auto in = stack_inputs();
  const auto counts = typemesh::launch(4, [&](typemesh::device& dev) {
    stack_mesh m({4, 1, 1});
    auto x = import_tensor<LXd>(m, host(SX{B, T, U}, in[0]));
    std::vector<typemesh::tensor<double, SW, LWd, stack_mesh>> w;
    for (int l = 0; l < 3; ++l) w.push_back(import_tensor<LWd>(m, host(SW{2 * U, 4 * U}, in[1 + l])));
    for (auto& t : w) t.requires_grad("w");
    const auto before = dev.traffic()[typemesh::op_kind::allreduce].calls;
    auto y = typemesh::lstm<time_>(x, w);
    const auto forward = dev.traffic()[typemesh::op_kind::allreduce].calls - before;
    auto c = import_tensor<LXd>(m, host(y.shape(), random_values(B * T * U, 99)));
    auto loss = typemesh::reduce_sum(y * c);
    const auto before_backward = dev.traffic()[typemesh::op_kind::allreduce].calls;
    typemesh::backward(loss);
    return std::pair{forward, dev.traffic()[typemesh::op_kind::allreduce].calls - before_backward};
  });
  for (const auto& [forward, backward] : counts) {
    EXPECT_EQ(forward, 0u);
    EXPECT_EQ(backward, 3u);  // one per weight; the loss's sum is a forward allreduce
  }
}

// --- Errors -------------------------------------------------------------------------

TEST(Lstm, ErrorsNameSizesAndAxes) {
  typemesh::launch(4, [] {
    stack_mesh m({1, 4, 1});
    auto x = import_tensor<LX>(m, host(SX{B, T, U}, values(B * T * U)));
    auto w = import_tensor<LW>(m, host(SW{2 * U, 4 * U}, values(32 * U)));
    auto w_wide = import_tensor<LW>(m, host(SW{2 * U, 8 * U}, values(64 * U)));
    const auto s = typemesh::lstm_zero_state<time_>(x, w);
    const auto x_t = typemesh::time_step<time_>(x, 0);
    expect_error<typemesh::shape_error>([&] { (void)typemesh::lstm_step(x_t, s.h, s.c, w_wide); },
                                        {"weight", "[k=8 n=32]", "n=16"});
    expect_error<typemesh::shape_error>([&] { (void)typemesh::time_step<time_>(x, T); }, {"step 3", "time=3"});
    expect_error<typemesh::shape_error>([&] { (void)typemesh::lstm<time_>(x, std::vector{w, w}, std::vector{s}); },
                                        {"2 weights", "1 initial states"});
    // 2 units cannot split over axis1 of size 4, although 4 * 2 gate columns can.
    auto x2 = import_tensor<LX>(m, host(SX{B, T, 2}, values(B * T * 2)));
    auto w2 = import_tensor<LW>(m, host(SW{4, 8}, values(32)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::lstm<time_>(x2, std::array{w2}); },
                                        {"2 units", "axis1", "size 4", "splits n"});
  });
}

}  // namespace

// The RNNLM's two-layer LSTM (layers/lstm.hpp): its output equals a plain
// step-by-step loop; its loss and gradients under batch, n and k splits, on
// one mesh of devices for both layers or on disjoint halves, equal the
// one-device run and finite differences; on disjoint meshes the layers form
// a pipeline (layer 0's devices never wait for layer 1's going forward, nor
// the other way going backward); the weights' gradients are allreduced over
// the batch once, not once per step.
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

struct lstm_case {
  placement_options opt;

  template <class LXc, class LWc, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto [m0, m1] = layer_meshes(m, opt);
    auto x = import_tensor<LXc>(m0, host(SX{B, T, U}, in[0]));
    auto w0 = import_tensor<LWc>(m0, host(SW{2 * U, 4 * U}, in[1]));
    auto w1 = import_tensor<LWc>(m1, host(SW{2 * U, 4 * U}, in[2]));
    auto h0 = import_tensor<LX>(m0, host(SH{B, U}, in[3]));
    auto c0 = import_tensor<LC>(m0, host(SC{B, U}, in[4]));
    auto h1 = import_tensor<LX>(m1, host(SH{B, U}, in[5]));
    auto c1 = import_tensor<LC>(m1, host(SC{B, U}, in[6]));
    x.requires_grad("x"), w0.requires_grad("w0"), w1.requires_grad("w1");
    h0.requires_grad("h0"), c0.requires_grad("c0"), h1.requires_grad("h1"), c1.requires_grad("c1");
    auto y = typemesh::lstm_two_layer(x, w0, w1, typemesh::lstm_states{h0, c0, h1, c1});
    static_assert(std::is_same_v<decltype(y), typemesh::tensor<double, SX, LXc, lstm1_mesh>>);
    return finish(weighted_sum(y), x, w0, w1, h0, c0, h1, c1);
  }
};

// --- The plain loop ---------------------------------------------------------------

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

// y under the world's sizes, from a device of layer 1's mesh.
values lstm_output(const world::coords& sizes, const std::vector<values>& in, placement_options opt = {}) {
  int devices = 1;
  for (int s : sizes) devices *= s;
  auto per_device = typemesh::launch(devices, [&] {
    world m(sizes);
    auto [m0, m1] = layer_meshes(m, opt);
    auto x = import_tensor<LX>(m0, host(SX{B, T, U}, in[0]));
    auto w0 = import_tensor<LW>(m0, host(SW{2 * U, 4 * U}, in[1]));
    auto w1 = import_tensor<LW>(m1, host(SW{2 * U, 4 * U}, in[2]));
    auto s = typemesh::lstm_states{
        import_tensor<LX>(m0, host(SH{B, U}, in[3])), import_tensor<LC>(m0, host(SC{B, U}, in[4])),
        import_tensor<LX>(m1, host(SH{B, U}, in[5])), import_tensor<LC>(m1, host(SC{B, U}, in[6]))};
    return typemesh::export_tensor(typemesh::lstm_two_layer(x, w0, w1, s)).values();
  });
  for (auto& v : per_device)
    if (!v.empty()) return v;
  return {};
}

TEST(Lstm, OutputEqualsPlainLoop) {
  const auto in = lstm_inputs();
  const auto want = plain_lstm(in);
  expect_close(lstm_output({1, 1, 1, 1}, in), want, 1e-12, "one device");
  expect_close(lstm_output({1, 2, 2, 2}, in), want, 1e-12, "{2,2,2}, both layers on the same 8 devices");
  expect_close(lstm_output({2, 2, 1, 2}, in), want, 1e-12, "batch and k split, disjoint halves of 8");
  expect_close(lstm_output({2, 1, 2, 2}, in, {{std::array{4, 1, 1}}, false}), want, 1e-12,
               "layer 1 batch-split on the second half");
}

TEST(Lstm, ZeroStatesByDefault) {
  auto in = lstm_inputs();
  for (int i = 3; i < 7; ++i) in[i].assign(B * U, 0.0);
  const auto want = plain_lstm(in);
  auto y = typemesh::launch(4, [&] {
    world m({2, 1, 2, 1});
    auto [m0, m1] = layer_meshes(m, {});
    auto x = import_tensor<LX>(m0, host(SX{B, T, U}, in[0]));
    auto w0 = import_tensor<LW>(m0, host(SW{2 * U, 4 * U}, in[1]));
    auto w1 = import_tensor<LW>(m1, host(SW{2 * U, 4 * U}, in[2]));
    return typemesh::export_tensor(typemesh::lstm_two_layer(x, w0, w1)).values();
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
  auto got = typemesh::launch({.devices = 8, .timeout = std::chrono::seconds(5)}, [&](typemesh::device& dev) {
    world m({2, 2, 1, 2});  // per layer: batch over 2, k over 2
    auto [m0, m1] = layer_meshes(m, {});
    const bool layer0 = m0.contains(dev.id());
    auto x = import_tensor<LX>(m0, host(SX{B, T, U}, in[0]));
    auto w0 = import_tensor<LW>(m0, host(SW{2 * U, 4 * U}, in[1]));
    auto w1 = import_tensor<LW>(m1, host(SW{2 * U, 4 * U}, in[2]));
    w0.requires_grad("w0"), w1.requires_grad("w1");
    if (!layer0) wait_for(forward_done, 4);
    auto y = typemesh::lstm_two_layer(x, w0, w1);
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
    world m({1, 1, 1, 1});
    auto [m0, m1] = layer_meshes(m, {});
    auto x = import_tensor<LX>(m0, host(SX{B, T, U}, in[0]));
    auto w0 = import_tensor<LW>(m0, host(SW{2 * U, 4 * U}, in[1]));
    auto w1 = import_tensor<LW>(m1, host(SW{2 * U, 4 * U}, in[2]));
    w0.requires_grad("w0"), w1.requires_grad("w1");
    typemesh::backward(weighted_sum(typemesh::lstm_two_layer(x, w0, w1)));
    return std::pair{typemesh::export_tensor(w0.grad()).values(), typemesh::export_tensor(w1.grad()).values()};
  })[0];
  expect_close(got[0].w_grad, ref.first, 1e-12, "w0 gradient");
  expect_close(got[4].w_grad, ref.second, 1e-12, "w1 gradient");
}

// --- Errors -------------------------------------------------------------------------

TEST(Lstm, ErrorsNameSizesAndAxes) {
  typemesh::launch(4, [] {
    world m({1, 1, 4, 1});
    auto [m0, m1] = layer_meshes(m, {});
    auto x = import_tensor<LX>(m0, host(SX{B, T, U}, values(B * T * U)));
    auto w0 = import_tensor<LW>(m0, host(SW{2 * U, 4 * U}, values(32 * U)));
    auto w1_small = import_tensor<LW>(m1, host(SW{2 * U, 8 * U}, values(64 * U)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::lstm_two_layer(x, w0, w1_small); },
                                        {"w1", "[k=8 n=32]", "n=16"});
    // 2 units cannot split over axis1 of size 4, although 4 * 2 gate columns can.
    auto x2 = import_tensor<LX>(m0, host(SX{B, T, 2}, values(B * T * 2)));
    auto w2 = import_tensor<LW>(m0, host(SW{4, 8}, values(32)));
    auto w3 = import_tensor<LW>(m1, host(SW{4, 8}, values(32)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::lstm_two_layer(x2, w2, w3); },
                                        {"2 units", "axis1", "size 4", "splits n"});
  });
}

}  // namespace

// Operations and autodiff: every op's values and gradients under several
// layouts equal the one-device run, and the one-device gradients equal
// finite differences (tests/grad_check.hpp). Also: collectives' gradients,
// gradients across a mesh replacement, variables' layout-independent
// initialisation, and a few SGD/Adam steps identical under every layout.
#include <cmath>
#include <numeric>

#include "grad_check.hpp"

namespace {
using namespace tt;
using typemesh::import_tensor;
using typemesh::layout;
using typemesh::shape;

using M2 = typemesh::mesh<"ops", a0, a1>;
struct d3 : typemesh::dim<"d3"> {};
using S01 = shape<d0, d1>;
using S12 = shape<d1, d2>;
using S02 = shape<d0, d2>;

// loss = sum(y * c) for a fixed c placed like y: d loss / d y = c.
template <class Y>
auto weighted_sum(const Y& y, unsigned seed = 99) {
  using S = typename Y::shape_type;
  auto c = import_tensor<typename Y::layout_type>(
      y.mesh(), host(y.shape(), random_values(static_cast<std::size_t>(y.shape().elements()), seed)));
  return typemesh::reduce_sum(y * c);
  (void)sizeof(S);
}

// --- einsum ---------------------------------------------------------------------

struct matmul_case {
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(S01{8, 12}, in[0]));
    auto w = import_tensor<LW>(m, host(S12{12, 4}, in[1]));
    x.requires_grad("x"), w.requires_grad("w");
    auto y = typemesh::einsum<d0, d2>(x, w);
    return finish(weighted_sum(y), x, w);
  }
};

// BLAS's cores: the user's variables in OpenBLAS's order, else the machine's.
TEST(Blas, CoresFollowTheUsersThreadVariables) {
  using typemesh::backend::blas_cores;
  EXPECT_EQ(blas_cores(nullptr, nullptr, nullptr, 16), 16);
  EXPECT_EQ(blas_cores(nullptr, nullptr, nullptr, 0), 1);  // the machine's count unknown
  EXPECT_EQ(blas_cores("1", nullptr, nullptr, 16), 1);
  EXPECT_EQ(blas_cores("3", "5", "7", 16), 3);
  EXPECT_EQ(blas_cores(nullptr, "5", "7", 16), 5);
  EXPECT_EQ(blas_cores(nullptr, nullptr, "7", 16), 7);
  // Not a positive decimal integer: skipped.
  EXPECT_EQ(blas_cores("0", nullptr, "2", 16), 2);
  EXPECT_EQ(blas_cores("-4", "x", "", 16), 16);
  EXPECT_EQ(blas_cores("2 threads", nullptr, nullptr, 16), 16);
  EXPECT_EQ(blas_cores("99999999999999999999", nullptr, nullptr, 16), 16);
}

// OpenBLAS's generic kernels on a CPU with AVX2 or AVX-512 are named, with
// the core to choose; a core the user chose, a CPU without AVX2 and kernels
// made for AVX2 get no advice.
TEST(Blas, GenericKernelsOnANewerCpuAreNamedWithTheCoreToChoose) {
  using typemesh::backend::blas_kernel_advice;
  const std::string avx512 = blas_kernel_advice("Prescott", false, true, true);
  EXPECT_NE(avx512.find("runs its Prescott kernels"), std::string::npos) << avx512;
  EXPECT_NE(avx512.find("this CPU has AVX-512"), std::string::npos) << avx512;
  EXPECT_NE(avx512.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos) << avx512;
  const std::string avx2 = blas_kernel_advice("Sandybridge", false, true, false);
  EXPECT_NE(avx2.find("runs its Sandybridge kernels"), std::string::npos) << avx2;
  EXPECT_NE(avx2.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << avx2;
  EXPECT_EQ(blas_kernel_advice("Prescott", true, true, true), "");   // the user chose the core
  EXPECT_EQ(blas_kernel_advice("Prescott", false, false, false), "");  // an old CPU: the right kernels
  for (const char* core : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", ""})
    EXPECT_EQ(blas_kernel_advice(core, false, true, true), "") << core;
}

TEST(Einsum, MatmulUnderLayouts) {
  const std::vector<values> in{random_values(96, 1), random_values(48, 2)};
  matmul_case c;
  check_layouts<M2, layout<d0(a0)>, layout<>>("batch split", {4, 1}, in, c);
  check_layouts<M2, layout<d1(a1)>, layout<d1(a1)>>("contracted dim split", {1, 4}, in, c);
  check_layouts<M2, layout<d0(a0)>, layout<d2(a1)>>("batch and output split", {2, 2}, in, c);
  check_layouts<M2, layout<d0(a0), d1(a1)>, layout<d1(a1)>>("batch and contracted split", {2, 4}, in, c);
}

TEST(Einsum, ContractedSplitIsAllreducedAndCounted) {
  // x[d0, d1(a1)] . w[d1(a1), d2] on 4 devices: partial sums allreduced.
  const auto xs = random_values(8 * 12, 3), ws = random_values(12 * 4, 4);
  typemesh::launch(4, [&](typemesh::device& dev) {
    M2 m({1, 4});
    auto x = import_tensor<layout<d1(a1)>>(m, host(S01{8, 12}, xs));
    auto w = import_tensor<layout<d1(a1)>>(m, host(S12{12, 4}, ws));
    auto y = typemesh::einsum<d0, d2>(x, w);
    static_assert(std::is_same_v<decltype(y)::layout_type, layout<>>);
    auto whole = typemesh::export_tensor(y);
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j) {
        double want = 0;
        for (int k = 0; k < 12; ++k) want += xs[i * 12 + k] * ws[k * 4 + j];
        EXPECT_NEAR((whole[{i, j}]), want, 1e-12);
      }
    EXPECT_EQ(dev.traffic()[typemesh::op_kind::allreduce].calls, 1u);
  });
}

struct transposed_case {  // operands in orders that need packing: x[d1, d0], w[d2, d1] -> y[d2, d0]
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<d1, d0>{6, 4}, in[0]));
    auto w = import_tensor<LW>(m, host(shape<d2, d1>{5, 6}, in[1]));
    x.requires_grad("x"), w.requires_grad("w");
    return finish(weighted_sum(typemesh::einsum<d2, d0>(x, w)), x, w);
  }
};

// An op keeps its inputs for the gradient without copying them (copies of a
// tensor share their elements until one is written). A weight written in
// place between the forward pass and backward (an optimizer step taken
// early) must leave the gradient as the forward pass's value gives it: here
// dx[i][k] = sum over n of w[k][n] (d loss / d y = 1) with the old w, and
// dw[k][n] = sum over i of x[i][k].
TEST(Einsum, AWeightWrittenAfterTheForwardPassLeavesTheGradientAsItWas) {
  const auto xs = random_values(8 * 12, 21), ws = random_values(12 * 4, 22);
  typemesh::launch(2, [&] {
    M2 m({2, 1});
    auto x = import_tensor<layout<d0(a0)>>(m, host(S01{8, 12}, xs));
    auto w = import_tensor<layout<>>(m, host(S12{12, 4}, ws));
    x.requires_grad("x"), w.requires_grad("w");
    auto loss = typemesh::reduce_sum(typemesh::einsum<d0, d2>(x, w));
    for (auto& v : w.local()) v += 100.0;  // in place, after the forward pass
    for (auto& v : x.local()) v -= 100.0;
    typemesh::backward(loss);
    values dx(8 * 12), dw(12 * 4);
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < 12; ++k)
        for (int n = 0; n < 4; ++n) {
          dx[i * 12 + k] += ws[k * 4 + n];
          dw[k * 4 + n] += xs[i * 12 + k];
        }
    expect_close(typemesh::export_tensor(x.grad()).values(), dx, 1e-12, "dx with the forward pass's w");
    expect_close(typemesh::export_tensor(w.grad()).values(), dw, 1e-12, "dw with the forward pass's x");
  });
}

TEST(Einsum, AnyDimOrder) {
  const std::vector<values> in{random_values(24, 5), random_values(30, 6)};
  transposed_case c;
  check_layouts<M2, layout<d0(a0)>, layout<>>("batch split", {2, 1}, in, c);
  check_layouts<M2, layout<d1(a1)>, layout<d1(a1)>>("contracted split", {1, 2}, in, c);
  check_layouts<M2, layout<d0(a1)>, layout<d2(a0)>>("both outputs split", {5, 2}, in, c);
}

struct outer_and_sum_case {  // a summed dim only one input has, and an outer product
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(S01{4, 6}, in[0]));
    auto w = import_tensor<LW>(m, host(shape<d2>{3}, in[1]));
    x.requires_grad("x"), w.requires_grad("w");
    return finish(weighted_sum(typemesh::einsum<d0, d2>(x, w)), x, w);
  }
};

TEST(Einsum, SummedDimInOneInput) {
  const std::vector<values> in{random_values(24, 7), random_values(3, 8)};
  outer_and_sum_case c;
  check_layouts<M2, layout<>, layout<>>("replicated", {2, 2}, in, c);
  check_layouts<M2, layout<d1(a1)>, layout<>>("summed dim split", {1, 3}, in, c);
  check_layouts<M2, layout<d0(a0)>, layout<d2(a1)>>("both output dims split", {2, 3}, in, c);
}

struct shape_form_case {  // einsum<Out> with Out computed by the shape algebra, as layers write it
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    using SX = shape<d1, d0>;
    using SW = shape<d2, d1>;
    auto x = import_tensor<LX>(m, host(SX{6, 4}, in[0]));
    auto w = import_tensor<LW>(m, host(SW{5, 6}, in[1]));
    x.requires_grad("x"), w.requires_grad("w");
    using Out = typemesh::shape_union<typemesh::shape_minus<SX, SW>, typemesh::shape_minus<SW, SX>>;
    auto y = typemesh::einsum<Out>(x, w);
    static_assert(std::is_same_v<decltype(y), decltype(typemesh::einsum<d0, d2>(x, w))>);
    return finish(weighted_sum(y), x, w);
  }
};

// The local contraction with alpha and beta (out = alpha * sum + beta * out,
// what an SGD step folded into a weight gradient's product asks for), on
// every path the kernel has, against a brute-force sum over the index space:
// a GEMM into out as stored, into out transposed, into a staged copy, the
// general fold (a summed dim in one operand only), and an empty sum.
TEST(Contract, ScalesAndAddsOnEveryPath) {
  using typemesh::backend::dims;
  auto make = [](std::vector<std::pair<int, std::int64_t>> ds) {
    dims d;
    for (auto [id, extent] : ds) d.id[d.rank] = id, d.extent[d.rank++] = extent;
    return d;
  };
  // Row-major offset of x's element at the index `at` (by dim id).
  auto offset = [](const dims& x, const std::array<std::int64_t, 8>& at) {
    std::int64_t o = 0;
    for (int i = 0; i < x.rank; ++i) o = o * x.extent[i] + at[x.id[i]];
    return o;
  };
  struct case_t {
    const char* name;
    dims a, b, out;
  };
  // ids: 0 m, 1 k, 2 n, 3 a second m dim, 4 a dim only a has (summed).
  const std::vector<case_t> cases = {
      {"gemm", make({{0, 5}, {1, 7}}), make({{1, 7}, {2, 6}}), make({{0, 5}, {2, 6}})},
      {"transposed out", make({{0, 5}, {1, 7}}), make({{2, 6}, {1, 7}}), make({{2, 6}, {0, 5}})},
      {"staged out", make({{0, 3}, {3, 4}, {1, 7}}), make({{1, 7}, {2, 6}}), make({{0, 3}, {2, 6}, {3, 4}})},
      {"fold", make({{0, 5}, {1, 7}, {4, 3}}), make({{1, 7}, {2, 6}}), make({{0, 5}, {2, 6}})},
      {"empty sum", make({{0, 5}, {1, 0}}), make({{1, 0}, {2, 6}}), make({{0, 5}, {2, 6}})},
  };
  for (const auto& c : cases) {
    const auto av = random_values(static_cast<std::size_t>(c.a.elements()), 40);
    const auto bv = random_values(static_cast<std::size_t>(c.b.elements()), 41);
    const auto start = random_values(static_cast<std::size_t>(c.out.elements()), 42);
    for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{-0.25, 1.0}, std::pair{2.0, 0.5}}) {
      // Brute force over every index of the union of the dims.
      std::vector<double> sum(start.size(), 0.0);
      std::array<std::int64_t, 8> extent{}, at{};
      for (const dims* d : {&c.a, &c.b, &c.out})
        for (int i = 0; i < d->rank; ++i) extent[d->id[i]] = d->extent[i];
      std::int64_t total = 1;
      for (int id = 0; id < 5; ++id) total *= extent[id] ? extent[id] : 1;
      bool empty = false;
      for (const dims* d : {&c.a, &c.b}) empty = empty || d->elements() == 0;
      for (std::int64_t flat = 0; flat < total && !empty; ++flat) {
        std::int64_t r = flat;
        for (int id = 5; id-- > 0;) {
          const std::int64_t e = extent[id] ? extent[id] : 1;
          at[id] = r % e, r /= e;
        }
        sum[offset(c.out, at)] += av[offset(c.a, at)] * bv[offset(c.b, at)];
      }
      std::vector<double> out = start;
      typemesh::backend::contract(typemesh::host_space{}, av.data(), c.a, bv.data(), c.b, out.data(), c.out, alpha,
                                  beta);
      for (std::size_t i = 0; i < out.size(); ++i) {
        EXPECT_NEAR(out[i], alpha * sum[i] + beta * start[i], 1e-12)
            << c.name << ", alpha " << alpha << ", beta " << beta << ", element " << i;
      }
    }
  }
}

TEST(Einsum, OutputAsAShape) {
  const std::vector<values> in{random_values(24, 15), random_values(30, 16)};
  shape_form_case c;
  check_layouts<M2, layout<d0(a0)>, layout<>>("batch split", {2, 1}, in, c);
  check_layouts<M2, layout<d1(a1)>, layout<d1(a1)>>("contracted split", {1, 2}, in, c);
}

// --- Elementwise ----------------------------------------------------------------

struct broadcast_case {
  template <class LX, class LB, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(S01{4, 6}, in[0]));
    auto b = import_tensor<LB>(m, host(shape<d1>{6}, in[1]));
    x.requires_grad("x"), b.requires_grad("b");
    auto y = (x + b) * x - b / (x * x + 2.0);
    auto z = typemesh::maximum(y, b) + typemesh::minimum(x, b);
    return finish(weighted_sum(z), x, b);
  }
};

TEST(Elementwise, BroadcastByDimName) {
  const std::vector<values> in{random_values(24, 9), random_values(6, 10)};
  broadcast_case c;
  check_layouts<M2, layout<d0(a0)>, layout<>>("broadcast dim split", {4, 1}, in, c);
  check_layouts<M2, layout<d1(a1)>, layout<d1(a1)>>("shared dim split", {1, 3}, in, c);
  check_layouts<M2, layout<d0(a0), d1(a1)>, layout<d1(a1)>>("both", {2, 2}, in, c);
}

struct unary_case {
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(S01{4, 6}, in[0]));
    x.requires_grad("x");
    auto p = typemesh::exp(x);  // positive
    auto y = typemesh::relu(x) + typemesh::sigmoid(x) + typemesh::tanh(x) + typemesh::log(p + 1.0) +
             typemesh::sqrt(p) + typemesh::rsqrt(p) + typemesh::square(x) * 0.5 - typemesh::abs(x) + (-x);
    return finish(weighted_sum(y), x);
  }
};

TEST(Elementwise, UnaryFunctions) {
  const std::vector<values> in{random_values(24, 11)};
  unary_case c;
  check_layouts<M2, layout<d0(a0)>>("d0 split", {2, 1}, in, c);
  check_layouts<M2, layout<d1(a1)>>("d1 split", {1, 3}, in, c);
  check_layouts<M2, layout<d0(a1), d1(a0)>>("both split", {2, 4}, in, c);
}

// --- Reductions -----------------------------------------------------------------

struct reduce_case {
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<d0, d1, d2>{4, 6, 2}, in[0]));
    x.requires_grad("x");
    auto s = typemesh::reduce_sum<d1>(x);                    // [d0, d2]
    auto mx = typemesh::reduce_max<d0>(x);                   // [d1, d2]
    auto mean = typemesh::reduce_mean<d0, d2>(x);            // [d1]
    auto loss = weighted_sum(s) + weighted_sum(mx, 5) + weighted_sum(mean, 6) + typemesh::reduce_mean(x);
    return finish(loss, x);
  }
};

TEST(Reduce, SumMeanMaxOverSplitDims) {
  const std::vector<values> in{random_values(48, 12)};
  reduce_case c;
  check_layouts<M2, layout<d1(a0)>>("reduced dim split", {3, 1}, in, c);
  check_layouts<M2, layout<d0(a0), d2(a1)>>("kept and reduced split", {2, 2}, in, c);
  check_layouts<M2, layout<d1(a1), d0(a0)>>("both reduced dims split", {4, 2}, in, c);
}

// --- Collectives and conversions ------------------------------------------------

struct collectives_case {  // x: [d0 on a1, d1 whole]
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(S01{4, 6}, in[0]));
    x.requires_grad("x");
    auto whole = typemesh::allconcat<d0>(x);             // allgather; gradient: allsplit
    auto moved = typemesh::alltoall<d0, d1>(x);          // d1 on a1; gradient: the alltoall back
    auto back = typemesh::relayout<LX>(moved);           // an alltoall again
    auto split = typemesh::allsplit<d1, a0>(whole);      // no traffic; gradient: allconcat
    auto loss = weighted_sum(typemesh::square(whole)) + weighted_sum(back * back, 3) + weighted_sum(split, 4) +
                weighted_sum(moved, 5);
    return finish(loss, x);
  }
};

TEST(Collectives, GradientsAreTheDuals) {
  const std::vector<values> in{random_values(24, 13)};
  collectives_case c;
  check_layouts<M2, layout<d0(a1)>>("d0 on a1", {3, 2}, in, c);
  check_layouts<M2, layout<d0(a1)>>("d0 on a1, one replica", {1, 2}, in, c);
}

// allreduce takes partial sums (one per device along the axis) to their sum:
// each partial's gradient is the sum's. reduce_scatter's is an allgather.
TEST(Collectives, AllreduceAndReduceScatterGradients) {
  const auto xs = random_values(24, 16), cs = random_values(24, 17);
  typemesh::launch(3, [&] {
    M2 m({3, 1});
    auto x = import_tensor<layout<>>(m, host(S01{6, 4}, xs));
    auto c = import_tensor<layout<>>(m, host(S01{6, 4}, cs));
    x.requires_grad("x");
    auto loss = typemesh::reduce_sum(typemesh::allreduce<a0>(x) * c);
    typemesh::backward(loss);
    expect_close(typemesh::export_tensor(x.grad()).values(), cs, 0, "allreduce gradient");
    x.zero_grad();
    auto scattered = typemesh::reduce_scatter<d0, a0>(x);
    auto c_split = import_tensor<layout<d0(a0)>>(m, host(S01{6, 4}, cs));
    typemesh::backward(typemesh::reduce_sum(scattered * c_split));
    expect_close(typemesh::export_tensor(x.grad()).values(), cs, 0, "reduce_scatter gradient");
  });
}

using lstm0_mesh = typemesh::mesh<"stage0", a0, a1>;
using lstm1_mesh = typemesh::mesh<"stage1", a0, a1>;

// A tensor moved between meshes: its gradient is the reverse move.
TEST(Conversions, ReplaceMeshGradientIsTheReverseMove) {
  const auto xs = random_values(8 * 6, 14), ws = random_values(6 * 4, 15);
  auto run = [&](int devices, std::array<int, 2> s0, std::array<int, 2> s1, bool disjoint) {
    return typemesh::launch(devices, [&](typemesh::device& dev) {
      const int half = disjoint ? devices / 2 : devices;
      std::vector<int> first(half), second(half);
      std::iota(first.begin(), first.end(), 0);
      std::iota(second.begin(), second.end(), disjoint ? half : 0);
      lstm0_mesh m0(s0, first);
      lstm1_mesh m1(s1, second);
      auto x = import_tensor<layout<d0(a0)>>(m0, host(S01{8, 6}, xs));
      auto w = import_tensor<layout<d1(a1)>>(m1, host(S12{6, 4}, ws));
      x.requires_grad("x"), w.requires_grad("w");
      auto h = typemesh::tanh(x);
      auto moved = typemesh::replace_mesh<layout<d1(a1)>>(h, m1);
      auto loss = weighted_sum(typemesh::einsum<d0, d2>(moved, w));
      typemesh::backward(loss);
      auto gx = typemesh::export_tensor(x.grad());
      auto gw = typemesh::export_tensor(w.grad());
      (void)dev;
      return std::make_pair(gx.values(), gw.values());
    });
  };
  auto ref = run(1, {1, 1}, {1, 1}, false);
  auto got = run(8, {4, 1}, {2, 2}, true);
  // Device 0 holds x (first mesh), device 4 holds w (second mesh).
  expect_close(got[0].first, ref[0].first, 1e-12, "x gradient across meshes");
  expect_close(got[4].second, ref[0].second, 1e-12, "w gradient across meshes");
}

// --- Variables and optimizers ---------------------------------------------------

TEST(Variables, InitialisationIsLayoutIndependent) {
  auto values_under = [](auto layout_tag, std::array<int, 2> sizes) {
    using L = decltype(layout_tag);
    return typemesh::launch(sizes[0] * sizes[1], [&] {
      M2 m(sizes);
      auto w = typemesh::variable<L>(m, "w", S01{8, 6}, typemesh::init::normal{0.5}, 42);
      return typemesh::export_tensor(w).values();
    })[0];
  };
  const auto one = values_under(layout<>{}, {1, 1});
  EXPECT_EQ(values_under(layout<d0(a0)>{}, {4, 1}), one);
  EXPECT_EQ(values_under(layout<d1(a1), d0(a0)>{}, {2, 3}), one);
  double mean = 0, sq = 0;
  for (float v : one) mean += v, sq += double(v) * v;
  mean /= one.size();
  EXPECT_LT(std::abs(mean), 0.25);
  EXPECT_NEAR(std::sqrt(sq / one.size()), 0.5, 0.2);
  // Another name or seed gives other values.
  auto other = typemesh::launch(1, [] {
    M2 m({1, 1});
    return typemesh::export_tensor(typemesh::variable<layout<>>(m, "v", S01{8, 6}, typemesh::init::normal{0.5}, 42))
        .values();
  })[0];
  EXPECT_NE(other, one);
}

// The values of a tensor on this device, as doubles (empty outside its mesh).
template <class Tensor>
std::vector<double> local_values(const Tensor& t) {
  auto l = t.local();
  return {l.begin(), l.end()};
}

// A few training steps of a two-layer network: the same losses under every
// layout as on one device.
// With `minimize`, each step is opt.minimize(loss, ...) instead of backward
// then step; `folded` (if given) gets how many variables each minimize
// folded into their products, as device 0 counts them.
template <class L1, class L2, class Opt>
std::vector<double> train(std::array<int, 2> sizes, Opt opt, bool minimize = false,
                          std::vector<std::size_t>* folded = nullptr) {
  const auto xs = random_values(8 * 6, 20), ts = random_values(8 * 4, 21);
  return typemesh::launch(sizes[0] * sizes[1], [&](typemesh::device& dev) {
    M2 m(sizes);
    Opt o = opt;
    auto w1 = typemesh::variable<L1, double>(m, "w1", S12{6, 10}, typemesh::init::glorot_uniform{6, 10}, 1);
    auto b1 = typemesh::variable<typename L1::template without<d1>, double>(m, "b1", shape<d2>{10});
    auto w2 = typemesh::variable<L2, double>(m, "w2", shape<d2, d3>{10, 4}, typemesh::init::normal{0.3}, 1);
    std::vector<double> losses;
    for (int step = 0; step < 4; ++step) {
      auto x = import_tensor<layout<d0(a0)>>(m, host(S01{8, 6}, xs));
      auto h = typemesh::relu(typemesh::einsum<d0, d2>(x, w1) + b1);
      auto y = typemesh::einsum<d0, d3>(h, w2);
      auto t = import_tensor<typename decltype(y)::layout_type>(m, host(y.shape(), ts));
      auto loss = typemesh::reduce_mean(typemesh::square(y - t));
      losses.push_back(typemesh::export_tensor(loss.detached()).values()[0]);
      if (minimize) {
        o.minimize(loss, w1, b1, w2);
        if constexpr (std::is_same_v<Opt, typemesh::optim::sgd>) {
          if (folded && dev.id() == 0) folded->push_back(o.folded());
        }
      } else {
        typemesh::backward(loss);
        o.step(w1, b1, w2);
      }
    }
    // The weights after the last step, as the last "losses".
    for (const auto& v : {typemesh::export_tensor(w1).values(), typemesh::export_tensor(w2).values()})
      losses.insert(losses.end(), v.begin(), v.end());
    return losses;
  })[0];
}

TEST(Optimizers, SgdAndAdamStepsMatchOneDevice) {
  using LW1 = layout<d2(a1)>;  // hidden units split: no allreduce in layer 1
  using LW2 = layout<d2(a1)>;  // contracted dim split: allreduce in layer 2
  for (int which = 0; which < 2; ++which) {
    auto run = [&](std::array<int, 2> sizes) {
      return which == 0 ? train<LW1, LW2>(sizes, typemesh::optim::sgd(0.1))
                        : train<LW1, LW2>(sizes, typemesh::optim::adam(0.01));
    };
    const auto ref = run({1, 1});
    expect_close(run({2, 2}), ref, 1e-10, which == 0 ? "sgd" : "adam");
    expect_close(run({4, 1}), ref, 1e-10, which == 0 ? "sgd, data parallel" : "adam, data parallel");
    EXPECT_LT(ref.back(), ref.front()) << "training lowers the loss";
  }
}

// minimize is backward then step. SGD folds its step into the weight
// gradients' products where they are local: both weights on one device and
// with the hidden units split (w1's and w2's gradients are then each one
// device's product), neither under data parallelism (both are allreduced);
// the bias's gradient (a sum) is never folded. The values agree with
// backward-then-step to rounding (the folded product is scaled before it is
// rounded).
TEST(Optimizers, MinimizeIsBackwardThenStep) {
  using L = layout<d2(a1)>;
  for (std::array<int, 2> sizes : {std::array{1, 1}, std::array{1, 2}, std::array{2, 2}, std::array{4, 1}}) {
    const std::string where = "mesh " + std::to_string(sizes[0]) + "x" + std::to_string(sizes[1]);
    std::vector<std::size_t> folded;
    const auto stepped = train<L, L>(sizes, typemesh::optim::sgd(0.1));
    const auto minimized = train<L, L>(sizes, typemesh::optim::sgd(0.1), true, &folded);
    expect_close(minimized, stepped, 1e-13, ("sgd, " + where).c_str());
    const std::size_t expected = sizes[0] == 1 ? 2 : 0;  // batch split over a0: allreduced gradients
    EXPECT_EQ(folded, std::vector<std::size_t>(4, expected)) << where;
    expect_close(train<L, L>(sizes, typemesh::optim::adam(0.01), true),
                 train<L, L>(sizes, typemesh::optim::adam(0.01)), 0.0, ("adam, " + where).c_str());
  }
}

// A variable whose values another tensor shares is not written during the
// pass (that would copy them): its step comes after, as step() takes it, and
// the sharing tensor keeps the old values. A weight used twice gets both
// contributions, folded or not.
TEST(Optimizers, MinimizeLeavesSharedValuesAndSumsEveryUse) {
  const auto xs = random_values(4 * 6, 30), x2s = random_values(4 * 6, 31);
  auto run = [&](bool minimize, bool keep_a_copy) {
    return typemesh::launch(1, [&] {
      M2 m({1, 1});
      auto w = typemesh::variable<layout<>, double>(m, "w", S12{6, 5}, typemesh::init::normal{0.5}, 7);
      const auto before = typemesh::export_tensor(w).values();
      std::optional<decltype(w)> copy;
      if (keep_a_copy) copy = w;
      auto x = import_tensor<layout<>>(m, host(S01{4, 6}, xs));
      auto x2 = import_tensor<layout<>>(m, host(S01{4, 6}, x2s));
      auto y = typemesh::einsum<d0, d2>(x, w) + typemesh::einsum<d0, d2>(x2, w);
      auto loss = typemesh::reduce_sum(y * y);
      typemesh::optim::sgd opt(0.05);
      if (minimize) {
        opt.minimize(loss, w);
        EXPECT_EQ(opt.folded(), keep_a_copy ? 0u : 1u);
      } else {
        typemesh::backward(loss);
        opt.step(w);
      }
      if (copy) {
        EXPECT_EQ(typemesh::export_tensor(*copy).values(), before);
      }
      EXPECT_FALSE(w.has_grad());
      return typemesh::export_tensor(w).values();
    })[0];
  };
  const auto reference = run(false, false);
  expect_close(run(true, false), reference, 1e-13, "folded");
  expect_close(run(true, true), reference, 1e-13, "shared, held");
}

// minimize checks before anything changes: a variable the loss does not
// reach is named (or skipped when allowed), a tensor that is not a variable
// and a loss that reaches no variable are errors.
TEST(Optimizers, MinimizeChecksBeforeAnythingChanges) {
  typemesh::launch(2, [] {
    M2 m({2, 1});
    auto w = typemesh::variable<layout<d0(a0)>, double>(m, "net/w", S01{4, 3}, typemesh::init::constant{1.0});
    auto b = typemesh::variable<layout<>, double>(m, "net/b", shape<d1>{3}, typemesh::init::constant{1.0});
    const auto w0 = local_values(w), b0 = local_values(b);
    typemesh::optim::sgd opt(0.1);
    expect_error<typemesh::error>([&] { opt.minimize(typemesh::reduce_sum(w * w), w, b); },
                                  {"optim::sgd.minimize", "does not depend on variable 'net/b'",
                                   "allow_missing_gradients"});
    EXPECT_EQ(local_values(w), w0);
    EXPECT_FALSE(w.has_grad());
    auto x = import_tensor<layout<d0(a0)>>(m, host(S01{4, 3}, random_values(12, 3)));
    expect_error<typemesh::error>([&] { opt.minimize(typemesh::reduce_sum(w * x), w, x); },
                                  {"1 of its 2 variables is a tensor that does not require a gradient"});
    expect_error<typemesh::error>([&] { opt.minimize(typemesh::reduce_sum(x), w); },
                                  {"optim::sgd.minimize: the loss does not depend on any tensor"});
    EXPECT_EQ(local_values(w), w0);
    typemesh::optim::adam strict(0.01);
    expect_error<typemesh::error>([&] { strict.minimize(typemesh::reduce_sum(b * b), w, b); },
                                  {"optim::adam.minimize", "variable 'net/w'"});
    EXPECT_EQ(local_values(b), b0);
    typemesh::optim::sgd lenient(0.1, {.allow_missing_gradients = true});
    lenient.minimize(typemesh::reduce_sum(w * w), w, b);  // d/dw = 2w = 2
    for (double v : local_values(w)) EXPECT_NEAR(v, 0.8, 1e-15);
    EXPECT_EQ(local_values(b), b0);
  });
}

TEST(Variables, NamedByTensorTypeAndReadAsScalars) {
  typemesh::launch(2, [] {
    M2 m({2, 1});
    using w_t = typemesh::tensor<double, S01, layout<d0(a0)>, M2>;
    w_t w = typemesh::variable<w_t>(m, "w", {4, 3}, typemesh::init::constant{2.0});
    auto same = typemesh::variable<layout<d0(a0)>, double>(m, "w", S01{4, 3}, typemesh::init::constant{2.0});
    EXPECT_EQ(typemesh::export_tensor(w).values(), typemesh::export_tensor(same).values());
    EXPECT_EQ(typemesh::reduce_sum(w).item(), 24.0);
  });
  typemesh::launch(2, [](typemesh::device& dev) {
    M2 m({1, 1}, {1});
    auto s = typemesh::reduce_sum(import_tensor<layout<>>(m, host(S01{2, 2}, values{1, 2, 3, 4})));
    if (dev.id() == 1) {
      EXPECT_EQ(s.item(), 10.0);
    } else {
      expect_error<typemesh::device_error>([&] { (void)s.item(); }, {"item(): device 0 is outside", "'ops'"});
    }
  });
}

TEST(Autodiff, ErrorsNameTheTensor) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    auto x = import_tensor<layout<>>(m, host(S01{2, 2}, random_values(4, 1)));
    expect_error<typemesh::error>([&] { (void)x.grad(); }, {"does not require one"});
    expect_error<typemesh::error>([&] { typemesh::backward(typemesh::reduce_sum(x)); }, {"does not depend"});
    auto w = typemesh::variable<layout<>, double>(m, "layer/w", S01{2, 2});
    expect_error<typemesh::error>([&] { (void)w.grad(); }, {"'layer/w'", "backward has not reached it"});
  });
}

// A layout written in another order than the shape's is the same layout: a
// tensor converted to that spelling shares the gradient of the original, and
// gradients pass through it.
TEST(Autodiff, LayoutSpelledInAnotherOrderSharesTheGradient) {
  const auto xs = random_values(24, 21);
  typemesh::launch(4, [&] {
    M2 m({2, 2});
    auto x = import_tensor<layout<d1(a1), d0(a0)>>(m, host(shape<d0, d1>{4, 6}, xs));
    x.requires_grad("x");
    typemesh::tensor<double, shape<d0, d1>, layout<d0(a0), d1(a1)>, M2> y = x;  // the canonical spelling
    typemesh::backward(typemesh::reduce_sum(y * y + x));
    const auto g = typemesh::export_tensor(x.grad()), gy = typemesh::export_tensor(y.grad());
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) {
        EXPECT_NEAR((g[{i, j}]), 2 * xs[i * 6 + j] + 1, 1e-12);
        EXPECT_NEAR((gy[{i, j}]), (g[{i, j}]), 0.0);
      }
  });
}

// --- Optimizers: a variable without a gradient ------------------------------------

// A step on variables backward has not reached since the last step is an
// error naming them, and changes nothing; the option lets it skip them.
template <class Opt>
void check_missing_gradients(const char* name, Opt strict, Opt lenient) {
  typemesh::launch(2, [&] {
    M2 m({2, 1});
    auto w = typemesh::variable<layout<d0(a0)>, double>(m, "net/w", S01{4, 3}, typemesh::init::constant{1.0});
    auto b = typemesh::variable<layout<>, double>(m, "net/b", shape<d1>{3}, typemesh::init::constant{1.0});
    const auto w0 = local_values(w), b0 = local_values(b);
    Opt opt = strict;
    // backward forgotten: both named, nothing changes.
    expect_error<typemesh::error>([&] { opt.step(w, b); },
                                  {std::string(name) + ".step", "variables 'net/w', 'net/b' have no gradient",
                                   "backward", "allow_missing_gradients"});
    EXPECT_EQ(local_values(w), w0);
    // The loss reaches w only: b is named, and w is not updated either.
    typemesh::backward(typemesh::reduce_sum(w * w));
    expect_error<typemesh::error>([&] { opt.step(w, b); }, {"variable 'net/b' has no gradient"});
    EXPECT_EQ(local_values(w), w0);
    EXPECT_TRUE(w.has_grad());
    opt.step(w);  // the gradient backward left is still there
    const auto w1 = local_values(w);
    for (std::size_t i = 0; i < w1.size(); ++i) EXPECT_LT(w1[i], w0[i]) << name << ": d/dw sum(w^2) = 2w > 0";
    // The step used the gradient: the next step needs another backward.
    expect_error<typemesh::error>([&] { opt.step(w); }, {"variable 'net/w' has no gradient since the last step"});
    // Allowed explicitly: w steps as the strict optimizer does, b is left alone.
    Opt allowing = lenient, reference = strict;
    auto w_ref = typemesh::variable<layout<d0(a0)>, double>(m, "net/w", S01{4, 3}, typemesh::init::constant{1.0});
    auto w_opt = typemesh::variable<layout<d0(a0)>, double>(m, "net/w", S01{4, 3}, typemesh::init::constant{1.0});
    typemesh::backward(typemesh::reduce_sum(w_ref * w_ref));
    reference.step(w_ref);
    typemesh::backward(typemesh::reduce_sum(w_opt * w_opt));
    allowing.step(w_opt, b);
    EXPECT_EQ(local_values(w_opt), local_values(w_ref)) << name;
    EXPECT_EQ(local_values(b), b0) << name;
    // A tensor that is not a variable never gets a gradient: always an error.
    auto x = import_tensor<layout<>>(m, host(S01{4, 3}, random_values(12, 3)));
    expect_error<typemesh::error>([&] { allowing.step(x); },
                                  {"1 of its 1 arguments is a tensor that does not require a gradient"});
  });
}

TEST(Optimizers, StepWithoutGradientNamesTheVariables) {
  check_missing_gradients("optim::sgd", typemesh::optim::sgd(0.1),
                          typemesh::optim::sgd(0.1, {.allow_missing_gradients = true}));
  check_missing_gradients("optim::adam", typemesh::optim::adam(0.01),
                          typemesh::optim::adam(0.01, {.allow_missing_gradients = true}));
}

// A device outside a variable's mesh holds none of it: no gradient there is
// not a missing gradient, and the devices of the mesh step as one device does.
TEST(Optimizers, DevicesOutsideAVariablesMeshStepWithoutError) {
  auto run = [](int devices, std::vector<int> mesh_devices) {
    return typemesh::launch(devices, [&](typemesh::device& dev) {
      M2 m({static_cast<int>(mesh_devices.size()), 1}, mesh_devices);
      auto w = typemesh::variable<layout<d0(a0)>, double>(m, "w", S01{4, 3}, typemesh::init::normal{1.0}, 5);
      typemesh::optim::sgd opt(0.1);
      for (int step = 0; step < 2; ++step) {
        typemesh::backward(typemesh::reduce_sum(w * w * w));
        opt.step(w);
      }
      EXPECT_EQ(w.holds_data(), m.contains(dev.id()));
      return typemesh::export_tensor(w).values();
    });
  };
  const auto one = run(1, {0})[0];
  const auto four = run(4, {2, 1});  // devices 0 and 3 hold nothing
  EXPECT_EQ(four[1], one);
  EXPECT_EQ(four[2], one);
  EXPECT_TRUE(four[0].empty() && four[3].empty());
}

// Adam counts steps per variable: stepping w and b in two calls gives what
// one call gives (bias correction 1 - beta^t with each variable's own t).
TEST(Optimizers, AdamStepsCountPerVariable) {
  auto run = [](bool separate_calls) {
    return typemesh::launch(1, [&] {
      M2 m({1, 1});
      auto w = typemesh::variable<layout<>, double>(m, "w", S01{2, 3}, typemesh::init::normal{1.0}, 3);
      auto b = typemesh::variable<layout<>, double>(m, "b", shape<d1>{3}, typemesh::init::normal{1.0}, 4);
      typemesh::optim::adam opt(0.1);
      for (int step = 0; step < 3; ++step) {
        typemesh::backward(typemesh::reduce_sum(w * w + b * b * b));
        if (separate_calls) opt.step(w), opt.step(b);
        else opt.step(w, b);
      }
      auto values = typemesh::export_tensor(w).values();
      const auto bs = typemesh::export_tensor(b);
      values.insert(values.end(), bs.values().begin(), bs.values().end());
      return values;
    })[0];
  };
  const auto together = run(false), apart = run(true);
  ASSERT_EQ(together.size(), apart.size());
  for (std::size_t i = 0; i < together.size(); ++i) EXPECT_EQ(apart[i], together[i]) << "element " << i;
}

}  // namespace

// The Transformer's layers: layer_norm, dropout, softmax, multihead
// attention, dense_relu_dense and the positional encoding. Each layer's loss
// and gradients under several layouts (batch, heads, d_ff, d_model or the
// memory length split, and 2-d meshes) equal the one-device run, whose
// gradients equal finite differences (tests/grad_check.hpp); the forward
// values equal references computed here with plain loops; dropout masks are
// the same under every layout. Every layer takes its dims by role, so an
// input whose shape lists the dims in another order (weights too) gives the
// same values and gradients as the canonical order, under split layouts.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include <typemesh/layers/attention.hpp>
#include <typemesh/layers/dropout.hpp>
#include <typemesh/layers/layer_norm.hpp>

#include "grad_check.hpp"

namespace {
using namespace tt;
using typemesh::import_tensor;
using typemesh::layout;
using typemesh::shape;

using M2 = typemesh::mesh<"transformer", a0, a1>;

struct batch : typemesh::dim<"batch"> {};
struct length : typemesh::dim<"length"> {};
struct memory_length : typemesh::dim<"memory_length"> {};
struct d_model : typemesh::dim<"d_model"> {};
struct heads : typemesh::dim<"heads"> {};
struct d_k : typemesh::dim<"d_k"> {};
struct d_v : typemesh::dim<"d_v"> {};
struct d_ff : typemesh::dim<"d_ff"> {};

// loss = sum(y * c) for a fixed random c placed like y: d loss / d y = c.
template <class Y>
auto weighted_sum(const Y& y, unsigned seed = 99) {
  auto c = import_tensor<typename Y::layout_type>(
      y.mesh(), host(y.shape(), random_values(static_cast<std::size_t>(y.shape().elements()), seed)));
  return typemesh::reduce_sum(typemesh::mul(y, c));
}

// The whole of a tensor on every device, as a flat vector.
template <class X>
values whole(const X& x) {
  return typemesh::export_tensor(x.detached()).values();
}

// The values of a whole tensor of shape `from`, listed in the order of shape
// To: the same dims in another order. Empty stays empty (a device outside the
// tensor's mesh).
template <class To, class From>
values reorder(const From& from, const values& v) {
  static_assert(typemesh::same_dims<From, To>);
  if (v.empty()) return v;
  const To to = typemesh::shape_from<To>(from);
  std::array<std::int64_t, From::rank> from_stride{};
  std::int64_t stride = 1;
  for (std::size_t i = From::rank; i-- > 0;) {
    from_stride[i] = stride;
    stride *= from[i];
  }
  std::array<std::int64_t, To::rank> step{};  // each of To's dims: its stride in From's order
  [&]<class... Ds>(typemesh::type_list<Ds...>) {
    std::size_t i = 0;
    ((step[i++] = from_stride[From::template index_of<Ds>]), ...);
  }(typemesh::dims_of<To>{});
  values out(v.size());
  std::array<std::int64_t, To::rank> idx{};
  for (std::size_t n = 0; n < out.size(); ++n) {
    std::int64_t at = 0;
    for (std::size_t i = 0; i < To::rank; ++i) at += idx[i] * step[i];
    out[n] = v[static_cast<std::size_t>(at)];
    for (std::size_t i = To::rank; i-- > 0;) {
      if (++idx[i] < to[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

// A whole tensor given in canonical order C (with C's sizes), imported under
// layout L as shape S: the same dims, perhaps in another order.
template <class S, class L, class M, class C>
auto import_as(const M& m, const C& canonical_shape, const values& v) {
  const S s = typemesh::shape_from<S>(canonical_shape);
  return import_tensor<L>(m, host(s, reorder<S>(canonical_shape, v)));
}

// weighted_sum with the weights drawn in canonical order C, so that the loss
// is the same whatever order y lists its dims in.
template <class C, class Y>
auto weighted_sum_as(const Y& y, unsigned seed = 99) {
  const C c_shape = typemesh::shape_from<C>(y.shape());
  const auto n = static_cast<std::size_t>(y.shape().elements());
  auto c = import_tensor<typename Y::layout_type>(
      y.mesh(), host(y.shape(), reorder<typename Y::shape_type>(c_shape, random_values(n, seed))));
  return typemesh::reduce_sum(typemesh::mul(y, c));
}

// A tensor's gradient (as finish() exported it, in x's order) in canonical order C.
template <class C, class X>
values grad_as(const X& x, const values& g) {
  return reorder<C>(x.shape(), g);
}

// Runs a case whose outcome is in canonical order on one device with the
// canonical shapes and under `sizes` with permuted ones: the loss, the
// gradients and the extra outcome entries (the output's values) must agree.
template <class Mesh, class... Layouts, class Canonical, class Permuted>
void expect_same_as_canonical(const std::string& name, const typename Mesh::coords& sizes,
                              const std::vector<values>& inputs, Canonical canonical, Permuted permuted) {
  SCOPED_TRACE(name);
  typename Mesh::coords one{};
  one.fill(1);
  const outcome ref = run_case<Mesh, Layouts...>(one, inputs, canonical);
  const outcome got = run_case<Mesh, Layouts...>(sizes, inputs, permuted);
  ASSERT_FALSE(std::isnan(ref.loss));
  EXPECT_NEAR(got.loss, ref.loss, 1e-10 * (1 + std::abs(ref.loss))) << name << ": loss vs canonical order";
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  for (std::size_t i = 0; i < ref.grads.size(); ++i) {
    expect_close(got.grads[i], ref.grads[i], 1e-10, name + ": entry " + std::to_string(i) + " vs canonical order");
  }
}

// --- layer_norm -------------------------------------------------------------------

using SX = shape<batch, length, d_model>;
constexpr int B = 4, LEN = 2, DM = 6;

// x of shape S (SX's dims in any order); the outcome is in SX's order, and
// ends with the output's values.
template <class S = SX>
struct layer_norm_case {
  template <class LX, class LS, class LB, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_as<S, LX>(m, SX{B, LEN, DM}, in[0]);
    auto s = import_tensor<LS>(m, host(shape<d_model>{DM}, in[1]));
    auto b = import_tensor<LB>(m, host(shape<d_model>{DM}, in[2]));
    x.requires_grad("x"), s.requires_grad("scale"), b.requires_grad("bias");
    auto y = typemesh::layer_norm<d_model>(x, s, b, {.epsilon = 1e-6});
    static_assert(std::is_same_v<typename decltype(y)::shape_type, S>);
    outcome o = finish(weighted_sum_as<SX>(y), x, s, b);
    o.grads[0] = grad_as<SX>(x, o.grads[0]);
    o.grads.push_back(reorder<SX>(y.shape(), whole(y)));
    return o;
  }
};

TEST(LayerNorm, GradientsUnderLayouts) {
  const std::vector<values> in{random_values(B * LEN * DM, 1), random_values(DM, 2, 0.5, 1.5),
                               random_values(DM, 3)};
  layer_norm_case<> c;
  check_layouts<M2, layout<batch(a0)>, layout<>, layout<>>("batch split", {2, 1}, in, c);
  check_layouts<M2, layout<d_model(a1)>, layout<d_model(a1)>, layout<d_model(a1)>>("d_model split", {1, 3}, in, c);
  check_layouts<M2, layout<batch(a0), d_model(a1)>, layout<d_model(a1)>, layout<d_model(a1)>>(
      "batch and d_model split", {2, 2}, in, c);
}

// layer_norm as the composed ops the host's single op replaces (and CUDA
// still runs): the normalisation, then mul and add.
struct layer_norm_composed_case {
  template <class LX, class LS, class LB, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(SX{B, LEN, DM}, in[0]));
    auto s = import_tensor<LS>(m, host(shape<d_model>{DM}, in[1]));
    auto b = import_tensor<LB>(m, host(shape<d_model>{DM}, in[2]));
    x.requires_grad("x"), s.requires_grad("scale"), b.requires_grad("bias");
    auto y = typemesh::add(typemesh::mul(typemesh::layer_norm_detail::normalise<d_model>(x, 1e-6), s), b);
    outcome o = finish(weighted_sum_as<SX>(y), x, s, b);
    o.grads.push_back(whole(y));
    return o;
  }
};

TEST(LayerNorm, OneOpOnTheHostMatchesTheComposedOps) {
  const std::vector<values> in{random_values(B * LEN * DM, 1), random_values(DM, 2, 0.5, 1.5),
                               random_values(DM, 3)};
  const auto expect_same = [&]<class LX, class LP>(const std::string& name, M2::coords sizes) {
    SCOPED_TRACE(name);
    layer_norm_case<> one_op;
    layer_norm_composed_case composed_ops;
    const outcome fused = run_case<M2, LX, LP, LP>(sizes, in, one_op);
    const outcome composed = run_case<M2, LX, LP, LP>(sizes, in, composed_ops);
    EXPECT_NEAR(fused.loss, composed.loss, 1e-12 * (1 + std::abs(composed.loss)));
    ASSERT_EQ(fused.grads.size(), composed.grads.size());
    for (std::size_t i = 0; i < fused.grads.size(); ++i) {
      expect_close(fused.grads[i], composed.grads[i], 1e-12, name + ": entry " + std::to_string(i));
    }
  };
  expect_same.operator()<layout<>, layout<>>("one device", {1, 1});
  expect_same.operator()<layout<batch(a0)>, layout<>>("batch split", {2, 1});
  expect_same.operator()<layout<batch(a0), d_model(a1)>, layout<d_model(a1)>>("batch and d_model split", {2, 3});
}

TEST(LayerNorm, ValuesMatchPlainLoops) {
  const auto xs = random_values(B * LEN * DM, 4), ss = random_values(DM, 5), bs = random_values(DM, 6);
  const double eps = 1e-3;
  auto got = typemesh::launch(4, [&] {
    M2 m({2, 2});
    auto x = import_tensor<layout<batch(a0), d_model(a1)>>(m, host(SX{B, LEN, DM}, xs));
    auto s = import_tensor<layout<d_model(a1)>>(m, host(shape<d_model>{DM}, ss));
    auto b = import_tensor<layout<d_model(a1)>>(m, host(shape<d_model>{DM}, bs));
    return whole(typemesh::layer_norm<d_model>(x, s, b, {.epsilon = eps}));
  });
  for (int row = 0; row < B * LEN; ++row) {
    double mean = 0, var = 0;
    for (int j = 0; j < DM; ++j) mean += xs[row * DM + j] / DM;
    for (int j = 0; j < DM; ++j) var += (xs[row * DM + j] - mean) * (xs[row * DM + j] - mean) / DM;
    for (int j = 0; j < DM; ++j) {
      const double want = (xs[row * DM + j] - mean) / std::sqrt(var + eps) * ss[j] + bs[j];
      for (const auto& g : got) EXPECT_NEAR(g[row * DM + j], want, 1e-12) << "row " << row << " channel " << j;
    }
  }
}

TEST(LayerNorm, PermutedShapesGiveTheSameValuesAndGradients) {
  const std::vector<values> in{random_values(B * LEN * DM, 1), random_values(DM, 2, 0.5, 1.5),
                               random_values(DM, 3)};
  using split = layout<batch(a0), d_model(a1)>;
  using split_d = layout<d_model(a1)>;
  expect_same_as_canonical<M2, split, split_d, split_d>("[d_model, batch, length]", {2, 2}, in, layer_norm_case<>{},
                                                        layer_norm_case<shape<d_model, batch, length>>{});
  expect_same_as_canonical<M2, split, split_d, split_d>("[length, d_model, batch]", {2, 3}, in, layer_norm_case<>{},
                                                        layer_norm_case<shape<length, d_model, batch>>{});
  expect_same_as_canonical<M2, layout<length(a0)>, layout<>, layout<>>(
      "[batch, d_model, length], length split", {2, 1}, in, layer_norm_case<>{},
      layer_norm_case<shape<batch, d_model, length>>{});
}

TEST(LayerNorm, BadEpsilonAndSizesAreErrors) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    auto x = import_tensor<layout<>>(m, host(SX{B, LEN, DM}, random_values(B * LEN * DM, 4)));
    auto s = import_tensor<layout<>>(m, host(shape<d_model>{DM}, random_values(DM, 5)));
    auto short_bias = import_tensor<layout<>>(m, host(shape<d_model>{DM - 1}, random_values(DM - 1, 6)));
    expect_error<typemesh::error>([&] { (void)typemesh::layer_norm<d_model>(x, s, s, {.epsilon = -1}); },
                                  {"layer_norm over d_model", "epsilon must be >= 0", "-1"});
    expect_error<typemesh::shape_error>([&] { (void)typemesh::layer_norm<d_model>(x, s, short_bias); },
                                        {"layer_norm over d_model", "5"});
  });
}

// A plain serial layer norm: the mean, then the mean of squared deviations
// from it, summed in column order.
values serial_layer_norm(const values& x, const values& scale, const values& bias, int rows, int width,
                         double eps) {
  values y(x.size());
  for (int row = 0; row < rows; ++row) {
    const double* r = &x[static_cast<std::size_t>(row * width)];
    double* out = &y[static_cast<std::size_t>(row * width)];
    double sum = 0;
    for (int j = 0; j < width; ++j) sum += r[j];
    const double mean = sum / width;
    double squares = 0;
    for (int j = 0; j < width; ++j) squares += (r[j] - mean) * (r[j] - mean);
    const double sigma = std::sqrt(squares / width + eps);
    for (std::size_t j = 0; j < static_cast<std::size_t>(width); ++j) {
      out[j] = (r[j] - mean) / sigma * scale[j] + bias[j];
    }
  }
  return y;
}

// x's gradient for a weighted sum of the serial layer norm's output, the
// weights c: with g = c * scale and x_hat = (x - mean) / sigma,
// dx = (g - mean(g) - x_hat * mean(g * x_hat)) / sigma.
values serial_layer_norm_gradient(const values& x, const values& c, const values& scale, int rows, int width,
                                  double eps) {
  values dx(x.size());
  for (int row = 0; row < rows; ++row) {
    const auto at = static_cast<std::size_t>(row * width);
    double sum = 0;
    for (int j = 0; j < width; ++j) sum += x[at + j];
    const double mean = sum / width;
    double squares = 0;
    for (int j = 0; j < width; ++j) squares += (x[at + j] - mean) * (x[at + j] - mean);
    const double sigma = std::sqrt(squares / width + eps);
    double mean_g = 0, mean_gx = 0;
    for (int j = 0; j < width; ++j) {
      const double g = c[at + j] * scale[j], x_hat = (x[at + j] - mean) / sigma;
      mean_g += g / width;
      mean_gx += g * x_hat / width;
    }
    for (int j = 0; j < width; ++j) {
      const double g = c[at + j] * scale[j], x_hat = (x[at + j] - mean) / sigma;
      dx[at + j] = (g - mean_g - x_hat * mean_gx) / sigma;
    }
  }
  return dx;
}

// Row 0 sits at 1e6 with noise of 1e-2: E[x^2] - E[x]^2 loses the variance
// (about 3e-5) to rounding of x^2 (about 1e12), the two-pass variance keeps it.
TEST(LayerNorm, MatchesASerialReferenceOnRowsFarFromZero) {
  auto xs = random_values(B * LEN * DM, 7);
  for (int j = 0; j < DM; ++j) xs[static_cast<std::size_t>(j)] = 1e6 + 1e-2 * xs[static_cast<std::size_t>(j)];
  const auto ss = random_values(DM, 8, 0.5, 1.5), bs = random_values(DM, 9);
  const double eps = 1e-9;
  const values want = serial_layer_norm(xs, ss, bs, B * LEN, DM, eps);
  const values want_dx = serial_layer_norm_gradient(xs, random_values(B * LEN * DM, 99), ss, B * LEN, DM, eps);

  // The naive formula really fails on row 0, so the check below can tell.
  double sum = 0, sum_squares = 0;
  for (std::size_t j = 0; j < DM; ++j) sum += xs[j], sum_squares += xs[j] * xs[j];
  const double naive_variance = sum_squares / DM - (sum / DM) * (sum / DM);
  double squares = 0;
  for (std::size_t j = 0; j < DM; ++j) squares += (xs[j] - sum / DM) * (xs[j] - sum / DM);
  EXPECT_GT(std::abs(naive_variance - squares / DM), 1e-2 * squares / DM) << "row 0 is not hard enough";

  auto run = [&](auto lx, std::array<int, 2> sizes, const std::string& name) {
    using LX = decltype(lx);
    SCOPED_TRACE(name);
    auto got = typemesh::launch(sizes[0] * sizes[1], [&] {
      M2 m(sizes);
      auto x = import_tensor<LX>(m, host(SX{B, LEN, DM}, xs));
      auto s = import_tensor<layout<>>(m, host(shape<d_model>{DM}, ss));
      auto b = import_tensor<layout<>>(m, host(shape<d_model>{DM}, bs));
      x.requires_grad("x");
      auto y = typemesh::layer_norm<d_model>(x, s, b, {.epsilon = eps});
      const outcome o = finish(weighted_sum(y), x);
      return std::array<values, 2>{whole(y), o.grads[0]};
    });
    for (const auto& [y, dx] : got) {
      ASSERT_EQ(y.size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-12) << "element " << i;
      ASSERT_EQ(dx.size(), want_dx.size());
      for (std::size_t i = 0; i < want_dx.size(); ++i) {
        EXPECT_NEAR(dx[i], want_dx[i], 1e-9 * (1 + std::abs(want_dx[i]))) << "x's gradient, element " << i;
      }
    }
  };
  run(layout<>{}, {1, 1}, "one device");
  run(layout<batch(a0)>{}, {2, 1}, "batch split");
  run(layout<length(a1)>{}, {2, 2}, "length split, replicated along a0");
}

// Split d_model: one allreduce forward (both row sums in one message) and one
// backward; a whole d_model needs none.
TEST(LayerNorm, OneAllreduceEachWayWhenDModelIsSplit) {
  const auto xs = random_values(B * LEN * DM, 10), ss = random_values(DM, 11), bs = random_values(DM, 12);
  auto count = [&](auto lx, std::array<int, 2> sizes) {
    using LX = decltype(lx);
    return typemesh::launch(sizes[0] * sizes[1], [&](typemesh::device& dev) {
      M2 m(sizes);
      auto x = import_tensor<LX>(m, host(SX{B, LEN, DM}, xs));
      auto s = import_tensor<LX>(m, host(shape<d_model>{DM}, ss));
      auto b = import_tensor<LX>(m, host(shape<d_model>{DM}, bs));
      x.requires_grad("x");
      auto calls = [&] { return dev.traffic()[typemesh::op_kind::allreduce].calls; };
      const auto before = calls();
      auto y = typemesh::layer_norm<d_model>(x, s, b);
      const auto forward = calls() - before;
      auto loss = typemesh::reduce_sum(typemesh::stop_gradient(y) * y);
      const auto before_backward = calls();
      typemesh::backward(loss);
      return std::array<std::uint64_t, 2>{forward, calls() - before_backward};
    })[0];
  };
  using two = std::array<std::uint64_t, 2>;
  EXPECT_EQ(count(layout<d_model(a1)>{}, {1, 2}), (two{1, 1})) << "d_model split";
  EXPECT_EQ(count(layout<d_model(a1)>{}, {1, 3}), (two{1, 1})) << "d_model split three ways";
  EXPECT_EQ(count(layout<>{}, {1, 2}), (two{0, 0})) << "d_model whole";
}

// --- dropout ----------------------------------------------------------------------

using S2 = shape<batch, d_model>;

struct dropout_case {
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(S2{4, 6}, in[0]));
    x.requires_grad("x");
    auto y = typemesh::dropout(typemesh::tanh(x), {.rate = 0.4, .key = {7, "test/dropout", 3}});
    return finish(weighted_sum(y), x);
  }
};

TEST(Dropout, GradientIsTheSameMask) {
  const std::vector<values> in{random_values(24, 7)};
  dropout_case c;
  check_layouts<M2, layout<batch(a0)>>("batch split", {2, 1}, in, c);
  check_layouts<M2, layout<d_model(a1)>>("d_model split", {1, 3}, in, c);
  check_layouts<M2, layout<batch(a0), d_model(a1)>>("both split", {2, 3}, in, c);
  check_layouts<M2, layout<d_model(a0), batch(a1)>>("both split, axes swapped", {3, 2}, in, c);
}

// dropout(ones): the mask itself, exported whole, on every device.
template <class L>
std::vector<values> dropout_mask(std::array<int, 2> sizes, double rate, typemesh::rng_key key) {
  return typemesh::launch(sizes[0] * sizes[1], [&] {
    M2 m(sizes);
    auto ones = typemesh::constant<L, double>(m, S2{16, 64}, 1.0);
    return whole(typemesh::dropout(ones, {.rate = rate, .key = key}));
  });
}

TEST(Dropout, MaskIsTheSameUnderEveryLayout) {
  const double rate = 0.3;
  const typemesh::rng_key key{11, "block0/ffn/dropout", 5};
  const values ref = dropout_mask<layout<>>({1, 1}, rate, key)[0];
  for (const auto& got : dropout_mask<layout<batch(a0)>>({4, 1}, rate, key)) EXPECT_EQ(got, ref) << "batch split";
  for (const auto& got : dropout_mask<layout<batch(a0), d_model(a1)>>({2, 4}, rate, key)) EXPECT_EQ(got, ref) << "2-d";
  for (const auto& got : dropout_mask<layout<d_model(a0)>>({2, 2}, rate, key)) EXPECT_EQ(got, ref) << "d_model split";

  // Kept elements are scaled by 1 / (1 - rate); about 1 - rate of them are kept.
  int kept = 0;
  for (double v : ref) {
    if (v != 0) {
      EXPECT_DOUBLE_EQ(v, 1.0 / (1.0 - rate));
      ++kept;
    }
  }
  EXPECT_NEAR(double(kept) / ref.size(), 1.0 - rate, 0.05);

  // Another step or another name gives another mask.
  EXPECT_NE(dropout_mask<layout<>>({1, 1}, rate, {11, "block0/ffn/dropout", 6})[0], ref);
  EXPECT_NE(dropout_mask<layout<>>({1, 1}, rate, {11, "block1/ffn/dropout", 5})[0], ref);
}

TEST(Dropout, RateZeroIsIdentityAndBadRatesAreErrors) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    auto x = import_tensor<layout<>>(m, host(S2{2, 3}, random_values(6, 8)));
    EXPECT_EQ(whole(typemesh::dropout(x, {.rate = 0.0, .key = {1, "d", 0}})), whole(x));
    EXPECT_EQ(whole(typemesh::dropout(x)), whole(x));  // the default options drop nothing
    for (double bad : {1.0, 1.5, -0.25}) {
      std::ostringstream rate;
      rate << bad;
      expect_error<typemesh::error>([&] { (void)typemesh::dropout(x, {.rate = bad, .key = {1, "layer2/dropout", 0}}); },
                                    {"'layer2/dropout'", "[0, 1)", rate.str()});
    }
  });
}

// A tensor that lists the same dims in another order gets the same mask at
// the same coordinates, under any layout.
TEST(Dropout, MaskIsTheSameForPermutedShapes) {
  const double rate = 0.5;
  const typemesh::rng_key key{13, "permuted/dropout", 2};
  const S2 s{16, 64};
  const values ref = dropout_mask<layout<>>({1, 1}, rate, key)[0];
  auto masks = typemesh::launch(4, [&] {
    M2 m({2, 2});
    auto ones = typemesh::constant<layout<batch(a1), d_model(a0)>, double>(m, shape<d_model, batch>{64, 16}, 1.0);
    auto y = typemesh::dropout(ones, {.rate = rate, .key = key});
    return reorder<S2>(y.shape(), whole(y));
  });
  for (const auto& got : masks) EXPECT_EQ(got, ref) << "[d_model, batch] vs [batch, d_model]";
  int kept = 0;
  for (double v : ref) kept += v != 0;
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, static_cast<int>(s.elements()));
}

// --- softmax ----------------------------------------------------------------------

struct softmax_case {
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(S2{4, 6}, in[0]));
    x.requires_grad("x");
    return finish(weighted_sum(typemesh::softmax<d_model>(x)), x);
  }
};

TEST(Softmax, GradientsWithTheNormalisedDimSplit) {
  const std::vector<values> in{random_values(24, 9, -3, 3)};
  softmax_case c;
  check_layouts<M2, layout<d_model(a1)>>("normalised dim split", {1, 3}, in, c);
  check_layouts<M2, layout<batch(a0)>>("batch split", {2, 1}, in, c);
  check_layouts<M2, layout<batch(a0), d_model(a1)>>("both split", {2, 2}, in, c);
}

// softmax of x as shape S (S2's dims in any order); the outcome in S2's order.
template <class S = S2>
struct softmax_as {
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_as<S, LX>(m, S2{4, 6}, in[0]);
    x.requires_grad("x");
    auto y = typemesh::softmax<d_model>(x);
    outcome o = finish(weighted_sum_as<S2>(y), x);
    o.grads[0] = grad_as<S2>(x, o.grads[0]);
    o.grads.push_back(reorder<S2>(y.shape(), whole(y)));
    return o;
  }
};

TEST(Softmax, PermutedShapeGivesTheSameValuesAndGradients) {
  const std::vector<values> in{random_values(24, 9, -3, 3)};
  using permuted = softmax_as<shape<d_model, batch>>;
  expect_same_as_canonical<M2, layout<batch(a0), d_model(a1)>>("[d_model, batch], both split", {2, 3}, in,
                                                               softmax_as<>{}, permuted{});
  expect_same_as_canonical<M2, layout<d_model(a0)>>("[d_model, batch], d_model split", {2, 1}, in, softmax_as<>{},
                                                    permuted{});
}

TEST(Softmax, StableForLargeLogits) {
  auto got = typemesh::launch(2, [] {
    M2 m({1, 2});
    auto x = import_tensor<layout<d_model(a1)>>(m, host(S2{1, 4}, {1000.0, 999.0, -1000.0, 1000.0}));
    return whole(typemesh::softmax<d_model>(x));
  });
  const double e = std::exp(-1.0), total = 2 + e;
  expect_close(got[1], {1 / total, e / total, 0.0, 1 / total}, 1e-14, "softmax of large logits");
}

// Float rows whole on the device take the host's vector kernels (lanes, a
// zero-padded last vector): forward and backward against a double
// reference computed here from the same float inputs, at row widths below,
// at and past the vector widths, and with logits far from zero.
TEST(Softmax, FloatRowsMatchADoubleReference) {
  constexpr std::int64_t rows = 5;
  for (const std::int64_t width : {1, 7, 16, 37, 128}) {
    const auto n = static_cast<std::size_t>(rows * width);
    std::vector<float> xs(n), cs(n);
    const values xd = random_values(n, 31, -4, 4), cd = random_values(n, 32);
    for (std::size_t i = 0; i < n; ++i) xs[i] = static_cast<float>(xd[i] + (i % 3 == 0 ? 500.0 : 0.0));
    for (std::size_t i = 0; i < n; ++i) cs[i] = static_cast<float>(cd[i]);
    const auto got = typemesh::launch(1, [&] {
      M2 m({1, 1});
      auto x = import_tensor<layout<>>(m, typemesh::host_tensor<float, S2>(S2{rows, width}, xs));
      x.requires_grad("x");
      auto c = import_tensor<layout<>>(m, typemesh::host_tensor<float, S2>(S2{rows, width}, cs));
      auto y = typemesh::softmax<d_model>(x);
      typemesh::backward(typemesh::reduce_sum(typemesh::mul(y, c)));
      return std::array<std::vector<float>, 2>{typemesh::export_tensor(y.detached()).values(),
                                               typemesh::export_tensor(x.grad()).values()};
    })[0];
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto row = static_cast<std::size_t>(r * width);
      double top = xs[row], sum = 0, dot = 0;
      for (std::int64_t v = 0; v < width; ++v) top = std::max(top, static_cast<double>(xs[row + v]));
      for (std::int64_t v = 0; v < width; ++v) sum += std::exp(xs[row + v] - top);
      std::vector<double> y(static_cast<std::size_t>(width));
      for (std::int64_t v = 0; v < width; ++v) y[v] = std::exp(xs[row + v] - top) / sum;
      for (std::int64_t v = 0; v < width; ++v) dot += cs[row + v] * y[v];
      for (std::int64_t v = 0; v < width; ++v) {
        const double dx = y[v] * (cs[row + v] - dot);
        EXPECT_NEAR(got[0][row + v], y[v], 1e-6 + 1e-5 * y[v]) << "y, width " << width << " row " << r << " col " << v;
        EXPECT_NEAR(got[1][row + v], dx, 1e-6 + 1e-5 * std::abs(dx))
            << "dx, width " << width << " row " << r << " col " << v;
      }
    }
  }
}

// --- multihead attention ------------------------------------------------------------

// Sizes: batch 2, length 4, d_model 4, heads 2, d_k 3, d_v 2; memory_length
// 6 for attention over another sequence, 4 for causal self-attention.
constexpr int AB = 2, AL = 4, AD = 4, AH = 2, AK = 3, AV = 2;

struct attention_inputs {
  int memory_size;
  std::vector<values> in;
};

// query, memory, wq, wk, wv, wo. Self-attention's memory holds the query's values.
inline attention_inputs make_attention_inputs(bool self) {
  const int ml = self ? AL : 6;
  values query = random_values(AB * AL * AD, 20);
  values memory = self ? query : random_values(AB * ml * AD, 21);
  return {ml,
          {query, memory, random_values(AD * AH * AK, 22), random_values(AD * AH * AK, 23),
           random_values(AD * AH * AV, 24), random_values(AH * AV * AD, 25)}};
}

// The shapes the attention inputs are imported with: the canonical ones by
// default; a test may list any of them in another order.
template <class Q = shape<batch, length, d_model>, class Mem = shape<batch, memory_length, d_model>,
          class WQ = shape<d_model, heads, d_k>, class WK = shape<d_model, heads, d_k>,
          class WV = shape<d_model, heads, d_v>, class WO = shape<heads, d_v, d_model>>
struct attention_shapes {
  using query = Q;
  using memory = Mem;
  using wq = WQ;
  using wk = WK;
  using wv = WV;
  using wo = WO;
};
using canonical_attention = attention_shapes<>;

// query, memory, wq, wk, wv, wo from canonical values, as the shapes Shapes names.
template <class LQ, class LM, class LWQ, class LWK, class LWV, class LWO, class Shapes = canonical_attention, class M>
auto import_attention(const M& m, int ml, const std::vector<values>& in) {
  using C = canonical_attention;
  return std::make_tuple(import_as<typename Shapes::query, LQ>(m, typename C::query{AB, AL, AD}, in[0]),
                         import_as<typename Shapes::memory, LM>(m, typename C::memory{AB, ml, AD}, in[1]),
                         import_as<typename Shapes::wq, LWQ>(m, typename C::wq{AD, AH, AK}, in[2]),
                         import_as<typename Shapes::wk, LWK>(m, typename C::wk{AD, AH, AK}, in[3]),
                         import_as<typename Shapes::wv, LWV>(m, typename C::wv{AD, AH, AV}, in[4]),
                         import_as<typename Shapes::wo, LWO>(m, typename C::wo{AH, AV, AD}, in[5]));
}

// Self-attention uses the query as memory (renamed), so the memory input
// gets no gradient; the query gets both paths'. The outcome is in canonical
// order and ends with the output's values.
template <class Shapes = canonical_attention>
struct attention_case {
  int memory_size;
  typemesh::attention_options options;
  bool self = false;
  template <class LQ, class LM, class LWQ, class LWK, class LWV, class LWO, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto [q, mem, wq, wk, wv, wo] = import_attention<LQ, LM, LWQ, LWK, LWV, LWO, Shapes>(m, memory_size, in);
    q.requires_grad("query"), mem.requires_grad("memory"), wq.requires_grad("wq"), wk.requires_grad("wk");
    wv.requires_grad("wv"), wo.requires_grad("wo");
    if (self) {
      return finish_as(typemesh::self_attention<length, memory_length>(q, wq, wk, wv, wo, options), q, mem, wq, wk,
                       wv, wo);
    }
    return finish_as(typemesh::multihead_attention<length, memory_length>(q, mem, wq, wk, wv, wo, options), q, mem,
                     wq, wk, wv, wo);
  }

  template <class Y, class... X>
  static outcome finish_as(const Y& y, const X&... xs) {
    using C = canonical_attention;
    static_assert(std::is_same_v<typename Y::shape_type, typename Shapes::query>,
                  "the output has the query's dims in the query's order");
    outcome o = finish(weighted_sum_as<typename C::query>(y), xs...);
    const auto& [q, mem, wq, wk, wv, wo] = std::tie(xs...);
    o.grads = {grad_as<typename C::query>(q, o.grads[0]), grad_as<typename C::memory>(mem, o.grads[1]),
               grad_as<typename C::wq>(wq, o.grads[2]),   grad_as<typename C::wk>(wk, o.grads[3]),
               grad_as<typename C::wv>(wv, o.grads[4]),   grad_as<typename C::wo>(wo, o.grads[5]),
               reorder<typename C::query>(y.shape(), whole(y))};
    return o;
  }
};

// Each layout set with: attention over another sequence; causal
// self-attention; and attention with dropout on its weights.
template <class LQ, class LM, class LWQ, class LWK, class LWV, class LWO>
void check_attention(const std::string& name, std::array<int, 2> sizes) {
  const auto cross = make_attention_inputs(false), self = make_attention_inputs(true);
  check_layouts<M2, LQ, LM, LWQ, LWK, LWV, LWO>(name + ", cross", sizes, cross.in,
                                                attention_case<>{cross.memory_size, {}});
  check_layouts<M2, LQ, LM, LWQ, LWK, LWV, LWO>(name + ", causal, memory imported", sizes, self.in,
                                                attention_case<>{self.memory_size, {.causal = true}});
  check_layouts<M2, LQ, LM, LWQ, LWK, LWV, LWO>(name + ", causal self_attention", sizes, self.in,
                                                attention_case<>{self.memory_size, {.causal = true}, true});
  check_layouts<M2, LQ, LM, LWQ, LWK, LWV, LWO>(
      name + ", dropout", sizes, cross.in,
      attention_case<>{cross.memory_size, {.dropout_rate = 0.25, .dropout_key = {3, "attention/dropout", 1}}});
}

TEST(MultiheadAttention, BatchSplit) {
  check_attention<layout<batch(a0)>, layout<batch(a0)>, layout<>, layout<>, layout<>, layout<>>("batch split",
                                                                                                 {2, 1});
}
TEST(MultiheadAttention, HeadsSplit) {
  using W = layout<heads(a1)>;
  check_attention<layout<>, layout<>, W, W, W, W>("heads split", {1, 2});
}
TEST(MultiheadAttention, BatchAndHeadsSplit) {
  using W = layout<heads(a1)>;
  check_attention<layout<batch(a0)>, layout<batch(a0)>, W, W, W, W>("batch and heads split", {2, 2});
}
TEST(MultiheadAttention, MemoryLengthAndDModelSplit) {
  // softmax over a split dim; every projection contracts a split d_model.
  using W = layout<d_model(a1)>;
  check_attention<W, layout<memory_length(a0), d_model(a1)>, W, W, W, W>("memory_length and d_model split",
                                                                          {2, 2});
}

// The same values and gradients as the canonical shapes, with the inputs and
// the weights listing their dims in other orders, under split layouts: cross
// attention, causal attention over an imported memory, causal self_attention
// and attention with dropout.
template <class Shapes, class LQ, class LM, class LWQ, class LWK, class LWV, class LWO>
void check_permuted_attention(const std::string& name, std::array<int, 2> sizes) {
  const auto cross = make_attention_inputs(false), self = make_attention_inputs(true);
  const typemesh::attention_options dropout{.dropout_rate = 0.25, .dropout_key = {3, "attention/dropout", 1}};
  auto same = [&](const std::string& what, const attention_inputs& inputs, typemesh::attention_options options,
                  bool self_attention) {
    expect_same_as_canonical<M2, LQ, LM, LWQ, LWK, LWV, LWO>(
        name + ", " + what, sizes, inputs.in, attention_case<>{inputs.memory_size, options, self_attention},
        attention_case<Shapes>{inputs.memory_size, options, self_attention});
  };
  same("cross", cross, {}, false);
  same("causal, memory imported", self, {.causal = true}, false);
  same("causal self_attention", self, {.causal = true}, true);
  same("dropout", cross, dropout, false);
}

// Length first, batch in the middle; weights in other orders too.
using length_first = attention_shapes<shape<length, batch, d_model>, shape<memory_length, batch, d_model>,
                                      shape<d_k, d_model, heads>, shape<heads, d_k, d_model>,
                                      shape<d_v, heads, d_model>, shape<d_model, heads, d_v>>;
// d_model first, batch last; the memory's length last.
using d_model_first = attention_shapes<shape<d_model, length, batch>, shape<d_model, batch, memory_length>,
                                       shape<heads, d_k, d_model>, shape<d_model, d_k, heads>,
                                       shape<heads, d_model, d_v>, shape<d_v, d_model, heads>>;

TEST(MultiheadAttention, PermutedShapesBatchAndHeadsSplit) {
  using W = layout<heads(a1)>;
  check_permuted_attention<length_first, layout<batch(a0)>, layout<batch(a0)>, W, W, W, W>(
      "[length, batch, d_model], batch and heads split", {2, 2});
  check_permuted_attention<d_model_first, layout<batch(a0)>, layout<batch(a0)>, W, W, W, W>(
      "[d_model, length, batch], batch and heads split", {2, 2});
}

TEST(MultiheadAttention, PermutedShapesMemoryLengthAndDModelSplit) {
  using W = layout<d_model(a1)>;
  check_permuted_attention<length_first, W, layout<memory_length(a0), d_model(a1)>, W, W, W, W>(
      "[length, batch, d_model], memory_length and d_model split", {2, 2});
  check_permuted_attention<d_model_first, W, layout<memory_length(a0), d_model(a1)>, W, W, W, W>(
      "[d_model, length, batch], memory_length and d_model split", {2, 2});
}

// The attention output computed with plain loops.
values naive_attention(const std::vector<values>& in, int ml, bool causal) {
  const auto &x = in[0], &mem = in[1], &wq = in[2], &wk = in[3], &wv = in[4], &wo = in[5];
  values out(AB * AL * AD, 0.0);
  for (int b = 0; b < AB; ++b)
    for (int h = 0; h < AH; ++h)
      for (int l = 0; l < AL; ++l) {
        std::vector<double> q(AK, 0.0), logits(ml, 0.0), o(AV, 0.0);
        for (int k = 0; k < AK; ++k)
          for (int d = 0; d < AD; ++d) q[k] += x[(b * AL + l) * AD + d] * wq[(d * AH + h) * AK + k] / std::sqrt(AK);
        double largest = -1e300;
        for (int m = 0; m < ml; ++m) {
          for (int k = 0; k < AK; ++k) {
            double key = 0;
            for (int d = 0; d < AD; ++d) key += mem[(b * ml + m) * AD + d] * wk[(d * AH + h) * AK + k];
            logits[m] += q[k] * key;
          }
          if (causal && m > l) logits[m] = -1e300;
          largest = std::max(largest, logits[m]);
        }
        double total = 0;
        for (int m = 0; m < ml; ++m) total += logits[m] = std::exp(logits[m] - largest);
        for (int m = 0; m < ml; ++m)
          for (int v = 0; v < AV; ++v) {
            double value = 0;
            for (int d = 0; d < AD; ++d) value += mem[(b * ml + m) * AD + d] * wv[(d * AH + h) * AV + v];
            o[v] += logits[m] / total * value;
          }
        for (int d = 0; d < AD; ++d)
          for (int v = 0; v < AV; ++v) out[(b * AL + l) * AD + d] += o[v] * wo[(h * AV + v) * AD + d];
      }
  return out;
}

TEST(MultiheadAttention, ValuesMatchPlainLoops) {
  for (bool self : {false, true}) {
    const auto inputs = make_attention_inputs(self);
    auto got = typemesh::launch(4, [&] {
      M2 m({2, 2});
      using W = layout<heads(a1)>;
      auto [q, mem, wq, wk, wv, wo] =
          import_attention<layout<batch(a0)>, layout<batch(a0)>, W, W, W, W>(m, inputs.memory_size, inputs.in);
      if (self) return whole(typemesh::self_attention<length, memory_length>(q, wq, wk, wv, wo, {.causal = true}));
      return whole(typemesh::multihead_attention<length, memory_length>(q, mem, wq, wk, wv, wo));
    });
    const values want = naive_attention(inputs.in, inputs.memory_size, self);
    for (const auto& g : got) expect_close(g, want, 1e-12, self ? "causal self-attention" : "cross attention");
  }
}

// Any number of batch-like dims, anywhere: two (batch, and group around the
// other dims), and none.
TEST(MultiheadAttention, AnyNumberOfBatchLikeDims) {
  struct group : typemesh::dim<"group"> {};
  const auto inputs = make_attention_inputs(false);
  constexpr int G = 2, ML = 6;
  auto got = typemesh::launch(4, [&] {
    M2 m({2, 2});
    using W = layout<heads(a1)>;
    auto [q, mem, wq, wk, wv, wo] =
        import_attention<layout<batch(a0)>, layout<batch(a0)>, W, W, W, W>(m, ML, inputs.in);
    // Group g holds the inputs times g + 1.
    auto factor = typemesh::import_tensor<layout<>>(m, host(shape<group>{G}, {1.0, 2.0}));
    auto q2 = typemesh::mul(q, factor);    // [batch, length, d_model, group]
    auto mem2 = typemesh::mul(factor, mem);  // [group, batch, memory_length, d_model]
    auto y = typemesh::multihead_attention<length, memory_length>(q2, mem2, wq, wk, wv, wo);
    static_assert(std::is_same_v<decltype(y)::shape_type, shape<batch, length, d_model, group>>);
    return reorder<shape<group, batch, length, d_model>>(y.shape(), whole(y));
  });
  for (int g = 0; g < G; ++g) {
    auto in = inputs.in;
    for (auto& v : in[0]) v *= g + 1;
    for (auto& v : in[1]) v *= g + 1;
    const values want = naive_attention(in, ML, false);
    for (const auto& d : got) {
      const values part(d.begin() + g * AB * AL * AD, d.begin() + (g + 1) * AB * AL * AD);
      expect_close(part, want, 1e-12, "group " + std::to_string(g));
    }
  }

  // No batch-like dim: the first batch element's query and memory alone.
  auto single = typemesh::launch(2, [&] {
    M2 m({1, 2});
    using W = layout<heads(a1)>;
    auto q = import_tensor<layout<>>(
        m, host(shape<d_model, length>{AD, AL}, reorder<shape<d_model, length>>(
                                                  shape<length, d_model>{AL, AD},
                                                  values(inputs.in[0].begin(), inputs.in[0].begin() + AL * AD))));
    auto mem = import_tensor<layout<>>(
        m, host(shape<memory_length, d_model>{ML, AD}, values(inputs.in[1].begin(), inputs.in[1].begin() + ML * AD)));
    auto wq = import_tensor<W>(m, host(shape<d_model, heads, d_k>{AD, AH, AK}, inputs.in[2]));
    auto wk = import_tensor<W>(m, host(shape<d_model, heads, d_k>{AD, AH, AK}, inputs.in[3]));
    auto wv = import_tensor<W>(m, host(shape<d_model, heads, d_v>{AD, AH, AV}, inputs.in[4]));
    auto wo = import_tensor<W>(m, host(shape<heads, d_v, d_model>{AH, AV, AD}, inputs.in[5]));
    auto y = typemesh::multihead_attention<length, memory_length>(q, mem, wq, wk, wv, wo);
    static_assert(std::is_same_v<decltype(y)::shape_type, shape<d_model, length>>);
    return reorder<shape<length, d_model>>(y.shape(), whole(y));
  });
  const values want = naive_attention(inputs.in, ML, false);
  for (const auto& d : single) expect_close(d, values(want.begin(), want.begin() + AL * AD), 1e-12, "no batch dim");
}

// --- dense_relu_dense -------------------------------------------------------------

constexpr int FF = 6;

// x, w1, w2 as shapes S, S1, S2 (the canonical dims in any order); the
// outcome is in canonical order and ends with the output's values.
template <class S = SX, class S1 = shape<d_model, d_ff>, class S2W = shape<d_ff, d_model>>
struct dense_relu_dense_case {
  double dropout_rate = 0.0;
  template <class LX, class L1, class L2, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    using C1 = shape<d_model, d_ff>;
    using C2 = shape<d_ff, d_model>;
    auto x = import_as<S, LX>(m, SX{B, LEN, DM}, in[0]);
    auto w1 = import_as<S1, L1>(m, C1{DM, FF}, in[1]);
    auto w2 = import_as<S2W, L2>(m, C2{FF, DM}, in[2]);
    x.requires_grad("x"), w1.requires_grad("w1"), w2.requires_grad("w2");
    auto y =
        typemesh::dense_relu_dense(x, w1, w2, {.dropout_rate = dropout_rate, .dropout_key = {5, "ffn/dropout", 2}});
    static_assert(std::is_same_v<typename decltype(y)::shape_type, S>, "the output has x's dims in x's order");
    outcome o = finish(weighted_sum_as<SX>(y), x, w1, w2);
    o.grads = {grad_as<SX>(x, o.grads[0]), grad_as<C1>(w1, o.grads[1]), grad_as<C2>(w2, o.grads[2]),
               reorder<SX>(y.shape(), whole(y))};
    return o;
  }
};

TEST(DenseReluDense, GradientsUnderLayouts) {
  const std::vector<values> in{random_values(B * LEN * DM, 30), random_values(DM * FF, 31),
                               random_values(FF * DM, 32)};
  for (double rate : {0.0, 0.3}) {
    dense_relu_dense_case<> c{rate};
    const std::string r = rate == 0 ? "" : ", dropout";
    check_layouts<M2, layout<batch(a0)>, layout<>, layout<>>("batch split" + r, {2, 1}, in, c);
    check_layouts<M2, layout<>, layout<d_ff(a1)>, layout<d_ff(a1)>>("d_ff split" + r, {1, 3}, in, c);
    check_layouts<M2, layout<batch(a0)>, layout<d_ff(a1)>, layout<d_ff(a1)>>("batch and d_ff split" + r, {2, 3},
                                                                              in, c);
    check_layouts<M2, layout<d_model(a1)>, layout<d_model(a1)>, layout<d_model(a0)>>(
        "d_model split" + r, {2, 2}, in, c);
  }
}

TEST(DenseReluDense, PermutedShapesGiveTheSameValuesAndGradients) {
  const std::vector<values> in{random_values(B * LEN * DM, 30), random_values(DM * FF, 31),
                               random_values(FF * DM, 32)};
  using w1_first = shape<d_ff, d_model>;
  using w2_first = shape<d_model, d_ff>;
  for (double rate : {0.0, 0.3}) {
    const std::string r = rate == 0 ? "" : ", dropout";
    const dense_relu_dense_case<> canonical{rate};
    expect_same_as_canonical<M2, layout<batch(a0)>, layout<d_ff(a1)>, layout<d_ff(a1)>>(
        "[length, batch, d_model], batch and d_ff split" + r, {2, 3}, in, canonical,
        dense_relu_dense_case<shape<length, batch, d_model>, w1_first, w2_first>{rate});
    expect_same_as_canonical<M2, layout<batch(a0)>, layout<d_ff(a1)>, layout<d_ff(a1)>>(
        "[d_model, length, batch], batch and d_ff split" + r, {2, 2}, in, canonical,
        dense_relu_dense_case<shape<d_model, length, batch>, w1_first, w2_first>{rate});
    expect_same_as_canonical<M2, layout<d_model(a1)>, layout<d_model(a1)>, layout<d_model(a0)>>(
        "[d_model, length, batch], d_model split" + r, {2, 2}, in, canonical,
        dense_relu_dense_case<shape<d_model, length, batch>, shape<d_model, d_ff>, w2_first>{rate});
  }
}

TEST(DenseReluDense, ValuesMatchPlainLoops) {
  const auto xs = random_values(B * LEN * DM, 33), w1 = random_values(DM * FF, 34), w2 = random_values(FF * DM, 35);
  auto got = typemesh::launch(6, [&] {
    M2 m({2, 3});
    auto x = import_tensor<layout<batch(a0)>>(m, host(SX{B, LEN, DM}, xs));
    auto a = import_tensor<layout<d_ff(a1)>>(m, host(shape<d_model, d_ff>{DM, FF}, w1));
    auto b = import_tensor<layout<d_ff(a1)>>(m, host(shape<d_ff, d_model>{FF, DM}, w2));
    return whole(typemesh::dense_relu_dense(x, a, b));
  });
  values want(B * LEN * DM, 0.0);
  for (int row = 0; row < B * LEN; ++row)
    for (int f = 0; f < FF; ++f) {
      double h = 0;
      for (int d = 0; d < DM; ++d) h += xs[row * DM + d] * w1[d * FF + f];
      for (int d = 0; d < DM; ++d) want[row * DM + d] += std::max(h, 0.0) * w2[f * DM + d];
    }
  for (const auto& g : got) expect_close(g, want, 1e-12, "dense_relu_dense");
}

// --- an encoder block ---------------------------------------------------------------

// x + pe -> h = x + self_attention(layer_norm(x)) -> y = h + dense_relu_dense(layer_norm(h)),
// with dropout in both: the loss and some gradients, on the devices of the
// mesh (empty on the others, which record the same tape and must not hang).
template <class LX, class LW, class LF>
std::vector<outcome> encoder_block(int devices, std::array<int, 2> sizes, std::vector<int> mesh_devices) {
  const auto inputs = make_attention_inputs(true);
  const auto w1s = random_values(AD * FF, 40), w2s = random_values(FF * AD, 41);
  const auto ss = random_values(AD, 42, 0.5, 1.5), bs = random_values(AD, 43);
  return typemesh::launch(devices, [&] {
    M2 m(sizes, mesh_devices);
    auto [x, unused, wq, wk, wv, wo] = import_attention<LX, LX, LW, LW, LW, LW>(m, AL, inputs.in);
    auto w1 = import_tensor<LF>(m, host(shape<d_model, d_ff>{AD, FF}, w1s));
    auto w2 = import_tensor<LF>(m, host(shape<d_ff, d_model>{FF, AD}, w2s));
    auto s = import_tensor<layout<>>(m, host(shape<d_model>{AD}, ss));
    auto b = import_tensor<layout<>>(m, host(shape<d_model>{AD}, bs));
    x.requires_grad("x"), wq.requires_grad("wq"), wk.requires_grad("wk"), wv.requires_grad("wv");
    wo.requires_grad("wo"), w1.requires_grad("w1"), w2.requires_grad("w2"), s.requires_grad("scale");
    (void)unused;
    const auto pe = typemesh::positional_encoding<length, d_model, typename LX::template without<batch>, double>(
        m, shape<length, d_model>{AL, AD});
    auto x0 = typemesh::add(x, pe);
    auto h = typemesh::add(
        x0, typemesh::self_attention<length, memory_length>(
                typemesh::layer_norm<d_model>(x0, s, b), wq, wk, wv, wo,
                {.causal = true, .dropout_rate = 0.2, .dropout_key = {1, "att", 4}}));
    auto y = typemesh::add(h, typemesh::dense_relu_dense(typemesh::layer_norm<d_model>(h, s, b), w1, w2,
                                                         {.dropout_rate = 0.2, .dropout_key = {1, "ffn", 4}}));
    return finish(weighted_sum(y), x, wq, wo, w1, w2, s);
  });
}

TEST(EncoderBlock, SameUnderStrategiesAndOnPartOfTheDevices) {
  using W = layout<heads(a1)>;
  const outcome ref = encoder_block<layout<>, layout<>, layout<>>(1, {1, 1}, {0})[0];
  ASSERT_FALSE(std::isnan(ref.loss));
  auto compare = [&](const std::vector<outcome>& got, const std::vector<int>& holders, const std::string& what) {
    for (int d = 0; d < static_cast<int>(got.size()); ++d) {
      const bool holds = std::find(holders.begin(), holders.end(), d) != holders.end();
      if (!holds) {
        EXPECT_TRUE(std::isnan(got[d].loss)) << what << ": device " << d << " is outside the mesh";
        continue;
      }
      EXPECT_NEAR(got[d].loss, ref.loss, 1e-10 * (1 + std::abs(ref.loss))) << what << ": device " << d;
      for (std::size_t i = 0; i < ref.grads.size(); ++i) {
        expect_close(got[d].grads[i], ref.grads[i], 1e-10, what + ": gradient " + std::to_string(i));
      }
    }
  };
  compare(encoder_block<layout<batch(a0)>, W, layout<d_ff(a1)>>(4, {2, 2}, {0, 1, 2, 3}), {0, 1, 2, 3},
          "batch, heads and d_ff split");
  compare(encoder_block<layout<>, W, layout<d_ff(a1)>>(4, {1, 2}, {3, 1}), {1, 3}, "heads split on devices 3, 1");
}

// --- positional encoding ----------------------------------------------------------

template <class L>
std::vector<values> encoding_under(std::array<int, 2> sizes) {
  return typemesh::launch(sizes[0] * sizes[1], [&] {
    M2 m(sizes);
    return whole(typemesh::positional_encoding<length, d_model, L, double>(m, shape<length, d_model>{8, 6}));
  });
}

TEST(PositionalEncoding, SinusoidsFromGlobalIndices) {
  const values ref = encoding_under<layout<>>({1, 1})[0];
  ASSERT_EQ(ref.size(), 48u);
  for (int p = 0; p < 8; ++p)
    for (int c = 0; c < 6; ++c) {
      const double angle = p / std::pow(10000.0, (c - c % 2) / 6.0);
      EXPECT_NEAR(ref[p * 6 + c], c % 2 == 0 ? std::sin(angle) : std::cos(angle), 1e-15) << p << ", " << c;
    }
  for (const auto& got : encoding_under<layout<length(a0)>>({4, 1})) EXPECT_EQ(got, ref) << "length split";
  for (const auto& got : encoding_under<layout<length(a0), d_model(a1)>>({2, 3})) EXPECT_EQ(got, ref) << "2-d";
}

// The table is found by the dims' names: listed as [d_model, length] it holds
// the same values at the same (position, channel), under any layout; another
// max_timescale changes the wavelengths.
TEST(PositionalEncoding, PermutedShapeAndOptions) {
  const values ref = encoding_under<layout<>>({1, 1})[0];
  auto got = typemesh::launch(6, [] {
    M2 m({2, 3});
    auto pe = typemesh::positional_encoding<length, d_model, layout<d_model(a1), length(a0)>, double>(
        m, shape<d_model, length>{6, 8});
    return reorder<shape<length, d_model>>(pe.shape(), whole(pe));
  });
  for (const auto& g : got) EXPECT_EQ(g, ref) << "[d_model, length]";
  auto short_scale = typemesh::launch(1, [] {
    M2 m({1, 1});
    return whole(typemesh::positional_encoding<length, d_model, layout<>, double>(m, shape<length, d_model>{8, 6},
                                                                                  {.max_timescale = 100.0}));
  })[0];
  for (int p = 0; p < 8; ++p)
    for (int c = 0; c < 6; ++c) {
      const double angle = p / std::pow(100.0, (c - c % 2) / 6.0);
      EXPECT_NEAR(short_scale[p * 6 + c], c % 2 == 0 ? std::sin(angle) : std::cos(angle), 1e-15) << p << ", " << c;
    }
}

}  // namespace

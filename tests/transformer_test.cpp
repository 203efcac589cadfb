// The Transformer's layers: layer_norm, dropout, softmax, multihead
// attention, dense_relu_dense and the positional encoding. Each layer's loss
// and gradients under several layouts (batch, heads, d_ff, d_model or the
// memory length split, and 2-d meshes) equal the one-device run, whose
// gradients equal finite differences (tests/grad_check.hpp); the forward
// values equal references computed here with plain loops; dropout masks are
// the same under every layout.
#include <algorithm>
#include <cmath>
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

// --- layer_norm -------------------------------------------------------------------

using SX = shape<batch, length, d_model>;
constexpr int B = 4, LEN = 2, DM = 6;

struct layer_norm_case {
  template <class LX, class LS, class LB, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(SX{B, LEN, DM}, in[0]));
    auto s = import_tensor<LS>(m, host(shape<d_model>{DM}, in[1]));
    auto b = import_tensor<LB>(m, host(shape<d_model>{DM}, in[2]));
    x.requires_grad("x"), s.requires_grad("scale"), b.requires_grad("bias");
    return finish(weighted_sum(typemesh::layer_norm<d_model>(x, s, b, 1e-6)), x, s, b);
  }
};

TEST(LayerNorm, GradientsUnderLayouts) {
  const std::vector<values> in{random_values(B * LEN * DM, 1), random_values(DM, 2, 0.5, 1.5),
                               random_values(DM, 3)};
  layer_norm_case c;
  check_layouts<M2, layout<batch(a0)>, layout<>, layout<>>("batch split", {2, 1}, in, c);
  check_layouts<M2, layout<d_model(a1)>, layout<d_model(a1)>, layout<d_model(a1)>>("d_model split", {1, 3}, in, c);
  check_layouts<M2, layout<batch(a0), d_model(a1)>, layout<d_model(a1)>, layout<d_model(a1)>>(
      "batch and d_model split", {2, 2}, in, c);
}

TEST(LayerNorm, ValuesMatchPlainLoops) {
  const auto xs = random_values(B * LEN * DM, 4), ss = random_values(DM, 5), bs = random_values(DM, 6);
  const double eps = 1e-3;
  auto got = typemesh::launch(4, [&] {
    M2 m({2, 2});
    auto x = import_tensor<layout<batch(a0), d_model(a1)>>(m, host(SX{B, LEN, DM}, xs));
    auto s = import_tensor<layout<d_model(a1)>>(m, host(shape<d_model>{DM}, ss));
    auto b = import_tensor<layout<d_model(a1)>>(m, host(shape<d_model>{DM}, bs));
    return whole(typemesh::layer_norm<d_model>(x, s, b, eps));
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

// --- dropout ----------------------------------------------------------------------

using S2 = shape<batch, d_model>;

struct dropout_case {
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(S2{4, 6}, in[0]));
    x.requires_grad("x");
    auto y = typemesh::dropout(typemesh::tanh(x), 0.4, typemesh::rng_key{7, "test/dropout", 3});
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
    return whole(typemesh::dropout(ones, rate, key));
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
    EXPECT_EQ(whole(typemesh::dropout(x, 0.0, {1, "d", 0})), whole(x));
    for (double bad : {1.0, 1.5, -0.25}) {
      std::ostringstream rate;
      rate << bad;
      expect_error<typemesh::error>([&] { (void)typemesh::dropout(x, bad, {1, "layer2/dropout", 0}); },
                                    {"'layer2/dropout'", "[0, 1)", rate.str()});
    }
  });
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

TEST(Softmax, StableForLargeLogits) {
  auto got = typemesh::launch(2, [] {
    M2 m({1, 2});
    auto x = import_tensor<layout<d_model(a1)>>(m, host(S2{1, 4}, {1000.0, 999.0, -1000.0, 1000.0}));
    return whole(typemesh::softmax<d_model>(x));
  });
  const double e = std::exp(-1.0), total = 2 + e;
  expect_close(got[1], {1 / total, e / total, 0.0, 1 / total}, 1e-14, "softmax of large logits");
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

template <class LQ, class LM, class LWQ, class LWK, class LWV, class LWO, class M>
auto import_attention(const M& m, int ml, const std::vector<values>& in) {
  return std::make_tuple(import_tensor<LQ>(m, host(shape<batch, length, d_model>{AB, AL, AD}, in[0])),
                         import_tensor<LM>(m, host(shape<batch, memory_length, d_model>{AB, ml, AD}, in[1])),
                         import_tensor<LWQ>(m, host(shape<d_model, heads, d_k>{AD, AH, AK}, in[2])),
                         import_tensor<LWK>(m, host(shape<d_model, heads, d_k>{AD, AH, AK}, in[3])),
                         import_tensor<LWV>(m, host(shape<d_model, heads, d_v>{AD, AH, AV}, in[4])),
                         import_tensor<LWO>(m, host(shape<heads, d_v, d_model>{AH, AV, AD}, in[5])));
}

// Self-attention uses the query as memory (renamed), so the memory input
// gets no gradient; the query gets both paths'.
struct attention_case {
  int memory_size;
  typemesh::attention_options options;
  bool self = false;
  template <class LQ, class LM, class LWQ, class LWK, class LWV, class LWO, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto [q, mem, wq, wk, wv, wo] = import_attention<LQ, LM, LWQ, LWK, LWV, LWO>(m, memory_size, in);
    q.requires_grad("query"), mem.requires_grad("memory"), wq.requires_grad("wq"), wk.requires_grad("wk");
    wv.requires_grad("wv"), wo.requires_grad("wo");
    if (self) {
      auto y = typemesh::self_attention<memory_length>(q, wq, wk, wv, wo, options);
      return finish(weighted_sum(y), q, mem, wq, wk, wv, wo);
    }
    auto y = typemesh::multihead_attention(q, mem, wq, wk, wv, wo, options);
    return finish(weighted_sum(y), q, mem, wq, wk, wv, wo);
  }
};

// Each layout set with: attention over another sequence; causal
// self-attention; and attention with dropout on its weights.
template <class LQ, class LM, class LWQ, class LWK, class LWV, class LWO>
void check_attention(const std::string& name, std::array<int, 2> sizes) {
  const auto cross = make_attention_inputs(false), self = make_attention_inputs(true);
  check_layouts<M2, LQ, LM, LWQ, LWK, LWV, LWO>(name + ", cross", sizes, cross.in,
                                                attention_case{cross.memory_size, {}});
  check_layouts<M2, LQ, LM, LWQ, LWK, LWV, LWO>(name + ", causal, memory imported", sizes, self.in,
                                                attention_case{self.memory_size, {.causal = true}});
  check_layouts<M2, LQ, LM, LWQ, LWK, LWV, LWO>(name + ", causal self_attention", sizes, self.in,
                                                attention_case{self.memory_size, {.causal = true}, true});
  check_layouts<M2, LQ, LM, LWQ, LWK, LWV, LWO>(
      name + ", dropout", sizes, cross.in,
      attention_case{cross.memory_size, {.dropout_rate = 0.25, .dropout_key = {3, "attention/dropout", 1}}});
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
      if (self) return whole(typemesh::self_attention<memory_length>(q, wq, wk, wv, wo, {.causal = true}));
      return whole(typemesh::multihead_attention(q, mem, wq, wk, wv, wo));
    });
    const values want = naive_attention(inputs.in, inputs.memory_size, self);
    for (const auto& g : got) expect_close(g, want, 1e-12, self ? "causal self-attention" : "cross attention");
  }
}

// --- dense_relu_dense -------------------------------------------------------------

constexpr int FF = 6;

struct dense_relu_dense_case {
  double dropout_rate = 0.0;
  template <class LX, class L1, class L2, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(SX{B, LEN, DM}, in[0]));
    auto w1 = import_tensor<L1>(m, host(shape<d_model, d_ff>{DM, FF}, in[1]));
    auto w2 = import_tensor<L2>(m, host(shape<d_ff, d_model>{FF, DM}, in[2]));
    x.requires_grad("x"), w1.requires_grad("w1"), w2.requires_grad("w2");
    auto y = typemesh::dense_relu_dense(x, w1, w2, dropout_rate, {5, "ffn/dropout", 2});
    return finish(weighted_sum(y), x, w1, w2);
  }
};

TEST(DenseReluDense, GradientsUnderLayouts) {
  const std::vector<values> in{random_values(B * LEN * DM, 30), random_values(DM * FF, 31),
                               random_values(FF * DM, 32)};
  for (double rate : {0.0, 0.3}) {
    dense_relu_dense_case c{rate};
    const std::string r = rate == 0 ? "" : ", dropout";
    check_layouts<M2, layout<batch(a0)>, layout<>, layout<>>("batch split" + r, {2, 1}, in, c);
    check_layouts<M2, layout<>, layout<d_ff(a1)>, layout<d_ff(a1)>>("d_ff split" + r, {1, 3}, in, c);
    check_layouts<M2, layout<batch(a0)>, layout<d_ff(a1)>, layout<d_ff(a1)>>("batch and d_ff split" + r, {2, 3},
                                                                              in, c);
    check_layouts<M2, layout<d_model(a1)>, layout<d_model(a1)>, layout<d_model(a0)>>(
        "d_model split" + r, {2, 2}, in, c);
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
    const auto pe =
        typemesh::positional_encoding<typename LX::template without<batch>, double>(m, shape<length, d_model>{AL, AD});
    auto x0 = typemesh::add(x, pe);
    auto h = typemesh::add(
        x0, typemesh::self_attention<memory_length>(typemesh::layer_norm<d_model>(x0, s, b), wq, wk, wv, wo,
                                                    {.causal = true, .dropout_rate = 0.2, .dropout_key = {1, "att", 4}}));
    auto y = typemesh::add(h, typemesh::dense_relu_dense(typemesh::layer_norm<d_model>(h, s, b), w1, w2, 0.2,
                                                         {1, "ffn", 4}));
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
    return whole(typemesh::positional_encoding<L, double>(m, shape<length, d_model>{8, 6}));
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

}  // namespace

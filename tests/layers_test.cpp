// Layers: dense, embedding and softmax_cross_entropy. Each layer's loss and
// gradients under several layouts equal the one-device run, and the
// one-device gradients equal finite differences (tests/grad_check.hpp);
// integer inputs (ids, labels) come last and are left out of `finish`, which
// exports gradients as doubles;
// the values equal a direct computation; bad ids and labels name themselves.
#include <cmath>
#include <cstdint>

#include "grad_check.hpp"
#include "typemesh/layers/dense.hpp"
#include "typemesh/layers/embedding.hpp"
#include "typemesh/layers/softmax_cross_entropy.hpp"
#include "typemesh/optim/optimizers.hpp"

namespace {
using namespace tt;
using typemesh::import_tensor;
using typemesh::layout;
using typemesh::shape;

using M3 = typemesh::mesh<"layers", a0, a1, a2>;
struct batch : typemesh::dim<"batch"> {};
struct seq : typemesh::dim<"seq"> {};
struct k : typemesh::dim<"k"> {};
struct h : typemesh::dim<"h"> {};
struct n : typemesh::dim<"n"> {};
struct vocab : typemesh::dim<"vocab"> {};
struct embed : typemesh::dim<"embed"> {};
struct e2 : typemesh::dim<"e2"> {};

// loss = sum(y * c) for a fixed c placed like y: d loss / d y = c.
template <class Y>
auto weighted_sum(const Y& y, unsigned seed = 99) {
  auto c = import_tensor<typename Y::layout_type>(
      y.mesh(), host(y.shape(), random_values(static_cast<std::size_t>(y.shape().elements()), seed)));
  return typemesh::reduce_sum(y * c);
}

// Class ids in [0, classes), as the doubles a case receives.
values random_ids(std::size_t count, int classes, unsigned seed) {
  values v = random_values(count, seed, 0.0, static_cast<double>(classes));
  for (auto& x : v) x = std::floor(x);
  return v;
}

// An integer host tensor from ids passed as doubles.
template <class S>
typemesh::host_tensor<std::int32_t, S> ids_host(const S& s, const values& v) {
  std::vector<std::int32_t> ids(v.begin(), v.end());
  return typemesh::host_tensor<std::int32_t, S>(s, std::move(ids));
}

// --- dense ----------------------------------------------------------------------

struct dense_case {  // tanh(x[batch, k] . w[k, n] + b[n])
  template <class LX, class LW, class LB, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<batch, k>{4, 6}, in[0]));
    auto w = import_tensor<LW>(m, host(shape<k, n>{6, 8}, in[1]));
    auto b = import_tensor<LB>(m, host(shape<n>{8}, in[2]));
    x.requires_grad("x"), w.requires_grad("w"), b.requires_grad("b");
    auto y = typemesh::dense(x, w, b, typemesh::activation::tanh);
    static_assert(std::is_same_v<typename decltype(y)::shape_type, shape<batch, n>>);
    return finish(weighted_sum(y), x, w, b);
  }
};

TEST(Dense, WithBiasAndActivationUnderLayouts) {
  const std::vector<values> in{random_values(24, 1), random_values(48, 2), random_values(8, 3)};
  dense_case c;
  check_layouts<M3, layout<batch(a0)>, layout<>, layout<>>("batch split", {4, 1, 1}, in, c);
  check_layouts<M3, layout<k(a1)>, layout<k(a1)>, layout<>>("contracted dim split", {1, 3, 1}, in, c);
  check_layouts<M3, layout<batch(a0)>, layout<n(a2)>, layout<n(a2)>>("batch and hidden split", {2, 1, 4}, in, c);
  check_layouts<M3, layout<batch(a0), k(a1)>, layout<k(a1), n(a2)>, layout<n(a2)>>("batch, contracted, hidden",
                                                                                 {2, 2, 2}, in, c);
}

struct dense_two_reduced_case {  // sigmoid(x[batch, k, h] . w[h, k, n]): k and h reduced, no bias
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<batch, k, h>{2, 4, 3}, in[0]));
    auto w = import_tensor<LW>(m, host(shape<h, k, n>{3, 4, 4}, in[1]));
    x.requires_grad("x"), w.requires_grad("w");
    auto y = typemesh::dense(x, w, typemesh::activation::sigmoid);
    static_assert(std::is_same_v<typename decltype(y)::shape_type, shape<batch, n>>);
    return finish(weighted_sum(y), x, w);
  }
};

TEST(Dense, SeveralReducedDims) {
  const std::vector<values> in{random_values(24, 4), random_values(48, 5)};
  dense_two_reduced_case c;
  check_layouts<M3, layout<k(a0), h(a1)>, layout<k(a0), h(a1)>>("both reduced dims split", {2, 3, 1}, in, c);
  check_layouts<M3, layout<batch(a0)>, layout<n(a1)>>("batch and hidden split", {2, 2, 1}, in, c);
  check_layouts<M3, layout<h(a2), batch(a0)>, layout<n(a1), h(a2)>>("batch, hidden, reduced", {2, 2, 3}, in, c);
}

TEST(Dense, ValuesAreMatmulPlusBias) {
  const auto xs = random_values(24, 6), ws = random_values(48, 7), bs = random_values(8, 8);
  typemesh::launch(4, [&] {
    M3 m({1, 2, 2});
    auto x = import_tensor<layout<k(a1)>>(m, host(shape<batch, k>{4, 6}, xs));
    auto w = import_tensor<layout<k(a1), n(a2)>>(m, host(shape<k, n>{6, 8}, ws));
    auto b = import_tensor<layout<n(a2)>>(m, host(shape<n>{8}, bs));
    auto y = typemesh::export_tensor(typemesh::dense(x, w, b, typemesh::activation::relu));
    auto plain = typemesh::export_tensor(typemesh::dense(x, w));
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 8; ++j) {
        double want = 0;
        for (int q = 0; q < 6; ++q) want += xs[i * 6 + q] * ws[q * 8 + j];
        EXPECT_NEAR((plain[{i, j}]), want, 1e-12);
        EXPECT_NEAR((y[{i, j}]), std::max(0.0, want + bs[j]), 1e-12);
      }
  });
}

// Nothing is found by position: x as [k, batch] and w as [n, k] give the
// values and gradients of x [batch, k] and w [k, n], under split layouts.
TEST(Dense, PermutedOperandsGiveTheCanonicalValues) {
  const auto xs = random_values(24, 11), ws = random_values(48, 12);
  values xt(24), wt(48);  // the same tensors, stored transposed
  for (int i = 0; i < 4; ++i)
    for (int q = 0; q < 6; ++q) xt[q * 4 + i] = xs[i * 6 + q];
  for (int q = 0; q < 6; ++q)
    for (int j = 0; j < 8; ++j) wt[j * 6 + q] = ws[q * 8 + j];
  typemesh::launch(4, [&] {
    M3 m({2, 2, 1});
    auto x = import_tensor<layout<batch(a0), k(a1)>>(m, host(shape<batch, k>{4, 6}, xs));
    auto w = import_tensor<layout<k(a1)>>(m, host(shape<k, n>{6, 8}, ws));
    auto xp = import_tensor<layout<k(a1), batch(a0)>>(m, host(shape<k, batch>{6, 4}, xt));
    auto wp = import_tensor<layout<k(a1)>>(m, host(shape<n, k>{8, 6}, wt));
    x.requires_grad("x"), w.requires_grad("w"), xp.requires_grad("xp"), wp.requires_grad("wp");
    auto y = typemesh::dense(x, w, typemesh::activation::tanh);
    auto yp = typemesh::dense(xp, wp, typemesh::activation::tanh);
    static_assert(std::is_same_v<typename decltype(yp)::shape_type, shape<batch, n>>);
    const auto whole = typemesh::export_tensor(y), whole_p = typemesh::export_tensor(yp);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 8; ++j) EXPECT_NEAR((whole_p[{i, j}]), (whole[{i, j}]), 1e-12);
    typemesh::backward(typemesh::reduce_sum(y * y));
    typemesh::backward(typemesh::reduce_sum(yp * yp));
    const auto gx = typemesh::export_tensor(x.grad());
    const auto gxp = typemesh::export_tensor(xp.grad());
    const auto gw = typemesh::export_tensor(w.grad());
    const auto gwp = typemesh::export_tensor(wp.grad());
    for (int q = 0; q < 6; ++q) {
      for (int i = 0; i < 4; ++i) EXPECT_NEAR((gxp[{q, i}]), (gx[{i, q}]), 1e-12);
      for (int j = 0; j < 8; ++j) EXPECT_NEAR((gwp[{j, q}]), (gw[{q, j}]), 1e-12);
    }
  });
}

// --- embedding ------------------------------------------------------------------

struct embedding_case {  // embedding(ids[batch, seq], table[vocab, embed]), squared
  template <class LI, class LT, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto table = import_tensor<LT>(m, host(shape<vocab, embed>{6, 4}, in[0]));
    auto ids = import_tensor<LI>(m, ids_host(shape<batch, seq>{4, 3}, in[1]));
    table.requires_grad("table");
    auto y = typemesh::embedding<embed>(ids, table);
    static_assert(std::is_same_v<typename decltype(y)::shape_type, shape<batch, seq, embed>>);
    return finish(weighted_sum(y * y), table);
  }
};

TEST(Embedding, GatherAndScatterUnderLayouts) {
  // 12 ids over 6 rows: repeated ids add up in the gradient, unused rows get 0.
  const std::vector<values> in{random_values(24, 11), random_ids(12, 6, 10)};
  embedding_case c;
  const std::vector<bool> fd{true, false};
  check_layouts<M3, layout<batch(a0)>, layout<>>("batch split", {2, 1, 1}, in, c, fd);
  check_layouts<M3, layout<>, layout<vocab(a1)>>("vocab split", {1, 3, 1}, in, c, fd);
  check_layouts<M3, layout<batch(a0)>, layout<vocab(a1), embed(a2)>>("batch, vocab, embed split", {2, 2, 2}, in, c,
                                                                   fd);
  check_layouts<M3, layout<seq(a2)>, layout<embed(a0)>>("seq and embed split", {2, 1, 3}, in, c, fd);
}

// Three SGD steps on a table alone (loss = sum(embedding^2)), through
// minimize or backward then step; the table after them, and how many
// variables device 0's last minimize folded.
template <class LI, class LT>
std::pair<values, std::size_t> train_table(std::array<int, 3> sizes, bool minimize) {
  const values ids = random_ids(12, 6, 10);  // repeated ids, and rows no id picks
  std::size_t folded = 0;
  const values table = typemesh::launch(sizes[0] * sizes[1] * sizes[2], [&](typemesh::device& dev) {
    M3 m(sizes);
    auto w = typemesh::variable<LT, double>(m, "table", shape<vocab, embed>{6, 4}, typemesh::init::normal{0.5}, 3);
    const auto x = import_tensor<LI>(m, ids_host(shape<batch, seq>{4, 3}, ids));
    typemesh::optim::sgd opt(0.1);
    for (int step = 0; step < 3; ++step) {
      auto y = typemesh::embedding<embed>(x, w);
      auto loss = typemesh::reduce_sum(y * y);
      if (minimize) {
        opt.minimize(loss, w);
        if (dev.id() == 0) folded = opt.folded();
      } else {
        typemesh::backward(loss);
        opt.step(w);
      }
    }
    return typemesh::export_tensor(w).values();
  })[0];
  return {table, folded};
}

// sgd::minimize takes the table's step inside the gradient's scatter where a
// device's sums need no allreduce (the whole table, or its vocab or embed
// dim split): only the rows the ids pick change, by the same bits as
// backward then step. With the ids split, the sums are allreduced and the
// step comes after the pass.
TEST(Embedding, MinimizeStepsInsideTheScatter) {
  auto check = [&]<class LI, class LT>(const char* where, std::array<int, 3> sizes, std::size_t folds) {
    SCOPED_TRACE(where);
    const auto [stepped, none] = train_table<LI, LT>(sizes, false);
    const auto [minimized, folded] = train_table<LI, LT>(sizes, true);
    EXPECT_EQ(minimized, stepped);
    EXPECT_EQ(folded, folds);
  };
  check.template operator()<layout<>, layout<>>("one device", {1, 1, 1}, 1);
  check.template operator()<layout<>, layout<vocab(a1)>>("vocab split", {1, 3, 1}, 1);
  check.template operator()<layout<>, layout<embed(a2)>>("embed split", {1, 1, 2}, 1);
  check.template operator()<layout<seq(a2)>, layout<vocab(a1)>>("seq split: allreduced sums", {1, 2, 3}, 0);
}

struct embedding_two_dims_case {  // table[embed, vocab, e2]; output [batch, e2, embed]
  template <class LI, class LT, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto table = import_tensor<LT>(m, host(shape<embed, vocab, e2>{2, 4, 3}, in[0]));
    auto ids = import_tensor<LI>(m, ids_host(shape<batch>{6}, in[1]));
    table.requires_grad("table");
    auto y = typemesh::embedding<e2, embed>(ids, table);
    static_assert(std::is_same_v<typename decltype(y)::shape_type, shape<batch, e2, embed>>);
    return finish(weighted_sum(typemesh::tanh(y)), table);
  }
};

TEST(Embedding, TableInAnyDimOrderWithSeveralEmbeddingDims) {
  const std::vector<values> in{random_values(24, 13), random_ids(6, 4, 12)};
  embedding_two_dims_case c;
  check_layouts<M3, layout<batch(a0)>, layout<vocab(a1), embed(a2)>>("batch, vocab, embed split", {3, 2, 2}, in, c,
                                                                   {true, false});
  check_layouts<M3, layout<>, layout<vocab(a0), e2(a1)>>("vocab and e2 split", {4, 3, 1}, in, c, {true, false});
}

TEST(Embedding, ValuesAreTheRows) {
  const auto ids = random_ids(12, 6, 14), table = random_values(24, 15);
  typemesh::launch(8, [&](typemesh::device& dev) {
    M3 m({2, 2, 2});
    auto i = import_tensor<layout<batch(a2)>>(m, ids_host(shape<batch, seq>{4, 3}, ids));
    auto t = import_tensor<layout<vocab(a0), embed(a1)>>(m, host(shape<vocab, embed>{6, 4}, table));
    const auto before = dev.traffic()[typemesh::op_kind::allreduce].calls;
    auto y = typemesh::embedding<embed>(i, t);
    EXPECT_EQ(dev.traffic()[typemesh::op_kind::allreduce].calls, before + 1) << "one allreduce over the vocab axis";
    auto whole = typemesh::export_tensor(y);
    for (int b = 0; b < 4; ++b)
      for (int s = 0; s < 3; ++s)
        for (int e = 0; e < 4; ++e) {
          const int id = static_cast<int>(ids[b * 3 + s]);
          EXPECT_EQ((whole[{b, s, e}]), table[id * 4 + e]);
        }
  });
}

TEST(Embedding, IdsOutsideTheVocabNameThemselves) {
  values ids = random_ids(12, 6, 16);
  ids[1 * 3 + 2] = 6;  // batch 1, seq 2
  const auto table = random_values(24, 17);
  auto run = [&](const values& v) {
    typemesh::launch(4, [&] {
      M3 m({2, 2, 1});
      auto i = import_tensor<layout<batch(a0)>>(m, ids_host(shape<batch, seq>{4, 3}, v));
      auto t = import_tensor<layout<vocab(a1)>>(m, host(shape<vocab, embed>{6, 4}, table));
      (void)typemesh::embedding<embed>(i, t);
    });
  };
  expect_error<typemesh::shape_error>([&] { run(ids); },
                                      {"embedding", "id 6", "(batch 1, seq 2)", "vocab of size 6"});
  ids[1 * 3 + 2] = 0;
  ids[3 * 3 + 0] = -1;
  expect_error<typemesh::shape_error>([&] { run(ids); }, {"id -1", "(batch 3, seq 0)", "vocab of size 6"});
}

// --- softmax_cross_entropy ------------------------------------------------------

struct xent_case {  // softmax_cross_entropy<vocab>(logits[batch, seq, vocab], labels[batch, seq])
  template <class LL, class LY, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto logits = import_tensor<LL>(m, host(shape<batch, seq, vocab>{4, 2, 8}, in[0]));
    auto labels = import_tensor<LY>(m, ids_host(shape<batch, seq>{4, 2}, in[1]));
    logits.requires_grad("logits");
    auto loss = typemesh::softmax_cross_entropy<vocab>(logits, labels);
    static_assert(std::is_same_v<typename decltype(loss)::shape_type, shape<batch, seq>>);
    return finish(weighted_sum(loss), logits);
  }
};

TEST(SoftmaxCrossEntropy, ClassIdsUnderLayouts) {
  const std::vector<values> in{random_values(64, 20, -3, 3), random_ids(8, 8, 21)};
  xent_case c;
  const std::vector<bool> fd{true, false};
  check_layouts<M3, layout<batch(a0)>, layout<batch(a0)>>("batch split", {2, 1, 1}, in, c, fd);
  check_layouts<M3, layout<vocab(a1)>, layout<>>("vocab split", {1, 4, 1}, in, c, fd);
  check_layouts<M3, layout<batch(a0), vocab(a1), seq(a2)>, layout<seq(a2), batch(a0)>>("batch, vocab, seq split",
                                                                                      {2, 2, 2}, in, c, fd);
}

struct xent_reordered_case {  // logits[vocab, batch, seq], labels[seq, batch]
  template <class LL, class LY, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto logits = import_tensor<LL>(m, host(shape<vocab, batch, seq>{8, 3, 2}, in[0]));
    auto labels = import_tensor<LY>(m, ids_host(shape<seq, batch>{2, 3}, in[1]));
    logits.requires_grad("logits");
    auto loss = typemesh::softmax_cross_entropy<vocab>(logits, labels);
    static_assert(std::is_same_v<typename decltype(loss)::shape_type, shape<batch, seq>>);
    return finish(weighted_sum(loss), logits);
  }
};

TEST(SoftmaxCrossEntropy, VocabDimAnywhere) {
  const std::vector<values> in{random_values(48, 22, -3, 3), random_ids(6, 8, 23)};
  xent_reordered_case c;
  check_layouts<M3, layout<vocab(a0), seq(a1)>, layout<seq(a1)>>("vocab and seq split", {4, 2, 1}, in, c,
                                                                {true, false});
}

struct xent_probs_case {  // logits[batch, vocab], probabilities[vocab, batch]
  template <class LL, class LP, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto logits = import_tensor<LL>(m, host(shape<batch, vocab>{4, 6}, in[0]));
    auto probs = import_tensor<LP>(m, host(shape<vocab, batch>{6, 4}, in[1]));
    logits.requires_grad("logits"), probs.requires_grad("probs");
    auto loss = typemesh::softmax_cross_entropy<vocab>(logits, probs);
    static_assert(std::is_same_v<typename decltype(loss)::shape_type, shape<batch>>);
    return finish(weighted_sum(loss), logits, probs);
  }
};

TEST(SoftmaxCrossEntropy, ProbabilitiesUnderLayouts) {
  const std::vector<values> in{random_values(24, 24, -3, 3), random_values(24, 25, 0, 1)};
  xent_probs_case c;
  check_layouts<M3, layout<batch(a0)>, layout<batch(a0)>>("batch split", {2, 1, 1}, in, c);
  check_layouts<M3, layout<vocab(a1)>, layout<vocab(a1)>>("vocab split", {1, 3, 1}, in, c);
  check_layouts<M3, layout<batch(a0), vocab(a2)>, layout<vocab(a2), batch(a0)>>("batch and vocab split", {4, 1, 2},
                                                                              in, c);
}

TEST(SoftmaxCrossEntropy, ValuesAreStableAndMatchOneHot) {
  values logits = random_values(4 * 8, 26, -3, 3);
  for (int i = 0; i < 8; ++i) logits[i] += 1000.0;  // example 0: exp would overflow unshifted
  const values labels = random_ids(4, 8, 27);
  values onehot(4 * 8, 0.0);
  for (int b = 0; b < 4; ++b) onehot[b * 8 + static_cast<int>(labels[b])] = 1.0;
  typemesh::launch(4, [&](typemesh::device& dev) {
    M3 m({1, 4, 1});
    auto x = import_tensor<layout<vocab(a1)>>(m, host(shape<batch, vocab>{4, 8}, logits));
    auto y = import_tensor<layout<>>(m, ids_host(shape<batch>{4}, labels));
    auto p = import_tensor<layout<vocab(a1)>>(m, host(shape<batch, vocab>{4, 8}, onehot));
    x.requires_grad("logits");
    const auto before = dev.traffic()[typemesh::op_kind::allreduce].calls;
    auto per_example = typemesh::softmax_cross_entropy<vocab>(x, y);
    EXPECT_EQ(dev.traffic()[typemesh::op_kind::allreduce].calls, before + 2) << "the max, then sums and picks";
    auto loss = typemesh::export_tensor(per_example.detached());
    typemesh::backward(per_example);
    EXPECT_EQ(dev.traffic()[typemesh::op_kind::allreduce].calls, before + 2) << "the gradient is local";
    auto grad = typemesh::export_tensor(x.grad());
    auto from_probs = typemesh::export_tensor(typemesh::softmax_cross_entropy<vocab>(x, p));
    for (int b = 0; b < 4; ++b) {
      double top = logits[b * 8];
      for (int v = 0; v < 8; ++v) top = std::max(top, logits[b * 8 + v]);
      double sum = 0;
      for (int v = 0; v < 8; ++v) sum += std::exp(logits[b * 8 + v] - top);
      const double want = top + std::log(sum) - logits[b * 8 + static_cast<int>(labels[b])];
      ASSERT_TRUE(std::isfinite(loss[{b}]));
      EXPECT_NEAR(loss[{b}], want, 1e-12);
      EXPECT_NEAR(from_probs[{b}], want, 1e-12);
      for (int v = 0; v < 8; ++v) {  // softmax - onehot
        const double p = std::exp(logits[b * 8 + v] - top) / sum;
        EXPECT_NEAR((grad[{b, v}]), p - onehot[b * 8 + v], 1e-12);
      }
    }
  });
}

TEST(SoftmaxCrossEntropy, LabelsOutsideTheVocabNameThemselves) {
  values labels = random_ids(4, 8, 28);
  labels[2] = 8;
  const auto logits = random_values(32, 29);
  expect_error<typemesh::shape_error>(
      [&] {
        typemesh::launch(2, [&] {
          M3 m({1, 2, 1});
          auto x = import_tensor<layout<vocab(a1)>>(m, host(shape<batch, vocab>{4, 8}, logits));
          auto y = import_tensor<layout<>>(m, ids_host(shape<batch>{4}, labels));
          (void)typemesh::softmax_cross_entropy<vocab>(x, y);
        });
      },
      {"softmax_cross_entropy", "id 8", "(batch 2)", "vocab of size 8"});
}

TEST(Layers, SizeMismatchesNameTheDims) {
  typemesh::launch(1, [] {
    M3 m({1, 1, 1});
    auto x = import_tensor<layout<>>(m, host(shape<batch, k>{2, 3}, random_values(6, 30)));
    auto w = import_tensor<layout<>>(m, host(shape<k, n>{4, 2}, random_values(8, 31)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::dense(x, w); }, {"dim k has size 3", "4"});
    auto logits = import_tensor<layout<>>(m, host(shape<batch, vocab>{2, 5}, random_values(10, 32)));
    auto labels = import_tensor<layout<>>(m, ids_host(shape<batch>{3}, values{0, 1, 2}));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::softmax_cross_entropy<vocab>(logits, labels); },
                                        {"softmax_cross_entropy", "dim batch has size 3", "2"});
  });
}

}  // namespace

// Shape operations (ops/shape_ops.hpp): rename, reshape, concat, slice,
// split, stack and one_hot. Each differentiable op's values and gradients
// under several layouts, also splits of dims the op does not touch, equal
// the one-device run and finite differences (tests/grad_check.hpp); one_hot
// matches a brute-force reference with the vocab dim split; devices outside
// the mesh record the same tape and hold nothing; run-time errors name what
// is wrong.
#include <cstdint>

#include <typemesh/ops/shape_ops.hpp>

#include "grad_check.hpp"

namespace {
using namespace tt;
using typemesh::import_tensor;
using typemesh::layout;
using typemesh::shape;

using M2 = typemesh::mesh<"shape_ops", a0, a1>;
struct d3 : typemesh::dim<"d3"> {};
struct d4 : typemesh::dim<"d4"> {};
struct vocab : typemesh::dim<"vocab"> {};

// loss = sum(y * c) for a fixed random c placed like y: d loss / d y = c.
template <class Y>
auto weighted_sum(const Y& y, unsigned seed = 99) {
  auto c = import_tensor<typename Y::layout_type>(
      y.mesh(), host(y.shape(), random_values(static_cast<std::size_t>(y.shape().elements()), seed)));
  return typemesh::reduce_sum(y * c);
}

// --- rename ---------------------------------------------------------------------

struct rename_case {  // x: [d0=12, d1=6]
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<d0, d1>{12, 6}, in[0]));
    x.requires_grad("x");
    auto y = typemesh::rename<d1, d3>(x);
    // d3 takes d1's axis; d0 keeps its own.
    using LY = typename decltype(y)::layout_type;
    static_assert(std::is_same_v<typename LY::template axis_of<d3>, typename LX::template axis_of<d1>>);
    static_assert(std::is_same_v<typename LY::template axis_of<d0>, typename LX::template axis_of<d0>>);
    auto back = typemesh::rename<d3, d1>(typemesh::square(y));
    return finish(weighted_sum(y) + weighted_sum(back * x, 3), x);
  }
};

TEST(ShapeOps, RenameKeepsTheAxis) {
  const std::vector<values> in{random_values(72, 1)};
  rename_case c;
  check_layouts<M2, layout<d0(a0)>>("untouched dim split", {4, 1}, in, c);
  check_layouts<M2, layout<d1(a1)>>("renamed dim split", {1, 3}, in, c);
  check_layouts<M2, layout<d0(a0), d1(a1)>>("both split", {2, 2}, in, c);
}

// --- reshape --------------------------------------------------------------------

struct reshape_case {  // x: [d0=4, d1=3, d2=2, d4=6] -> [d0=4, d3=6, d4=6]: d1, d2 regrouped
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    using S = shape<d0, d1, d2, d4>;
    auto x = import_tensor<LX>(m, host(S{4, 3, 2, 6}, in[0]));
    x.requires_grad("x");
    auto y = typemesh::reshape(x, shape<d0, d3, d4>{4, 6, 6});
    static_assert(std::is_same_v<typename decltype(y)::layout_type, typemesh::canonical<shape<d0, d3, d4>, LX>>);
    // Back, with the shape and the layout stated.
    auto z = typemesh::reshape<S, LX>(y * y, x.shape());
    return finish(weighted_sum(y) + weighted_sum(z * x, 3), x);
  }
};

TEST(ShapeOps, ReshapeKeepsLeadingAndTrailingSplits) {
  const std::vector<values> in{random_values(144, 2)};
  reshape_case c;
  check_layouts<M2, layout<d0(a0)>>("leading dim split", {4, 1}, in, c);
  check_layouts<M2, layout<d4(a1)>>("trailing dim split", {1, 3}, in, c);
  check_layouts<M2, layout<d4(a1), d0(a0)>>("both split", {2, 2}, in, c);
}

// --- concat, slice, split -------------------------------------------------------

struct concat_slice_case {  // x: [d0=12, d1=5, d2=6], w: [d0=12, d1=3, d2=6]
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<d0, d1, d2>{12, 5, 6}, in[0]));
    auto w = import_tensor<LW>(m, host(shape<d0, d1, d2>{12, 3, 6}, in[1]));
    x.requires_grad("x"), w.requires_grad("w");
    auto c = typemesh::concat<d1>(x, w);  // [12, 8, 6]
    auto s = typemesh::slice<d1>(c, 2, 4);
    auto [p, q] = typemesh::split<d1>(x, 2);
    auto empty = typemesh::slice<d1>(w, 3, 0);
    auto loss = weighted_sum(typemesh::square(c)) + weighted_sum(s, 3) + weighted_sum(p * p, 4) +
                weighted_sum(q, 5) + weighted_sum(empty, 6);
    return finish(loss, x, w);
  }
};

TEST(ShapeOps, ConcatSliceSplit) {
  const std::vector<values> in{random_values(360, 3), random_values(216, 4)};
  concat_slice_case c;
  check_layouts<M2, layout<d0(a0)>, layout<d0(a0)>>("leading dim split", {4, 1}, in, c);
  check_layouts<M2, layout<d2(a1)>, layout<d2(a1)>>("trailing dim split", {1, 3}, in, c);
  // The same placement spelled in another order.
  check_layouts<M2, layout<d0(a0), d2(a1)>, layout<d2(a1), d0(a0)>>("both split", {2, 2}, in, c);
}

// --- stack ----------------------------------------------------------------------

struct stack_case {  // x, w: [d0=12, d2=6] -> [d3=3, d0, d2]
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<d0, d2>{12, 6}, in[0]));
    auto w = import_tensor<LX>(m, host(shape<d0, d2>{12, 6}, in[1]));
    x.requires_grad("x"), w.requires_grad("w");
    auto s = typemesh::stack<d3>(x, w, x * w);
    static_assert(std::is_same_v<typename decltype(s)::shape_type, shape<d3, d0, d2>>);
    auto one = typemesh::stack<d3>(w);
    return finish(weighted_sum(typemesh::square(s)) + weighted_sum(s, 7) + weighted_sum(one, 8), x, w);
  }
};

TEST(ShapeOps, StackAddsALeadingWholeDim) {
  const std::vector<values> in{random_values(72, 5), random_values(72, 6)};
  stack_case c;
  check_layouts<M2, layout<d0(a0)>>("leading dim split", {4, 1}, in, c);
  check_layouts<M2, layout<d2(a1)>>("trailing dim split", {1, 3}, in, c);
  check_layouts<M2, layout<d0(a0), d2(a1)>>("both split", {2, 2}, in, c);
}

// --- one_hot --------------------------------------------------------------------

// logits: [d0=12, vocab=6] placed by LL; labels: [d0=12] placed like logits
// without vocab; the one-hot vocab dim takes logits' vocab axis.
struct one_hot_case {
  template <class LL, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto logits = import_tensor<LL>(m, host(shape<d0, vocab>{12, 6}, in[0]));
    logits.requires_grad("logits");
    std::vector<std::int32_t> ids(in[1].begin(), in[1].end());
    auto labels = import_tensor<typename LL::template without<vocab>>(
        m, typemesh::host_tensor<std::int32_t, shape<d0>>(shape<d0>{12}, ids));
    auto y = typemesh::one_hot<vocab, typename LL::template axis_of<vocab>>(labels, 6, 1.0, 0.0);
    static_assert(std::is_same_v<decltype(y), typemesh::ops_detail::canonical_t<decltype(logits)>>);
    auto picked = typemesh::reduce_sum<vocab>(y * typemesh::square(logits));  // [d0]
    return finish(weighted_sum(y * logits) + weighted_sum(picked, 3), logits);
  }
};

TEST(ShapeOps, OneHotUnderLayouts) {
  const std::vector<values> in{random_values(72, 7), {0, 5, 2, 2, 3, 1, 4, 5, 0, 3, 1, 4}};
  one_hot_case c;
  check_layouts<M2, layout<d0(a0)>>("indices split, vocab whole", {4, 1}, in, c, {true, false});
  check_layouts<M2, layout<vocab(a1)>>("vocab split", {1, 3}, in, c, {true, false});
  check_layouts<M2, layout<d0(a0), vocab(a1)>>("indices and vocab split", {2, 2}, in, c, {true, false});
}

// Each device fills only its part of the vocab, communicating nothing; the
// whole equals a brute-force one-hot.
TEST(ShapeOps, OneHotMatchesBruteForceWithSplitVocab) {
  const std::vector<std::int32_t> ids{3, 0, 8, 8, 1, 5, 7, 2, 6, 4, 0, 3};  // [d0=4, d1=3]
  const std::int64_t V = 9;
  typemesh::launch(6, [&](typemesh::device& dev) {
    M2 m({2, 3});
    auto labels = import_tensor<layout<d0(a0)>>(m, typemesh::host_tensor<std::int32_t, shape<d0, d1>>({4, 3}, ids));
    auto split = typemesh::one_hot<vocab, a1>(labels, V, 0.75f, -0.25f);
    auto whole = typemesh::one_hot<vocab>(labels, V);
    static_assert(std::is_same_v<decltype(split)::value_type, float>);
    static_assert(std::is_same_v<decltype(split)::layout_type, layout<d0(a0), vocab(a1)>>);
    static_assert(std::is_same_v<decltype(whole)::layout_type, layout<d0(a0)>>);
    EXPECT_EQ(split.local().size(), 2u * 3u * 3u);
    EXPECT_EQ(split.slice_begin<vocab>(), 3 * m.coordinate<a1>(dev.id()));
    EXPECT_EQ(dev.traffic().calls(), 0u) << "one_hot communicates nothing";
    auto got = typemesh::export_tensor(split).values();
    auto got_whole = typemesh::export_tensor(whole).values();
    ASSERT_EQ(got.size(), ids.size() * V);
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (std::int64_t v = 0; v < V; ++v) {
        EXPECT_EQ(got[i * V + v], ids[i] == v ? 0.75f : -0.25f) << "element " << i << ", vocab " << v;
        EXPECT_EQ(got_whole[i * V + v], ids[i] == v ? 1.0f : 0.0f) << "element " << i << ", vocab " << v;
      }
  });
}

// --- Devices outside the mesh ---------------------------------------------------

// A chain of every op on a mesh of devices 1 and 2 in a run of 3: device 0
// holds nothing, records the same nodes and runs the same backward.
std::vector<values> chain_gradients(int devices, std::array<int, 2> sizes, std::vector<int> members) {
  const auto xs = random_values(24, 8);
  return typemesh::launch(devices, [&] {
    M2 m(sizes, members);
    auto x = import_tensor<layout<d1(a1)>>(m, host(shape<d2, d0, d1>{2, 2, 6}, xs));
    x.requires_grad("x");
    auto r = typemesh::reshape(typemesh::rename<d0, d4>(x), shape<d3, d1>{4, 6});  // d1 stays split
    auto c = typemesh::concat<d3>(r, typemesh::square(r));
    auto [p, q] = typemesh::split<d3>(c, 5);
    auto s = typemesh::stack<d0>(typemesh::slice<d3>(p, 1, 3), typemesh::slice<d3>(q, 0, 3));
    auto ids = import_tensor<layout<>>(m, typemesh::host_tensor<std::int32_t, shape<d3>>({3}, {2, 0, 1}));
    auto oh = typemesh::rename<vocab, d1>(typemesh::one_hot<vocab, a1>(ids, 6, 1.0, 0.5));
    auto loss = weighted_sum(s * oh);
    typemesh::backward(loss);
    EXPECT_EQ(x.holds_data(), m.contains(typemesh::this_device().id()));
    return typemesh::export_tensor(x.grad()).values();
  });
}

TEST(ShapeOps, DevicesOutsideTheMeshHoldNothing) {
  const auto ref = chain_gradients(1, {1, 1}, {0});
  const auto got = chain_gradients(3, {1, 2}, {1, 2});
  EXPECT_TRUE(got[0].empty());
  expect_close(got[1], ref[0], 1e-12, "device 1");
  expect_close(got[2], ref[0], 1e-12, "device 2");
}

// --- Run-time errors ------------------------------------------------------------

TEST(ShapeOps, ErrorsNameTheDimAndSizes) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    auto x = import_tensor<layout<>>(m, host(shape<d0, d1>{4, 7}, random_values(28, 9)));
    using typemesh::shape_error;
    expect_error<shape_error>([&] { (void)typemesh::slice<d1>(x, 5, 4); },
                              {"slice<d1>", "begin 5", "size 4", "dim d1 of size 7"});
    expect_error<shape_error>([&] { (void)typemesh::slice<d1>(x, -1, 2); }, {"slice<d1>", "begin -1", "size 2"});
    expect_error<shape_error>([&] { (void)typemesh::split<d1>(x, 8); }, {"split<d1>", "first_size 8", "[0, 7]"});
    auto y = import_tensor<layout<>>(m, host(shape<d0, d1>{3, 2}, random_values(6, 10)));
    expect_error<shape_error>([&] { (void)typemesh::concat<d1>(x, y); },
                              {"concat<d1>", "[d0=4 d1=7]", "[d0=3 d1=2]", "other than d1"});
    expect_error<shape_error>([&] { (void)typemesh::stack<d3>(x, x, y); },
                              {"stack<d3>", "tensor 2 has shape [d0=3 d1=2]", "tensor 0 has [d0=4 d1=7]"});
    expect_error<shape_error>([&] { (void)typemesh::reshape(x, shape<d0, d3>{4, 6}); },
                              {"reshape", "[d0=4 d1=7] (28 elements)", "[d0=4 d3=6] (24 elements)"});
    expect_error<shape_error>([&] { (void)typemesh::reshape(x, shape<d0, d3>{2, 14}); },
                              {"reshape", "dim d0 keeps its place but changes size from 4 to 2"});
  });
}

// An index out of range names itself, its global position and vocab_size,
// also when the indices are split and another device holds it.
TEST(ShapeOps, OneHotIndexOutOfRange) {
  auto run = [](std::vector<std::int32_t> ids) {
    typemesh::launch(2, [&] {
      M2 m({2, 1});
      auto labels =
          import_tensor<layout<d0(a0)>>(m, typemesh::host_tensor<std::int32_t, shape<d0, d1>>({4, 2}, ids));
      (void)typemesh::one_hot<vocab>(labels, 5);
    });
  };
  expect_error<typemesh::shape_error>([&] { run({0, 1, 2, 3, 4, 0, 1, 5}); },
                                      {"one_hot<vocab>", "index 5", "(d0=3, d1=1)", "[0, 5)", "vocab_size"});
  expect_error<typemesh::shape_error>([&] { run({0, -2, 2, 3, 4, 0, 1, 2}); },
                                      {"one_hot<vocab>", "index -2", "(d0=0, d1=1)", "[0, 5)"});
}

}  // namespace

// Convolution and pooling (layers/conv2d.hpp, layers/pooling.hpp): values
// and gradients under layouts that split batch, in-channels (a summed dim:
// allreduced) and out-channels, each equal to the one-device run and to
// finite differences (tests/grad_check.hpp); forward values against direct
// loops written here; TensorFlow's SAME padding split on known answers; the
// allreduces the layouts imply; errors naming the dims.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <typemesh/layers/conv2d.hpp>
#include <typemesh/layers/pooling.hpp>

#include "grad_check.hpp"

namespace {
using namespace tt;
using typemesh::import_tensor;
using typemesh::layout;
using typemesh::padding;
using typemesh::shape;

struct batch : typemesh::dim<"batch"> {};
struct h : typemesh::dim<"h"> {};
struct w : typemesh::dim<"w"> {};
struct c : typemesh::dim<"c"> {};
struct k : typemesh::dim<"k"> {};
struct fh : typemesh::dim<"fh"> {};
struct fw : typemesh::dim<"fw"> {};
struct oh : typemesh::dim<"oh"> {};
struct ow : typemesh::dim<"ow"> {};

using M2 = typemesh::mesh<"conv", a0, a1>;
using image = shape<batch, h, w, c>;
using filter = shape<fh, fw, c, k>;

// Sizes: height and width differ, and so do the filter's, so a swap of the
// two shows; fw = 4 on w = 6 gives SAME an odd total padding (split 1 + 2).
constexpr int NB = 4, NH = 7, NW = 6, NC = 4, NK = 6, FH = 3, FW = 4;

struct config {
  typemesh::strides step;
  padding pad;
  const char* name;
};
const config configs[] = {
    {{1, 1}, padding::valid, "VALID stride 1"}, {{2, 2}, padding::valid, "VALID stride 2"},
    {{1, 1}, padding::same, "SAME stride 1"},   {{2, 2}, padding::same, "SAME stride 2"},
    {{1, 2}, padding::same, "SAME stride 1x2"},
};

// loss = sum(y * r) for a fixed random r placed like y: d loss / d y = r.
template <class Y>
auto weighted_sum(const Y& y, unsigned seed = 99) {
  auto r = import_tensor<typename Y::layout_type>(
      y.mesh(), host(y.shape(), random_values(static_cast<std::size_t>(y.shape().elements()), seed)));
  return typemesh::reduce_sum(y * r);
}

// --- Direct loops, TensorFlow's definitions written out again ----------------------

struct axis_plan {
  int out, pad_before;
};
axis_plan tf_axis(int in, int size, int stride, padding p) {
  if (p == padding::valid) return {(in - size) / stride + 1, 0};
  const int out = (in + stride - 1) / stride;
  return {out, std::max((out - 1) * stride + size - in, 0) / 2};
}

values naive_conv(const values& x, const values& f, const config& cfg) {
  const auto ph = tf_axis(NH, FH, int(cfg.step.h), cfg.pad), pw = tf_axis(NW, FW, int(cfg.step.w), cfg.pad);
  values y(std::size_t(NB) * ph.out * pw.out * NK, 0.0);
  for (int b = 0; b < NB; ++b)
    for (int i = 0; i < ph.out; ++i)
      for (int j = 0; j < pw.out; ++j)
        for (int o = 0; o < NK; ++o) {
          double acc = 0;
          for (int di = 0; di < FH; ++di)
            for (int dj = 0; dj < FW; ++dj)
              for (int ch = 0; ch < NC; ++ch) {
                const int r = i * int(cfg.step.h) - ph.pad_before + di, s = j * int(cfg.step.w) - pw.pad_before + dj;
                if (r < 0 || r >= NH || s < 0 || s >= NW) continue;
                acc += x[((b * NH + r) * NW + s) * NC + ch] * f[((di * FW + dj) * NC + ch) * NK + o];
              }
          y[((b * ph.out + i) * pw.out + j) * NK + o] = acc;
        }
  return y;
}

enum class pool_kind { max, avg };
constexpr int PH = 3, PW = 2;  // pooling window

values naive_pool(const values& x, const config& cfg, pool_kind kind) {
  const auto ph = tf_axis(NH, PH, int(cfg.step.h), cfg.pad), pw = tf_axis(NW, PW, int(cfg.step.w), cfg.pad);
  values y;
  for (int b = 0; b < NB; ++b)
    for (int i = 0; i < ph.out; ++i)
      for (int j = 0; j < pw.out; ++j)
        for (int ch = 0; ch < NC; ++ch) {
          double best = -1e300, sum = 0;
          int count = 0;
          for (int di = 0; di < PH; ++di)
            for (int dj = 0; dj < PW; ++dj) {
              const int r = i * int(cfg.step.h) - ph.pad_before + di, s = j * int(cfg.step.w) - pw.pad_before + dj;
              if (r < 0 || r >= NH || s < 0 || s >= NW) continue;
              const double v = x[((b * NH + r) * NW + s) * NC + ch];
              best = std::max(best, v), sum += v, ++count;
            }
          y.push_back(kind == pool_kind::max ? best : sum / count);
        }
  return y;
}

// --- conv2d ---------------------------------------------------------------------

struct conv_case {
  config cfg;
  template <class LX, class LF, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(image{NB, NH, NW, NC}, in[0]));
    auto f = import_tensor<LF>(m, host(filter{FH, FW, NC, NK}, in[1]));
    x.requires_grad("x"), f.requires_grad("filter");
    return finish(weighted_sum(typemesh::conv2d(x, f, cfg.step, cfg.pad)), x, f);
  }
};

// The forward values, exported whole from device 0.
template <class LX, class LF>
values conv_values(typemesh::mesh<"conv", a0, a1>::coords sizes, const std::vector<values>& in, const config& cfg) {
  return typemesh::launch(sizes[0] * sizes[1], [&] {
    M2 m(sizes);
    auto x = import_tensor<LX>(m, host(image{NB, NH, NW, NC}, in[0]));
    auto f = import_tensor<LF>(m, host(filter{FH, FW, NC, NK}, in[1]));
    return typemesh::export_tensor(typemesh::conv2d(x, f, cfg.step, cfg.pad)).values();
  })[0];
}

const std::vector<values> conv_inputs{random_values(NB * NH * NW * NC, 1), random_values(FH * FW * NC * NK, 2)};

TEST(Conv2d, UnderLayoutsEqualsOneDeviceAndFiniteDifferences) {
  for (const auto& cfg : configs) {
    SCOPED_TRACE(cfg.name);
    const conv_case cs{cfg};
    check_layouts<M2, layout<batch(a0)>, layout<>>("batch split", {4, 1}, conv_inputs, cs);
    check_layouts<M2, layout<c(a1)>, layout<c(a1)>>("in-channels split (summed)", {1, 4}, conv_inputs, cs);
    check_layouts<M2, layout<>, layout<k(a1)>>("out-channels split", {1, 3}, conv_inputs, cs);
    check_layouts<M2, layout<batch(a0), c(a1)>, layout<c(a1)>>("batch and in-channels", {2, 2}, conv_inputs, cs);
    check_layouts<M2, layout<batch(a1)>, layout<k(a0)>>("batch and out-channels", {3, 2}, conv_inputs, cs);
    check_layouts<M2, layout<c(a0)>, layout<c(a0), k(a1)>>("in- and out-channels", {2, 3}, conv_inputs, cs);
  }
}

TEST(Conv2d, ForwardEqualsDirectLoops) {
  for (const auto& cfg : configs) {
    SCOPED_TRACE(cfg.name);
    const values want = naive_conv(conv_inputs[0], conv_inputs[1], cfg);
    expect_close(conv_values<layout<>, layout<>>({1, 1}, conv_inputs, cfg), want, 1e-12, "one device");
    expect_close((conv_values<layout<batch(a0), c(a1)>, layout<c(a1)>>({2, 2}, conv_inputs, cfg)), want, 1e-12,
                 "batch and in-channels split");
    expect_close((conv_values<layout<c(a0)>, layout<c(a0), k(a1)>>({2, 3}, conv_inputs, cfg)), want, 1e-12,
                 "in- and out-channels split");
  }
}

// A 1x1 filter with stride 1 takes the path without im2col.
struct pointwise_case {
  template <class LX, class LF, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(image{NB, 3, 2, NC}, in[0]));
    auto f = import_tensor<LF>(m, host(filter{1, 1, NC, NK}, in[1]));
    x.requires_grad("x"), f.requires_grad("filter");
    return finish(weighted_sum(typemesh::conv2d(x, f, {1, 1}, padding::same)), x, f);
  }
};

TEST(Conv2d, PointwiseFilter) {
  const std::vector<values> in{random_values(NB * 3 * 2 * NC, 3), random_values(NC * NK, 4)};
  check_layouts<M2, layout<batch(a0), c(a1)>, layout<c(a1)>>("batch and in-channels", {2, 2}, in, pointwise_case{});
  check_layouts<M2, layout<batch(a1)>, layout<k(a0)>>("batch and out-channels", {3, 2}, in, pointwise_case{});
}

// SAME with an even filter pads 0 before and 1 after (TensorFlow): a filter
// whose only tap is its top-left corner copies the image; one whose only tap
// is its bottom-right corner shifts it up-left, with zeros coming in.
TEST(Conv2d, SamePaddingPutsTheLargerHalfAfter) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    values xs(16);
    std::iota(xs.begin(), xs.end(), 1.0);
    values fs(2 * 2 * 1 * 2, 0.0);
    fs[((0 * 2 + 0) * 1 + 0) * 2 + 0] = 1;  // out-channel 0: tap (0, 0)
    fs[((1 * 2 + 1) * 1 + 0) * 2 + 1] = 1;  // out-channel 1: tap (1, 1)
    auto x = import_tensor<layout<>>(m, host(image{1, 4, 4, 1}, xs));
    auto f = import_tensor<layout<>>(m, host(filter{2, 2, 1, 2}, fs));
    auto y = typemesh::conv2d<oh, ow>(x, f, {1, 1}, padding::same);
    static_assert(std::is_same_v<decltype(y)::shape_type, shape<batch, oh, ow, k>>);
    auto out = typemesh::export_tensor(y);
    ASSERT_EQ(y.shape(), (shape<batch, oh, ow, k>{1, 4, 4, 2}));
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        EXPECT_EQ((out[{0, i, j, 0}]), xs[i * 4 + j]) << i << "," << j;
        EXPECT_EQ((out[{0, i, j, 1}]), (i < 3 && j < 3 ? xs[(i + 1) * 4 + j + 1] : 0.0)) << i << "," << j;
      }
  });
}

// The output layouts, and the allreduces: forward over in-channels' axis;
// backward, the image's gradient over out-channels' axis and the filter's
// over batch's.
TEST(Conv2d, AllreducesFollowTheContractionRules) {
  auto count = [](auto lx, auto lf, std::array<int, 2> sizes) {
    using LX = decltype(lx);
    using LF = decltype(lf);
    return typemesh::launch(sizes[0] * sizes[1], [&](typemesh::device& dev) {
      M2 m(sizes);
      auto x = import_tensor<LX>(m, host(image{NB, NH, NW, NC}, conv_inputs[0]));
      auto f = import_tensor<LF>(m, host(filter{FH, FW, NC, NK}, conv_inputs[1]));
      x.requires_grad("x"), f.requires_grad("filter");
      auto calls = [&] { return dev.traffic()[typemesh::op_kind::allreduce].calls; };
      const auto before = calls();
      auto y = typemesh::conv2d(x, f, {2, 2}, padding::same);
      const auto forward = calls() - before;
      auto loss = typemesh::reduce_sum(typemesh::stop_gradient(y) * y);
      const auto before_backward = calls();
      typemesh::backward(loss);  // only conv2d's gradients communicate
      return std::array<std::uint64_t, 2>{forward, calls() - before_backward};
    })[0];
  };
  using two = std::array<std::uint64_t, 2>;
  EXPECT_EQ(count(layout<batch(a0)>{}, layout<>{}, {2, 1}), (two{0, 1})) << "batch split: the filter's gradient";
  EXPECT_EQ(count(layout<c(a1)>{}, layout<c(a1)>{}, {1, 2}), (two{1, 0})) << "in-channels split: the output";
  EXPECT_EQ(count(layout<>{}, layout<k(a1)>{}, {1, 2}), (two{0, 1})) << "out-channels split: the image's gradient";
  EXPECT_EQ(count(layout<batch(a0), c(a1)>{}, layout<c(a1)>{}, {2, 2}), (two{1, 1})) << "batch and in-channels";

  using X = typemesh::tensor<double, image, layout<batch(a0)>, M2>;
  using FK = typemesh::tensor<double, filter, layout<k(a1)>, M2>;
  static_assert(std::is_same_v<decltype(typemesh::conv2d(std::declval<X>(), std::declval<FK>(), {}, padding::valid)),
                               typemesh::tensor<double, shape<batch, h, w, k>, layout<batch(a0), k(a1)>, M2>>);
}

TEST(Conv2d, SizesThatDoNotFitNameTheDims) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    auto x = import_tensor<layout<>>(m, host(image{1, 7, 7, 4}, values(196, 1.0)));
    auto big = import_tensor<layout<>>(m, host(filter{9, 3, 4, 2}, values(216, 1.0)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::conv2d(x, big, {1, 1}, padding::valid); },
                                        {"conv2d", "VALID", "filter dim fh of size 9", "image dim h of size 7"});
    EXPECT_NO_THROW((void)typemesh::conv2d(x, big, {1, 1}, padding::same));  // SAME pads instead
    auto wrong_c = import_tensor<layout<>>(m, host(filter{3, 3, 5, 2}, values(90, 1.0)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::conv2d(x, wrong_c, {1, 1}, padding::same); },
                                        {"conv2d", "dim c", "4", "5"});
    auto f = import_tensor<layout<>>(m, host(filter{3, 3, 4, 2}, values(72, 1.0)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::conv2d(x, f, {1, 0}, padding::same); },
                                        {"conv2d", "stride along dim w", "0"});
  });
}

// --- Pooling --------------------------------------------------------------------

struct pool_case {
  config cfg;
  pool_kind kind;
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(image{NB, NH, NW, NC}, in[0]));
    x.requires_grad("x");
    const typemesh::window win{PH, PW};
    auto y = kind == pool_kind::max ? typemesh::max_pool2d(x, win, cfg.step, cfg.pad)
                                    : typemesh::avg_pool2d(x, win, cfg.step, cfg.pad);
    return finish(weighted_sum(y), x);
  }
};

const std::vector<values> pool_inputs{random_values(NB * NH * NW * NC, 5)};

TEST(Pooling, UnderLayoutsEqualsOneDeviceAndFiniteDifferences) {
  for (auto kind : {pool_kind::max, pool_kind::avg}) {
    for (const auto& cfg : configs) {
      SCOPED_TRACE(std::string(kind == pool_kind::max ? "max " : "avg ") + cfg.name);
      const pool_case cs{cfg, kind};
      check_layouts<M2, layout<batch(a0)>>("batch split", {4, 1}, pool_inputs, cs);
      check_layouts<M2, layout<c(a1)>>("channels split", {1, 2}, pool_inputs, cs);
      check_layouts<M2, layout<batch(a1), c(a0)>>("batch and channels", {2, 2}, pool_inputs, cs);
    }
  }
}

TEST(Pooling, ForwardEqualsDirectLoops) {
  for (auto kind : {pool_kind::max, pool_kind::avg}) {
    for (const auto& cfg : configs) {
      SCOPED_TRACE(std::string(kind == pool_kind::max ? "max " : "avg ") + cfg.name);
      auto got = typemesh::launch(4, [&] {
        M2 m({2, 2});
        auto x = import_tensor<layout<batch(a1), c(a0)>>(m, host(image{NB, NH, NW, NC}, pool_inputs[0]));
        const typemesh::window win{PH, PW};
        auto y = kind == pool_kind::max ? typemesh::max_pool2d(x, win, cfg.step, cfg.pad)
                                        : typemesh::avg_pool2d(x, win, cfg.step, cfg.pad);
        static_assert(std::is_same_v<decltype(y)::layout_type, layout<batch(a1), c(a0)>>);
        return typemesh::export_tensor(y).values();
      })[0];
      expect_close(got, naive_pool(pool_inputs[0], cfg, kind), 1e-12, "batch and channels split");
    }
  }
}

// SAME averages count only the elements inside the image: on a 3x3 image a
// 2x2 window at the bottom-right corner holds one element. Its gradient goes
// to that element alone.
TEST(Pooling, SameAveragesOverElementsInside) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    values xs(9);
    std::iota(xs.begin(), xs.end(), 1.0);
    auto x = import_tensor<layout<>>(m, host(image{1, 3, 3, 1}, xs));
    x.requires_grad("x");
    auto y = typemesh::avg_pool2d(x, {2, 2}, {1, 1}, padding::same);
    auto mx = typemesh::max_pool2d(x, {2, 2}, {1, 1}, padding::same);
    auto out = typemesh::export_tensor(y.detached());
    EXPECT_EQ((out[{0, 0, 0, 0}]), (1 + 2 + 4 + 5) / 4.0);
    EXPECT_EQ((out[{0, 0, 2, 0}]), (3 + 6) / 2.0);
    EXPECT_EQ((out[{0, 2, 2, 0}]), 9.0);
    EXPECT_EQ((typemesh::export_tensor(mx.detached())[{0, 2, 0, 0}]), 8.0);
    auto [g] = typemesh::grad(typemesh::reduce_sum(y), x);
    // Element (2, 2) is in windows (1,1) of 4, (1,2) and (2,1) of 2, (2,2) of 1.
    EXPECT_DOUBLE_EQ((typemesh::export_tensor(g)[{0, 2, 2, 0}]), 0.25 + 0.5 + 0.5 + 1.0);
    EXPECT_DOUBLE_EQ((typemesh::export_tensor(g)[{0, 0, 0, 0}]), 0.25);
  });
}

TEST(Pooling, WindowsThatDoNotFitNameTheDims) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    auto x = import_tensor<layout<>>(m, host(image{2, 7, 5, 3}, values(210, 1.0)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::max_pool2d(x, {8, 2}, {1, 1}, padding::valid); },
                                        {"max_pool2d", "VALID", "window height 8", "image dim h of size 7"});
    expect_error<typemesh::shape_error>([&] { (void)typemesh::avg_pool2d(x, {2, 6}, {2, 2}, padding::valid); },
                                        {"avg_pool2d", "window width 6", "image dim w of size 5"});
    expect_error<typemesh::shape_error>([&] { (void)typemesh::avg_pool2d(x, {2, 0}, {1, 1}, padding::same); },
                                        {"avg_pool2d", "window width 0", "empty"});
  });
}

}  // namespace

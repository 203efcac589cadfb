// Convolution and pooling (layers/conv2d.hpp, layers/pooling.hpp): values
// and gradients under layouts that split batch, in-channels (a summed dim:
// allreduced) and out-channels, each equal to the one-device run and to
// finite differences (tests/grad_check.hpp); forward values against direct
// loops written here; TensorFlow's SAME padding split on known answers; the
// allreduces the layouts imply; errors naming the dims. Dims are found by
// role: images and filters whose dims come in other orders (with any number
// of batch-like dims) give the canonical order's values and gradients,
// rearranged by plain loops written here. Float convolutions on the host's
// direct kernels equal the im2col path's to float rounding.
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
struct group : typemesh::dim<"group"> {};  // a second batch-like dim

using M2 = typemesh::mesh<"conv", a0, a1>;
using image = shape<batch, h, w, c>;  // the kernel's own orders: used in place
using filter = shape<fh, fw, c, k>;
using conv_out = shape<batch, h, w, k>;

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

// x [images, NH, NW, NC], f [FH, FW, NC, NK] -> [images, out h, out w, NK].
values naive_conv(const values& x, const values& f, const config& cfg, int images = NB) {
  const auto ph = tf_axis(NH, FH, int(cfg.step.h), cfg.pad), pw = tf_axis(NW, FW, int(cfg.step.w), cfg.pad);
  values y(std::size_t(images) * ph.out * pw.out * NK, 0.0);
  for (int b = 0; b < images; ++b)
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

// x [NB, NH, NW, NC] -> [NB, out h, out w, NC].
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

// v, the elements of a tensor of shape `from` (row-major), rearranged into
// the dim order of To (the same dims).
template <class To, class From>
values permuted(const values& v, const From& from) {
  constexpr std::size_t r = From::rank;
  std::array<std::size_t, r> to_position{};
  [&]<class... Ds>(typemesh::type_list<Ds...>) {
    std::size_t i = 0;
    ((to_position[i++] = To::template index_of<Ds>), ...);
  }(typemesh::dims_of<From>{});
  const auto sizes = from.sizes();
  std::array<std::int64_t, r> to_sizes{}, to_stride{};
  for (std::size_t i = 0; i < r; ++i) to_sizes[to_position[i]] = sizes[i];
  std::int64_t stride = 1;
  for (std::size_t j = r; j-- > 0;) to_stride[j] = stride, stride *= to_sizes[j];
  values out(v.size());
  for (std::size_t e = 0; e < v.size(); ++e) {
    std::int64_t rest = std::int64_t(e), at = 0;
    for (std::size_t i = r; i-- > 0;) {
      at += rest % sizes[i] * to_stride[to_position[i]];
      rest /= sizes[i];
    }
    out[std::size_t(at)] = v[e];
  }
  return out;
}

// --- conv2d ---------------------------------------------------------------------

struct conv_case {
  config cfg;
  template <class LX, class LF, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(image{NB, NH, NW, NC}, in[0]));
    auto f = import_tensor<LF>(m, host(filter{FH, FW, NC, NK}, in[1]));
    x.requires_grad("x"), f.requires_grad("filter");
    return finish(weighted_sum(typemesh::conv2d<h, w, fh, fw>(x, f, {.strides = cfg.step, .padding = cfg.pad})), x, f);
  }
};

// The forward values, exported whole from device 0.
template <class LX, class LF>
values conv_values(typemesh::mesh<"conv", a0, a1>::coords sizes, const std::vector<values>& in, const config& cfg) {
  return typemesh::launch(sizes[0] * sizes[1], [&] {
    M2 m(sizes);
    auto x = import_tensor<LX>(m, host(image{NB, NH, NW, NC}, in[0]));
    auto f = import_tensor<LF>(m, host(filter{FH, FW, NC, NK}, in[1]));
    return typemesh::export_tensor(typemesh::conv2d<h, w, fh, fw>(x, f, {.strides = cfg.step, .padding = cfg.pad}))
        .values();
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
    return finish(weighted_sum(typemesh::conv2d<h, w, fh, fw>(x, f)), x, f);  // the defaults: stride 1, SAME
  }
};

TEST(Conv2d, PointwiseFilter) {
  const std::vector<values> in{random_values(NB * 3 * 2 * NC, 3), random_values(NC * NK, 4)};
  check_layouts<M2, layout<batch(a0), c(a1)>, layout<c(a1)>>("batch and in-channels", {2, 2}, in, pointwise_case{});
  check_layouts<M2, layout<batch(a1)>, layout<k(a0)>>("batch and out-channels", {3, 2}, in, pointwise_case{});
}

// Float convolutions whose out-channels are a multiple of 16 (or 8) run the host's
// direct kernels (backend/host/direct_conv.hpp) where the CPU has AVX2 or
// AVX-512. Through conv2d, under layouts that split batch, in-channels and
// out-channels (locally 16 each), the output and both gradients equal the
// im2col path's (direct_conv_limit none) to float rounding.
struct float_conv {
  std::vector<values> results;  // y, d x, d filter
};

template <class LX, class LF>
float_conv float_conv_run(std::array<int, 2> sizes, typemesh::backend::host::conv_isa limit, const config& cfg) {
  const auto xs = random_values(2 * 6 * 5 * 32, 11), fs = random_values(3 * 3 * 32 * 32, 12);
  const auto before = typemesh::backend::host::direct_conv_limit().exchange(limit);
  auto per_device = typemesh::launch(sizes[0] * sizes[1], [&] {
    M2 m(sizes);
    auto x = import_tensor<LX>(
        m, typemesh::host_tensor<float, image>(image{2, 6, 5, 32}, std::vector<float>(xs.begin(), xs.end())));
    auto f = import_tensor<LF>(
        m, typemesh::host_tensor<float, filter>(filter{3, 3, 32, 32}, std::vector<float>(fs.begin(), fs.end())));
    x.requires_grad("x"), f.requires_grad("filter");
    auto y = typemesh::conv2d<h, w, fh, fw>(x, f, {.strides = cfg.step, .padding = cfg.pad});
    typemesh::backward(typemesh::reduce_sum(y * y));
    auto whole = [](const auto& t) {
      auto e = typemesh::export_tensor(t);
      return values(e.values().begin(), e.values().end());
    };
    return float_conv{{whole(y), whole(x.grad()), whole(f.grad())}};
  });
  typemesh::backend::host::direct_conv_limit().store(before);
  return per_device[0];
}

TEST(Conv2d, FloatDirectKernelsEqualTheIm2colPath) {
  if (typemesh::backend::host::detected_simd_isa() == typemesh::backend::host::conv_isa::none) {
    GTEST_SKIP() << "the direct kernels need AVX2 or AVX-512 and GCC or Clang";
  }
  using typemesh::backend::host::conv_isa;
  const char* names[] = {"output", "image gradient", "filter gradient"};
  for (const config& cfg : {config{{1, 1}, padding::same, "SAME stride 1"}, config{{2, 2}, padding::valid, "VALID stride 2"}}) {
    SCOPED_TRACE(cfg.name);
    const float_conv want = float_conv_run<layout<>, layout<>>({1, 1}, conv_isa::none, cfg);
    auto check = [&](const float_conv& got, const std::string& what) {
      for (int i = 0; i < 3; ++i) expect_close(got.results[i], want.results[i], 1e-4, what + " " + names[i]);
    };
    check(float_conv_run<layout<>, layout<>>({1, 1}, conv_isa::avx512, cfg), "one device");
    check(float_conv_run<layout<>, layout<>>({1, 1}, conv_isa::avx2, cfg), "one device, AVX2");
    check(float_conv_run<layout<batch(a0)>, layout<k(a1)>>({2, 2}, conv_isa::avx512, cfg), "batch and out-channels");
    check(float_conv_run<layout<c(a0)>, layout<c(a0)>>({2, 1}, conv_isa::avx512, cfg), "in-channels split");
  }
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
    auto y = typemesh::conv2d<h, w, fh, fw, oh, ow>(x, f, {.strides = {1, 1}, .padding = padding::same});
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
      auto y = typemesh::conv2d<h, w, fh, fw>(x, f, {.strides = {2, 2}});
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
  static_assert(std::is_same_v<decltype(typemesh::conv2d<h, w, fh, fw>(std::declval<X>(), std::declval<FK>())),
                               typemesh::tensor<double, shape<batch, h, w, k>, layout<batch(a0), k(a1)>, M2>>);
}

TEST(Conv2d, SizesThatDoNotFitNameTheDims) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    auto x = import_tensor<layout<>>(m, host(image{1, 7, 7, 4}, values(196, 1.0)));
    auto big = import_tensor<layout<>>(m, host(filter{9, 3, 4, 2}, values(216, 1.0)));
    expect_error<typemesh::shape_error>(
        [&] { (void)typemesh::conv2d<h, w, fh, fw>(x, big, {.padding = padding::valid}); },
        {"conv2d", "VALID", "filter dim fh of size 9", "image dim h of size 7"});
    EXPECT_NO_THROW(((void)typemesh::conv2d<h, w, fh, fw>(x, big)));  // SAME (the default) pads instead
    auto wrong_c = import_tensor<layout<>>(m, host(filter{3, 3, 5, 2}, values(90, 1.0)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::conv2d<h, w, fh, fw>(x, wrong_c); },
                                        {"conv2d", "dim c", "4", "5"});
    auto f = import_tensor<layout<>>(m, host(filter{3, 3, 4, 2}, values(72, 1.0)));
    expect_error<typemesh::shape_error>([&] { (void)typemesh::conv2d<h, w, fh, fw>(x, f, {.strides = {1, 0}}); },
                                        {"conv2d", "stride along dim w", "0"});
  });
}

// The options' defaults are Mesh-TensorFlow's: stride 1, SAME padding.
TEST(Conv2d, DefaultOptionsAreStrideOneSame) {
  const config same1{{1, 1}, padding::same, "SAME stride 1"};
  expect_close(typemesh::launch(1,
                                [&] {
                                  M2 m({1, 1});
                                  auto x = import_tensor<layout<>>(m, host(image{NB, NH, NW, NC}, conv_inputs[0]));
                                  auto f = import_tensor<layout<>>(m, host(filter{FH, FW, NC, NK}, conv_inputs[1]));
                                  auto y = typemesh::conv2d<h, w, fh, fw>(x, f);
                                  EXPECT_EQ(y.shape(), (conv_out{NB, NH, NW, NK}));
                                  return typemesh::export_tensor(y).values();
                                })[0],
               naive_conv(conv_inputs[0], conv_inputs[1], same1), 1e-12, "conv2d<h, w, fh, fw>(x, f)");
}

// --- conv2d with dims in other orders ------------------------------------------------

// loss = sum(conv2d(x, f) * r), with r given (input 2) in the output's order,
// so that two dim orders can be given the same loss.
template <class SX, class SF>
struct weighted_conv_case {
  config cfg;
  SX xs;
  SF fs;
  template <class LX, class LF, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(xs, in[0]));
    auto f = import_tensor<LF>(m, host(fs, in[1]));
    x.requires_grad("x"), f.requires_grad("filter");
    auto y = typemesh::conv2d<h, w, fh, fw>(x, f, {.strides = cfg.step, .padding = cfg.pad});
    auto r = import_tensor<typename decltype(y)::layout_type>(m, host(y.shape(), in[2]));
    return finish(typemesh::reduce_sum(y * r), x, f);
  }
};

// conv2d's output exported whole from device 0.
template <class LX, class LF, class SX, class SF>
values conv_values_of(typemesh::mesh<"conv", a0, a1>::coords sizes, const SX& xs, const SF& fs,
                      const std::vector<values>& in, const config& cfg) {
  return typemesh::launch(sizes[0] * sizes[1], [&] {
    M2 m(sizes);
    auto x = import_tensor<LX>(m, host(xs, in[0]));
    auto f = import_tensor<LF>(m, host(fs, in[1]));
    return typemesh::export_tensor(typemesh::conv2d<h, w, fh, fw>(x, f, {.strides = cfg.step, .padding = cfg.pad}))
        .values();
  })[0];
}

// The image as [c, batch, w, h] and the filter as [k, fw, c, fh]: the output
// is [k, batch, w, h] (the image's order, c replaced by k), and values and
// gradients are the canonical order's, rearranged.
TEST(Conv2d, PermutedDimsGiveTheCanonicalValuesAndGradients) {
  using image_p = shape<c, batch, w, h>;
  using filter_p = shape<k, fw, c, fh>;
  using out_p = shape<k, batch, w, h>;
  const image xs{NB, NH, NW, NC};
  const filter fs{FH, FW, NC, NK};
  const image_p xps{NC, NB, NW, NH};
  const filter_p fps{NK, FW, NC, FH};
  using X = typemesh::tensor<double, image_p, layout<batch(a0), c(a1)>, M2>;
  using F = typemesh::tensor<double, filter_p, layout<c(a1)>, M2>;
  static_assert(std::is_same_v<decltype(typemesh::conv2d<h, w, fh, fw>(std::declval<X>(), std::declval<F>())),
                               typemesh::tensor<double, out_p, layout<batch(a0)>, M2>>);
  for (const auto& cfg : {configs[1], configs[4]}) {
    SCOPED_TRACE(cfg.name);
    const auto ph = tf_axis(NH, FH, int(cfg.step.h), cfg.pad), pw = tf_axis(NW, FW, int(cfg.step.w), cfg.pad);
    const conv_out ys{NB, ph.out, pw.out, NK};
    const values r = random_values(std::size_t(ys.elements()), 12);
    const std::vector<values> canonical{conv_inputs[0], conv_inputs[1], r};
    const std::vector<values> in{permuted<image_p>(conv_inputs[0], xs), permuted<filter_p>(conv_inputs[1], fs),
                                 permuted<out_p>(r, ys)};
    const weighted_conv_case<image, filter> canonical_case{cfg, xs, fs};
    const weighted_conv_case<image_p, filter_p> permuted_case{cfg, xps, fps};

    // Under split layouts: the one-device run and finite differences.
    check_layouts<M2, layout<batch(a0), c(a1)>, layout<c(a1)>>("batch and in-channels", {2, 2}, in, permuted_case,
                                                                {true, true, false});
    check_layouts<M2, layout<batch(a1)>, layout<k(a0)>>("batch and out-channels", {3, 2}, in, permuted_case,
                                                         {true, true, false});

    // Against the canonical order on one device.
    const outcome want = run_case<M2, layout<>, layout<>>({1, 1}, canonical, canonical_case);
    const outcome got = run_case<M2, layout<c(a0)>, layout<c(a0), k(a1)>>({2, 3}, in, permuted_case);
    EXPECT_NEAR(got.loss, want.loss, 1e-12 * (1 + std::abs(want.loss)));
    expect_close(got.grads[0], permuted<image_p>(want.grads[0], xs), 1e-12, "the image's gradient");
    expect_close(got.grads[1], permuted<filter_p>(want.grads[1], fs), 1e-12, "the filter's gradient");
    expect_close((conv_values_of<layout<batch(a0), c(a1)>, layout<c(a1)>>({2, 2}, xps, fps, in, cfg)),
                 permuted<out_p>(naive_conv(conv_inputs[0], conv_inputs[1], cfg), ys), 1e-12, "the output");
  }
}

// Two batch-like dims, one before the image's height and one between its
// channels and width: [h, group, c, batch, w] convolves like NB x G images.
TEST(Conv2d, AnyNumberOfBatchLikeDimsPassThrough) {
  constexpr int G = 2;
  using image5 = shape<h, group, c, batch, w>;
  using canonical5 = shape<group, batch, h, w, c>;  // group x batch images, NHWC
  using out5 = shape<h, group, k, batch, w>;
  const image5 xs{NH, G, NC, NB, NW};
  const filter fs{FH, FW, NC, NK};
  const values x_canonical = random_values(std::size_t(G) * NB * NH * NW * NC, 21);
  const values x = permuted<image5>(x_canonical, canonical5{G, NB, NH, NW, NC});
  const config cfg = configs[3];  // SAME stride 2
  const auto ph = tf_axis(NH, FH, 2, cfg.pad), pw = tf_axis(NW, FW, 2, cfg.pad);
  const values want = permuted<out5>(naive_conv(x_canonical, conv_inputs[1], cfg, G * NB),
                                     shape<group, batch, h, w, k>{G, NB, ph.out, pw.out, NK});
  const std::vector<values> in{x, conv_inputs[1], random_values(want.size(), 22)};
  expect_close((conv_values_of<layout<group(a0), batch(a1)>, layout<>>({2, 2}, xs, fs, in, cfg)), want, 1e-12,
               "group and batch split");
  expect_close((conv_values_of<layout<batch(a0), c(a1)>, layout<c(a1)>>({2, 2}, xs, fs, in, cfg)), want,
               1e-12, "batch and in-channels split");
  const weighted_conv_case<image5, filter> cs{cfg, xs, fs};
  check_layouts<M2, layout<group(a0), batch(a1)>, layout<>>("group and batch", {2, 2}, in, cs, {true, true, false});
  check_layouts<M2, layout<group(a1), c(a0)>, layout<c(a0)>>("group and in-channels", {2, 2}, in, cs,
                                                              {true, true, false});
  check_layouts<M2, layout<group(a1)>, layout<k(a0)>>("group and out-channels", {3, 2}, in, cs, {true, true, false});
}

// In the kernel's own orders the operands are used in place: no transpose,
// no copy.
TEST(Conv2d, KernelOrderIsUsedInPlace) {
  using X = typemesh::tensor<double, image, layout<batch(a0)>, M2>;
  using XP = typemesh::tensor<double, shape<c, batch, w, h>, layout<batch(a0)>, M2>;
  static_assert(std::is_reference_v<decltype(typemesh::conv_detail::in_order<image>(std::declval<const X&>()))>);
  static_assert(
      !std::is_reference_v<decltype(typemesh::conv_detail::in_order<image>(std::declval<const XP&>()))>);
  typemesh::launch(1, [] {
    M2 m({1, 1});
    auto x = import_tensor<layout<>>(m, host(image{1, 2, 2, 1}, values{1, 2, 3, 4}));
    const auto& same = typemesh::conv_detail::in_order<image>(x);
    EXPECT_EQ(&same, &x);
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
    const typemesh::pool2d_options o{.window = {PH, PW}, .strides = cfg.step, .padding = cfg.pad};
    auto y = kind == pool_kind::max ? typemesh::max_pool2d<h, w>(x, o) : typemesh::avg_pool2d<h, w>(x, o);
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

// Windows that tile the image (stride = window, no padding, sizes that
// divide): each output writes its window's gradient itself, zeros included,
// into a gradient that was never zeroed (backend::max_pool_grad). Windows
// that do not overlap but leave the last row out (3 x 2 on 7 rows) take the
// other path, which zeroes the gradient first: that row's gradient is zero.
struct tiling_pool_case {
  typemesh::pool2d_options o;
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(image{NB, NH, NW, NC}, in[0]));
    x.requires_grad("x");
    return finish(weighted_sum(typemesh::max_pool2d<h, w>(x, o)), x);
  }
};

TEST(Pooling, WindowsThatTileTheImageGiveEveryElementItsGradient) {
  static_assert(NH % 7 == 0 && NW % 2 == 0 && NW % 3 == 0 && NH % 3 != 0);
  for (const typemesh::pool2d_options o : {typemesh::pool2d_options{.window = {1, 2}, .strides = {1, 2}},
                                           typemesh::pool2d_options{.window = {7, 3}, .strides = {7, 3}},
                                           typemesh::pool2d_options{.window = {3, 2}, .strides = {3, 2}}}) {
    SCOPED_TRACE(testing::Message() << "window " << o.window.h << "x" << o.window.w);
    const tiling_pool_case cs{o};
    check_layouts<M2, layout<batch(a0)>>("batch split", {4, 1}, pool_inputs, cs);
    check_layouts<M2, layout<batch(a1), c(a0)>>("batch and channels", {2, 2}, pool_inputs, cs);
  }
}

TEST(Pooling, ForwardEqualsDirectLoops) {
  for (auto kind : {pool_kind::max, pool_kind::avg}) {
    for (const auto& cfg : configs) {
      SCOPED_TRACE(std::string(kind == pool_kind::max ? "max " : "avg ") + cfg.name);
      auto got = typemesh::launch(4, [&] {
        M2 m({2, 2});
        auto x = import_tensor<layout<batch(a1), c(a0)>>(m, host(image{NB, NH, NW, NC}, pool_inputs[0]));
        const typemesh::pool2d_options o{.window = {PH, PW}, .strides = cfg.step, .padding = cfg.pad};
        auto y = kind == pool_kind::max ? typemesh::max_pool2d<h, w>(x, o) : typemesh::avg_pool2d<h, w>(x, o);
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
    auto y = typemesh::avg_pool2d<h, w>(x, {.window = {2, 2}, .strides = {1, 1}, .padding = padding::same});
    auto mx = typemesh::max_pool2d<h, w>(x, {.window = {2, 2}, .strides = {1, 1}, .padding = padding::same});
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
    expect_error<typemesh::shape_error>(
        [&] { (void)typemesh::max_pool2d<h, w>(x, {.window = {8, 2}, .strides = {1, 1}}); },
        {"max_pool2d", "VALID", "window height 8", "image dim h of size 7"});
    expect_error<typemesh::shape_error>([&] { (void)typemesh::avg_pool2d<h, w>(x, {.window = {2, 6}}); },
                                        {"avg_pool2d", "window width 6", "image dim w of size 5"});
    expect_error<typemesh::shape_error>(
        [&] { (void)typemesh::avg_pool2d<h, w>(x, {.window = {2, 0}, .strides = {1, 1}, .padding = padding::same}); },
        {"avg_pool2d", "window width 0", "empty"});
    // The window has no default.
    expect_error<typemesh::shape_error>([&] { (void)typemesh::max_pool2d<h, w>(x, {.strides = {1, 1}}); },
                                        {"max_pool2d", "no window", "{.window = {2, 2}}"});
  });
}

// The strides default to the window (non-overlapping windows), the padding
// to VALID.
TEST(Pooling, StridesDefaultToTheWindow) {
  typemesh::launch(1, [] {
    M2 m({1, 1});
    auto x = import_tensor<layout<>>(m, host(image{NB, NH, NW, NC}, pool_inputs[0]));
    auto y = typemesh::max_pool2d<h, w>(x, {.window = {PH, PW}});
    const config cfg{{PH, PW}, padding::valid, "window-sized strides, VALID"};
    EXPECT_EQ(y.shape(), (image{NB, (NH - PH) / PH + 1, (NW - PW) / PW + 1, NC}));
    expect_close(typemesh::export_tensor(y).values(), naive_pool(pool_inputs[0], cfg, pool_kind::max), 0,
                 "max_pool2d<h, w>(x, {.window = {3, 2}})");
  });
}

// --- Pooling with dims in other orders ----------------------------------------------

// loss = sum(pool(x) * r), r given (input 1) in the output's order.
template <class SX>
struct weighted_pool_case {
  config cfg;
  pool_kind kind;
  SX xs;
  template <class LX, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(xs, in[0]));
    x.requires_grad("x");
    const typemesh::pool2d_options o{.window = {PH, PW}, .strides = cfg.step, .padding = cfg.pad};
    auto y = kind == pool_kind::max ? typemesh::max_pool2d<h, w>(x, o) : typemesh::avg_pool2d<h, w>(x, o);
    auto r = import_tensor<typename decltype(y)::layout_type>(m, host(y.shape(), in[1]));
    return finish(typemesh::reduce_sum(y * r), x);
  }
};

// [h, batch, c, w] (transposed locally: the width does not follow the
// height) and NCHW [batch, c, h, w] (used in place, one channel per image)
// give the canonical order's values and gradients, rearranged.
template <class SP>
void check_permuted_pooling(const SP& xps) {
  const image xs{NB, NH, NW, NC};
  for (auto kind : {pool_kind::max, pool_kind::avg}) {
    for (const auto& cfg : {configs[1], configs[3]}) {
      SCOPED_TRACE(std::string(kind == pool_kind::max ? "max " : "avg ") + cfg.name + " " + xps.describe());
      const auto ph = tf_axis(NH, PH, int(cfg.step.h), cfg.pad), pw = tf_axis(NW, PW, int(cfg.step.w), cfg.pad);
      const image ys{NB, ph.out, pw.out, NC};
      const values r = random_values(std::size_t(ys.elements()), 31);
      const std::vector<values> in{permuted<SP>(pool_inputs[0], xs), permuted<SP>(r, ys)};
      const weighted_pool_case<SP> permuted_case{cfg, kind, xps};
      check_layouts<M2, layout<batch(a1), c(a0)>>("batch and channels", {2, 2}, in, permuted_case, {true, false});

      const weighted_pool_case<image> canonical_case{cfg, kind, xs};
      const outcome want = run_case<M2, layout<>>({1, 1}, {pool_inputs[0], r}, canonical_case);
      const outcome got = run_case<M2, layout<batch(a0), c(a1)>>({2, 2}, in, permuted_case);
      EXPECT_NEAR(got.loss, want.loss, 1e-12 * (1 + std::abs(want.loss)));
      expect_close(got.grads[0], permuted<SP>(want.grads[0], xs), 1e-12, "the image's gradient");
      const values y = typemesh::launch(4, [&] {
        M2 m({2, 2});
        auto x = import_tensor<layout<batch(a1), c(a0)>>(m, host(xps, in[0]));
        const typemesh::pool2d_options o{.window = {PH, PW}, .strides = cfg.step, .padding = cfg.pad};
        auto out = kind == pool_kind::max ? typemesh::max_pool2d<h, w>(x, o) : typemesh::avg_pool2d<h, w>(x, o);
        static_assert(std::is_same_v<typename decltype(out)::shape_type, SP>);
        return typemesh::export_tensor(out).values();
      })[0];
      expect_close(y, permuted<SP>(naive_pool(pool_inputs[0], cfg, kind), ys), 1e-12, "the output");
    }
  }
}

TEST(Pooling, PermutedDimsGiveTheCanonicalValuesAndGradients) {
  check_permuted_pooling(shape<h, batch, c, w>{NH, NB, NC, NW});
  check_permuted_pooling(shape<batch, c, h, w>{NB, NC, NH, NW});
}

// Renamed output dims, in the image's order.
TEST(Pooling, RenamedOutputDimsKeepTheImagesOrder) {
  using X = typemesh::tensor<double, shape<w, c, h, batch>, layout<batch(a0)>, M2>;
  static_assert(std::is_same_v<decltype(typemesh::avg_pool2d<h, w, oh, ow>(std::declval<X>(), {.window = {2, 2}})),
                               typemesh::tensor<double, shape<ow, c, oh, batch>, layout<batch(a0)>, M2>>);
}

}  // namespace

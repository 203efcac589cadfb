// The direct convolution kernels (backend/host/direct_conv.hpp), through
// backend::conv_forward, conv_filter_grad and conv_image_grad: each
// instruction set the CPU has, against serial loops in double written here
// and against the im2col path, over SAME and VALID, 1x1 to 5x5 filters,
// strides 1 and 2, 3 to 80 channels (whole and half vectors, every size of
// the filter gradient's last in-channel block), 1 to 3 images, non-square
// images; the same bits at 1, 2 and 3 threads; the shapes outside the rule
// (and doubles) fall back to im2col.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <typemesh/backend/conv.hpp>

#include "support.hpp"

namespace {
namespace be = typemesh::backend;
using be::host::conv_isa;
using typemesh::host_space;

struct conv_case {
  int images, h, w, c, k, fh, fw, sh, sw;
  bool same;
};

std::string describe(const conv_case& cs) {
  return std::to_string(cs.images) + "x" + std::to_string(cs.h) + "x" + std::to_string(cs.w) + "x" +
         std::to_string(cs.c) + " * " + std::to_string(cs.fh) + "x" + std::to_string(cs.fw) + "->" +
         std::to_string(cs.k) + " stride " + std::to_string(cs.sh) + "x" + std::to_string(cs.sw) +
         (cs.same ? " SAME" : " VALID");
}

// TensorFlow's sizes and padding, written out again.
be::window_axis axis(int in, int size, int stride, bool same) {
  be::window_axis a;
  a.in = in, a.size = size, a.stride = stride;
  if (same) {
    a.out = (in + stride - 1) / stride;
    a.pad_before = std::max<std::int64_t>((a.out - 1) * stride + size - in, 0) / 2;
  } else {
    a.out = (in - size) / stride + 1;
  }
  return a;
}

be::conv_geometry geometry(const conv_case& cs) {
  be::conv_geometry g;
  g.images = cs.images, g.channels = cs.c, g.out_channels = cs.k;
  g.h = axis(cs.h, cs.fh, cs.sh, cs.same);
  g.w = axis(cs.w, cs.fw, cs.sw, cs.same);
  return g;
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// A result in double, and the sum of its terms' magnitudes (for the
// tolerance of a float sum of them).
struct reference {
  std::vector<double> value, scale;
};

// Calls term(output index, x index, filter index, y index) for every
// product of the convolution: x [n, h, w, c], f [fh, fw, c, k], y [n, oh, ow, k].
template <class Term>
void for_each_product(const be::conv_geometry& g, Term term) {
  for (std::int64_t b = 0; b < g.images; ++b)
    for (std::int64_t oh = 0; oh < g.h.out; ++oh)
      for (std::int64_t ow = 0; ow < g.w.out; ++ow)
        for (std::int64_t i = 0; i < g.h.size; ++i)
          for (std::int64_t j = 0; j < g.w.size; ++j) {
            const std::int64_t ih = oh * g.h.stride - g.h.pad_before + i, iw = ow * g.w.stride - g.w.pad_before + j;
            if (ih < 0 || ih >= g.h.in || iw < 0 || iw >= g.w.in) continue;
            for (std::int64_t ci = 0; ci < g.channels; ++ci)
              for (std::int64_t ko = 0; ko < g.out_channels; ++ko)
                term(((b * g.h.in + ih) * g.w.in + iw) * g.channels + ci,
                     ((i * g.w.size + j) * g.channels + ci) * g.out_channels + ko,
                     ((b * g.h.out + oh) * g.w.out + ow) * g.out_channels + ko);
          }
}

enum class product { forward, filter_grad, image_grad };
const char* name(product p) {
  return p == product::forward ? "forward" : p == product::filter_grad ? "filter gradient" : "image gradient";
}

// The serial loop's answer: a = the image (or d_out for the image gradient's
// second operand), per product.
reference naive(product p, const be::conv_geometry& g, const std::vector<float>& x, const std::vector<float>& f,
                const std::vector<float>& dy) {
  const std::size_t n = p == product::forward       ? dy.size()
                        : p == product::filter_grad ? f.size()
                                                    : x.size();
  reference r{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for_each_product(g, [&](std::int64_t xi, std::int64_t fi, std::int64_t yi) {
    double t = 0;
    std::int64_t at = 0;
    if (p == product::forward) t = double(x[xi]) * f[fi], at = yi;
    if (p == product::filter_grad) t = double(x[xi]) * dy[yi], at = fi;
    if (p == product::image_grad) t = double(dy[yi]) * f[fi], at = xi;
    r.value[std::size_t(at)] += t;
    r.scale[std::size_t(at)] += std::abs(t);
  });
  return r;
}

// Runs one product on one device with `threads` kernel threads and the
// direct kernels limited to `limit` (none: the im2col path).
std::vector<float> run(product p, const be::conv_geometry& g, const std::vector<float>& x,
                       const std::vector<float>& f, const std::vector<float>& dy, conv_isa limit, int threads) {
  std::vector<float> out(p == product::forward       ? dy.size()
                         : p == product::filter_grad ? f.size()
                                                     : x.size(),
                         p == product::image_grad ? 0.0f : 12345.0f);  // the image gradient adds into zeros
  const conv_isa before = be::host::direct_conv_limit().exchange(limit);
  typemesh::launch({.devices = 1, .threads_per_device = threads}, [&](typemesh::device&) {
    if (p == product::forward) be::conv_forward(host_space{}, x.data(), f.data(), out.data(), g);
    if (p == product::filter_grad) be::conv_filter_grad(host_space{}, x.data(), dy.data(), out.data(), g);
    if (p == product::image_grad) be::conv_image_grad(host_space{}, dy.data(), f.data(), out.data(), g);
  });
  be::host::direct_conv_limit().store(before);
  return out;
}

// Whether `p` runs the direct kernels of `isa` with the limit at `isa`.
// The instruction set the direct path runs product p with when limited to
// `isa` (none: im2col).
conv_isa direct_isa_of(product p, const be::conv_geometry& g, conv_isa isa) {
  const conv_isa before = be::host::direct_conv_limit().exchange(isa);
  const conv_isa got = p == product::image_grad ? be::direct_image_grad_isa<host_space, float>(g)
                                                : be::direct_isa<host_space, float>(g);
  be::host::direct_conv_limit().store(before);
  return got;
}
bool takes_direct(product p, const be::conv_geometry& g, conv_isa isa) { return direct_isa_of(p, g, isa) == isa; }

void expect_near(const std::vector<float>& got, const reference& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.value.size()) << what;
  int shown = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tolerance = 1e-5 * want.scale[i] + 1e-6;
    if (std::abs(got[i] - want.value[i]) > tolerance && shown++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want.value[i];
    }
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const conv_case cases[] = {
    {1, 7, 9, 16, 16, 3, 3, 1, 1, true},    // one vector of out-channels
    {3, 6, 5, 64, 64, 3, 3, 1, 1, false},   // VALID, a row narrower than a pixel block
    {3, 8, 11, 80, 80, 5, 5, 1, 1, true},   // 64 + 16 channels, 5x5
    {1, 5, 7, 16, 80, 1, 1, 1, 1, false},   // pointwise (the im2col path's is one GEMM)
    {3, 5, 7, 16, 80, 1, 1, 2, 1, true},    // 1x1 with stride 2
    {3, 10, 12, 3, 64, 3, 3, 1, 1, true},   // 3 in-channels: single-channel blocks; image gradient by im2col
    {1, 9, 8, 16, 48, 3, 4, 2, 2, true},    // stride 2, an even filter width (padding 1 + 2)
    {2, 4, 3, 80, 16, 5, 5, 1, 1, true},    // the image smaller than the filter
    {2, 12, 40, 64, 64, 3, 3, 1, 1, true},  // rows of several pixel blocks and a remainder
    {1, 6, 13, 16, 32, 3, 3, 1, 2, false},  // stride 1x2, VALID
    {2, 9, 10, 24, 24, 3, 3, 1, 1, true},   // 24 channels both ways: AVX-512's 16 + 8 lanes, AVX2's 3 x 8
    {1, 7, 7, 3, 40, 5, 5, 2, 2, true},     // 40 out-channels: 32 + 8, stride 2
    {2, 6, 7, 8, 8, 3, 3, 1, 1, true},      // 8 channels both ways: AVX-512's half vector alone
    {1, 6, 9, 16, 72, 3, 3, 1, 1, true},    // 72 out-channels: a wide block of 64, then a block of 8
    {1, 5, 6, 56, 56, 3, 3, 1, 1, true},    // 56 channels both ways: 3 vectors and a half
    {1, 6, 7, 5, 24, 3, 3, 1, 1, true},     // 5 in-channels: one filter-gradient block of 5 (AVX-512), 3 + 2
    {1, 5, 5, 13, 16, 3, 3, 1, 1, true},    // 13 in-channels: 6 + 6 + 1 (AVX-512), 3 x 4 + 1
    {2, 23, 19, 3, 24, 11, 11, 4, 4, false},  // AlexNet's first layer: filter-gradient blocks across a row's taps
    {1, 7, 9, 5, 16, 3, 3, 1, 2, false},    // VALID, 5 in-channels: a row of 15, blocks of 6, 6 and 3
    {1, 6, 7, 3, 16, 2, 2, 1, 1, true},     // SAME, even filter: no padding left, one right (blocks per tap)
};

TEST(DirectConv, MatchesSerialLoopsAndTheIm2colPathForEachInstructionSet) {
  const conv_isa cpu = be::host::detected_simd_isa();
  if (cpu == conv_isa::none) GTEST_SKIP() << "the direct kernels need AVX2 or AVX-512 and GCC or Clang";
  for (const conv_case& cs : cases) {
    const be::conv_geometry g = geometry(cs);
    const auto x = random_floats(std::size_t(g.images * g.h.in * g.w.in * g.channels), 1);
    const auto f = random_floats(std::size_t(g.h.size * g.w.size * g.channels * g.out_channels), 2);
    const auto dy = random_floats(std::size_t(g.images * g.h.out * g.w.out * g.out_channels), 3);
    for (product p : {product::forward, product::filter_grad, product::image_grad}) {
      const reference want = naive(p, g, x, f, dy);
      const std::vector<float> im2col = run(p, g, x, f, dy, conv_isa::none, 1);
      expect_near(im2col, want, describe(cs) + " " + name(p) + " by im2col");
      for (conv_isa isa : {conv_isa::avx2, conv_isa::avx512}) {
        if (isa > cpu) continue;
        const std::string what = describe(cs) + " " + name(p) + (isa == conv_isa::avx512 ? " AVX-512" : " AVX2");
        // Every case is in the rule, but the image gradient's needs stride 1 and in-channels of whole
        // vectors of 8 (AVX-512's kernels end 8 mod 16 channels with half a vector).
        // AVX2's take at most avx2_direct_max_channels either way.
        const std::int64_t lanes = p == product::image_grad ? cs.c : cs.k;
        const bool in_rule = (p != product::image_grad || (cs.sh == 1 && cs.sw == 1)) &&
                             (isa != conv_isa::avx2 || std::max(cs.c, cs.k) <= be::host::avx2_direct_max_channels);
        const conv_isa expected = !in_rule || lanes % 8 != 0 ? conv_isa::none : isa;
        EXPECT_EQ(direct_isa_of(p, g, isa), expected) << what;
        const std::vector<float> got = run(p, g, x, f, dy, isa, 1);
        expect_near(got, want, what);
        // The im2col path's result is within the same tolerance of the direct one's.
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (std::abs(got[i] - im2col[i]) > 2e-5 * want.scale[i] + 2e-6) {
            ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", im2col gives " << im2col[i];
            break;
          }
        }
      }
    }
  }
}

TEST(DirectConv, SameBitsAtOneTwoAndThreeThreads) {
  const conv_isa cpu = be::host::detected_simd_isa();
  if (cpu == conv_isa::none) GTEST_SKIP() << "the direct kernels need AVX2 or AVX-512 and GCC or Clang";
  for (conv_isa isa : {conv_isa::avx2, conv_isa::avx512}) {
    if (isa > cpu) continue;
    // Large enough that the filter gradient's groups and the forward rows split over 3 threads; with
    // a last block narrower than the others (AVX-512: 64 + 16, AVX2: 32 + 24).
    const conv_case cs = isa == conv_isa::avx512 ? conv_case{3, 16, 12, 64, 80, 3, 3, 1, 1, true}
                                                 : conv_case{3, 16, 12, 64, 56, 3, 3, 1, 1, true};
    const be::conv_geometry g = geometry(cs);
    const auto x = random_floats(std::size_t(g.images * g.h.in * g.w.in * g.channels), 4);
    const auto f = random_floats(std::size_t(g.h.size * g.w.size * g.channels * g.out_channels), 5);
    const auto dy = random_floats(std::size_t(g.images * g.h.out * g.w.out * g.out_channels), 6);
    for (product p : {product::forward, product::filter_grad, product::image_grad}) {
      ASSERT_TRUE(takes_direct(p, g, isa)) << name(p);
      const std::vector<float> one = run(p, g, x, f, dy, isa, 1);
      expect_near(one, naive(p, g, x, f, dy), name(p));
      for (int threads : {2, 3}) {
        EXPECT_TRUE(same_bits(run(p, g, x, f, dy, isa, threads), one)) << name(p) << " at " << threads << " threads";
      }
    }
  }
}

TEST(DirectConv, ShapesOutsideTheRuleAndDoublesTakeIm2col) {
  // 20 out-channels: not whole vectors of 8.
  const be::conv_geometry g = geometry({1, 5, 5, 16, 20, 3, 3, 1, 1, true});
  EXPECT_EQ((be::direct_isa<host_space, float>(g)), conv_isa::none);
  // 24: whole vectors of 8, so the strongest kernels the CPU has (AVX-512's with half a vector).
  EXPECT_EQ((be::direct_isa<host_space, float>(geometry({1, 5, 5, 16, 24, 3, 3, 1, 1, true}))),
            be::host::detected_simd_isa());
  EXPECT_EQ((be::direct_isa<host_space, double>(geometry({1, 5, 5, 16, 32, 3, 3, 1, 1, true}))), conv_isa::none);
  // AVX2's kernels stop at 64 channels either way (avx2_direct_max_channels); AVX-512's do not.
  if (be::host::detected_simd_isa() != conv_isa::none) {
    EXPECT_EQ(direct_isa_of(product::forward, geometry({1, 5, 5, 64, 64, 3, 3, 1, 1, true}), conv_isa::avx2),
              conv_isa::avx2);
    EXPECT_EQ(direct_isa_of(product::forward, geometry({1, 5, 5, 64, 72, 3, 3, 1, 1, true}), conv_isa::avx2),
              conv_isa::none);
    EXPECT_EQ(direct_isa_of(product::forward, geometry({1, 5, 5, 72, 64, 3, 3, 1, 1, true}), conv_isa::avx2),
              conv_isa::none);
    EXPECT_EQ(direct_isa_of(product::image_grad, geometry({1, 5, 5, 64, 72, 3, 3, 1, 1, true}), conv_isa::avx2),
              conv_isa::none);
  }
  if (be::host::detected_simd_isa() == conv_isa::avx512) {
    EXPECT_EQ(direct_isa_of(product::forward, geometry({1, 5, 5, 128, 128, 3, 3, 1, 1, true}), conv_isa::avx512),
              conv_isa::avx512);
  }
  // Stride 2: the image gradient stays on col2im, the forward product does not.
  const be::conv_geometry strided = geometry({1, 8, 8, 16, 32, 3, 3, 2, 2, true});
  EXPECT_EQ((be::direct_image_grad_isa<host_space, float>(strided)), conv_isa::none);
  EXPECT_EQ((be::direct_isa<host_space, float>(strided)), be::host::detected_simd_isa());
  const auto x = random_floats(std::size_t(g.images * g.h.in * g.w.in * g.channels), 7);
  const auto f = random_floats(std::size_t(g.h.size * g.w.size * g.channels * g.out_channels), 8);
  const auto dy = random_floats(std::size_t(g.images * g.h.out * g.w.out * g.out_channels), 9);
  expect_near(run(product::forward, g, x, f, dy, conv_isa::avx512, 1), naive(product::forward, g, x, f, dy),
              "20 out-channels");
}

// A device that holds no in-channels (the channels split unevenly) computes
// no products, but still writes its output: zeros, whatever was there.
TEST(DirectConv, AnEmptyPatchWritesZeros) {
  for (const int c : {0, 16}) {
    be::conv_geometry g = geometry({2, 5, 5, c, 16, 3, 3, 1, 1, true});
    if (c != 0) g.h.size = 0;  // no filter rows: an empty patch again
    std::vector<float> out(std::size_t(g.images * g.out_pixels() * g.out_channels),
                           std::numeric_limits<float>::quiet_NaN());
    const std::vector<float> x(std::size_t(g.images * g.h.in * g.w.in * std::max(c, 1)), 1.0f), f(16, 1.0f);
    be::conv_forward(host_space{}, x.data(), f.data(), out.data(), g);
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 0.0f) << c << " channels, element " << i;
  }
}

}  // namespace

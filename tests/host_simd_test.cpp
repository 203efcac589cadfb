// The host's hand-vectorised kernels, each instruction set this CPU has:
// - exp, tanh and the LSTM gate activations (backend/host/vector_math.hpp)
//   against the C library in double: within 2 ulp of the float nearest the
//   true value over sweeps of the whole range, the special values exact,
//   and every element the same bits wherever it lies in its array (full
//   vectors and the padded last one alike);
// - the unpacked small-row GEMMs (backend/host/small_gemm.hpp) and the
//   GEMMs with op(B) in L1 (backend/host/narrow_gemm.hpp) against a double
//   loop, A and B as stored and transposed, with strides, alpha and beta
//   (beta 0 never reading C), the same bits at 1, 2 and 3 threads;
// - softmax rows and their gradients (vector_math.hpp) against double
//   loops, a row's maximum against the sequential one, and max pooling's step (backend/host/max_pool.hpp) against its
//   plain loop, bit for bit;
// - the dropout mask in vector lanes (backend/host/random_kernels.hpp)
//   against the scalar formula, row by row and through dropout_mask_fill at
//   1, 2 and 3 threads; and, on every CPU, the integer threshold of the
//   scalar formula against the double comparison it replaces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <typemesh/backend/host/max_pool.hpp>
#include <typemesh/backend/host/narrow_gemm.hpp>
#include <typemesh/backend/host/random_kernels.hpp>
#include <typemesh/backend/host/small_gemm.hpp>
#include <typemesh/backend/host/vector_math.hpp>
#include <typemesh/backend/random.hpp>
#include <typemesh/runtime/launch.hpp>

#include "gemm_reference.hpp"

namespace {

namespace backend = typemesh::backend;

// What the mask used to compare: the uniform draw against the rate.
bool dropped_by_double(double rate, std::uint64_t n) { return static_cast<double>(n) * 0x1.0p-53 < rate; }

const double threshold_rates[] = {0.1,
                                  0.3,
                                  0.5,
                                  1.0 / 3.0,
                                  1e-12,
                                  0.999999,
                                  0.0,
                                  1.0,
                                  -0.0,
                                  -0.25,
                                  1.5,
                                  0x1.0p-53,
                                  0x1.8p-53,
                                  0x1.0p-60,
                                  std::numeric_limits<double>::denorm_min(),
                                  std::numeric_limits<double>::min(),
                                  std::nextafter(1.0, 0.0),
                                  1.0 - 0x1.0p-53,
                                  std::nextafter(0.5, 0.0),
                                  std::nextafter(0.5, 1.0),
                                  std::numeric_limits<double>::infinity(),
                                  -std::numeric_limits<double>::infinity()};

// n < threshold iff n * 2^-53 < rate for every n below 2^53: the double
// comparison is monotone in n, so it is enough that it holds at threshold - 1
// and fails at threshold (where those are below 2^53).
void expect_threshold_is_exact(double rate) {
  const std::uint64_t t = backend::dropout_threshold(rate), top = std::uint64_t(1) << 53;
  ASSERT_LE(t, top) << "rate " << rate;
  if (t > 0) {
    EXPECT_TRUE(dropped_by_double(rate, t - 1)) << "rate " << rate << " threshold " << t;
  }
  if (t < top) {
    EXPECT_FALSE(dropped_by_double(rate, t)) << "rate " << rate << " threshold " << t;
  }
  for (std::uint64_t n : {std::uint64_t(0), std::uint64_t(1), top / 2, top - 1}) {
    EXPECT_EQ(n < t, dropped_by_double(rate, n)) << "rate " << rate << " n " << n;
  }
}

TEST(DropoutThreshold, IsTheExactIntegerFormOfTheDoubleComparison) {
  for (double rate : threshold_rates) expect_threshold_is_exact(rate);
  // Rates spread over every exponent a rate below 1 can have.
  std::uint64_t state = 12345;
  for (int k = 0; k < 20000; ++k) {
    state = backend::splitmix64(state);
    const double mantissa = 1.0 + static_cast<double>(state >> 12) * 0x1.0p-52;
    expect_threshold_is_exact(std::ldexp(mantissa, -1 - static_cast<int>(state % 1074)));
  }
  EXPECT_EQ(backend::dropout_threshold(0.0), 0u);
  EXPECT_EQ(backend::dropout_threshold(1.0), std::uint64_t(1) << 53);
  // NaN keeps everything, as the comparison did (the layer rejects it first).
  EXPECT_EQ(backend::dropout_threshold(std::numeric_limits<double>::quiet_NaN()), 0u);
}

TEST(DropoutThreshold, TheScalarMaskIsTheOneTheDoubleComparisonGave) {
  const std::uint64_t bases[] = {0, 1, backend::random_base(42, 0x1234abcd, 7, 1), ~std::uint64_t(0)};
  const std::uint64_t starts[] = {0, (std::uint64_t(1) << 40) - 1000, std::uint64_t(1) << 62};
  std::int64_t dropped = 0, total = 0;
  for (double rate : threshold_rates) {
    if (std::isinf(rate)) continue;
    for (std::uint64_t base : bases) {
      const backend::random_fill_detail::dropout_value<float> value{base, backend::dropout_threshold(rate), 2.0f};
      for (std::uint64_t start : starts) {
        for (std::uint64_t i = start; i < start + 4000; ++i) {
          const bool was = backend::random_uniform(base, i) < rate;
          ASSERT_EQ(value(i), was ? 0.0f : 2.0f) << "rate " << rate << " base " << base << " i " << i;
          dropped += was;
          ++total;
        }
      }
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, total);
  // Rates at and just above an element's own draw, where an off-by-one in
  // the threshold or the comparison would show (random rates almost never
  // land there).
  for (std::uint64_t base : bases) {
    for (std::uint64_t i = 0; i < 2000; ++i) {
      const std::uint64_t n = backend::random_bits53(base, i);
      for (double rate : {static_cast<double>(n) * 0x1.0p-53, std::nextafter(static_cast<double>(n) * 0x1.0p-53, 2.0)}) {
        const backend::random_fill_detail::dropout_value<float> value{base, backend::dropout_threshold(rate), 2.0f};
        ASSERT_EQ(value(i), backend::random_uniform(base, i) < rate ? 0.0f : 2.0f)
            << "rate " << rate << " at element " << i << "'s draw";
      }
    }
  }
}

}  // namespace

#if TYPEMESH_HOST_SIMD
namespace {

namespace host = typemesh::backend::host;
namespace vmath = typemesh::backend::host::vmath;

// The entry points of one instruction set.
struct isa_functions {
  std::string name;
  float (*exp_shifted_sum)(const float*, float, std::int64_t);
  void (*scaled_exp_shifted)(const float*, float, float, float*, std::int64_t);
  void (*tanh)(const float*, float*, std::int64_t);
  void (*lstm_gates)(float*, std::int64_t);
  void (*softmax_row)(const float*, float*, std::int64_t);
  void (*softmax_gradient_row)(const float*, const float*, float*, std::int64_t);
  void (*max_pool_step)(float*, std::int64_t*, const float*, std::int64_t, std::int64_t);
  float (*max_of)(const float*, std::int64_t);
};

std::vector<isa_functions> available() {
  std::vector<isa_functions> out;
  const auto isa = host::detected_simd_isa();
  if (isa >= host::simd_isa::avx2) {
    out.push_back({"avx2", vmath::exp_shifted_sum_avx2, vmath::scaled_exp_shifted_avx2, vmath::tanh_avx2,
                   vmath::lstm_gates_avx2, vmath::softmax_row_avx2, vmath::softmax_gradient_row_avx2,
                   host::pool_simd::max_step_avx2, vmath::max_of_avx2});
  }
  if (isa >= host::simd_isa::avx512) {
    out.push_back({"avx512", vmath::exp_shifted_sum_avx512, vmath::scaled_exp_shifted_avx512, vmath::tanh_avx512,
                   vmath::lstm_gates_avx512, vmath::softmax_row_avx512, vmath::softmax_gradient_row_avx512,
                   host::pool_simd::max_step_avx512, vmath::max_of_avx512});
  }
  return out;
}

// |got - want| in units of the last place of the float nearest want (the
// smallest normal's ulp below it).
double ulps(float got, double want) {
  const float nearest = static_cast<float>(want);
  const float magnitude = std::max(std::abs(nearest), std::numeric_limits<float>::min());
  const double ulp = std::nextafter(magnitude, std::numeric_limits<float>::infinity()) - magnitude;
  return std::abs(static_cast<double>(got) - want) / ulp;
}

std::vector<float> sweep(float lo, float hi, int count) {
  std::vector<float> x(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) x[static_cast<std::size_t>(i)] = lo + (hi - lo) * (static_cast<float>(i) / count);
  return x;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(VectorMath, ExpIsWithinTwoUlpOverTheWholeRange) {
  const auto isas = available();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  auto x = sweep(-110.0f, 95.0f, 1 << 20);
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 88.72f, 88.73f, -87.33f, -103.9f, 1e-8f, -1e-8f}) x.push_back(v);
  for (const auto& f : isas) {
    std::vector<float> y(x.size());
    f.scaled_exp_shifted(x.data(), 0.0f, 1.0f, y.data(), static_cast<std::int64_t>(x.size()));
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      if (want > std::numeric_limits<float>::max() * 1.0000001) {
        EXPECT_EQ(y[i], std::numeric_limits<float>::infinity()) << f.name << " exp(" << x[i] << ")";
      } else {
        worst = std::max(worst, ulps(y[i], want));
        ASSERT_LE(ulps(y[i], want), 2.0) << f.name << " exp(" << x[i] << ") = " << y[i] << ", not " << want;
      }
    }
    EXPECT_EQ(y[x.size() - 10], 1.0f) << f.name << " exp(0)";
    RecordProperty(f.name + "_exp_worst_ulp", std::to_string(worst));
  }
}

TEST(VectorMath, SpecialValues) {
  const auto isas = available();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float x[4] = {nan, inf, -inf, 0.0f};
  for (const auto& f : isas) {
    float e[4], t[4];
    f.scaled_exp_shifted(x, 0.0f, 1.0f, e, 4);
    f.tanh(x, t, 4);
    EXPECT_TRUE(std::isnan(e[0])) << f.name;
    EXPECT_EQ(e[1], inf) << f.name;
    EXPECT_EQ(e[2], 0.0f) << f.name;
    EXPECT_EQ(e[3], 1.0f) << f.name;
    EXPECT_TRUE(std::isnan(t[0])) << f.name;
    EXPECT_EQ(t[1], 1.0f) << f.name;
    EXPECT_EQ(t[2], -1.0f) << f.name;
    EXPECT_EQ(t[3], 0.0f) << f.name;
  }
}

TEST(VectorMath, TanhIsWithinTwoUlpAndOdd) {
  const auto isas = available();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  auto x = sweep(-12.0f, 12.0f, 1 << 20);
  const auto tiny = sweep(-1e-3f, 1e-3f, 1 << 16);
  x.insert(x.end(), tiny.begin(), tiny.end());
  for (const auto& f : isas) {
    std::vector<float> y(x.size()), minus_x(x.size()), y_of_minus(x.size());
    f.tanh(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) minus_x[i] = -x[i];
    f.tanh(minus_x.data(), y_of_minus.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = std::tanh(static_cast<double>(x[i]));
      ASSERT_LE(ulps(y[i], want), 2.0) << f.name << " tanh(" << x[i] << ") = " << y[i] << ", not " << want;
      ASSERT_TRUE(same_bits(y_of_minus[i], -y[i])) << f.name << " tanh(-x) = " << y_of_minus[i] << ", not -tanh(x) = " << -y[i] << " at x = " << x[i];
    }
  }
}

TEST(VectorMath, LstmGatesAreSigmoidsAndTanhOfTheGCells) {
  const auto isas = available();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  const auto x = sweep(-30.0f, 30.0f, 4 * 40001);  // not a whole number of vectors
  for (const auto& f : isas) {
    auto z = x;
    f.lstm_gates(z.data(), static_cast<std::int64_t>(z.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      const double want = i % 4 == 2 ? std::tanh(v) : 1.0 / (1.0 + std::exp(-v));
      ASSERT_LE(ulps(z[i], want), 3.0) << f.name << (i % 4 == 2 ? " tanh(" : " sigmoid(") << v << ") = " << z[i];
    }
  }
}

// An element's result is the same bits in a full vector and in the padded
// last one, alone or among others, whatever the array's length.
TEST(VectorMath, AnElementsResultDoesNotDependOnWhereItLies) {
  const auto isas = available();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  const auto x = sweep(-9.0f, 7.0f, 37);
  for (const auto& f : isas) {
    std::vector<float> all(x.size()), tanh_all(x.size());
    f.scaled_exp_shifted(x.data(), 0.5f, 3.0f, all.data(), static_cast<std::int64_t>(x.size()));
    f.tanh(x.data(), tanh_all.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
      float one = 0, tanh_one = 0;
      f.scaled_exp_shifted(&x[i], 0.5f, 3.0f, &one, 1);
      f.tanh(&x[i], &tanh_one, 1);
      EXPECT_TRUE(same_bits(one, all[i])) << f.name << " exp at " << i;
      EXPECT_TRUE(same_bits(tanh_one, tanh_all[i])) << f.name << " tanh at " << i;
    }
  }
}

TEST(VectorMath, ExpShiftedSumMatchesADoubleSum) {
  const auto isas = available();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  for (int n : {0, 1, 7, 16, 17, 1000, 8193}) {
    const auto x = sweep(-20.0f, 3.0f, n);
    double want = 0;
    for (float v : x) want += std::exp(static_cast<double>(v) - 2.5);
    for (const auto& f : isas) {
      const float got = f.exp_shifted_sum(x.data(), 2.5f, n);
      EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, want) + 1e-6 * n * std::max(1.0, want) / 1000)
          << f.name << ", " << n << " elements";
    }
  }
}

// C = alpha * A . op(B) + beta * C for small m, against a double loop.
struct gemm_case {
  bool trans_b;
  std::int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  bool trans_a;
};

std::vector<float> wave(std::size_t count, double step) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(std::sin(static_cast<double>(i) * step));
  return v;
}

// A softmax row and its gradient against double loops, at widths below, at
// and past a vector, rows far from zero included; and each row's results
// the same bits wherever the row starts (its own lanes, not its neighbours').
TEST(VectorMath, SoftmaxRowsMatchDoubleLoops) {
  const auto isas = available();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  for (const int n : {1, 7, 8, 16, 17, 100}) {
    auto x = sweep(-6.0f, 5.0f, n);
    for (int i = 0; i < n; i += 3) x[static_cast<std::size_t>(i)] += 300.0f;
    const auto dy = sweep(-1.0f, 2.0f, n);
    double top = x[0], sum = 0, dot = 0;
    for (float v : x) top = std::max(top, static_cast<double>(v));
    for (float v : x) sum += std::exp(v - top);
    std::vector<double> y(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) y[i] = std::exp(x[i] - top) / sum;
    for (int i = 0; i < n; ++i) dot += dy[i] * y[i];
    for (const auto& f : isas) {
      std::vector<float> got(static_cast<std::size_t>(n)), dx(static_cast<std::size_t>(n));
      f.softmax_row(x.data(), got.data(), n);
      std::vector<float> yf(got);  // the gradient takes the float y the forward gave
      f.softmax_gradient_row(yf.data(), dy.data(), dx.data(), n);
      for (int i = 0; i < n; ++i) {
        const double want_dx = y[i] * (dy[i] - dot);
        EXPECT_NEAR(got[i], y[i], 1e-7 + 1e-6 * y[i]) << f.name << ", y of " << n << " at " << i;
        EXPECT_NEAR(dx[i], want_dx, 1e-7 + 1e-5 * std::abs(want_dx)) << f.name << ", dx of " << n << " at " << i;
      }
      // The same row one element further into a buffer: the same bits.
      std::vector<float> x1(x.size() + 1), y1(x.size() + 1);
      std::copy(x.begin(), x.end(), x1.begin() + 1);
      f.softmax_row(x1.data() + 1, y1.data() + 1, n);
      for (int i = 0; i < n; ++i) EXPECT_TRUE(same_bits(y1[i + 1], got[i])) << f.name << " at " << i;
    }
  }
}

// A row's maximum in lanes: the sequential maximum of its numbers, NaNs
// passed over wherever they lie, -inf for none.
TEST(VectorMath, MaxOfIsTheSequentialMaximumPassingOverNaNs) {
  const auto isas = available();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const int n : {0, 1, 7, 16, 17, 100}) {
    auto x = wave(static_cast<std::size_t>(n), 0.37);
    for (int i = 0; i < n; i += 5) x[i] = nan;
    if (n > 3) x[static_cast<std::size_t>(n - 2)] = 1.5f;  // the maximum, late in the row
    float want = -inf;
    for (float v : x)
      if (v > want) want = v;
    for (const auto& f : isas) EXPECT_TRUE(same_bits(f.max_of(x.data(), n), want)) << f.name << ", " << n << " elements";
  }
  for (const auto& f : isas) {
    const float all_nan[3] = {nan, nan, nan};
    EXPECT_EQ(f.max_of(all_nan, 3), -inf) << f.name;
  }
}

// max pooling's step in lanes against the plain loop: the same maxima and
// offsets to the bit, ties kept at the first, NaNs where the plain loop
// puts them, at channel counts around the vector widths.
TEST(MaxPoolStep, LanesMatchThePlainLoop) {
  const auto isas = available();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const int c : {1, 7, 8, 9, 16, 17, 40, 64}) {
    const auto top0 = wave(static_cast<std::size_t>(c), 0.7);
    auto v = wave(static_cast<std::size_t>(c), 1.3);
    std::vector<std::int64_t> at0(static_cast<std::size_t>(c));
    for (int k = 0; k < c; ++k) {
      at0[k] = 1000 + 3 * k;
      if (k % 5 == 2) v[k] = top0[k];  // a tie: the running maximum stays
      if (k % 7 == 3) v[k] = nan;
    }
    auto want_top = top0;
    auto want_at = at0;
    if (c > 4) want_top[4] = nan;  // a NaN maximum so far: the plain loop never replaces it
    auto start_top = want_top;
    host::max_pool_step_plain(want_top.data(), want_at.data(), v.data(), c, 500);
    for (const auto& f : isas) {
      auto top = start_top;
      auto at = at0;
      f.max_pool_step(top.data(), at.data(), v.data(), c, 500);
      for (int k = 0; k < c; ++k) {
        EXPECT_TRUE(same_bits(top[k], want_top[k])) << f.name << ", " << c << " channels, channel " << k;
        EXPECT_EQ(at[k], want_at[k]) << f.name << ", " << c << " channels, channel " << k;
      }
    }
  }
}

// Runs `product` (one of the kernels, given C) on `threads` threads of one
// device; C starts as c0.
template <class Product>
std::vector<float> run_gemm(int threads, const std::vector<float>& c0, const Product& product) {
  std::vector<float> c = c0;
  typemesh::launch({.devices = 1, .threads_per_device = threads}, [&](typemesh::device&) { product(c.data()); });
  return c;
}

// Checks each case of a kernel against a double loop on one thread, then
// the same bits at 2 and 3 threads, for each instruction set this CPU has.
// run(g, isa, a, b, c) computes the case into c; C starts as a wave, or NaN
// where beta is 0 (it must not be read), and its columns past n must stay.
template <class Run>
void check_gemm_cases(const std::vector<gemm_case>& cases, const char* kernel, const Run& run) {
  const auto cpu = host::detected_simd_isa();
  for (const gemm_case& g : cases) {
    const std::int64_t a_rows = g.trans_a ? g.k : g.m, b_rows = g.trans_b ? g.n : g.k;
    const auto a = wave(static_cast<std::size_t>(a_rows * g.lda), 0.37);
    const auto b = wave(static_cast<std::size_t>(b_rows * g.ldb), 0.11);
    auto c0 = wave(static_cast<std::size_t>(g.m * g.ldc), 0.7);
    if (g.beta == 0.0f) std::fill(c0.begin(), c0.end(), std::numeric_limits<float>::quiet_NaN());
    for (auto isa : {host::simd_isa::avx2, host::simd_isa::avx512}) {
      if (isa > cpu) continue;
      const std::string what = std::string(kernel) + (isa == host::simd_isa::avx2 ? " avx2" : " avx512") +
                               (g.trans_a ? " A transposed," : " A as stored,") +
                               (g.trans_b ? " B transposed" : " B as stored") + " m " + std::to_string(g.m) +
                               " n " + std::to_string(g.n) + " k " + std::to_string(g.k);
      const auto one = run_gemm(1, c0, [&](float* c) { run(g, isa, a, b, c); });
      for (std::int64_t i = 0; i < g.m; ++i) {
        for (std::int64_t j = 0; j < g.ldc; ++j) {
          const float got = one[static_cast<std::size_t>(i * g.ldc + j)];
          if (j >= g.n) {  // past C's columns: untouched
            ASSERT_TRUE(same_bits(got, c0[static_cast<std::size_t>(i * g.ldc + j)])) << what;
            continue;
          }
          const tt::dot_and_scale r = tt::reference_dot(g, a.data(), b.data(), i, j);
          const double c_in = g.beta == 0.0f ? 0.0 : c0[static_cast<std::size_t>(i * g.ldc + j)];
          const double want = g.alpha * r.dot + g.beta * c_in;
          ASSERT_NEAR(got, want, 1e-6 * (std::abs(g.alpha) * r.scale + std::abs(g.beta * c_in)) + 1e-6)
              << what << " at (" << i << ", " << j << ")";
        }
      }
      for (int threads : {2, 3}) {
        const auto more = run_gemm(threads, c0, [&](float* c) { run(g, isa, a, b, c); });
        for (std::size_t e = 0; e < one.size(); ++e) {
          ASSERT_TRUE(same_bits(more[e], one[e])) << what << " at " << threads << " threads, element " << e;
        }
      }
    }
  }
}

TEST(SmallGemm, MatchesADoubleLoopAtEveryThreadCount) {
  if (host::detected_simd_isa() == host::simd_isa::none) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  const std::vector<gemm_case> cases = {
      {false, 32, 2048, 512, 512, 4096, 2048, 1.0f, 1.0f, false},  // an LSTM step's forward, in place in the weight
      {true, 32, 512, 2048, 2048, 4096, 512, 1.0f, 0.0f, false},   // and its backward
      {false, 5, 80, 33, 40, 96, 85, 0.5f, -2.0f, false},          // row and column blocks cut short
      {false, 13, 112, 300, 304, 128, 120, 0.75f, 0.5f, false},    // and B's rows in chunks, the last one short
      {true, 7, 6, 48, 50, 64, 9, -1.5f, 0.25f, false},
      {false, 1, 16, 16, 16, 16, 16, 1.0f, 0.0f, false},
      {true, 32, 3, 16, 16, 16, 3, 2.0f, 0.0f, false},
  };
  for (const gemm_case& g : cases) {
    ASSERT_NE(host::small_gemm_suits(false, g.trans_b, g.m, g.n, g.k), host::simd_isa::none);
  }
  check_gemm_cases(cases, "small_gemm", [](const gemm_case& g, host::simd_isa isa, const std::vector<float>& a,
                                           const std::vector<float>& b, float* c) {
    host::small_gemm(isa, g.trans_b, g.m, g.n, g.k, g.alpha, a.data(), g.lda, b.data(), g.ldb, g.beta, c, g.ldc);
  });
}

TEST(NarrowGemm, MatchesADoubleLoopAtEveryThreadCount) {
  if (host::detected_simd_isa() == host::simd_isa::none) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  // Attention's per-head products as the peer Transformer runs them (8
  // heads of 64: Q, K and V rows 512 apart), then blocks cut short.
  const std::vector<gemm_case> cases = {
      {true, 128, 128, 64, 512, 512, 128, 1.0f, 0.0f, false},   // logits = q . k^T
      {false, 128, 64, 128, 128, 512, 512, 1.0f, 0.0f, false},  // weights . v
      {false, 128, 64, 128, 128, 512, 512, 1.0f, 0.0f, true},   // weights^T . d(heads' outputs)
      {false, 128, 64, 128, 128, 64, 64, -0.5f, 1.0f, true},    // B already one block, C added to
      {false, 37, 80, 21, 30, 90, 85, 0.5f, -2.0f, false},      // rows and vectors left over
      {true, 41, 112, 32, 48, 32, 120, 0.75f, 0.5f, true},
      {false, 3, 48, 100, 40, 48, 48, 2.0f, 0.0f, true},
      {true, 512, 16, 512, 512, 512, 16, 1.0f, 0.0f, false},    // the largest m and k x n taken
  };
  for (const gemm_case& g : cases) {
    ASSERT_NE(host::narrow_gemm_suits(g.trans_b, g.m, g.n, g.k), host::simd_isa::none);
  }
  check_gemm_cases(cases, "narrow_gemm", [](const gemm_case& g, host::simd_isa isa, const std::vector<float>& a,
                                            const std::vector<float>& b, float* c) {
    host::narrow_gemm(isa, g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a.data(), g.lda, b.data(), g.ldb, g.beta,
                      c, g.ldc);
  });
}

TEST(NarrowGemm, TakesOnlyWhatItIsBuiltFor) {
  if (host::detected_simd_isa() == host::simd_isa::none) GTEST_SKIP() << "no vector kernels on this CPU";
  EXPECT_EQ(host::narrow_gemm_suits(false, 513, 64, 64), host::simd_isa::none) << "more than 512 rows";
  EXPECT_EQ(host::narrow_gemm_suits(false, 128, 72, 64), host::simd_isa::none) << "n not whole vectors";
  EXPECT_EQ(host::narrow_gemm_suits(true, 128, 64, 40), host::simd_isa::none) << "k not whole vectors";
  EXPECT_EQ(host::narrow_gemm_suits(false, 128, 64, 8), host::simd_isa::none) << "k below 16";
  EXPECT_EQ(host::narrow_gemm_suits(false, 128, 128, 65), host::simd_isa::none) << "op(B) over 8 Ki floats";
  EXPECT_NE(host::narrow_gemm_suits(false, 128, 128, 64), host::simd_isa::none);
  EXPECT_NE(host::narrow_gemm_suits(false, 128, 64, 40), host::simd_isa::none);
}

TEST(SmallGemm, TakesOnlyWhatItIsBuiltFor) {
  if (host::detected_simd_isa() == host::simd_isa::none) GTEST_SKIP() << "no vector kernels on this CPU";
  EXPECT_EQ(host::small_gemm_suits(true, false, 32, 64, 64), host::simd_isa::none) << "A transposed";
  EXPECT_EQ(host::small_gemm_suits(false, false, 33, 64, 64), host::simd_isa::none) << "more than 32 rows";
  EXPECT_EQ(host::small_gemm_suits(false, false, 32, 72, 64), host::simd_isa::none) << "n not whole vectors";
  EXPECT_EQ(host::small_gemm_suits(false, true, 32, 72, 40), host::simd_isa::none) << "k not whole vectors";
  EXPECT_EQ(host::small_gemm_suits(false, false, 32, 64, 4096), host::simd_isa::none) << "B's panel too big";
  EXPECT_EQ(host::small_gemm_suits(false, true, 32, 64, 8192), host::simd_isa::none) << "A too big";
  EXPECT_EQ(host::small_gemm_suits(false, false, 32, 4096, 1024), host::simd_isa::none) << "B too big";
  EXPECT_NE(host::small_gemm_suits(false, false, 32, 2048, 512), host::simd_isa::none);
  EXPECT_NE(host::small_gemm_suits(false, true, 32, 4096, 1024), host::simd_isa::none);
}

// The mask kernels of one element type, per instruction set.
template <class T>
struct mask_isa {
  std::string name;
  void (*row)(T*, std::uint64_t, std::uint64_t, std::int64_t, std::uint64_t, std::uint64_t, T);
};

template <class T>
std::vector<mask_isa<T>> mask_isas() {
  namespace rs = typemesh::backend::host::rng_simd;
  std::vector<mask_isa<T>> out;
  const auto isa = host::random_simd_isa();
  if (isa >= host::simd_isa::avx2) out.push_back({"avx2", rs::dropout_row_avx2});
  if (isa >= host::simd_isa::avx512) out.push_back({"avx512", rs::dropout_row_avx512});
  return out;
}

template <class T>
bool same_value_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

template <class T>
void check_mask_rows() {
  const auto isas = mask_isas<T>();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  const std::uint64_t big = std::uint64_t(1) << 40;
  const std::uint64_t starts[] = {0, 1, 7, 12345, big - 5, big + 3};
  const std::uint64_t steps[] = {1, 3, 1000};
  const std::uint64_t bases[] = {0, backend::random_base(42, 0x1234abcd, 7, 1), backend::random_base(1, 2, 3, 4)};
  const double rates[] = {0.1, 0.5, 1.0 / 3.0, 0.999999, 1e-12, 0.0, 1.0};
  const T sentinel = std::numeric_limits<T>::quiet_NaN();
  // The rates' thresholds, then (rate -1) thresholds equal to the draw of
  // the row's first or last element, where an off-by-one would show.
  std::vector<double> cases(std::begin(rates), std::end(rates));
  cases.push_back(-1.0);
  cases.push_back(-2.0);
  for (const auto& f : isas) {
    std::int64_t kept = 0, dropped = 0;
    for (double rate : cases) {
      const T keep = rate > 0.0 && rate < 1.0 ? static_cast<T>(1.0 / (1.0 - rate)) : T{1.25};
      for (std::uint64_t base : bases) {
        for (std::uint64_t start : starts) {
          for (std::uint64_t step : steps) {
            for (std::int64_t count = 0; count <= 67; ++count) {
              const std::uint64_t last = start + static_cast<std::uint64_t>(std::max<std::int64_t>(count - 1, 0)) * step;
              const std::uint64_t threshold = rate == -1.0   ? backend::random_bits53(base, start)
                                              : rate == -2.0 ? backend::random_bits53(base, last)
                                                             : backend::dropout_threshold(rate);
              const backend::random_fill_detail::dropout_value<T> scalar{base, threshold, keep};
              // One element past the row must stay untouched.
              std::vector<T> out(static_cast<std::size_t>(count + 1), sentinel);
              f.row(out.data(), start, step, count, base, threshold, keep);
              for (std::int64_t j = 0; j < count; ++j) {
                const T want = scalar(start + static_cast<std::uint64_t>(j) * step);
                ASSERT_TRUE(same_value_bits(out[static_cast<std::size_t>(j)], want))
                    << f.name << " rate " << rate << " threshold " << threshold << " base " << base << " start "
                    << start << " step " << step << " count " << count << " element " << j;
                (want == T{0} ? dropped : kept) += 1;
              }
              ASSERT_TRUE(same_value_bits(out[static_cast<std::size_t>(count)], sentinel))
                  << f.name << " wrote past the row of " << count;
            }
          }
        }
      }
    }
    EXPECT_GT(kept, 0) << f.name;
    EXPECT_GT(dropped, 0) << f.name;
  }
}

TEST(DropoutMaskRow, FloatMatchesTheScalarFormula) { check_mask_rows<float>(); }
TEST(DropoutMaskRow, DoubleMatchesTheScalarFormula) { check_mask_rows<double>(); }

// Through dropout_mask_fill (the vector kernels where the CPU has them)
// against fill_by_global_index with the scalar formula, over a slice that is
// not the whole tensor and whose global strides are another order of its
// dims, at 1, 2 and 3 threads.
template <class T>
void check_mask_fill() {
  const backend::slice_geometry<3> g{{70, 61, 37}, {3, 5, 11}, {1, 80 * 50, 80}};
  const std::size_t n = 70 * 61 * 37;
  const std::uint64_t base = backend::random_base(7, 99, 3, 1);
  const double rate = 0.3;
  const T keep = static_cast<T>(1.0 / 0.7);
  std::vector<T> want(n, std::numeric_limits<T>::quiet_NaN());
  backend::fill_by_global_index(typemesh::host_space{}, want.data(), g,
                                backend::random_fill_detail::dropout_value<T>{base, backend::dropout_threshold(rate),
                                                                               keep});
  for (int threads : {1, 2, 3}) {
    std::vector<T> got(n, std::numeric_limits<T>::quiet_NaN());
    typemesh::launch({.devices = 1, .threads_per_device = threads}, [&](typemesh::device&) {
      backend::dropout_mask_fill(typemesh::host_space{}, got.data(), g, base, rate, keep);
    });
    for (std::size_t e = 0; e < n; ++e) {
      ASSERT_TRUE(same_value_bits(got[e], want[e])) << threads << " threads, element " << e;
    }
  }
}

TEST(DropoutMaskFill, GivesTheScalarBitsAtEveryThreadCount) {
  if (host::random_simd_isa() == host::simd_isa::none) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  check_mask_fill<float>();
  check_mask_fill<double>();
}

}  // namespace
#else
TEST(VectorMath, CompiledOut) { GTEST_SKIP() << "no vector math on this compiler or CPU family"; }
#endif

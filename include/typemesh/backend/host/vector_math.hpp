// exp, sigmoid, tanh and maxima over float arrays on the host, in AVX-512 or
// AVX2 (host/simd.hpp), for the kernels that spend their time in them: the
// LSTM's gates (backend/lstm.hpp), softmax cross-entropy's rows
// (backend/softmax_cross_entropy.hpp) and softmax's rows
// (backend/softmax.hpp). The C library's expf and tanhf run one element at a
// time, and tanhf goes through expm1f: in the RNNLM step
// they took a tenth of the time.
//
// The functions are the classic Cephes single-precision ones, evaluated in
// vector lanes:
//   exp(x):  x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts), a
//            degree-7 polynomial for exp(r), times 2^n applied as two
//            halves so that results near overflow or in the subnormal range
//            round like one product; within 2 ulp of the true value.
//            +inf above 88.72, 0 below -103.97, NaN stays NaN.
//   sigmoid(x) = 1 / (1 + exp(-x)).
//   tanh(x): an odd polynomial below |x| = 0.625, 1 - 2 / (1 + exp(2|x|))
//            (sign restored) above; within 2 ulp.
// Every element goes through the same instructions: the last partial vector
// is copied into a full one, computed, and copied back. So an element's
// result depends only on its value, never on where it lies or how rows are
// split among threads. Results differ from the C library's by an ulp or two;
// double and other CPUs keep the C library (callers check simd_enabled()).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "typemesh/backend/host/simd.hpp"
#include "typemesh/core/space.hpp"

namespace typemesh::backend::host {

// Whether the vector functions below run on this CPU.
inline bool vector_math_enabled() { return detected_simd_isa() != simd_isa::none; }

// Whether a kernel of Space on T may take them (where vector_math_enabled):
// float on the host space.
template <class Space, class T>
inline constexpr bool vector_math_types = std::is_same_v<Space, host_space> && std::is_same_v<T, float>;

#if TYPEMESH_HOST_SIMD
// Vectors go by reference, results into out-parameters (see simd::load).
namespace vmath {

using simd::ints_of;
using simd::lanes;
using simd::load;
using simd::store;

template <class V>
[[gnu::always_inline]] inline void exp(const V& x, V& result) {
  using I = typename ints_of<V>::type;
  // Clamped so that n stays within [-150, 128]; outside, the product below
  // rounds to 0 or overflows to +inf as exp does.
  V xc = x > (V{} + 88.8f) ? (V{} + 88.8f) : x;
  xc = xc < (V{} + -104.0f) ? (V{} + -104.0f) : xc;
  // n = round(x / ln2) by the 1.5 * 2^23 trick (|x / ln2| < 2^22).
  const V magic = (V{} + 12582912.0f);
  const V n = (xc * (V{} + 1.44269504088896341f) + magic) - magic;
  const V r = (xc - n * (V{} + 0.693359375f)) - n * (V{} + -2.12194440e-4f);
  V p = (V{} + 1.9875691500e-4f);
  p = p * r + (V{} + 1.3981999507e-3f);
  p = p * r + (V{} + 8.3334519073e-3f);
  p = p * r + (V{} + 4.1665795894e-2f);
  p = p * r + (V{} + 1.6666665459e-1f);
  p = p * r + (V{} + 5.0000001201e-1f);
  p = p * (r * r) + r + (V{} + 1.0f);
  const I ni = __builtin_convertvector(n, I);
  const I half = ni >> 1;
  const V scale_a = (V)((half + 127) << 23), scale_b = (V)((ni - half + 127) << 23);
  const V y = p * scale_a * scale_b;
  result = x != x ? x : y;
}

// tanh(x) given u = 1 / (1 + exp(2|x|)): above |x| = 0.625 it is
// 1 - 2u with x's sign, below it the odd polynomial.
template <class V>
[[gnu::always_inline]] inline void tanh_given(const V& x, const V& u, V& result) {
  using I = typename ints_of<V>::type;
  const I sign = (I)x & (I{} + static_cast<std::int32_t>(0x80000000u));
  const V a = (V)((I)x & ~sign);
  const V z = x * x;
  V p = (V{} + -5.70498872745e-3f);
  p = p * z + (V{} + 2.06390887954e-2f);
  p = p * z - (V{} + 5.37397155531e-2f);
  p = p * z + (V{} + 1.33314422036e-1f);
  p = p * z - (V{} + 3.33332819422e-1f);
  // Both branches on |x|, the sign put back after, so tanh(-x) is -tanh(x)
  // to the bit, zeros included.
  const V magnitude = a < (V{} + 0.625f) ? p * z * a + a : (V{} + 1.0f) - (u + u);
  result = (V)((I)magnitude | sign);
}

template <class V>
[[gnu::always_inline]] inline void tanh(const V& x, V& result) {
  const V a = x < (V{} + 0.0f) ? -x : x;
  V e;
  exp(a + a, e);
  tanh_given(x, (V{} + 1.0f) / ((V{} + 1.0f) + e), result);
}

// The maps' element functions, as structs whose calls are always inlined
// into the target-specific entry points (a lambda's body would be compiled
// for the plain target).
template <class V>
struct tanh_of {
  [[gnu::always_inline]] void operator()(const V& v, V& out) const { vmath::tanh(v, out); }
};
template <class V>
struct scaled_exp_of {
  float shift, scale;
  [[gnu::always_inline]] void operator()(const V& v, V& out) const {
    exp(v - shift, out);
    out *= scale;
  }
};
// The LSTM gates of one vector of z = [units, 4] (i, f, g, o): g lanes
// (mask -1) tanh, the others sigmoid, from one exp and one division each.
template <class V>
struct lstm_gate_of {
  typename ints_of<V>::type g_lanes;
  [[gnu::always_inline]] void operator()(const V& v, V& out) const {
    const V a = v < (V{} + 0.0f) ? -v : v;
    V e, tanh_v;
    exp(g_lanes ? a + a : -v, e);
    const V u = (V{} + 1.0f) / ((V{} + 1.0f) + e);
    tanh_given(v, u, tanh_v);
    out = g_lanes ? tanh_v : u;
  }
};

// y[i] = f(x[i]) for i < n; x and y may be the same array.
template <class V, class F>
[[gnu::always_inline]] inline void map(const float* x, float* y, std::int64_t n, const F& f) {
  constexpr int w = lanes<V>;
  std::int64_t i = 0;
  for (; i + w <= n; i += w) {
    V v, r;
    load(v, x + i);
    f(v, r);
    store(y + i, r);
  }
  if (i < n) {
    float part[w] = {};
    std::copy(x + i, x + n, part);
    V v, r;
    load(v, part);
    f(v, r);
    store(part, r);
    std::copy(part, part + (n - i), y + i);
  }
}

// The sum of exp(x[i] - shift) for i < n, lane by lane in index order, the
// lanes then added in lane order.
template <class V>
[[gnu::always_inline]] inline float exp_shifted_sum(const float* x, float shift, std::int64_t n) {
  constexpr int w = lanes<V>;
  V acc{};
  std::int64_t i = 0;
  for (; i + w <= n; i += w) {
    V v, e;
    load(v, x + i);
    exp(v - shift, e);
    acc += e;
  }
  if (i < n) {
    float part[w] = {};
    std::copy(x + i, x + n, part);
    V v, e;
    load(v, part);
    exp(v - shift, e);
    float values[w];
    store(values, e);
    std::fill(values + (n - i), values + w, 0.0f);
    load(e, values);
    acc += e;
  }
  float sum = 0.0f;
  for (int l = 0; l < w; ++l) sum += acc[l];
  return sum;
}

// y[i] = scale * exp(x[i] - shift).
template <class V>
[[gnu::always_inline]] inline void scaled_exp_shifted(const float* x, float shift, float scale, float* y,
                                                      std::int64_t n) {
  map<V>(x, y, n, scaled_exp_of<V>{shift, scale});
}

// The largest x[i], i < n, lane by lane in index order, the lanes then
// compared in lane order; NaNs are passed over, and -inf is the maximum of
// none. Exact, so it equals a sequential maximum wherever x holds no NaN.
template <class V>
[[gnu::always_inline]] inline float max_of(const float* x, std::int64_t n) {
  constexpr int w = lanes<V>;
  const float lowest = -__builtin_inff();
  V acc = V{} + lowest;
  std::int64_t i = 0;
  for (; i + w <= n; i += w) {
    V v;
    load(v, x + i);
    acc = v > acc ? v : acc;
  }
  if (i < n) {
    float part[w];
    std::fill(part, part + w, lowest);
    std::copy(x + i, x + n, part);
    V v;
    load(v, part);
    acc = v > acc ? v : acc;
  }
  float top = acc[0];
  for (int l = 1; l < w; ++l) top = acc[l] > top ? acc[l] : top;
  return top;
}

// One softmax row: y[i] = exp(x[i] - max) / sum_j exp(x[j] - max), i < n
// (n > 0). The exponentials are computed twice, for the sum and for y, which
// costs less than a second pass over y while the row is in L1.
template <class V>
[[gnu::always_inline]] inline void softmax_row(const float* x, float* y, std::int64_t n) {
  const float top = max_of<V>(x, n);
  const float sum = exp_shifted_sum<V>(x, top, n);
  scaled_exp_shifted<V>(x, top, 1.0f / sum, y, n);
}

// One softmax row's gradient: dx[i] = y[i] * (dy[i] - sum_j dy[j] y[j]),
// i < n, the sum lane by lane in index order, the lanes then added in lane
// order. The last partial vector is zero-padded, so every element goes
// through the same instructions.
template <class V>
[[gnu::always_inline]] inline void softmax_gradient_row(const float* y, const float* dy, float* dx,
                                                        std::int64_t n) {
  constexpr int w = lanes<V>;
  V acc{};
  std::int64_t i = 0;
  for (; i + w <= n; i += w) {
    V a, b;
    load(a, y + i);
    load(b, dy + i);
    acc += a * b;
  }
  const std::int64_t tail = n - i;
  float y_part[w] = {}, dy_part[w] = {}, dx_part[w];
  std::copy(y + i, y + n, y_part);
  std::copy(dy + i, dy + n, dy_part);
  V a, b;
  if (tail > 0) {
    load(a, y_part);
    load(b, dy_part);
    acc += a * b;
  }
  float dot = 0.0f;
  for (int l = 0; l < w; ++l) dot += acc[l];
  for (i = 0; i + w <= n; i += w) {
    load(a, y + i);
    load(b, dy + i);
    store(dx + i, a * (b - dot));
  }
  if (tail > 0) {
    load(a, y_part);
    load(b, dy_part);
    store(dx_part, a * (b - dot));
    std::copy(dx_part, dx_part + tail, dx + i);
  }
}

// The LSTM's gate activations over z = [units, 4] (i, f, g, o), in place:
// sigmoid of i, f and o, tanh of g. n is 4 x units, so a vector holds whole
// units and the gate pattern repeats every 4 lanes.
template <class V>
[[gnu::always_inline]] inline void lstm_gates(float* z, std::int64_t n) {
  using I = typename ints_of<V>::type;
  I g_lanes{};
  for (int l = 2; l < lanes<V>; l += 4) g_lanes[l] = -1;
  map<V>(z, z, n, lstm_gate_of<V>{g_lanes});
}

// The instruction-set-specific entry points: the templates above are
// inlined into them and compiled for their target.
#define TYPEMESH_AVX512 __attribute__((target("avx512f,fma")))
#define TYPEMESH_AVX2 __attribute__((target("avx2,fma")))
TYPEMESH_AVX512 inline float exp_shifted_sum_avx512(const float* x, float shift, std::int64_t n) {
  return exp_shifted_sum<simd::v16>(x, shift, n);
}
TYPEMESH_AVX2 inline float exp_shifted_sum_avx2(const float* x, float shift, std::int64_t n) {
  return exp_shifted_sum<simd::v8>(x, shift, n);
}
TYPEMESH_AVX512 inline void scaled_exp_shifted_avx512(const float* x, float shift, float scale, float* y,
                                                      std::int64_t n) {
  scaled_exp_shifted<simd::v16>(x, shift, scale, y, n);
}
TYPEMESH_AVX2 inline void scaled_exp_shifted_avx2(const float* x, float shift, float scale, float* y,
                                                  std::int64_t n) {
  scaled_exp_shifted<simd::v8>(x, shift, scale, y, n);
}
TYPEMESH_AVX512 inline void tanh_avx512(const float* x, float* y, std::int64_t n) {
  map<simd::v16>(x, y, n, tanh_of<simd::v16>{});
}
TYPEMESH_AVX2 inline void tanh_avx2(const float* x, float* y, std::int64_t n) {
  map<simd::v8>(x, y, n, tanh_of<simd::v8>{});
}
TYPEMESH_AVX512 inline float max_of_avx512(const float* x, std::int64_t n) { return max_of<simd::v16>(x, n); }
TYPEMESH_AVX2 inline float max_of_avx2(const float* x, std::int64_t n) { return max_of<simd::v8>(x, n); }
TYPEMESH_AVX512 inline void softmax_row_avx512(const float* x, float* y, std::int64_t n) {
  softmax_row<simd::v16>(x, y, n);
}
TYPEMESH_AVX2 inline void softmax_row_avx2(const float* x, float* y, std::int64_t n) {
  softmax_row<simd::v8>(x, y, n);
}
TYPEMESH_AVX512 inline void softmax_gradient_row_avx512(const float* y, const float* dy, float* dx,
                                                        std::int64_t n) {
  softmax_gradient_row<simd::v16>(y, dy, dx, n);
}
TYPEMESH_AVX2 inline void softmax_gradient_row_avx2(const float* y, const float* dy, float* dx, std::int64_t n) {
  softmax_gradient_row<simd::v8>(y, dy, dx, n);
}
TYPEMESH_AVX512 inline void lstm_gates_avx512(float* z, std::int64_t n) { lstm_gates<simd::v16>(z, n); }
TYPEMESH_AVX2 inline void lstm_gates_avx2(float* z, std::int64_t n) { lstm_gates<simd::v8>(z, n); }
#undef TYPEMESH_AVX512
#undef TYPEMESH_AVX2

}  // namespace vmath
#endif

// The functions callers use; each requires vector_math_enabled().

// sum of exp(x[i] - shift), i < n.
inline float exp_shifted_sum(const float* x, float shift, std::int64_t n) {
#if TYPEMESH_HOST_SIMD
  if (detected_simd_isa() == simd_isa::avx512) return vmath::exp_shifted_sum_avx512(x, shift, n);
  return vmath::exp_shifted_sum_avx2(x, shift, n);
#else
  (void)x, (void)shift, (void)n;
  return 0.0f;
#endif
}

// y[i] = scale * exp(x[i] - shift), i < n.
inline void scaled_exp_shifted(const float* x, float shift, float scale, float* y, std::int64_t n) {
#if TYPEMESH_HOST_SIMD
  if (detected_simd_isa() == simd_isa::avx512) vmath::scaled_exp_shifted_avx512(x, shift, scale, y, n);
  else vmath::scaled_exp_shifted_avx2(x, shift, scale, y, n);
#else
  (void)x, (void)shift, (void)scale, (void)y, (void)n;
#endif
}

// The largest of x[i], i < n, ignoring NaNs; -inf where there is none
// (vmath::max_of).
inline float max_floats(const float* x, std::int64_t n) {
#if TYPEMESH_HOST_SIMD
  if (detected_simd_isa() == simd_isa::avx512) return vmath::max_of_avx512(x, n);
  return vmath::max_of_avx2(x, n);
#else
  (void)x, (void)n;
  return 0.0f;
#endif
}

// One softmax row of n > 0 elements (vmath::softmax_row).
inline void softmax_row(const float* x, float* y, std::int64_t n) {
#if TYPEMESH_HOST_SIMD
  if (detected_simd_isa() == simd_isa::avx512) vmath::softmax_row_avx512(x, y, n);
  else vmath::softmax_row_avx2(x, y, n);
#else
  (void)x, (void)y, (void)n;
#endif
}

// One softmax row's gradient (vmath::softmax_gradient_row).
inline void softmax_gradient_row(const float* y, const float* dy, float* dx, std::int64_t n) {
#if TYPEMESH_HOST_SIMD
  if (detected_simd_isa() == simd_isa::avx512) vmath::softmax_gradient_row_avx512(y, dy, dx, n);
  else vmath::softmax_gradient_row_avx2(y, dy, dx, n);
#else
  (void)y, (void)dy, (void)dx, (void)n;
#endif
}

// y[i] = tanh(x[i]), i < n (y may be x).
inline void tanh_floats(const float* x, float* y, std::int64_t n) {
#if TYPEMESH_HOST_SIMD
  if (detected_simd_isa() == simd_isa::avx512) vmath::tanh_avx512(x, y, n);
  else vmath::tanh_avx2(x, y, n);
#else
  (void)x, (void)y, (void)n;
#endif
}

// The LSTM gate activations of z = [n / 4 units, 4 gates], in place.
inline void lstm_gate_activations(float* z, std::int64_t n) {
#if TYPEMESH_HOST_SIMD
  if (detected_simd_isa() == simd_isa::avx512) vmath::lstm_gates_avx512(z, n);
  else vmath::lstm_gates_avx2(z, n);
#else
  (void)z, (void)n;
#endif
}

}  // namespace typemesh::backend::host

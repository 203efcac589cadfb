// Elementwise functions of one tensor, with their gradients. The output has
// the input's shape and layout; nothing is communicated.
//
//   auto h = typemesh::relu(x);
//   auto s = typemesh::scale(x, 0.5f);      // also x * 0.5f, 0.5f * x, x + 1.0f
#pragma once

#include <cmath>
#include <span>
#include <string_view>
#include <type_traits>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/kernels.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace ops_detail {

// out[i] = f(x[i]).
template <class U, class T, class S, class L, class M, class F>
tensor<U, S, L, M> apply(const tensor<T, S, L, M>& x, F f) {
  tensor<U, S, L, M> out(x.mesh(), x.shape(), uninitialized);
  backend::map(x.space(), x.data(), out.data(), x.local_size(), f);
  return out;
}

// out[i] = f(a[i], b[i]) for tensors of one type.
template <class Tensor, class F>
Tensor apply2(const Tensor& a, const Tensor& b, F f) {
  Tensor out(a.mesh(), a.shape(), uninitialized);
  backend::zip(a.space(), a.data(), b.data(), out.data(), a.local_size(), f);
  return out;
}

// 1 where v > 0, else 0 (NaN too), as a value rather than a branch. On the
// host the comparison is a quiet one (it raises no floating-point
// exception): GCC does not turn an ordinary comparison, which may trap,
// into a vector select, so relu's gradient loop ran one element at a time.
template <class T>
TYPEMESH_KERNEL T positive_step(T v) {
#if defined(__CUDA_ARCH__)
  return v > T{0} ? T{1} : T{0};
#else
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(__builtin_isgreater(v, T{0}));
  else return v > T{0} ? T{1} : T{0};
#endif
}

// dy * d(u), the gradient of a unary function whose derivative d is written
// in terms of u: the input x or the output y, whichever it needs.
template <class D>
struct times_derivative {
  D d;
  template <class T>
  TYPEMESH_KERNEL T operator()(T u, T dy) const {
    return dy * d(u);
  }
};

// A unary function y = f(x) whose derivative is d(y) (OfOutput) or d(x).
// Recording keeps only that one tensor for the gradient dy * d(.): with
// relu after a dense layer, the layer's product can be freed once relu has
// read it, and the gradient reads two arrays instead of three.
template <bool OfOutput, class T, class S, class L, class M, class F, class D>
tensor<T, S, L, M> unary(const char* what, const tensor<T, S, L, M>& x, F f, D d) {
  using t = tensor<T, S, L, M>;
  t y = apply<T>(x, f);
  if (!autodiff::recording() || !x.tracked()) return y;
  return record(std::move(y), what, gradient_of(x, [kept = OfOutput ? y.detached() : x.detached(), d](const t& dy) {
                  t dx(kept.mesh(), kept.shape(), uninitialized);
                  backend::zip(dx.space(), kept.data(), dy.data(), dx.data(), dx.local_size(),
                               times_derivative<D>{d});
                  return dx;
                }));
}

}  // namespace ops_detail

// U names what the derivative D is written in: v (the input) or y (the output).
#define TYPEMESH_UNARY(NAME, F, U, D)                                                 \
  namespace ops_detail {                                                              \
  struct NAME##_value {                                                               \
    template <class T>                                                                \
    TYPEMESH_KERNEL T operator()(T v) const {                                         \
      return F;                                                                       \
    }                                                                                 \
  };                                                                                  \
  struct NAME##_derivative {                                                          \
    template <class T>                                                                \
    TYPEMESH_KERNEL T operator()([[maybe_unused]] T U) const {                        \
      return D;                                                                       \
    }                                                                                 \
  };                                                                                  \
  }                                                                                   \
  template <class T, class S, class L, class M>                                       \
  tensor<T, S, L, M> NAME(const tensor<T, S, L, M>& x) {                              \
    constexpr bool of_output = std::string_view(#U) == "y";                           \
    return ops_detail::unary<of_output>(#NAME, x, ops_detail::NAME##_value{},         \
                                        ops_detail::NAME##_derivative{});             \
  }

// Each line: the function of v, and its derivative in terms of v or of
// y = f(v). relu's y is positive exactly where v is (a NaN gives 0 for both).
TYPEMESH_UNARY(relu, v > T{0} ? v : T{0}, y, positive_step(y))
TYPEMESH_UNARY(sigmoid, T{1} / (T{1} + std::exp(-v)), y, y*(T{1} - y))
TYPEMESH_UNARY(tanh, std::tanh(v), y, T{1} - y * y)
TYPEMESH_UNARY(exp, std::exp(v), y, y)
TYPEMESH_UNARY(log, std::log(v), v, T{1} / v)
TYPEMESH_UNARY(sqrt, std::sqrt(v), y, T{0.5} / y)
TYPEMESH_UNARY(rsqrt, T{1} / std::sqrt(v), y, T{-0.5} * y * y * y)
TYPEMESH_UNARY(square, v* v, v, T{2} * v)
TYPEMESH_UNARY(negative, -v, v, T{-1})
TYPEMESH_UNARY(abs, v < T{0} ? -v : v, v, v < T{0} ? T{-1} : T{1})
#undef TYPEMESH_UNARY

// x * factor.
template <class T, class S, class L, class M>
tensor<T, S, L, M> scale(const tensor<T, S, L, M>& x, std::type_identity_t<T> factor) {
  using t = tensor<T, S, L, M>;
  t y = ops_detail::apply<T>(x, backend::times<T>{factor});
  return record(std::move(y), "scale",
                gradient_of(x, [factor](const t& dy) { return ops_detail::apply<T>(dy, backend::times<T>{factor}); }));
}

// x + c.
template <class T, class S, class L, class M>
tensor<T, S, L, M> shift(const tensor<T, S, L, M>& x, std::type_identity_t<T> c) {
  using t = tensor<T, S, L, M>;
  t y = ops_detail::apply<T>(x, backend::plus_constant<T>{c});
  return record(std::move(y), "shift", gradient_of(x, [](const t& dy) { return dy.detached(); }));
}

// The same values as another element type (no gradient flows through).
template <class U, class T, class S, class L, class M>
tensor<U, S, L, M> cast(const tensor<T, S, L, M>& x) {
  return ops_detail::apply<U>(x, backend::cast_to<U>{});
}

// The same values, with no gradient flowing back (stop_gradient).
template <class T, class S, class L, class M>
tensor<T, S, L, M> stop_gradient(const tensor<T, S, L, M>& x) {
  return x.detached();
}

template <class T, class S, class L, class M>
tensor<T, S, L, M> operator*(const tensor<T, S, L, M>& x, std::type_identity_t<T> c) {
  return typemesh::scale(x, c);
}
template <class T, class S, class L, class M>
tensor<T, S, L, M> operator*(std::type_identity_t<T> c, const tensor<T, S, L, M>& x) {
  return typemesh::scale(x, c);
}
template <class T, class S, class L, class M>
tensor<T, S, L, M> operator+(const tensor<T, S, L, M>& x, std::type_identity_t<T> c) {
  return typemesh::shift(x, c);
}
template <class T, class S, class L, class M>
tensor<T, S, L, M> operator-(const tensor<T, S, L, M>& x, std::type_identity_t<T> c) {
  return typemesh::shift(x, -c);
}
template <class T, class S, class L, class M>
tensor<T, S, L, M> operator-(const tensor<T, S, L, M>& x) {
  return typemesh::negative(x);
}

// A tensor of the given shape on a mesh, every element `value`.
template <class Layout, class T = float, class S, class M>
tensor<T, S, Layout, M> constant(const M& m, const S& s, T value) {
  tensor<T, S, Layout, M> t(m, s);
  backend::fill(t.space(), t.data(), t.local_size(), value);
  return t;
}
template <class Layout, class T = float, class S, class M>
tensor<T, S, Layout, M> zeros(const M& m, const S& s) {
  return tensor<T, S, Layout, M>(m, s);
}

}  // namespace typemesh

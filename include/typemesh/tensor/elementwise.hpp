// Elementwise maps over distributed tensors, and whole-tensor reductions to
// plain values. zip's operands must live on the same mesh with the same shape
// and layout: the checks below make anything else a compile error that names
// the meshes or the dim whose layouts disagree. The arithmetic operators,
// which broadcast by dim name and have gradients, are in ops/binary.hpp.
#pragma once

#include <limits>
#include <type_traits>

#include "typemesh/backend/kernels.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/tensor/import_export.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace detail {

template <class D, class LA, class LB>
consteval bool check_same_axis() {
  return diagnostic::conflicting_layouts<D, LA, LB,
                                                !std::is_same_v<typename LA::template axis_of<D>,
                                                                typename LB::template axis_of<D>>>::passed;
}

template <class A, class B>
struct same_placement;

template <class TA, class TB, class... Dims, class SB, class LA, class LB, class MA, class MB>
struct same_placement<tensor<TA, shape<Dims...>, LA, MA>, tensor<TB, SB, LB, MB>> {
  static constexpr bool value =
      diagnostic::different_meshes<MA, MB, !std::is_same_v<MA, MB>>::passed &&
      diagnostic::different_shapes<shape<Dims...>, SB, !std::is_same_v<shape<Dims...>, SB>>::passed &&
      (check_same_axis<Dims, LA, LB>() && ...);
};

template <class A, class B>
void check_same_values(const A& a, const B& b) {
  if (!(a.mesh() == b.mesh())) {
    throw device_error(cat("operands on ", a.mesh().describe(), " and ", b.mesh().describe(),
                           ": same mesh type, different devices or sizes"));
  }
  if (!(a.shape() == b.shape())) {
    throw shape_error(cat("operands of shapes ", a.shape().describe(), " and ", b.shape().describe(),
                          " cannot be combined elementwise"));
  }
}

}  // namespace detail

// f applied to every element.
template <class T, class S, class L, class M, class F>
auto map(const tensor<T, S, L, M>& x, F f) {
  using U = std::decay_t<std::invoke_result_t<F&, T>>;
  tensor<U, S, L, M> out(x.mesh(), x.shape());
  backend::map(x.space(), x.data(), out.data(), x.local_size(), f);
  return out;
}

// f applied to every pair of elements of a and b.
template <class TA, class SA, class LA, class MA, class TB, class SB, class LB, class MB, class F>
auto zip(const tensor<TA, SA, LA, MA>& a, const tensor<TB, SB, LB, MB>& b, F f) {
  using U = std::decay_t<std::invoke_result_t<F&, TA, TB>>;
  if constexpr (!detail::same_placement<tensor<TA, SA, LA, MA>, tensor<TB, SB, LB, MB>>::value) {
    return diagnostic::after_failure<tensor<U, SA, LA, MA>>();
  } else {
    detail::check_same_values(a, b);
    tensor<U, SA, LA, MA> out(a.mesh(), a.shape());
    backend::zip(a.space(), a.data(), b.data(), out.data(), a.local_size(), f);
    return out;
  }
}

template <class T>
struct plus_op {
  TYPEMESH_HOST_DEVICE T operator()(T x, T y) const { return x + y; }
};

// The sum of all elements, on every device of the mesh (T{} outside it).
// Replicas are not counted twice: the local sums are reduced only along the
// axes that split the tensor.
template <class T, class S, class L, class M>
T sum(const tensor<T, S, L, M>& x) {
  if (!x.holds_data()) return T{};
  T local = backend::sum(x.space(), x.data(), x.local_size());
  this_device().allreduce(detail::splitting_group(x), std::span<T>(&local, 1));
  return local;
}

// The largest element, on every device of the mesh.
template <class T, class S, class L, class M>
T max(const tensor<T, S, L, M>& x) {
  if (!x.holds_data()) return std::numeric_limits<T>::lowest();
  T local = backend::max(x.space(), x.data(), x.local_size(), std::numeric_limits<T>::lowest());
  this_device().allreduce(detail::splitting_group(x), std::span<T>(&local, 1), reduce_op::max);
  return local;
}

}  // namespace typemesh

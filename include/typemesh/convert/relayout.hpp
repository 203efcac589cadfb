// Relayout within a mesh: a dim goes from split to whole (allconcat), whole
// to split (local, no traffic), from one axis to another, several at once.
//
//   auto y = typemesh::relayout<layout<batch(axis1), k(axis0)>>(x);
//
// The transfer plan moves exactly what each device lacks, so a dim that
// moves between axes is right where Mesh-TensorFlow's rename went wrong.
#pragma once

#include <type_traits>

#include "typemesh/convert/transfer.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

template <class NewLayout, class T, class S, class L, class M>
tensor<T, S, NewLayout, M> relayout(const tensor<T, S, L, M>& x) {
  if constexpr (std::is_same_v<canonical<S, L>, canonical<S, NewLayout>>) {
    return tensor<T, S, L, M>(x);  // the same placement: nothing moves
  } else {
    return transfer<NewLayout>(x, x.mesh());
  }
}

}  // namespace typemesh

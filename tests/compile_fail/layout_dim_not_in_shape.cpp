// The layout of the activations splits n, a dim of the weights only.
// expect: typemesh: the layout maps a dim that the tensor's shape does not have
// expect: diagnostic::layout_dim_not_in_shape<n, typemesh::shape<batch, k>,
#include <typemesh/tensor/tensor.hpp>

#include "common.hpp"

using namespace typemesh;

#if FIXED
using activations = tensor<float, shape<batch, k>, layout<batch(axis0), k(axis1)>, grid>;
#else
using activations = tensor<float, shape<batch, k>, layout<batch(axis0), n(axis1)>, grid>;
#endif

activations zeros(const grid& g) { return activations(g, {64, 128}); }

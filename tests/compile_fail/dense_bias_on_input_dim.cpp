// A dense layer whose bias is sized by the input dim k, which the product
// sums away, instead of the output dim n.
// expect: typemesh: dense: the bias has a dim that the layer's output lacks
// expect: diagnostic::bias_dim_not_in_output<k, typemesh::shape<batch, n>
#include <typemesh/layers/dense.hpp>

#include "common.hpp"

using namespace typemesh;

using x_t = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
using w_t = tensor<float, shape<k, n>, layout<n(axis1)>, grid>;
#if FIXED
using b_t = tensor<float, shape<n>, layout<n(axis1)>, grid>;
#else
using b_t = tensor<float, shape<k>, layout<>, grid>;
#endif

auto fc(const x_t& x, const w_t& w, const b_t& b) { return dense(x, w, b, activation::relu); }

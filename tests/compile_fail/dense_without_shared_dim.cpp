// A dense layer whose weight names its input dim with another tag than x's:
// x and w share no dim, so nothing would be summed (an outer product).
// expect: typemesh: dense: x and w share no dim, so nothing is reduced
// expect: diagnostic::dense_without_reduced_dim<typemesh::shape<batch, k>, typemesh::shape<d_in, n>
#include <typemesh/layers/dense.hpp>

#include "common.hpp"

using namespace typemesh;

struct d_in : dim<"d_in"> {};

using x_t = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
#if FIXED
using w_t = tensor<float, shape<k, n>, layout<n(axis1)>, grid>;
#else
using w_t = tensor<float, shape<d_in, n>, layout<n(axis1)>, grid>;
#endif

auto fc(const x_t& x, const w_t& w) { return dense(x, w, activation::relu); }

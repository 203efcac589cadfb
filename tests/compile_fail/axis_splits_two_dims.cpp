// A product whose inputs split different dims over the same axis: no device
// holds matching parts of the two.
// expect: typemesh: one mesh axis splits a different dim in each input
// expect: diagnostic::axis_splits_two_dims<axis0, batch, n
#include <typemesh/ops/einsum.hpp>

#include "common.hpp"

using namespace typemesh;

using x_t = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
#if FIXED
using w_t = tensor<float, shape<k, n>, layout<n(axis1)>, grid>;
#else
using w_t = tensor<float, shape<k, n>, layout<n(axis0)>, grid>;
#endif

auto project(const x_t& x, const w_t& w) { return einsum<batch, n>(x, w); }

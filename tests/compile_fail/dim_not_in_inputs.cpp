// An einsum whose output names a dim that neither input has.
// expect: typemesh: the output names a dim that no input has
// expect: diagnostic::dim_not_in_inputs<batch,
#include <typemesh/ops/einsum.hpp>

#include "common.hpp"

using namespace typemesh;

using x_t = tensor<float, shape<k>, layout<>, grid>;
using w_t = tensor<float, shape<k, n>, layout<n(axis1)>, grid>;

#if FIXED
auto project(const x_t& x, const w_t& w) { return einsum<n>(x, w); }
#else
auto project(const x_t& x, const w_t& w) { return einsum<batch, n>(x, w); }
#endif

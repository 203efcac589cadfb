// max_pool2d called as it was when it found its dims by position: the
// spatial dims are template arguments now.
// expect: typemesh: pooling names the image's spatial dims as template arguments
// expect: diagnostic::pool2d_roles_not_named<typemesh::conv_detail::not_named, typemesh::conv_detail::not_named,
#include <typemesh/layers/pooling.hpp>

#include "common.hpp"

using namespace typemesh;

struct h : dim<"h"> {};
struct w : dim<"w"> {};
struct c : dim<"c"> {};

using x_t = tensor<float, shape<batch, h, w, c>, layout<batch(axis0)>, grid>;

#if FIXED
auto pool(const x_t& x) { return max_pool2d<h, w>(x, {.window = {3, 3}, .strides = {2, 2}}); }
#else
auto pool(const x_t& x) { return max_pool2d(x, {.window = {3, 3}, .strides = {2, 2}}); }
#endif

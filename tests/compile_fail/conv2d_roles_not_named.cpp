// conv2d called as it was when it found its dims by position: the spatial
// roles are template arguments now.
// expect: typemesh: conv2d names its spatial dims as template arguments
// expect: diagnostic::conv2d_roles_not_named<typemesh::conv_detail::not_named,
#include <typemesh/layers/conv2d.hpp>

#include "common.hpp"

using namespace typemesh;

struct h : dim<"h"> {};
struct w : dim<"w"> {};
struct c : dim<"c"> {};
struct fh : dim<"fh"> {};
struct fw : dim<"fw"> {};

using x_t = tensor<float, shape<batch, h, w, c>, layout<batch(axis0)>, grid>;
using filter_t = tensor<float, shape<fh, fw, c, n>, layout<>, grid>;

#if FIXED
auto conv(const x_t& x, const filter_t& f) { return conv2d<h, w, fh, fw>(x, f, {.strides = {2, 2}}); }
#else
auto conv(const x_t& x, const filter_t& f) { return conv2d(x, f, {.strides = {2, 2}}); }
#endif

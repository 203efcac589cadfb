// Pooling over a spatial dim the image lacks: the sequence-like image
// [batch, len, c] has no width, and pooling does not pick the next dim by
// position.
// expect: typemesh: convolution and pooling slide along the spatial dims named as template arguments, but the image has no such dim
// expect: diagnostic::spatial_dim_not_in_image<w, typemesh::shape<batch, h, c>
#include <typemesh/layers/pooling.hpp>

#include "common.hpp"

using namespace typemesh;

struct h : dim<"h"> {};
struct w : dim<"w"> {};
struct c : dim<"c"> {};

#if FIXED
using x_t = tensor<float, shape<batch, h, w, c>, layout<batch(axis0)>, grid>;
#else
using x_t = tensor<float, shape<batch, h, c>, layout<batch(axis0)>, grid>;
#endif

auto pool(const x_t& x) { return max_pool2d<h, w>(x, {.window = {2, 2}}); }

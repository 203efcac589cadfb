// Pooling images whose width is split over a mesh axis, in an NCHW image:
// windows would cross device borders (typemesh does no halo exchange).
// expect: typemesh: convolution and pooling need the spatial dims .* whole on every device
// expect: diagnostic::spatial_dim_split<w, typemesh::layout<batch ?\(axis0\), w ?\(axis1\)>
#include <typemesh/layers/pooling.hpp>

#include "common.hpp"

using namespace typemesh;

struct h : dim<"h"> {};
struct w : dim<"w"> {};
struct c : dim<"c"> {};

#if FIXED
using x_t = tensor<float, shape<batch, c, h, w>, layout<batch(axis0), c(axis1)>, grid>;
#else
using x_t = tensor<float, shape<batch, c, h, w>, layout<batch(axis0), w(axis1)>, grid>;
#endif

auto pool(const x_t& x) { return avg_pool2d<h, w>(x, {.window = {3, 3}, .strides = {2, 2}}); }

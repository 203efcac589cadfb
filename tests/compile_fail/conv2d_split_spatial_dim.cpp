// A convolution of images whose height is split over a mesh axis: windows
// would cross device borders (typemesh does no halo exchange).
// expect: typemesh: convolution and pooling need the spatial dims .* whole on every device
// expect: diagnostic::spatial_dim_split<h, typemesh::layout<batch ?\(axis0\), h ?\(axis1\)>
#include <typemesh/layers/conv2d.hpp>

#include "common.hpp"

using namespace typemesh;

struct h : dim<"h"> {};
struct w : dim<"w"> {};
struct c : dim<"c"> {};
struct fh : dim<"fh"> {};
struct fw : dim<"fw"> {};

#if FIXED
using x_t = tensor<float, shape<batch, h, w, c>, layout<batch(axis0)>, grid>;
#else
using x_t = tensor<float, shape<batch, h, w, c>, layout<batch(axis0), h(axis1)>, grid>;
#endif
using filter_t = tensor<float, shape<fh, fw, c, n>, layout<>, grid>;

auto conv(const x_t& x, const filter_t& f) { return conv2d<h, w, fh, fw>(x, f); }

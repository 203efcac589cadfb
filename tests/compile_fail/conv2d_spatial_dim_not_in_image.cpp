// Spatial dims named for an image that calls them otherwise: conv2d finds
// height and width by name, never by position, so an image whose dims are
// rows and cols has no dim h.
// expect: typemesh: convolution and pooling slide along the spatial dims named as template arguments, but the image has no such dim
// expect: diagnostic::spatial_dim_not_in_image<h, typemesh::shape<batch, rows, cols, c>
#include <typemesh/layers/conv2d.hpp>

#include "common.hpp"

using namespace typemesh;

struct h : dim<"h"> {};
struct w : dim<"w"> {};
struct rows : dim<"rows"> {};
struct cols : dim<"cols"> {};
struct c : dim<"c"> {};
struct fh : dim<"fh"> {};
struct fw : dim<"fw"> {};

using x_t = tensor<float, shape<batch, rows, cols, c>, layout<batch(axis0)>, grid>;
using filter_t = tensor<float, shape<fh, fw, c, n>, layout<>, grid>;

#if FIXED
auto conv(const x_t& x, const filter_t& f) { return conv2d<rows, cols, fh, fw>(x, f); }
#else
auto conv(const x_t& x, const filter_t& f) { return conv2d<h, w, fh, fw>(x, f); }
#endif

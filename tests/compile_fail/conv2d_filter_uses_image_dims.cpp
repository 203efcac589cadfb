// A filter that names its height and width with the image's own spatial
// dims: the image and the filter would share h and w as well as the
// in-channels (and a 3x3 window is not the image's height).
// expect: typemesh: the filter has one of the image's spatial dims; its window needs dims of its own
// expect: diagnostic::spatial_dim_in_filter<h, typemesh::shape<h, w, c, n>
#include <typemesh/layers/conv2d.hpp>

#include "common.hpp"

using namespace typemesh;

struct h : dim<"h"> {};
struct w : dim<"w"> {};
struct c : dim<"c"> {};
struct fh : dim<"fh"> {};
struct fw : dim<"fw"> {};

using x_t = tensor<float, shape<batch, h, w, c>, layout<batch(axis0)>, grid>;
#if FIXED
using filter_t = tensor<float, shape<fh, fw, c, n>, layout<>, grid>;
#else
using filter_t = tensor<float, shape<h, w, c, n>, layout<>, grid>;
#endif

auto conv(const x_t& x, const filter_t& f) { return conv2d<h, w, fh, fw>(x, f, {.padding = padding::valid}); }

// A filter that names its height and width with the image's own spatial
// dims: the output would have h and w twice over (and a 3x3 filter is not
// the image's height).
// expect: typemesh: a filter's height and width need dims of their own, not dims of the image
// expect: diagnostic::filter_dim_is_image_dim<h, typemesh::shape<batch, h, w, c>
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

auto conv(const x_t& x, const filter_t& f) { return conv2d(x, f, strides{1, 1}, padding::valid); }

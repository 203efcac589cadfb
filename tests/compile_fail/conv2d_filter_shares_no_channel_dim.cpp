// A filter whose in-channel dim is not the image's channel dim: conv2d's
// in-channels are the one dim image and filter share, and these share none.
// expect: typemesh: conv2d's in-channels are the one dim that the image and the filter share, but these share none or several
// expect: diagnostic::in_channels_not_one_shared_dim<typemesh::shape<>, typemesh::shape<batch, h, w, c>, typemesh::shape<fh, fw, rgb, n>
#include <typemesh/layers/conv2d.hpp>

#include "common.hpp"

using namespace typemesh;

struct h : dim<"h"> {};
struct w : dim<"w"> {};
struct c : dim<"c"> {};
struct rgb : dim<"rgb"> {};
struct fh : dim<"fh"> {};
struct fw : dim<"fw"> {};

using x_t = tensor<float, shape<batch, h, w, c>, layout<batch(axis0)>, grid>;
#if FIXED
using filter_t = tensor<float, shape<fh, fw, c, n>, layout<n(axis1)>, grid>;
#else
using filter_t = tensor<float, shape<fh, fw, rgb, n>, layout<n(axis1)>, grid>;
#endif

auto conv(const x_t& x, const filter_t& f) { return conv2d<h, w, fh, fw>(x, f); }

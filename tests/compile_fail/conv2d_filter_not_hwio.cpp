// A filter in PyTorch's [out_channels, in_channels, height, width] order
// where conv2d takes TensorFlow's HWIO [height, width, in_channels,
// out_channels].
// expect: typemesh: conv2d takes a filter of shape<filter_height, filter_width, in_channels, out_channels>
// expect: diagnostic::filter_not_hwio<typemesh::shape<n, c, fh, fw>, typemesh::shape<batch, h, w, c>
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
using filter_t = tensor<float, shape<fh, fw, c, n>, layout<n(axis1)>, grid>;
#else
using filter_t = tensor<float, shape<n, c, fh, fw>, layout<n(axis1)>, grid>;
#endif

auto conv(const x_t& x, const filter_t& f) { return conv2d(x, f, strides{1, 1}, padding::same); }

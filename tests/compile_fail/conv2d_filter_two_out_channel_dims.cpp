// A filter with two dims besides its window and in-channels: which one is
// the out-channels is not fixed by anything, so conv2d does not guess.
// expect: typemesh: a conv2d filter has its two window dims, the in-channel dim it shares with the image and exactly one more
// expect: diagnostic::filter_needs_one_out_channel_dim<typemesh::shape<k, n>, typemesh::shape<fh, fw, c, k, n>
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
using filter_t = tensor<float, shape<fh, fw, c, k, n>, layout<>, grid>;
#endif

auto conv(const x_t& x, const filter_t& f) { return conv2d<h, w, fh, fw>(x, f); }

// 2-d convolution over images in NHWC order, as in the PaSE AlexNet and
// Inception-v3 benchmarks:
//
//   struct batch : dim<"batch"> {};  struct h : dim<"h"> {};  struct w : dim<"w"> {};
//   struct c : dim<"c"> {};          struct k : dim<"k"> {};
//   struct fh : dim<"fh"> {};        struct fw : dim<"fw"> {};
//
//   // x: shape<batch, h, w, c>, filter: shape<fh, fw, c, k>  ->  shape<batch, h, w, k>
//   auto y = typemesh::conv2d(x, filter, typemesh::strides{2, 2}, typemesh::padding::same);
//   // the same, naming the output's spatial dims (shape<batch, oh, ow, k>):
//   auto z = typemesh::conv2d<oh, ow>(x, filter, typemesh::strides{1, 1}, typemesh::padding::valid);
//
// Dims are found by position: the image is shape<batch, height, width,
// channels>, the filter shape<filter_height, filter_width, channels,
// out_channels> (TensorFlow's HWIO) and shares the image's channel dim. By
// default the output keeps the image's spatial tags: a dim names a role
// (height), and its size is a property of each tensor, so a stack of layers
// needs no new tag per layer. conv2d<OutH, OutW> gives them other names when a
// program wants to tell the sizes apart by type.
//
// Padding and output sizes are TensorFlow's: VALID has no padding and
// out = floor((in - f) / s) + 1; SAME has out = ceil(in / s) and pads
// max((out - 1) * s + f - in, 0) zeros, the smaller half before and the
// larger half after.
//
// Layouts follow the rules of every contraction (ops/rules.hpp), applied by
// the same functions einsum uses: batch, in-channels and out-channels may
// each be split over a mesh axis; the in-channel dim is summed, so where it
// is split each device computes a partial sum and the partial sums are
// allreduced over its axis. Backward, the same rules give the image's
// gradient an allreduce over out-channels' axis and the filter's gradient an
// allreduce over batch's axis. The spatial dims must be whole: splitting them
// would need halo exchanges, which typemesh does not do.
//
// The local kernel is im2col + one GEMM per chunk of images (BLAS, through
// backend::gemm); a 1x1 convolution with stride 1 skips im2col. Backward:
// the image's gradient is a GEMM then col2im, the filter's a GEMM over the
// recomputed columns.
//
// This file also holds what pooling (layers/pooling.hpp) shares with
// convolution: padding, strides, the window arithmetic and the checks on
// image dims.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/blas.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

// How a sliding window treats the image's border (TensorFlow's meaning).
enum class padding {
  valid,  // windows lie wholly inside the image
  same,   // out = ceil(in / stride), zero padding split smaller-half-first
};

// Steps between windows along the image's height and width.
struct strides {
  std::int64_t h = 1;
  std::int64_t w = 1;
};

namespace diagnostic {
TYPEMESH_DIAGNOSTIC(image_not_nhwc, (class Shape), (Shape),
                    "convolution and pooling take images of shape<batch, height, width, channels> (NHWC); "
                    "the image's shape is the argument above");
TYPEMESH_DIAGNOSTIC(filter_not_hwio, (class FilterShape, class ImageShape), (FilterShape, ImageShape),
                    "conv2d takes a filter of shape<filter_height, filter_width, in_channels, out_channels> "
                    "whose in_channels is the image's channel dim (its last); the filter's and the image's shapes are "
                    "the arguments above");
TYPEMESH_DIAGNOSTIC(spatial_dim_split, (class Dim, class Layout), (Dim, Layout),
                    "convolution and pooling need the spatial dims (image and filter height and width) "
                    "whole on every device; split batch or channels instead, or relayout this dim whole first; the dim "
                    "is the first argument above");
TYPEMESH_DIAGNOSTIC(filter_dim_is_image_dim, (class Dim, class ImageShape), (Dim, ImageShape),
                    "a filter's height and width need dims of their own, not dims of the image; the dim and "
                    "the image's shape are the arguments above");
TYPEMESH_DIAGNOSTIC(output_spatial_dim_taken, (class Dim, class Shapes), (Dim, Shapes),
                    "an output spatial dim must be the image's own height or width dim, or a dim that no "
                    "input has; the dim and the input shapes are the arguments above");
}  // namespace diagnostic

namespace conv_detail {

// --- Dims by position ----------------------------------------------------------

template <class S>
struct image_dims {
  static constexpr bool ok = false;
};
template <class B, class H, class W, class C>
struct image_dims<shape<B, H, W, C>> {
  static constexpr bool ok = true;
  using batch = B;
  using height = H;
  using width = W;
  using channels = C;
};

template <class S>
struct filter_dims {
  static constexpr bool ok = false;
  using in_channels = void;
};
template <class FH, class FW, class C, class K>
struct filter_dims<shape<FH, FW, C, K>> {
  static constexpr bool ok = true;
  using height = FH;
  using width = FW;
  using in_channels = C;
  using out_channels = K;
};

// The output's spatial dim: the one asked for, or the input's own.
template <class Asked, class Own>
using out_dim = std::conditional_t<std::is_void_v<Asked>, Own, Asked>;

template <class D, class L>
consteval bool whole_in() {
  return sizeof(diagnostic::spatial_dim_split<D, L, L::template splits<D>>);
}

// The image is NHWC, its spatial dims are whole, and the output's spatial
// dims (when named) clash with no input dim. Inputs lists the input shapes.
template <class SX, class LX, class OutH, class OutW, class... Inputs>
consteval bool check_image() {
  using I = image_dims<SX>;
  if constexpr (!I::ok) {
    return sizeof(diagnostic::image_not_nhwc<SX>) == 0;
  } else {
    using H = typename I::height;
    using W = typename I::width;
    auto free_name = [&]<class D, class Own>() {
      constexpr bool taken = !std::is_same_v<D, Own> && (Inputs::template has<D> || ...);
      return sizeof(diagnostic::output_spatial_dim_taken<D, type_list<Inputs...>, taken>) > 0;
    };
    return whole_in<H, LX>() && whole_in<W, LX>() && free_name.template operator()<out_dim<OutH, H>, H>() &&
           free_name.template operator()<out_dim<OutW, W>, W>();
  }
}

template <class SX, class LX, class SF, class LF, class OutH, class OutW>
consteval bool check_conv() {
  if constexpr (!check_image<SX, LX, OutH, OutW, SX, SF>()) {
    return false;
  } else {
    using F = filter_dims<SF>;
    if constexpr (!F::ok || !std::is_same_v<typename F::in_channels, typename image_dims<SX>::channels>) {
      return sizeof(diagnostic::filter_not_hwio<SF, SX>) == 0;
    } else {
      using FH = typename F::height;
      using FW = typename F::width;
      return sizeof(diagnostic::filter_dim_is_image_dim<FH, SX, SX::template has<FH>>) &&
             sizeof(diagnostic::filter_dim_is_image_dim<FW, SX, SX::template has<FW>>) && whole_in<FH, LF>() &&
             whole_in<FW, LF>() && ops_detail::compatible<SX, LX, SF, LF>();
    }
  }
}

// --- Window arithmetic ---------------------------------------------------------

// One spatial axis of a sliding window: the input's size, the window's size
// and stride, and what they give: the output's size and the padding before
// the first element.
struct window_axis {
  std::int64_t in = 0;
  std::int64_t size = 1;
  std::int64_t stride = 1;
  std::int64_t out = 0;
  std::int64_t pad_before = 0;

  // Where output position o's window starts along the input (may be < 0).
  std::int64_t start(std::int64_t o) const { return o * stride - pad_before; }
  // The input positions of o's window that lie inside the input: [first, last).
  std::int64_t first(std::int64_t o) const { return std::max<std::int64_t>(start(o), 0); }
  std::int64_t last(std::int64_t o) const { return std::min(start(o) + size, in); }
};

// TensorFlow's output size and padding for one axis. `in_dim` names the
// image's dim, `window_side` says what slides ("filter dim fh of size 3"),
// `context` describes the operands for messages.
inline window_axis slide(std::string_view op, std::string_view in_dim, std::int64_t in, const std::string& window_side,
                         std::int64_t size, std::int64_t stride, padding p, const std::string& context) {
  if (stride < 1) {
    throw shape_error(detail::cat(op, ": the stride along dim ", in_dim, " is ", stride, "; it must be at least 1",
                                  context));
  }
  if (size < 1) {
    throw shape_error(detail::cat(op, ": ", window_side, " is empty; a window needs at least one element", context));
  }
  window_axis a{in, size, stride, 0, 0};
  if (p == padding::valid) {
    if (size > in) {
      throw shape_error(detail::cat(op, ": VALID padding needs every window inside the image, but ", window_side,
                                    " is larger than image dim ", in_dim, " of size ", in,
                                    "; use SAME padding or a smaller window", context));
    }
    a.out = (in - size) / stride + 1;
  } else {
    a.out = (in + stride - 1) / stride;
    a.pad_before = std::max<std::int64_t>((a.out - 1) * stride + size - in, 0) / 2;
  }
  return a;
}

// --- Local kernels (no communication; T only, so compiled once per type) -------

// This device's part of a convolution: `images` local images of
// height h.in x width w.in with `channels` local in-channels, and
// `out_channels` local out-channels. Arrays are row-major: image
// [images, h.in, w.in, channels], filter [h.size, w.size, channels,
// out_channels], output [images, h.out, w.out, out_channels].
struct conv_geometry {
  std::int64_t images = 0;
  std::int64_t channels = 0;
  std::int64_t out_channels = 0;
  window_axis h, w;

  // Columns of the im2col matrix: one patch, ordered (filter row, filter
  // column, channel) like the filter's rows.
  std::int64_t patch() const { return h.size * w.size * channels; }
  std::int64_t out_pixels() const { return h.out * w.out; }
  // A 1x1 filter with stride 1 and no padding: the image is its own im2col.
  bool pointwise() const {
    return h.size == 1 && w.size == 1 && h.stride == 1 && w.stride == 1 && h.pad_before == 0 && w.pad_before == 0;
  }
  bool empty() const { return images == 0 || out_pixels() == 0 || out_channels == 0 || patch() == 0; }
};

// im2col buffers hold at most this many elements (or one image's columns,
// if more): a chunk of images at a time, so memory stays bounded for large
// batches while each GEMM stays large.
inline constexpr std::int64_t max_column_elements = std::int64_t{1} << 22;

inline std::int64_t images_per_chunk(const conv_geometry& g) {
  const std::int64_t per_image = std::max<std::int64_t>(1, g.out_pixels() * g.patch());
  return std::clamp<std::int64_t>(max_column_elements / per_image, 1, g.images);
}

// Visits every (output pixel, filter tap) of images [first, first + count):
// f(column_offset, image_offset_or_minus_1), the offsets of `channels`
// consecutive elements; -1 where the tap falls in the padding.
template <class F>
void for_each_tap(const conv_geometry& g, std::int64_t first, std::int64_t count, F&& f) {
  const std::int64_t c = g.channels;
  std::int64_t col = 0;
  for (std::int64_t b = first; b < first + count; ++b) {
    for (std::int64_t oh = 0; oh < g.h.out; ++oh) {
      for (std::int64_t ow = 0; ow < g.w.out; ++ow) {
        for (std::int64_t i = 0; i < g.h.size; ++i) {
          const std::int64_t ih = g.h.start(oh) + i;
          for (std::int64_t j = 0; j < g.w.size; ++j, col += c) {
            const std::int64_t iw = g.w.start(ow) + j;
            const bool inside = ih >= 0 && ih < g.h.in && iw >= 0 && iw < g.w.in;
            f(col, inside ? ((b * g.h.in + ih) * g.w.in + iw) * c : std::int64_t{-1});
          }
        }
      }
    }
  }
}

// The columns of images [first, first + count): zeros where a tap is padding.
template <class T>
void im2col(const T* image, const conv_geometry& g, std::int64_t first, std::int64_t count, T* columns) {
  const std::int64_t c = g.channels;
  for_each_tap(g, first, count, [&](std::int64_t col, std::int64_t at) {
    if (at < 0) std::fill_n(columns + col, c, T{0});
    else std::copy_n(image + at, c, columns + col);
  });
}

// The reverse: adds each column entry to the image element it came from.
template <class T>
void col2im(const T* columns, const conv_geometry& g, std::int64_t first, std::int64_t count, T* image) {
  const std::int64_t c = g.channels;
  for_each_tap(g, first, count, [&](std::int64_t col, std::int64_t at) {
    if (at < 0) return;
    for (std::int64_t k = 0; k < c; ++k) image[at + k] += columns[col + k];
  });
}

// output = columns(image) . filter, a chunk of images at a time.
template <class T>
void conv_forward(const T* image, const T* filter, T* out, const conv_geometry& g) {
  if (g.empty()) return;  // the output is already zero
  const std::int64_t p = g.patch(), k = g.out_channels, pix = g.out_pixels();
  if (g.pointwise()) {
    backend::gemm(false, false, g.images * pix, k, p, T{1}, image, p, filter, k, T{0}, out, k);
    return;
  }
  const std::int64_t chunk = images_per_chunk(g);
  backend::scratch<T> columns(static_cast<std::size_t>(chunk * pix * p));
  for (std::int64_t first = 0; first < g.images; first += chunk) {
    const std::int64_t n = std::min(chunk, g.images - first);
    im2col(image, g, first, n, columns.data());
    backend::gemm(false, false, n * pix, k, p, T{1}, columns.data(), p, filter, k, T{0}, out + first * pix * k, k);
  }
}

// d image += col2im(d out . filter^T). `d_image` starts at zero.
template <class T>
void conv_image_grad(const T* d_out, const T* filter, T* d_image, const conv_geometry& g) {
  if (g.empty()) return;
  const std::int64_t p = g.patch(), k = g.out_channels, pix = g.out_pixels();
  if (g.pointwise()) {
    backend::gemm(false, true, g.images * pix, p, k, T{1}, d_out, k, filter, k, T{0}, d_image, p);
    return;
  }
  const std::int64_t chunk = images_per_chunk(g);
  backend::scratch<T> d_columns(static_cast<std::size_t>(chunk * pix * p));
  for (std::int64_t first = 0; first < g.images; first += chunk) {
    const std::int64_t n = std::min(chunk, g.images - first);
    backend::gemm(false, true, n * pix, p, k, T{1}, d_out + first * pix * k, k, filter, k, T{0}, d_columns.data(),
                  p);
    col2im(d_columns.data(), g, first, n, d_image);
  }
}

// d filter = columns(image)^T . d out, summed over this device's images.
template <class T>
void conv_filter_grad(const T* image, const T* d_out, T* d_filter, const conv_geometry& g) {
  if (g.empty()) return;
  const std::int64_t p = g.patch(), k = g.out_channels, pix = g.out_pixels();
  if (g.pointwise()) {
    backend::gemm(true, false, p, k, g.images * pix, T{1}, image, p, d_out, k, T{0}, d_filter, k);
    return;
  }
  const std::int64_t chunk = images_per_chunk(g);
  backend::scratch<T> columns(static_cast<std::size_t>(chunk * pix * p));
  for (std::int64_t first = 0; first < g.images; first += chunk) {
    const std::int64_t n = std::min(chunk, g.images - first);
    im2col(image, g, first, n, columns.data());
    backend::gemm(true, false, p, k, n * pix, T{1}, columns.data(), p, d_out + first * pix * k, k,
                  first == 0 ? T{0} : T{1}, d_filter, k);
  }
}

// Allreduces t's local part over the axes marked (nothing when none is, or
// on a device outside the mesh).
template <std::size_t N, class Tensor>
void allreduce_over(const std::array<bool, N>& axes, Tensor& t) {
  if (ops_detail::any(axes) && t.holds_data()) {
    this_device().allreduce(t.mesh().group_along(t.device(), axes), t.local());
  }
}

}  // namespace conv_detail

// The convolution of images x [batch, h, w, c] with filter [fh, fw, c, k]:
// [batch, OutH, OutW, k], OutH and OutW defaulting to h and w. See the top of
// this file for padding, layouts and communication.
template <class OutH = void, class OutW = void, class T, class SX, class LX, class MX, class SF, class LF, class MF>
auto conv2d(const tensor<T, SX, LX, MX>& x, const tensor<T, SF, LF, MF>& filter, strides step, padding pad) {
  constexpr bool ok = ops_detail::same_mesh<MX, MF>() && conv_detail::check_conv<SX, LX, SF, LF, OutH, OutW>();
  if constexpr (!ok) {
    return;  // a check above has reported the mistake
  } else {
    using I = conv_detail::image_dims<SX>;
    using F = conv_detail::filter_dims<SF>;
    using B = typename I::batch;
    using H = typename I::height;
    using W = typename I::width;
    using C = typename I::channels;
    using FH = typename F::height;
    using FW = typename F::width;
    using K = typename F::out_channels;
    using M = MX;
    using Out = shape<B, conv_detail::out_dim<OutH, H>, conv_detail::out_dim<OutW, W>, K>;
    using OutL = canonical<Out, typename ops_detail::output_layout<Out, LX, LF>::type>;
    using out_t = tensor<T, Out, OutL, M>;

    ops_detail::check_same_mesh("conv2d", x, filter);
    ops_detail::check_common_sizes("conv2d", x.shape(), filter.shape());
    backend::share_blas_threads(this_device().count());
    const std::string context =
        detail::cat(" (conv2d of image ", x.shape().describe(), " with filter ", filter.shape().describe(), ")");
    const SF fs = filter.shape();
    conv_detail::conv_geometry g;
    g.h = conv_detail::slide("conv2d", H::name, x.shape().template size<H>(),
                             detail::cat("filter dim ", FH::name, " of size ", fs.template size<FH>()),
                             fs.template size<FH>(), step.h, pad, context);
    g.w = conv_detail::slide("conv2d", W::name, x.shape().template size<W>(),
                             detail::cat("filter dim ", FW::name, " of size ", fs.template size<FW>()),
                             fs.template size<FW>(), step.w, pad, context);
    g.images = x.template local_extent<B>();
    g.channels = x.template local_extent<C>();
    g.out_channels = filter.template local_extent<K>();

    const Out out_shape{x.shape().template size<B>(), g.h.out, g.w.out, fs.template size<K>()};
    out_t out(x.mesh(), out_shape);
    if (x.holds_data()) conv_detail::conv_forward(x.local().data(), filter.local().data(), out.local().data(), g);
    // c is summed: where it is split, the devices along its axis hold partial sums.
    constexpr auto summed =
        ops_detail::either(ops_detail::summed_axes<SX, LX, Out, M>(), ops_detail::summed_axes<SF, LF, Out, M>());
    conv_detail::allreduce_over(summed, out);

    if (!autodiff::recording() || !(x.tracked() || filter.tracked())) return out;
    using LXc = canonical<SX, LX>;
    using LFc = canonical<SF, LF>;
    return record(std::move(out), "conv2d",
                  gradient_of(x,
                              [fv = filter.detached(), g, xs = x.shape()](const out_t& dy) {
                                tensor<T, SX, LXc, M> dx(dy.mesh(), xs);
                                if (dy.holds_data()) {
                                  conv_detail::conv_image_grad(dy.local().data(), fv.local().data(),
                                                               dx.local().data(), g);
                                }
                                // k (and the filter taps) are summed away here.
                                constexpr auto axes = ops_detail::either(ops_detail::summed_axes<Out, OutL, SX, M>(),
                                                                         ops_detail::summed_axes<SF, LF, SX, M>());
                                conv_detail::allreduce_over(axes, dx);
                                return dx;
                              }),
                  gradient_of(filter, [xv = x.detached(), g, fs](const out_t& dy) {
                    tensor<T, SF, LFc, M> df(dy.mesh(), fs);
                    if (dy.holds_data()) {
                      conv_detail::conv_filter_grad(xv.local().data(), dy.local().data(), df.local().data(), g);
                    }
                    // batch (and the output pixels) are summed away here.
                    constexpr auto axes = ops_detail::either(ops_detail::summed_axes<SX, LX, SF, M>(),
                                                             ops_detail::summed_axes<Out, OutL, SF, M>());
                    conv_detail::allreduce_over(axes, df);
                    return df;
                  }));
  }
}

}  // namespace typemesh

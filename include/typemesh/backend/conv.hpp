// Convolution's local kernels, per space, on row-major arrays: images
// [images, height, width, channels], filters [height, width, channels,
// out-channels]. im2col lays each output pixel's patch out as a row of a
// matrix; col2im adds such rows back into the image; the three products of a
// convolution (output, image gradient, filter gradient) are im2col or col2im
// around one gemm per chunk of images. On the host, float convolutions whose
// shape suits them skip all that and run the direct kernels of
// backend/host/direct_conv.hpp. Nothing here communicates.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "typemesh/backend/blas.hpp"
#include "typemesh/backend/config.hpp"
#include "typemesh/backend/host/direct_conv.hpp"
#include "typemesh/backend/kernels.hpp"
#include "typemesh/backend/parallel.hpp"
#include "typemesh/backend/storage.hpp"

namespace typemesh::backend {

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
  TYPEMESH_HOST_DEVICE std::int64_t start(std::int64_t o) const { return o * stride - pad_before; }
  // The input positions of o's window that lie inside the input: [first, last).
  TYPEMESH_HOST_DEVICE std::int64_t first(std::int64_t o) const { return start(o) > 0 ? start(o) : 0; }
  TYPEMESH_HOST_DEVICE std::int64_t last(std::int64_t o) const {
    return start(o) + size < in ? start(o) + size : in;
  }
  // The output positions whose windows hold input position i: [first_out, last_out).
  TYPEMESH_HOST_DEVICE std::int64_t first_out(std::int64_t i) const {
    const std::int64_t reach = i + pad_before - size + 1;  // o * stride >= reach
    return reach <= 0 ? 0 : (reach + stride - 1) / stride;
  }
  TYPEMESH_HOST_DEVICE std::int64_t last_out(std::int64_t i) const {
    const std::int64_t o = (i + pad_before) / stride + 1;  // o * stride <= i + pad_before
    return o < out ? o : out;
  }
};

// This device's part of a convolution: `images` images of h.in x w.in with
// `channels` in-channels, and `out_channels` out-channels.
struct conv_geometry {
  std::int64_t images = 0;
  std::int64_t channels = 0;
  std::int64_t out_channels = 0;
  window_axis h, w;

  // Columns of the im2col matrix: one patch, ordered (filter row, filter
  // column, channel) like the filter's rows.
  TYPEMESH_HOST_DEVICE std::int64_t patch() const { return h.size * w.size * channels; }
  TYPEMESH_HOST_DEVICE std::int64_t out_pixels() const { return h.out * w.out; }
  // A 1x1 filter with stride 1 and no padding: the image is its own im2col.
  bool pointwise() const {
    return h.size == 1 && w.size == 1 && h.stride == 1 && w.stride == 1 && h.pad_before == 0 && w.pad_before == 0;
  }
  bool empty() const { return images == 0 || out_pixels() == 0 || out_channels == 0 || patch() == 0; }
};

// im2col buffers hold at most this many elements (or one image's columns,
// if more): a chunk of images at a time, so memory stays bounded for large
// batches while each gemm stays large.
inline constexpr std::int64_t max_column_elements = std::int64_t{1} << 22;

inline std::int64_t images_per_chunk(const conv_geometry& g) {
  const std::int64_t per_image = std::max<std::int64_t>(1, g.out_pixels() * g.patch());
  return std::clamp<std::int64_t>(max_column_elements / per_image, 1, g.images);
}

// The columns of images [first, first + count): row r is output pixel r's
// patch, zeros where a tap falls in the padding. One index per row.
template <class Space, class T>
void im2col(Space s, const T* image, const conv_geometry& g, std::int64_t first, std::int64_t count, T* columns) {
  const std::int64_t p = g.patch();
  parallel_for(
      s, count * g.out_pixels(),
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        const std::int64_t pix = g.out_pixels(), c = g.channels;
        const std::int64_t b = first + r / pix, oh = (r % pix) / g.w.out, ow = r % g.w.out;
        T* row = columns + r * p;
        for (std::int64_t i = 0; i < g.h.size; ++i) {
          const std::int64_t ih = g.h.start(oh) + i;
          for (std::int64_t j = 0; j < g.w.size; ++j, row += c) {
            const std::int64_t iw = g.w.start(ow) + j;
            if (ih >= 0 && ih < g.h.in && iw >= 0 && iw < g.w.in) {
              const T* from = image + ((b * g.h.in + ih) * g.w.in + iw) * c;
              for (std::int64_t k = 0; k < c; ++k) row[k] = from[k];
            } else {
              for (std::int64_t k = 0; k < c; ++k) row[k] = T{0};
            }
          }
        }
      },
      grain_for(p));
}

// The reverse: adds to each element of images [first, first + count) the
// column entries that were taken from it. One index per image pixel, which
// gathers its taps in the order of the output pixels that read them (at most
// one tap per output pixel), so each element's sum runs in the same order as
// a scatter over the columns row by row.
template <class Space, class T>
void col2im(Space s, const T* columns, const conv_geometry& g, std::int64_t first, std::int64_t count, T* image) {
  const std::int64_t taps = std::max<std::int64_t>(1, (g.h.size + g.h.stride - 1) / g.h.stride) *
                            std::max<std::int64_t>(1, (g.w.size + g.w.stride - 1) / g.w.stride);
  parallel_for(
      s, count * g.h.in * g.w.in,
      [=] TYPEMESH_KERNEL(std::int64_t q) {
        const std::int64_t c = g.channels, p = g.patch(), pixels_in = g.h.in * g.w.in;
        const std::int64_t b = q / pixels_in, ih = (q % pixels_in) / g.w.in, iw = q % g.w.in;
        T* to = image + ((first + b) * pixels_in + ih * g.w.in + iw) * c;
        const std::int64_t oh1 = g.h.last_out(ih), ow0 = g.w.first_out(iw), ow1 = g.w.last_out(iw);
        for (std::int64_t oh = g.h.first_out(ih); oh < oh1; ++oh) {
          const std::int64_t i = ih - g.h.start(oh);
          for (std::int64_t ow = ow0; ow < ow1; ++ow) {
            const std::int64_t j = iw - g.w.start(ow);
            const T* from = columns + (b * g.out_pixels() + oh * g.w.out + ow) * p + (i * g.w.size + j) * c;
            for (std::int64_t k = 0; k < c; ++k) to[k] += from[k];
          }
        }
      },
      grain_for(taps * g.channels));
}

}  // namespace typemesh::backend

// The CUDA space's im2col and col2im, declared before the products below
// that call them.
#if defined(TYPEMESH_CUDA)
#include "typemesh/backend/cuda/conv.hpp"
#endif

namespace typemesh::backend {

// Calls step(first, n, columns) for consecutive chunks of n images starting
// at image `first`, with column scratch sized for a whole chunk: the column
// matrix of every image at once could be far larger than the images.
template <class Space, class T, class Step>
void for_each_image_chunk(Space, const conv_geometry& g, Step step) {
  const std::int64_t chunk = images_per_chunk(g);
  scratch<T, Space> columns(static_cast<std::size_t>(chunk * g.out_pixels() * g.patch()));
  for (std::int64_t first = 0; first < g.images; first += chunk) {
    step(first, std::min(chunk, g.images - first), columns.data());
  }
}

// The direct kernels' description of a geometry.
inline host::direct_conv_shape direct_shape(const conv_geometry& g) {
  host::direct_conv_shape d;
  d.images = g.images, d.in_h = g.h.in, d.in_w = g.w.in, d.channels = g.channels, d.out_channels = g.out_channels;
  d.filter_h = g.h.size, d.filter_w = g.w.size, d.stride_h = g.h.stride, d.stride_w = g.w.stride;
  d.pad_h = g.h.pad_before, d.pad_w = g.w.pad_before, d.out_h = g.h.out, d.out_w = g.w.out;
  return d;
}

// Whether the direct kernels take a host float convolution
// (host::direct_conv_suits), and with which instruction set.
template <class Space, class T>
host::conv_isa direct_isa(const conv_geometry& g) {
  if constexpr (std::is_same_v<Space, host_space> && std::is_same_v<T, float>) {
    return host::direct_conv_suits(direct_shape(g));
  } else {
    return host::conv_isa::none;
  }
}
template <class Space, class T>
host::conv_isa direct_image_grad_isa(const conv_geometry& g) {
  if constexpr (std::is_same_v<Space, host_space> && std::is_same_v<T, float>) {
    return host::direct_conv_image_grad_suits(direct_shape(g));
  } else {
    return host::conv_isa::none;
  }
}

// out = columns(image) . filter, a chunk of images at a time. Writes every
// element of out: zeros where the patch is empty (no in-channels here).
template <class Space, class T>
void conv_forward(Space s, const T* image, const T* filter, T* out, const conv_geometry& g) {
  if (g.empty()) {
    fill(s, out, g.images * g.out_pixels() * g.out_channels, T{0});
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (const auto isa = direct_isa<Space, T>(g); isa != host::conv_isa::none) {
      host::direct_conv_forward(image, filter, out, direct_shape(g), isa);
      return;
    }
  }
  const std::int64_t p = g.patch(), k = g.out_channels, pix = g.out_pixels();
  if (g.pointwise()) {
    gemm(s, false, false, g.images * pix, k, p, T{1}, image, p, filter, k, T{0}, out, k);
    return;
  }
  for_each_image_chunk<Space, T>(s, g, [&](std::int64_t first, std::int64_t n, T* columns) {
    im2col(s, image, g, first, n, columns);
    gemm(s, false, false, n * pix, k, p, T{1}, columns, p, filter, k, T{0}, out + first * pix * k, k);
  });
}

// d_image += col2im(d_out . filter^T); d_image starts at zero (the direct
// kernel writes it).
template <class Space, class T>
void conv_image_grad(Space s, const T* d_out, const T* filter, T* d_image, const conv_geometry& g) {
  if (g.empty()) return;
  if constexpr (std::is_same_v<T, float>) {
    if (const auto isa = direct_image_grad_isa<Space, T>(g); isa != host::conv_isa::none) {
      host::direct_conv_image_grad(d_out, filter, d_image, direct_shape(g), isa);
      return;
    }
  }
  const std::int64_t p = g.patch(), k = g.out_channels, pix = g.out_pixels();
  if (g.pointwise()) {
    gemm(s, false, true, g.images * pix, p, k, T{1}, d_out, k, filter, k, T{0}, d_image, p);
    return;
  }
  for_each_image_chunk<Space, T>(s, g, [&](std::int64_t first, std::int64_t n, T* d_columns) {
    gemm(s, false, true, n * pix, p, k, T{1}, d_out + first * pix * k, k, filter, k, T{0}, d_columns, p);
    col2im(s, d_columns, g, first, n, d_image);
  });
}

// d_filter = columns(image)^T . d_out, summed over the images.
template <class Space, class T>
void conv_filter_grad(Space s, const T* image, const T* d_out, T* d_filter, const conv_geometry& g) {
  if (g.empty()) return;
  if constexpr (std::is_same_v<T, float>) {
    if (const auto isa = direct_isa<Space, T>(g); isa != host::conv_isa::none) {
      host::direct_conv_filter_grad(image, d_out, d_filter, direct_shape(g), isa);
      return;
    }
  }
  const std::int64_t p = g.patch(), k = g.out_channels, pix = g.out_pixels();
  if (g.pointwise()) {
    gemm(s, true, false, p, k, g.images * pix, T{1}, image, p, d_out, k, T{0}, d_filter, k);
    return;
  }
  for_each_image_chunk<Space, T>(s, g, [&](std::int64_t first, std::int64_t n, T* columns) {
    im2col(s, image, g, first, n, columns);
    gemm(s, true, false, p, k, n * pix, T{1}, columns, p, d_out + first * pix * k, k, first == 0 ? T{0} : T{1},
         d_filter, k);
  });
}

}  // namespace typemesh::backend

// Pooling's local kernels, per space, on row-major arrays [images, height,
// width, channels]: max pooling (keeping each maximum's offset), average
// pooling over the window's elements inside the image, and their gradients.
// Forward kernels run one index per output pixel, gradients one per input
// pixel gathering from the windows that hold it, in window order, so every
// sum runs in the order of a sequential scatter over the outputs and the
// results do not depend on the thread count. Nothing here communicates.
#pragma once

#include <cstdint>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/conv.hpp"
#include "typemesh/backend/parallel.hpp"

namespace typemesh::backend {

// This device's part of a pooling: `images` images of h.in x w.in with
// `channels` channels.
struct pool_geometry {
  std::int64_t images = 0;
  std::int64_t channels = 0;
  window_axis h, w;

  TYPEMESH_HOST_DEVICE std::int64_t window_elements() const { return h.size * w.size; }
};

// y = the window maxima; argmax[i] = the offset in x of y[i]'s maximum, the
// first in window order on ties.
template <class Space, class T>
void max_pool_forward(Space s, const T* x, T* y, std::int64_t* argmax, const pool_geometry& g) {
  parallel_for(
      s, g.images * g.h.out * g.w.out,
      [=] TYPEMESH_KERNEL(std::int64_t o) {
        const std::int64_t c = g.channels, pix = g.h.out * g.w.out;
        const std::int64_t b = o / pix, oh = (o % pix) / g.w.out, ow = o % g.w.out, out = o * c;
        const std::int64_t h1 = g.h.last(oh), w0 = g.w.first(ow), w1 = g.w.last(ow);
        bool first = true;
        for (std::int64_t ih = g.h.first(oh); ih < h1; ++ih) {
          for (std::int64_t iw = w0; iw < w1; ++iw) {
            const std::int64_t in = ((b * g.h.in + ih) * g.w.in + iw) * c;
            for (std::int64_t k = 0; k < c; ++k) {
              if (first || y[out + k] < x[in + k]) {
                y[out + k] = x[in + k];
                argmax[out + k] = in + k;
              }
            }
            first = false;
          }
        }
      },
      grain_for(g.window_elements() * g.channels));
}

// dx[argmax[i]] += dy[i] over the outputs i, as a gather: each input element
// adds the gradients of the outputs that chose it, in output order.
template <class Space, class T>
void max_pool_grad(Space s, const T* dy, const std::int64_t* argmax, T* dx, const pool_geometry& g) {
  parallel_for(
      s, g.images * g.h.in * g.w.in,
      [=] TYPEMESH_KERNEL(std::int64_t q) {
        const std::int64_t c = g.channels, pixels_in = g.h.in * g.w.in;
        const std::int64_t b = q / pixels_in, ih = (q % pixels_in) / g.w.in, iw = q % g.w.in, in = q * c;
        const std::int64_t oh1 = g.h.last_out(ih), ow0 = g.w.first_out(iw), ow1 = g.w.last_out(iw);
        for (std::int64_t oh = g.h.first_out(ih); oh < oh1; ++oh) {
          for (std::int64_t ow = ow0; ow < ow1; ++ow) {
            const std::int64_t out = ((b * g.h.out + oh) * g.w.out + ow) * c;
            for (std::int64_t k = 0; k < c; ++k) {
              if (argmax[out + k] == in + k) dx[in + k] += dy[out + k];
            }
          }
        }
      },
      grain_for(g.window_elements() * g.channels));
}

// y += the window means over the elements inside the image (y starts at
// zero).
template <class Space, class T>
void avg_pool_forward(Space s, const T* x, T* y, const pool_geometry& g) {
  parallel_for(
      s, g.images * g.h.out * g.w.out,
      [=] TYPEMESH_KERNEL(std::int64_t o) {
        const std::int64_t c = g.channels, pix = g.h.out * g.w.out;
        const std::int64_t b = o / pix, oh = (o % pix) / g.w.out, ow = o % g.w.out, out = o * c;
        const std::int64_t h0 = g.h.first(oh), h1 = g.h.last(oh), w0 = g.w.first(ow), w1 = g.w.last(ow);
        const T inverse = T{1} / static_cast<T>((h1 - h0) * (w1 - w0));
        for (std::int64_t ih = h0; ih < h1; ++ih) {
          for (std::int64_t iw = w0; iw < w1; ++iw) {
            const std::int64_t in = ((b * g.h.in + ih) * g.w.in + iw) * c;
            for (std::int64_t k = 0; k < c; ++k) y[out + k] += inverse * x[in + k];
          }
        }
      },
      grain_for(g.window_elements() * g.channels));
}

// dx += dy spread evenly over each window's elements inside the image, as a
// gather: each input element adds its share of every window that holds it,
// in output order.
template <class Space, class T>
void avg_pool_grad(Space s, const T* dy, T* dx, const pool_geometry& g) {
  parallel_for(
      s, g.images * g.h.in * g.w.in,
      [=] TYPEMESH_KERNEL(std::int64_t q) {
        const std::int64_t c = g.channels, pixels_in = g.h.in * g.w.in;
        const std::int64_t b = q / pixels_in, ih = (q % pixels_in) / g.w.in, iw = q % g.w.in, in = q * c;
        const std::int64_t oh1 = g.h.last_out(ih), ow0 = g.w.first_out(iw), ow1 = g.w.last_out(iw);
        for (std::int64_t oh = g.h.first_out(ih); oh < oh1; ++oh) {
          const std::int64_t rows = g.h.last(oh) - g.h.first(oh);
          for (std::int64_t ow = ow0; ow < ow1; ++ow) {
            const T inverse = T{1} / static_cast<T>(rows * (g.w.last(ow) - g.w.first(ow)));
            const std::int64_t out = ((b * g.h.out + oh) * g.w.out + ow) * c;
            for (std::int64_t k = 0; k < c; ++k) dx[in + k] += inverse * dy[out + k];
          }
        }
      },
      grain_for(g.window_elements() * g.channels));
}

}  // namespace typemesh::backend

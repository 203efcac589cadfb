// Pooling's local kernels, per space, on row-major arrays [images, height,
// width, channels]: max pooling (keeping each maximum's offset), average
// pooling, and their gradients. Each index owns what it writes and adds in
// the order of a sequential loop over the outputs, so the results do not
// depend on the thread count. Nothing here communicates.
#pragma once

#include <cstdint>
#include <type_traits>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/conv.hpp"
#include "typemesh/backend/host/max_pool.hpp"
#include "typemesh/backend/kernels.hpp"
#include "typemesh/backend/parallel.hpp"
#include "typemesh/core/space.hpp"

namespace typemesh::backend {

// This device's part of a pooling: `images` images of h.in x w.in with
// `channels` channels.
struct pool_geometry {
  std::int64_t images = 0;
  std::int64_t channels = 0;
  window_axis h, w;

  TYPEMESH_HOST_DEVICE std::int64_t window_elements() const { return h.size * w.size; }
  // Whether the windows tile the image: every element lies in exactly one.
  TYPEMESH_HOST_DEVICE bool windows_tile() const {
    return h.stride == h.size && w.stride == w.size && h.pad_before == 0 && w.pad_before == 0 &&
           h.out * h.size == h.in && w.out * w.size == w.in;
  }
};

namespace detail {
// The window of output o: its first element copied, then each later one
// taken where larger by step(top, at, v, channels, offset of v in x).
TYPEMESH_CALLS_CALLER
template <class T, class Step>
TYPEMESH_HOST_DEVICE void max_pool_window(const T* x, T* y, std::int64_t* argmax, const pool_geometry& g,
                                          std::int64_t o, Step step) {
  const std::int64_t c = g.channels, pix = g.h.out * g.w.out;
  const std::int64_t b = o / pix, oh = (o % pix) / g.w.out, ow = o % g.w.out;
  const std::int64_t h0 = g.h.first(oh), h1 = g.h.last(oh), w0 = g.w.first(ow), w1 = g.w.last(ow);
  T* top = y + o * c;
  std::int64_t* at = argmax + o * c;
  for (std::int64_t ih = h0; ih < h1; ++ih) {
    for (std::int64_t iw = w0; iw < w1; ++iw) {
      const std::int64_t in = ((b * g.h.in + ih) * g.w.in + iw) * c;
      if (ih == h0 && iw == w0) {
        for (std::int64_t k = 0; k < c; ++k) {
          top[k] = x[in + k];
          at[k] = in + k;
        }
      } else {
        step(top, at, x + in, c, in);
      }
    }
  }
}

struct plain_max_step {
  template <class T>
  TYPEMESH_HOST_DEVICE void operator()(T* top, std::int64_t* at, const T* v, std::int64_t c,
                                       std::int64_t offset) const {
    host::max_pool_step_plain(top, at, v, c, offset);
  }
};
}  // namespace detail

// y = the window maxima; argmax[i] = the offset in x of y[i]'s maximum, the
// first in window order on ties. The host's step runs in vector lanes.
template <class Space, class T>
void max_pool_forward(Space s, const T* x, T* y, std::int64_t* argmax, const pool_geometry& g) {
  const std::int64_t outputs = g.images * g.h.out * g.w.out;
  if constexpr (std::is_same_v<Space, host_space>) {
    parallel_for(
        s, outputs,
        [=](std::int64_t o) {
          detail::max_pool_window(x, y, argmax, g, o, [](T* top, std::int64_t* at, const T* v, std::int64_t c,
                                                         std::int64_t offset) {
            host::max_pool_step(top, at, v, c, offset);
          });
        },
        grain_for(g.window_elements() * g.channels));
  } else {
    parallel_for(
        s, outputs,
        [=] TYPEMESH_KERNEL(std::int64_t o) { detail::max_pool_window(x, y, argmax, g, o, detail::plain_max_step{}); },
        grain_for(g.window_elements() * g.channels));
  }
}

// Channels one index of max_pool_grad takes, where windows overlap: a run
// of consecutive elements long enough to use whole cache lines.
inline constexpr std::int64_t max_pool_grad_block = 32;

// dx = the gradient of the maxima: the sum of dy[i] over the outputs i whose
// maximum it is (argmax[i]), zero elsewhere; dx's values before are not read.
// Where the windows tile the image, each output writes its own window: zeros,
// then dy at its maximum (as 0 + dy[i], the bits of adding to a zero), with no
// pass of zeros over dx first. Else dx is zeroed first. Where windows do not
// overlap (stride at least the window, both ways), each output then adds
// into its window's elements itself. Else one index per image and block of
// channels adds those channels of that image's outputs in output order: an
// output reaches only elements of its own image and channels, and each
// element gets its gradients in a sequential loop's order. (A gather per
// input element gives the same bits, but compares every element with the
// choice of each window that holds it: several times the work.)
template <class Space, class T>
void max_pool_grad(Space s, const T* dy, const std::int64_t* argmax, T* dx, const pool_geometry& g) {
  const std::int64_t pix = g.h.out * g.w.out;
  if (g.windows_tile()) {
    parallel_for(
        s, g.images * pix,
        [=] TYPEMESH_KERNEL(std::int64_t o) {
          const std::int64_t c = g.channels, out = o * c, run = g.w.size * c;
          const std::int64_t b = o / pix, oh = (o % pix) / g.w.out, ow = o % g.w.out;
          for (std::int64_t ih = oh * g.h.size; ih < (oh + 1) * g.h.size; ++ih) {
            T* row = dx + ((b * g.h.in + ih) * g.w.in + ow * g.w.size) * c;
            for (std::int64_t e = 0; e < run; ++e) row[e] = T{0};
          }
          for (std::int64_t k = 0; k < c; ++k) dx[argmax[out + k]] = T{0} + dy[out + k];
        },
        grain_for(g.window_elements() * g.channels));
    return;
  }
  fill(s, dx, g.images * g.h.in * g.w.in * g.channels, T{0});
  if (g.images == 0 || g.channels == 0 || pix == 0) return;
  if (g.h.stride >= g.h.size && g.w.stride >= g.w.size) {
    parallel_for(
        s, g.images * pix,
        [=] TYPEMESH_KERNEL(std::int64_t o) {
          const std::int64_t c = g.channels, out = o * c;
          for (std::int64_t k = 0; k < c; ++k) dx[argmax[out + k]] += dy[out + k];
        },
        grain_for(g.channels));
    return;
  }
  const std::int64_t block = max_pool_grad_block < g.channels ? max_pool_grad_block : g.channels;
  const std::int64_t blocks = (g.channels + block - 1) / block;
  parallel_for(
      s, g.images * blocks,
      [=] TYPEMESH_KERNEL(std::int64_t q) {
        const std::int64_t c = g.channels, b = q / blocks, k0 = q % blocks * block;
        const std::int64_t k1 = k0 + block < c ? k0 + block : c;
        for (std::int64_t o = b * pix * c, end = (b + 1) * pix * c; o < end; o += c) {
          for (std::int64_t k = o + k0; k < o + k1; ++k) dx[argmax[k]] += dy[k];
        }
      },
      grain_for(pix * block));
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

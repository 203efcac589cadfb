// im2col and col2im (backend/conv.hpp) on the CUDA space: one thread per
// element (of the columns for im2col, of the image for col2im) instead of
// one per row or pixel, so neighbouring threads touch neighbouring channels.
// col2im still gathers each element's taps in the order of the output
// pixels that read them, as the host's does.
#pragma once

#include <cstdint>

#include "typemesh/backend/cuda/parallel.hpp"

namespace typemesh::backend {

namespace cuda {
template <class T>
struct im2col_element {
  const T* image;
  conv_geometry g;
  std::int64_t first;
  T* columns;
  __device__ void operator()(std::int64_t e) const {
    const std::int64_t p = g.patch(), c = g.channels, pix = g.out_pixels();
    const std::int64_t r = e / p, col = e % p;
    const std::int64_t b = first + r / pix, oh = (r % pix) / g.w.out, ow = r % g.w.out;
    const std::int64_t tap = col / c, k = col % c;
    const std::int64_t ih = g.h.start(oh) + tap / g.w.size, iw = g.w.start(ow) + tap % g.w.size;
    columns[e] = ih >= 0 && ih < g.h.in && iw >= 0 && iw < g.w.in ? image[((b * g.h.in + ih) * g.w.in + iw) * c + k]
                                                                   : T{0};
  }
};

template <class T>
struct col2im_element {
  const T* columns;
  conv_geometry g;
  std::int64_t first;
  T* image;
  __device__ void operator()(std::int64_t e) const {
    const std::int64_t c = g.channels, p = g.patch(), pixels_in = g.h.in * g.w.in;
    const std::int64_t k = e % c, q = e / c;
    const std::int64_t b = q / pixels_in, ih = (q % pixels_in) / g.w.in, iw = q % g.w.in;
    T acc = image[(first * pixels_in + q) * c + k];
    const std::int64_t oh1 = g.h.last_out(ih), ow0 = g.w.first_out(iw), ow1 = g.w.last_out(iw);
    for (std::int64_t oh = g.h.first_out(ih); oh < oh1; ++oh) {
      const std::int64_t i = ih - g.h.start(oh);
      for (std::int64_t ow = ow0; ow < ow1; ++ow) {
        const std::int64_t j = iw - g.w.start(ow);
        acc += columns[(b * g.out_pixels() + oh * g.w.out + ow) * p + (i * g.w.size + j) * c + k];
      }
    }
    image[(first * pixels_in + q) * c + k] = acc;
  }
};
}  // namespace cuda

template <class T>
void im2col(cuda_space s, const T* image, const conv_geometry& g, std::int64_t first, std::int64_t count, T* columns) {
  parallel_for(s, count * g.out_pixels() * g.patch(), cuda::im2col_element<T>{image, g, first, columns});
}

template <class T>
void col2im(cuda_space s, const T* columns, const conv_geometry& g, std::int64_t first, std::int64_t count, T* image) {
  parallel_for(s, count * g.h.in * g.w.in * g.channels, cuda::col2im_element<T>{columns, g, first, image});
}

}  // namespace typemesh::backend

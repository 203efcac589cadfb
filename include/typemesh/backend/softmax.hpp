// Softmax over the last dim of rows held whole on the device, per space:
// forward y = exp(x - max) / sum exp(x - max) and backward
// dx = y * (dy - sum(dy * y)), each one pass over a row in place of the four
// broadcasting ops (max, exp, sum, divide; multiply, sum, multiply,
// subtract) that a split row needs. One index per row; a row's sums run in
// column order (on the host's float vector path: in vector lanes, each lane
// in column order, then the lanes in order), so results do not depend on the
// number of threads.
#pragma once

#include <cmath>
#include <cstdint>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/host/vector_math.hpp"
#include "typemesh/backend/parallel.hpp"

namespace typemesh::backend {

// y = softmax of each of the `rows` rows of `width` elements of x.
template <class Space, class T>
void softmax_forward(Space s, const T* x, T* y, std::int64_t rows, std::int64_t width) {
  if (rows == 0 || width == 0) return;
  if constexpr (host::vector_math_types<Space, T>) {
    if (host::vector_math_enabled()) {
      parallel_for(
          s, rows, [=](std::int64_t r) { host::softmax_row(x + r * width, y + r * width, width); },
          grain_for(width));
      return;
    }
  }
  parallel_for(
      s, rows,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        const T* in = x + r * width;
        T* out = y + r * width;
        T top = in[0];
        for (std::int64_t v = 1; v < width; ++v) top = in[v] > top ? in[v] : top;
        T sum{0};
        for (std::int64_t v = 0; v < width; ++v) {
          out[v] = std::exp(in[v] - top);
          sum += out[v];
        }
        const T inverse = T{1} / sum;
        for (std::int64_t v = 0; v < width; ++v) out[v] *= inverse;
      },
      grain_for(width));
}

// dx = y * (dy - sum(dy * y)) row by row, from softmax_forward's y.
template <class Space, class T>
void softmax_gradient(Space s, const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t width) {
  if (rows == 0 || width == 0) return;
  if constexpr (host::vector_math_types<Space, T>) {
    if (host::vector_math_enabled()) {
      parallel_for(
          s, rows,
          [=](std::int64_t r) {
            host::softmax_gradient_row(y + r * width, dy + r * width, dx + r * width, width);
          },
          grain_for(width));
      return;
    }
  }
  parallel_for(
      s, rows,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        const T* yr = y + r * width;
        const T* dyr = dy + r * width;
        T* dxr = dx + r * width;
        T dot{0};
        for (std::int64_t v = 0; v < width; ++v) dot += dyr[v] * yr[v];
        for (std::int64_t v = 0; v < width; ++v) dxr[v] = yr[v] * (dyr[v] - dot);
      },
      grain_for(width));
}

}  // namespace typemesh::backend

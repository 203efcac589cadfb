// Layer normalisation, per space, on rows of `held` elements (this device's
// slice of the normalised dim D, whose whole size is `size`): forward, each
// row's x_hat = (x - mean) / sigma and 1 / sigma, sigma = sqrt(var + epsilon);
// backward, dx = (g - mean(g) - x_hat * mean(g * x_hat)) / sigma from the
// gradient g of x_hat. One index per row; a row's sums run in a fixed order
// (eight interleaved lanes, then the lanes in order), so results do not
// depend on the number of threads.
//
// When D is whole on the device, `sums` is null and each kernel computes its
// row's sums itself in the same pass (the variance two-pass: the mean, then
// the squared deviations from it, so a row far from zero keeps its
// precision). When D is split, the caller computes the partial sums with
// layer_norm_partial_sums or layer_norm_gradient_sums, allreduces them (one
// message: `rows` sums then `rows` second sums) and passes them in.
//
// On the host the affine step that follows (y = x_hat * scale + bias, scale
// and bias this device's `held` elements of D) can run inside the same
// passes: layer_norm_affine_forward writes x_hat and y together, and the
// gradient kernels take the scale, so that g = dy * scale is never stored.
#pragma once

#include <cmath>
#include <cstdint>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/parallel.hpp"

namespace typemesh::backend {

// A device's slice of rows x D: `rows` rows of `held` elements; `size` is D's
// whole size, the count the means divide by.
struct layer_norm_rows {
  std::int64_t rows, held, size;
};

// A row's sums run in eight interleaved lanes (element v into lane v % 8),
// then the lanes in order: a fixed order whatever the thread count, with
// eight additions in flight where one chain waited on each addition (a
// Transformer's rows of 512: about 4 cycles an element).
inline constexpr int row_lanes = 8;
template <class T>
TYPEMESH_KERNEL T fold_lanes(const T (&lanes)[row_lanes]) {
  T total{0};
  for (int l = 0; l < row_lanes; ++l) total += lanes[l];
  return total;
}

// A row's sum, and the sum of its squared deviations from its own mean
// (sum / held): two passes, in lanes.
template <class T>
struct row_sums {
  T sum, squares;
};
template <class T>
TYPEMESH_KERNEL row_sums<T> two_pass_sums(const T* row, std::int64_t held) {
  const std::int64_t whole = held / row_lanes * row_lanes;
  T lanes[row_lanes] = {};
  for (std::int64_t v = 0; v < whole; v += row_lanes)
    for (int l = 0; l < row_lanes; ++l) lanes[l] += row[v + l];
  for (std::int64_t v = whole; v < held; ++v) lanes[v - whole] += row[v];
  const T sum = fold_lanes(lanes);
  const T mean = held > 0 ? sum / static_cast<T>(held) : T{0};
  T squares[row_lanes] = {};
  for (std::int64_t v = 0; v < whole; v += row_lanes)
    for (int l = 0; l < row_lanes; ++l) squares[l] += (row[v + l] - mean) * (row[v + l] - mean);
  for (std::int64_t v = whole; v < held; ++v) squares[v - whole] += (row[v] - mean) * (row[v] - mean);
  return {sum, fold_lanes(squares)};
}

// sums[r] = sum of the row's x; sums[rows + r] = sum of its x^2, accumulated
// as the squared deviations from the local mean plus held * mean^2 (fewer
// rounding errors than squaring x directly).
template <class Space, class T>
void layer_norm_partial_sums(Space s, const T* x, T* sums, layer_norm_rows g) {
  parallel_for(
      s, g.rows,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        const row_sums<T> part = two_pass_sums(x + r * g.held, g.held);
        const T local_mean = g.held > 0 ? part.sum / static_cast<T>(g.held) : T{0};
        sums[r] = part.sum;
        sums[g.rows + r] = part.squares + static_cast<T>(g.held) * local_mean * local_mean;
      },
      grain_for(g.held));
}

// A row's mean and 1 / sqrt(var + epsilon), from the allreduced `sums`
// (sum x, sum x^2) or, when sums is null, from the row itself in two passes.
template <class T>
struct row_moments {
  T mean, inv_sigma;
};

template <class T>
TYPEMESH_KERNEL row_moments<T> moments_of_row(const T* row, const T* sums, std::int64_t r, layer_norm_rows g,
                                              T epsilon) {
  const T n = static_cast<T>(g.size);
  T mean{0}, variance{0};
  if (sums == nullptr) {  // D whole: held is its size
    const row_sums<T> whole = two_pass_sums(row, g.held);
    mean = whole.sum / n;
    variance = whole.squares / n;
  } else {
    mean = sums[r] / n;
    variance = sums[g.rows + r] / n - mean * mean;
    if (variance < T{0}) variance = T{0};  // rounding can push E[x^2] - mean^2 below zero
  }
  return {mean, T{1} / std::sqrt(variance + epsilon)};
}

// x_hat = (x - mean) * inv_sigma and inv_sigma[r] = 1 / sqrt(var + epsilon).
template <class Space, class T>
void layer_norm_forward(Space s, const T* x, const T* sums, T* x_hat, T* inv_sigma, layer_norm_rows g, T epsilon) {
  parallel_for(
      s, g.rows,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        const T* row = x + r * g.held;
        const row_moments<T> m = moments_of_row(row, sums, r, g, epsilon);
        inv_sigma[r] = m.inv_sigma;
        T* out = x_hat + r * g.held;
        for (std::int64_t v = 0; v < g.held; ++v) out[v] = (row[v] - m.mean) * m.inv_sigma;
      },
      grain_for(g.held));
}

// layer_norm_forward, and y = x_hat * scale + bias in the same pass (the
// host's: one read of x for three arrays written).
template <class T>
void layer_norm_affine_forward(host_space s, const T* x, const T* sums, const T* scale, const T* bias, T* x_hat,
                               T* y, T* inv_sigma, layer_norm_rows g, T epsilon) {
  parallel_for(
      s, g.rows,
      [=](std::int64_t r) {
        const T* row = x + r * g.held;
        const row_moments<T> m = moments_of_row(row, sums, r, g, epsilon);
        inv_sigma[r] = m.inv_sigma;
        T* xh = x_hat + r * g.held;
        T* out = y + r * g.held;
        for (std::int64_t v = 0; v < g.held; ++v) {
          const T normalised = (row[v] - m.mean) * m.inv_sigma;
          xh[v] = normalised;
          out[v] = normalised * scale[v] + bias[v];
        }
      },
      grain_for(g.held));
}

// A row's sum(g) and sum(g * x_hat), g = dy or, given a scale, dy * scale.
// In lanes, as two_pass_sums, both in one pass.
template <class T>
TYPEMESH_KERNEL void gradient_sums_of_row(const T* gr, const T* scale, const T* xr, std::int64_t held, T& sum, T& dot) {
  T sums[row_lanes] = {}, dots[row_lanes] = {};
  const std::int64_t whole = held / row_lanes * row_lanes;
  const auto add = [&](std::int64_t v, int l) {
    const T gv = scale == nullptr ? gr[v] : gr[v] * scale[v];
    sums[l] += gv;
    dots[l] += gv * xr[v];
  };
  for (std::int64_t v = 0; v < whole; v += row_lanes)
    for (int l = 0; l < row_lanes; ++l) add(v + l, l);
  for (std::int64_t v = whole; v < held; ++v) add(v, static_cast<int>(v - whole));
  sum = fold_lanes(sums);
  dot = fold_lanes(dots);
}

// sums[r] = sum of the row's gradient g of x_hat; sums[rows + r] = sum of
// g * x_hat. g is dy, or dy * scale where a scale is given (the host's).
template <class Space, class T>
void layer_norm_gradient_sums(Space s, const T* dy, const T* x_hat, T* sums, layer_norm_rows g,
                              const T* scale = nullptr) {
  parallel_for(
      s, g.rows,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        gradient_sums_of_row(dy + r * g.held, scale, x_hat + r * g.held, g.held, sums[r], sums[g.rows + r]);
      },
      grain_for(g.held));
}

// dx = (g - mean(g) - x_hat * mean(g * x_hat)) * inv_sigma, the means from
// the allreduced `sums` or, when sums is null, from the row itself; g is dy,
// or dy * scale where a scale is given (the host's).
template <class Space, class T>
void layer_norm_gradient(Space s, const T* dy, const T* x_hat, const T* inv_sigma, const T* sums, T* dx,
                         layer_norm_rows g, const T* scale = nullptr) {
  parallel_for(
      s, g.rows,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        const T* gr = dy + r * g.held;
        const T* xr = x_hat + r * g.held;
        T sum{0}, dot{0};
        if (sums == nullptr) {
          gradient_sums_of_row(gr, scale, xr, g.held, sum, dot);
        } else {
          sum = sums[r];
          dot = sums[g.rows + r];
        }
        const T n = static_cast<T>(g.size);
        const T mean_g = sum / n, mean_gx = dot / n, inv = inv_sigma[r];
        T* out = dx + r * g.held;
        if (scale == nullptr) {
          for (std::int64_t v = 0; v < g.held; ++v) out[v] = (gr[v] - mean_g - xr[v] * mean_gx) * inv;
        } else {
          for (std::int64_t v = 0; v < g.held; ++v) out[v] = (gr[v] * scale[v] - mean_g - xr[v] * mean_gx) * inv;
        }
      },
      grain_for(g.held));
}

}  // namespace typemesh::backend

#if defined(TYPEMESH_CUDA)
#include "typemesh/backend/cuda/layer_norm.hpp"
#endif

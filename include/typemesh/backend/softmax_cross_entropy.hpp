// The softmax cross-entropy of class ids, per space, on rows of `held`
// logits (this device's slice of the vocab, whose first column is `first`):
// each row's maximum, its sum of shifted exponentials and the label's
// shifted logit, the loss and log-sum-exp from those, and the gradient
// dy * (softmax - onehot). One index per row; a row's sums run in column
// order (on the host's float vector path: in vector lanes, each lane in
// column order, then the lanes in order), so results do not depend on the
// number of threads.
#pragma once

#include <cmath>
#include <cstdint>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/host/vector_math.hpp"
#include "typemesh/backend/parallel.hpp"

namespace typemesh::backend {

// A device's slice of rows x vocab columns: `rows` rows of `held` columns,
// the first being vocab column `first`.
struct softmax_rows {
  std::int64_t rows, held, first;
};

// top[r] = max over the row's columns, starting from `lowest`. (The host's
// float rows in vector lanes: the same maxima, but a NaN is passed over
// instead of taken where it falls; its row's loss is NaN either way.)
template <class Space, class T>
void softmax_row_max(Space s, const T* x, T* top, softmax_rows g, T lowest) {
  if constexpr (host::vector_math_types<Space, T>) {
    if (host::vector_math_enabled()) {
      parallel_for(
          s, g.rows,
          [=](std::int64_t r) {
            const float m = host::max_floats(x + r * g.held, g.held);
            top[r] = m > lowest ? m : lowest;
          },
          grain_for(g.held));
      return;
    }
  }
  parallel_for(
      s, g.rows,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        T m = lowest;
        for (std::int64_t v = 0; v < g.held; ++v) m = x[r * g.held + v] < m ? m : x[r * g.held + v];
        top[r] = m;
      },
      grain_for(g.held));
}

// sums[r] = sum_v exp(x - top[r]); sums[rows + r] = the label's x - top[r]
// where this device holds the label's column, else 0.
template <class Space, class T, class I>
void softmax_shifted_sums(Space s, const T* x, const I* label, const T* top, T* sums, softmax_rows g) {
  if constexpr (host::vector_math_types<Space, T>) {
    if (host::vector_math_enabled()) {
      parallel_for(
          s, g.rows,
          [=](std::int64_t r) {
            sums[r] = host::exp_shifted_sum(x + r * g.held, top[r], g.held);
            const std::int64_t c = static_cast<std::int64_t>(label[r]) - g.first;
            sums[g.rows + r] = c >= 0 && c < g.held ? x[r * g.held + c] - top[r] : 0.0f;
          },
          grain_for(g.held));
      return;
    }
  }
  parallel_for(
      s, g.rows,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        T sum{0};
        for (std::int64_t v = 0; v < g.held; ++v) sum += std::exp(x[r * g.held + v] - top[r]);
        sums[r] = sum;
        const std::int64_t c = static_cast<std::int64_t>(label[r]) - g.first;
        sums[g.rows + r] = c >= 0 && c < g.held ? x[r * g.held + c] - top[r] : T{0};
      },
      grain_for(g.held));
}

// loss[r] = log(sums[r]) - sums[rows + r]; lse[r] (the maximum on entry)
// becomes the row's log-sum-exp.
template <class Space, class T>
void softmax_loss_from_sums(Space s, const T* sums, T* loss, T* lse, std::int64_t rows) {
  parallel_for(s, rows, [=] TYPEMESH_KERNEL(std::int64_t r) {
    const T log_sum = std::log(sums[r]);
    loss[r] = log_sum - sums[rows + r];
    lse[r] += log_sum;
  });
}

// dx[r, v] = dy[r] * (exp(x[r, v] - lse[r]) - [column v is the label]).
template <class Space, class T, class I>
void softmax_cross_entropy_gradient(Space s, const T* x, const I* label, const T* lse, const T* dy, T* dx,
                                    softmax_rows g) {
  if constexpr (host::vector_math_types<Space, T>) {
    if (host::vector_math_enabled()) {
      parallel_for(
          s, g.rows,
          [=](std::int64_t r) {
            host::scaled_exp_shifted(x + r * g.held, lse[r], dy[r], dx + r * g.held, g.held);
            const std::int64_t c = static_cast<std::int64_t>(label[r]) - g.first;
            if (c >= 0 && c < g.held) {
              float p;  // the same exp, through the same vector code
              host::scaled_exp_shifted(x + r * g.held + c, lse[r], 1.0f, &p, 1);
              dx[r * g.held + c] = dy[r] * (p - 1.0f);
            }
          },
          grain_for(g.held));
      return;
    }
  }
  parallel_for(
      s, g.rows,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        const std::int64_t c = static_cast<std::int64_t>(label[r]) - g.first;
        for (std::int64_t v = 0; v < g.held; ++v) {
          const T p = std::exp(x[r * g.held + v] - lse[r]);
          dx[r * g.held + v] = dy[r] * (v == c ? p - T{1} : p);
        }
      },
      grain_for(g.held));
}

}  // namespace typemesh::backend

#if defined(TYPEMESH_CUDA)
#include "typemesh/backend/cuda/softmax_cross_entropy.hpp"
#endif

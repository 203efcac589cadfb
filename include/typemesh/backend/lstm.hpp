// The LSTM cell's local kernels, per space: [x_t | h] interleaved by unit and
// split back, the gate nonlinearities and the new state (c', h') from the
// pre-activations and the gates' gradients from d(h', c') (for one step, and
// for a step of the whole-sequence path), and the adds of a time step into
// (or out of) a sequence for the gradients of time_step and stack_steps. Each index owns one unit of one row (or one row of a step);
// the GEMMs around them are backend::gemm calls made by the layer. On the
// host, float gates run in vector lanes (host/vector_math.hpp): the C
// library's expf and tanhf, one element at a time, took a tenth of an
// RNNLM step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/host/vector_math.hpp"
#include "typemesh/backend/parallel.hpp"

namespace typemesh::backend {

namespace lstm_kernels {
template <class T>
TYPEMESH_KERNEL T sigmoid(T v) {
  return T{1} / (T{1} + std::exp(-v));
}

// The gates of one (row, unit), for both paths: q [4] holds the
// pre-activations and receives the activations; cells [2] receives c and
// tanh(c'); returns c' (h' is q[3] * cells[1]).
template <class T>
TYPEMESH_KERNEL T gates_forward(T* q, T c, T* cells) {
  const T i = sigmoid(q[0]), f = sigmoid(q[1]), g = std::tanh(q[2]), o = sigmoid(q[3]);
  const T c_new = f * c + i * g;
  q[0] = i, q[1] = f, q[2] = g, q[3] = o;
  cells[0] = c, cells[1] = std::tanh(c_new);
  return c_new;
}

// The gate gradients dz [4] of one (row, unit) from d(h') and d(c') and what
// the forward kept (q: activations, cells: c and tanh(c')); returns d(c).
template <class T>
TYPEMESH_KERNEL T gates_backward(const T* q, const T* cells, T dh, T dc_out, T* dz) {
  const T i = q[0], f = q[1], g = q[2], o = q[3];
  const T c = cells[0], tc = cells[1];
  const T dc = dc_out + dh * o * (T{1} - tc * tc);
  dz[0] = dc * g * i * (T{1} - i);
  dz[1] = dc * c * f * (T{1} - f);
  dz[2] = dc * i * (T{1} - g * g);
  dz[3] = dh * tc * o * (T{1} - o);
  return dc * f;
}

// Units per index of the vector path: the gates of a block in one vector
// pass, then c' and h' per unit, then tanh(c') in one pass.
inline constexpr std::int64_t vector_cell_block = 256;

// gates_forward over units [first, last) on the vector path: z [n, 4] as in
// gates_forward's q; c_old [n]; cells [n, 2]. put(r, h', c') receives each
// unit's new state (after c_old[r] has been read).
template <class Put>
void vector_gates_forward(float* z, const float* c_old, float* cells, std::int64_t first, std::int64_t last,
                          Put put) {
  float c_new[vector_cell_block], tanh_c[vector_cell_block];
  const std::int64_t count = last - first;
  host::lstm_gate_activations(z + 4 * first, 4 * count);
  for (std::int64_t u = 0; u < count; ++u) {
    const float* q = z + 4 * (first + u);
    const float c = c_old[first + u];
    c_new[u] = q[1] * c + q[0] * q[2];
    cells[2 * (first + u)] = c;
  }
  host::tanh_floats(c_new, tanh_c, count);
  for (std::int64_t u = 0; u < count; ++u) {
    cells[2 * (first + u) + 1] = tanh_c[u];
    put(first + u, z[4 * (first + u) + 3] * tanh_c[u], c_new[u]);
  }
}

// Runs vector_gates_forward over n units in blocks, on the host's threads.
template <class Put>
void vector_cells_forward(float* z, const float* c_old, float* cells, std::int64_t n, Put put) {
  const std::int64_t blocks = (n + vector_cell_block - 1) / vector_cell_block;
  parallel_for(
      host_space{}, blocks,
      [=](std::int64_t b) {
        vector_gates_forward(z, c_old, cells, b * vector_cell_block, std::min(n, (b + 1) * vector_cell_block), put);
      },
      grain_for(8 * vector_cell_block));
}
}  // namespace lstm_kernels

// out[2r] = x[r], out[2r + 1] = h[r] for r in [0, n).
template <class Space, class T>
void lstm_interleave(Space s, const T* x, const T* h, T* out, std::int64_t n) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t r) {
    out[2 * r] = x[r];
    out[2 * r + 1] = h[r];
  });
}

// out[r] = pairs[2r + part] for r in [0, n): one half of interleaved pairs.
template <class Space, class T>
void lstm_take_part(Space s, const T* pairs, std::int64_t part, T* out, std::int64_t n) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t r) { out[r] = pairs[2 * r + part]; });
}

// pairs[2r + part] = in[r] and the other half of each pair zero.
template <class Space, class T>
void lstm_put_part(Space s, const T* in, std::int64_t part, T* pairs, std::int64_t n) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t r) {
    pairs[2 * r + part] = in[r];
    pairs[2 * r + 1 - part] = T{0};
  });
}

// One step's gates, for n (row, unit) pairs. z: the pre-activations
// [n, 4] (i, f, g, o), overwritten with the activations; c_old: [n];
// cells: [n, 2] receives c and tanh(c'); state: [n, 2] receives h', c'.
template <class Space, class T>
void lstm_cell_forward(Space s, T* z, const T* c_old, T* cells, T* state, std::int64_t n) {
  if constexpr (host::vector_math_types<Space, T>) {
    if (host::vector_math_enabled()) {
      lstm_kernels::vector_cells_forward(z, c_old, cells, n, [=](std::int64_t r, float h, float c) {
        state[2 * r] = h, state[2 * r + 1] = c;
      });
      return;
    }
  }
  parallel_for(
      s, n,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        T* q = z + 4 * r;
        const T c_new = lstm_kernels::gates_forward(q, c_old[r], cells + 2 * r);
        state[2 * r] = q[3] * cells[2 * r + 1], state[2 * r + 1] = c_new;
      },
      grain_for(8));
}

// d(pre-activations) dz [n, 4] and, where dc_prev is not null, d(c) [n]
// from d(h', c') dstate [n, 2] and what the forward kept (gates, cells).
template <class Space, class T>
void lstm_gate_gradients(Space s, const T* gates, const T* cells, const T* dstate, T* dz, T* dc_prev,
                         std::int64_t n) {
  parallel_for(
      s, n,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        const T dc = lstm_kernels::gates_backward(gates + 4 * r, cells + 2 * r, dstate[2 * r], dstate[2 * r + 1],
                                                  dz + 4 * r);
        if (dc_prev) dc_prev[r] = dc;
      },
      grain_for(8));
}

// The sequence path's step: as lstm_cell_forward, but with the state kept
// as plain rows for the next step's GEMM. z: [n, 4] pre-activations,
// overwritten with the activations; c: [n], c on entry and c' on return;
// cells: [n, 2] receives c and tanh(c'); h: [n] receives h'.
template <class Space, class T>
void lstm_sequence_cell_forward(Space s, T* z, T* c, T* cells, T* h, std::int64_t n) {
  if constexpr (host::vector_math_types<Space, T>) {
    if (host::vector_math_enabled()) {
      lstm_kernels::vector_cells_forward(z, c, cells, n, [=](std::int64_t r, float h_new, float c_new) {
        h[r] = h_new, c[r] = c_new;
      });
      return;
    }
  }
  parallel_for(
      s, n,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        T* q = z + 4 * r;
        c[r] = lstm_kernels::gates_forward(q, c[r], cells + 2 * r);
        h[r] = q[3] * cells[2 * r + 1];
      },
      grain_for(8));
}

// The sequence path's gate gradients of one step: dz [n, 4] from d(h') =
// dh_out + dh_next (the step's output and the next step's recurrent input)
// and d(c') in dc, which is replaced by d(c) for the step before.
template <class Space, class T>
void lstm_sequence_gate_gradients(Space s, const T* gates, const T* cells, const T* dh_out, const T* dh_next, T* dc,
                                  T* dz, std::int64_t n) {
  parallel_for(
      s, n,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        dc[r] = lstm_kernels::gates_backward(gates + 4 * r, cells + 2 * r, dh_out[r] + dh_next[r], dc[r],
                                             dz + 4 * r);
      },
      grain_for(8));
}

// A sequence laid out [outer, steps, inner] and one step of it [outer, inner].
struct lstm_sequence {
  std::int64_t outer, steps, inner;
};

// seq[o, t, i] += step[o, i].
template <class Space, class T>
void lstm_add_step_into_sequence(Space s, const T* step, T* seq, lstm_sequence e, std::int64_t t) {
  parallel_for(
      s, e.outer,
      [=] TYPEMESH_KERNEL(std::int64_t o) {
        for (std::int64_t i = 0; i < e.inner; ++i) seq[(o * e.steps + t) * e.inner + i] += step[o * e.inner + i];
      },
      grain_for(e.inner));
}

// step[o, i] += seq[o, t, i].
template <class Space, class T>
void lstm_add_sequence_into_step(Space s, const T* seq, T* step, lstm_sequence e, std::int64_t t) {
  parallel_for(
      s, e.outer,
      [=] TYPEMESH_KERNEL(std::int64_t o) {
        for (std::int64_t i = 0; i < e.inner; ++i) step[o * e.inner + i] += seq[(o * e.steps + t) * e.inner + i];
      },
      grain_for(e.inner));
}

}  // namespace typemesh::backend

// The LSTM cell's local kernels, per space: [x_t | h] interleaved by unit and
// split back, the gate nonlinearities and the new state (c', h') from the
// pre-activations and the gates' gradients from d(h', c') (for one step, and
// for a step of the whole-sequence path), and the adds of a time step into
// (or out of) a sequence for the gradients of time_step and stack_steps. Each index owns one unit of one row (or one row of a step);
// the GEMMs around them are backend::gemm calls made by the layer.
#pragma once

#include <cmath>
#include <cstdint>

#include "typemesh/backend/config.hpp"
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

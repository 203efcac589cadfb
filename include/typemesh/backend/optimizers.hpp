// The optimizers' updates, elementwise over a variable's local elements.
#pragma once

#include <cmath>
#include <cstdint>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/parallel.hpp"

namespace typemesh::backend {

// w -= rate * g.
template <class Space, class T>
void sgd_update(Space s, T* w, const T* g, std::int64_t n, T rate) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) { w[i] -= rate * g[i]; });
}

// Adam's moments m, v (in double) and the weights, with bias corrections
// c1 = 1 - beta1^t, c2 = 1 - beta2^t.
struct adam_step {
  double rate, beta1, beta2, epsilon, c1, c2;
};

template <class Space, class T>
void adam_update(Space s, T* w, const T* g, double* m, double* v, std::int64_t n, adam_step a) {
  parallel_for(s, n, [=] TYPEMESH_KERNEL(std::int64_t i) {
    const double gi = static_cast<double>(g[i]);
    m[i] = a.beta1 * m[i] + (1 - a.beta1) * gi;
    v[i] = a.beta2 * v[i] + (1 - a.beta2) * gi * gi;
    w[i] -= static_cast<T>(a.rate * (m[i] / a.c1) / (std::sqrt(v[i] / a.c2) + a.epsilon));
  });
}

}  // namespace typemesh::backend

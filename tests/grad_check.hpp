// The gradient-check harness shared by the ops and layers tests.
//
// A case is a generic lambda templated on the layouts it places its inputs
// with: given a mesh and the inputs' host values, it imports them, computes a
// scalar loss, runs backward and returns the loss and the inputs' gradients
// (exported whole). `check_layouts` runs a case
//  1. on one device (every axis of size 1): the reference;
//  2. under the layouts and mesh shape given: loss and every gradient must
//     equal the reference up to rounding;
//  3. and compares the reference gradients with central finite differences
//     of the one-device loss at a few elements of every input.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support.hpp"

namespace tt {

using values = std::vector<double>;

struct outcome {
  double loss = std::nan("");
  std::vector<values> grads;
};

// Random values in [lo, hi), the same for a given seed.
inline values random_values(std::size_t n, unsigned seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  values v(n);
  for (auto& x : v) x = u(gen);
  return v;
}

// The whole tensor's values as a host tensor of shape s.
template <class S>
typemesh::host_tensor<double, S> host(const S& s, const values& v) {
  return typemesh::host_tensor<double, S>(s, v);
}

// What a case returns: the loss and the inputs' gradients, exported whole
// (empty on a device outside a tensor's mesh).
template <class Loss, class... X>
outcome finish(const Loss& loss, const X&... xs) {
  typemesh::backward(loss);
  outcome o;
  auto l = typemesh::export_tensor(loss.detached());
  if (!l.empty()) o.loss = l.values()[0];
  auto grad_of = [](const auto& x) {
    if (!x.has_grad()) return values{};
    auto g = typemesh::export_tensor(x.grad());
    return values(g.values().begin(), g.values().end());
  };
  (o.grads.push_back(grad_of(xs)), ...);
  return o;
}

// Runs `body` on prod(sizes) devices with a mesh of those sizes; merges what
// the devices return (the first that holds each value). Every device that
// returns a value must return the same one.
template <class Mesh, class... Layouts, class Body>
outcome run_case(const typename Mesh::coords& sizes, const std::vector<values>& inputs, Body& body) {
  int n = 1;
  for (int s : sizes) n *= s;
  auto per_device = typemesh::launch(n, [&] {
    Mesh m(sizes);
    return body.template operator()<Layouts...>(m, inputs);
  });
  outcome merged = per_device[0];
  for (const auto& o : per_device) {
    if (std::isnan(merged.loss)) merged.loss = o.loss;
    if (!std::isnan(o.loss)) {
      EXPECT_EQ(o.loss, merged.loss) << "devices disagree on the loss";
    }
    for (std::size_t i = 0; i < o.grads.size(); ++i) {
      if (merged.grads[i].empty()) merged.grads[i] = o.grads[i];
      if (!o.grads[i].empty()) {
        EXPECT_EQ(o.grads[i], merged.grads[i]) << "devices disagree on gradient " << i;
      }
    }
  }
  return merged;
}

inline void expect_close(const values& got, const values& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " at element " << i;
  }
}

// Steps 1-3 above. `fd_inputs` says which inputs get the finite-difference
// check (integer inputs such as labels have none); `samples` elements each.
template <class Mesh, class... Layouts, class Body>
void check_layouts(const std::string& name, const typename Mesh::coords& sizes, const std::vector<values>& inputs,
                   Body body, std::vector<bool> fd_inputs = {}, int samples = 6, double fd_tol = 1e-6) {
  SCOPED_TRACE(name);
  typename Mesh::coords one{};
  one.fill(1);
  const outcome ref = run_case<Mesh, Layouts...>(one, inputs, body);
  const outcome got = run_case<Mesh, Layouts...>(sizes, inputs, body);
  ASSERT_FALSE(std::isnan(ref.loss)) << "the one-device run gave no loss";
  EXPECT_NEAR(got.loss, ref.loss, 1e-10 * (1 + std::abs(ref.loss))) << "loss under the layouts vs one device";
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  for (std::size_t i = 0; i < ref.grads.size(); ++i) {
    expect_close(got.grads[i], ref.grads[i], 1e-10, name + ": gradient " + std::to_string(i) + " vs one device");
  }
  // Finite differences on the one-device run.
  for (std::size_t i = 0; i < inputs.size() && i < ref.grads.size(); ++i) {
    if (!fd_inputs.empty() && !fd_inputs[i]) continue;
    if (ref.grads[i].empty()) continue;
    std::mt19937 gen(static_cast<unsigned>(i) + 7);
    for (int s = 0; s < samples; ++s) {
      const std::size_t j = std::uniform_int_distribution<std::size_t>(0, inputs[i].size() - 1)(gen);
      const double h = 1e-5 * std::max(1.0, std::abs(inputs[i][j]));
      auto shifted = inputs;
      shifted[i][j] += h;
      const double up = run_case<Mesh, Layouts...>(one, shifted, body).loss;
      shifted[i][j] -= 2 * h;
      const double down = run_case<Mesh, Layouts...>(one, shifted, body).loss;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(ref.grads[i][j], fd, fd_tol * (1 + std::abs(fd)))
          << name << ": d loss / d input " << i << " element " << j << " vs finite difference";
    }
  }
}

}  // namespace tt

// Optimizers: a step over all variables, from the gradients `backward` left
// in them. A step clears the gradients it used. Variables that the loss did
// not reach (no gradient) are left as they are.
//
//   typemesh::optim::sgd opt(0.01);        // the reference's optimizer and rate
//   typemesh::backward(loss);
//   opt.step(w0, w1, bias);
#pragma once

#include <cmath>
#include <memory>
#include <unordered_map>
#include <vector>

#include "typemesh/autodiff/node.hpp"

namespace typemesh::optim {

// Plain gradient descent: w -= rate * grad.
class sgd {
 public:
  explicit sgd(double rate = 0.01) : rate_(rate) {}

  template <class... Variables>
  void step(Variables&... vars) {
    (update(vars), ...);
  }

 private:
  template <class V>
  void update(V& v) {
    if (!v.has_grad()) return;
    using T = typename V::value_type;
    auto w = v.local();
    auto g = v.grad().local();
    const T r = static_cast<T>(rate_);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= r * g[i];
    v.zero_grad();
  }
  double rate_;
};

// Adam (Kingma & Ba), with bias correction. Its moments live here, keyed by
// the variable.
class adam {
 public:
  explicit adam(double rate = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8)
      : rate_(rate), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {}

  template <class... Variables>
  void step(Variables&... vars) {
    ++t_;
    (update(vars), ...);
  }

 private:
  struct moments {
    std::vector<double> m, v;
  };

  template <class V>
  void update(V& var) {
    if (!var.has_grad()) return;
    using T = typename V::value_type;
    auto w = var.local();
    auto g = var.grad().local();
    moments& s = state_[var.node().get()];
    if (s.m.size() != w.size()) s.m.assign(w.size(), 0.0), s.v.assign(w.size(), 0.0);
    const double c1 = 1 - std::pow(beta1_, static_cast<double>(t_)), c2 = 1 - std::pow(beta2_, static_cast<double>(t_));
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double gi = static_cast<double>(g[i]);
      s.m[i] = beta1_ * s.m[i] + (1 - beta1_) * gi;
      s.v[i] = beta2_ * s.v[i] + (1 - beta2_) * gi * gi;
      w[i] -= static_cast<T>(rate_ * (s.m[i] / c1) / (std::sqrt(s.v[i] / c2) + epsilon_));
    }
    var.zero_grad();
  }

  double rate_, beta1_, beta2_, epsilon_;
  long t_ = 0;
  std::unordered_map<const autodiff::node*, moments> state_;
};

}  // namespace typemesh::optim

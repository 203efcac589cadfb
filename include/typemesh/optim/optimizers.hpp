// Optimizers: a step over all variables, from the gradients `backward` left
// in them. A step clears the gradients it used.
//
//   typemesh::optim::sgd opt(0.01);        // the reference's optimizer and rate
//   typemesh::backward(loss);
//   opt.step(w0, w1, bias);
//
// or both in one call, which for SGD takes the step of a weight inside the
// product that makes its gradient where it can (below):
//
//   opt.minimize(loss, w0, w1, bias);
//
// A variable given to step() that has no gradient since the last step is an
// error naming it: usually backward was forgotten, or the loss does not
// depend on the variable. A program whose loss genuinely leaves some
// variables out says so, and those are left as they are:
//
//   typemesh::optim::sgd opt(0.01, {.allow_missing_gradients = true});
//   typemesh::optim::adam opt(1e-3, {.allow_missing_gradients = true});
//
// On a device outside a variable's mesh the variable holds nothing, and it
// is skipped: that is not a missing gradient.
//
// sgd::minimize(loss, vars...) is backward(loss) then step(vars...), with
// the same checks, made before anything changes. SGD's step is linear in the
// gradient, so each contribution to a variable's gradient can be applied as
// it comes: where one is a product computed on the device alone (einsum's
// GEMMs, with no allreduce: the weight gradient of a dense layer on one
// device or under parameter parallelism), the product writes
// `w - rate * x^T dy` over w itself (GEMM with beta 1) once no other tensor
// shares w's values. That saves the gradient's array, the pass that would
// zero it and the pass of the step. Other contributions are held and applied
// after the pass, as step() does. The result equals backward then step up to
// float rounding (the product's sum is not rounded to float before it is
// scaled). If backward throws midway, contributions folded so far stay in
// the variables.
#pragma once

#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/optimizers.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/tensor/tape_node.hpp"

namespace typemesh::optim {

// What every optimizer accepts besides its rates.
struct options {
  // Leave variables without a gradient as they are instead of failing.
  bool allow_missing_gradients = false;
};

namespace detail {

// "'a', 'b'": the names of the variables an error is about.
inline std::string comma_separated(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

// Checked before any variable changes, so a failed step leaves all of them
// as they were. Only devices that hold a variable's data look at it.
template <class... Variables>
void check_gradients(const char* optimizer, const options& o, const Variables&... vars) {
  std::vector<std::string> missing;  // names of variables without a gradient
  int not_variables = 0;             // tensors that never get one
  auto check = [&](const auto& v) {
    if (!v.holds_data() || v.has_grad()) return;
    if (v.tracked()) missing.push_back("'" + v.node()->what + "'");
    else ++not_variables;
  };
  (check(vars), ...);
  if (not_variables) {
    throw error(typemesh::detail::cat(optimizer, ".step: ", not_variables, " of its ", sizeof...(vars), " arguments ",
                                      not_variables == 1 ? "is a tensor that does" : "are tensors that do",
                                      " not require a gradient; step() takes variables (typemesh::variable, or a "
                                      "tensor after requires_grad)"));
  }
  if (missing.empty() || o.allow_missing_gradients) return;
  const std::string names = comma_separated(missing);
  const bool one = missing.size() == 1;
  throw error(typemesh::detail::cat(
      optimizer, ".step: ", one ? "variable " : "variables ", names, one ? " has" : " have",
      " no gradient since the last step; call typemesh::backward(loss) before step(), or, if the loss does not "
      "depend on ", one ? "it" : "them", ", construct the optimizer with {.allow_missing_gradients = true}"));
}

// minimize's checks, before backward runs: as check_gradients, where a
// variable has a gradient when it holds one or the loss depends on it.
template <class Loss, class... Variables>
void check_minimize(const char* optimizer, const options& o, const Loss& loss, const Variables&... vars) {
  if (!loss.tracked()) {
    throw error(typemesh::detail::cat(optimizer, ".minimize: the loss does not depend on any tensor that requires a "
                                      "gradient"));
  }
  std::unordered_set<const autodiff::node*> reached;
  for (const auto& n : autodiff::reachable(loss.node())) reached.insert(n.get());
  std::vector<std::string> missing;
  int not_variables = 0;
  auto check = [&](const auto& v) {
    if (!v.holds_data() || v.has_grad()) return;
    if (!v.tracked()) ++not_variables;
    else if (!reached.count(v.node().get())) missing.push_back("'" + v.node()->what + "'");
  };
  (check(vars), ...);
  if (not_variables) {
    throw error(typemesh::detail::cat(optimizer, ".minimize: ", not_variables, " of its ", sizeof...(vars),
                                      " variables ", not_variables == 1 ? "is a tensor that does" : "are tensors that do",
                                      " not require a gradient; minimize() takes variables (typemesh::variable, or a "
                                      "tensor after requires_grad)"));
  }
  if (missing.empty() || o.allow_missing_gradients) return;
  const std::string names = comma_separated(missing);
  const bool one = missing.size() == 1;
  throw error(typemesh::detail::cat(optimizer, ".minimize: the loss does not depend on ", one ? "variable " : "variables ",
                                    names, "; pass only the variables it depends on, or construct the optimizer with "
                                    "{.allow_missing_gradients = true}"));
}

// For the length of one backward pass, marks the variables' nodes so that a
// contribution their edge can fold goes into their values times `scale`
// (autodiff::node::descent); unmarks them however the pass ends.
class descent_scope {
 public:
  template <class... Variables>
  explicit descent_scope(double scale, Variables&... vars) {
    (mark(scale, vars), ...);
  }
  ~descent_scope() {
    for (auto& n : nodes_) n->descend.reset();
  }
  descent_scope(const descent_scope&) = delete;
  descent_scope& operator=(const descent_scope&) = delete;

  // How many of the variables took a contribution into their values.
  std::size_t folded() const {
    std::size_t count = 0;
    for (const auto& n : nodes_) count += n->descend && n->descend->folded;
    return count;
  }

 private:
  template <class V>
  void mark(double scale, V& v) {
    if (!v.holds_data() || !v.tracked() || v.node()->descend) return;
    auto d = std::make_shared<autodiff::node::descent>();
    d->type = &typeid(typename V::canonical_type);
    d->scale = scale;
    // Null while another tensor shares v's values: writing them would copy.
    d->sole_values = [&v]() -> void* { return v.shares_elements() ? nullptr : v.data(); };
    v.node()->descend = std::move(d);
    nodes_.push_back(v.node());
  }
  std::vector<std::shared_ptr<autodiff::node>> nodes_;
};

}  // namespace detail

// Plain gradient descent: w -= rate * grad.
class sgd {
 public:
  explicit sgd(double rate = 0.01, options o = {}) : rate_(rate), options_(o) {}

  template <class... Variables>
  void step(Variables&... vars) {
    detail::check_gradients("optim::sgd", options_, vars...);
    (update(vars), ...);
  }

  // backward(loss) then step(vars...), with the steps taken inside the
  // products that make the gradients where they can (above).
  template <class Loss, class... Variables>
  void minimize(const Loss& loss, Variables&... vars) {
    detail::check_minimize("optim::sgd", options_, loss, vars...);
    {
      detail::descent_scope scope(-rate_, vars...);
      backward(loss);
      folded_ = scope.folded();
    }
    (update(vars), ...);  // the contributions held, not folded
  }

  // How many of the variables given to the last minimize took (part of)
  // their step inside a product on this device.
  std::size_t folded() const { return folded_; }

 private:
  template <class V>
  void update(V& v) {
    if (!v.has_grad()) return;
    using T = typename V::value_type;
    backend::sgd_update(v.space(), v.data(), v.grad().data(), v.local_size(), static_cast<T>(rate_));
    v.zero_grad();
  }
  double rate_;
  options options_;
  std::size_t folded_ = 0;
};

// Adam (Kingma & Ba), with bias correction. Its moments live here, keyed by
// the variable.
class adam {
 public:
  explicit adam(double rate = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8,
                options o = {})
      : rate_(rate), beta1_(beta1), beta2_(beta2), epsilon_(epsilon), options_(o) {}
  // The rate and the options, with the usual betas and epsilon.
  explicit adam(double rate, options o) : adam(rate, 0.9, 0.999, 1e-8, o) {}

  template <class... Variables>
  void step(Variables&... vars) {
    detail::check_gradients("optim::adam", options_, vars...);
    (update(vars), ...);
  }

  // backward(loss) then step(vars...), the checks made before either.
  // Adam's step is not linear in the gradient, so nothing is folded.
  template <class Loss, class... Variables>
  void minimize(const Loss& loss, Variables&... vars) {
    detail::check_minimize("optim::adam", options_, loss, vars...);
    backward(loss);
    (update(vars), ...);
  }

 private:
  // Each variable counts its own steps (as PyTorch's Adam does), so that
  // variables stepped by separate calls get the same bias correction as in
  // one call.
  // Kept in host memory for host variables; type-erased so that one adam
  // serves variables of any space.
  struct moments {
    std::shared_ptr<void> m, v;
    long steps = 0;
  };

  template <class V>
  void update(V& var) {
    if (!var.has_grad()) return;
    using store = backend::storage<double, typename V::space_type>;
    const std::int64_t n = var.local_size();
    moments& s = state_[var.node().get()];
    auto* m = static_cast<store*>(s.m.get());
    if (!m || static_cast<std::int64_t>(m->size()) != n) {
      s.m = std::make_shared<store>(n, 0.0);
      s.v = std::make_shared<store>(n, 0.0);
      m = static_cast<store*>(s.m.get());
    }
    auto* v = static_cast<store*>(s.v.get());
    const auto t = static_cast<double>(++s.steps);
    backend::adam_update(var.space(), var.data(), var.grad().data(), backend::view(*m).data(),
                         backend::view(*v).data(), n,
                         {rate_, beta1_, beta2_, epsilon_, 1 - std::pow(beta1_, t), 1 - std::pow(beta2_, t)});
    var.zero_grad();
  }

  double rate_, beta1_, beta2_, epsilon_;
  options options_;
  std::unordered_map<const autodiff::node*, moments> state_;
};

}  // namespace typemesh::optim

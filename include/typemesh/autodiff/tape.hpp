// Reverse-mode autodiff, the typed part: recording an operation's gradient
// functions, and running the tape backward from a loss.
//
//   auto y = typemesh::einsum<batch, n>(x, w);       // records when x or w is tracked
//   auto loss = typemesh::reduce_mean(...);
//   typemesh::backward(loss);                        // fills w.grad()
//
// An operation calls `record(out, "name", gradient_of(x, f), gradient_of(w, g))`:
// f and g map the gradient of `out` to the gradient of x and of w, as tensors
// of x's and w's types. Inputs that are not tracked are skipped, so their
// gradient functions never run.
#pragma once

#include <algorithm>
#include <any>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unordered_set>
#include <utility>
#include <vector>

#include "typemesh/tensor/tape_node.hpp"
#include "typemesh/backend/kernels.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace autodiff {

// Adds g to the gradient held by n (which belongs to a tensor of type In).
// Gradients are held in In's canonical spelling, so that the tensors of every
// spelling of a layout that share the node find it.
template <class In, class G>
void accumulate(node& n, G&& g) {
  using held_t = typename In::canonical_type;
  if (!n.grad.has_value()) {
    held_t converted(std::forward<G>(g));
    converted.set_node(nullptr);
    n.grad = std::move(converted);
    return;
  }
  auto& held = std::any_cast<held_t&>(n.grad);
  const held_t add(std::forward<G>(g));
  if (held.local().size() != add.local().size()) {
    throw shape_error(typemesh::detail::cat("gradient of '", n.what, "': a contribution of ", add.local().size(),
                                            " local elements meets ", held.local().size()));
  }
  backend::add_into(held.space(), held.data(), add.data(), held.local_size());
}

// The gradient a node holds, as a tensor of type Want: a reference when Want
// is the canonical spelling it is held in, else a converted copy.
template <class Want>
decltype(auto) held_gradient(const std::any& g) {
  using held_t = typename Want::canonical_type;
  const held_t& held = std::any_cast<const held_t&>(g);
  if constexpr (std::is_same_v<held_t, Want>) {
    return held;
  } else {
    return Want(held);
  }
}

// An edge without a way to add its contribution into an array.
struct no_fold {};

template <class In, class F, class Fold = no_fold>
struct gradient_edge {
  const In* input;
  F f;
  Fold fold;
};

// Adds `dy`'s contribution to the input's gradient: folded into the values
// of a variable that optim::sgd::minimize descends on, where the edge can
// fold and no other tensor shares those values; else held in the node.
template <class In, class Out, class F, class Fold>
void push_contribution(const Out& dy, node& in, const F& f, const Fold& fold) {
  using held_t = typename In::canonical_type;
  if constexpr (!std::is_same_v<Fold, no_fold>) {
    if (in.descend && *in.descend->type == typeid(held_t)) {
      if (void* values = in.descend->sole_values()) {
        using T = typename held_t::value_type;
        if (fold(dy, static_cast<T*>(values), static_cast<T>(in.descend->scale), T{1})) {
          in.descend->folded = true;
          return;
        }
      }
    }
  }
  accumulate<In>(in, f(dy));
}

}  // namespace autodiff

// One input of an operation and the function from the output's gradient to
// that input's gradient.
template <class In, class F>
auto gradient_of(const In& input, F f) {
  return autodiff::gradient_edge<In, F>{&input, std::move(f), {}};
}

// The same, with `fold(dy, values, alpha, beta)` that computes values =
// alpha * f(dy) + beta * values in place over the input's local elements
// (in its canonical layout), without making f(dy), and returns true; or
// returns false, having written nothing, where it cannot. The edge then can
// take an SGD step inside the product (optim::sgd::minimize).
template <class In, class F, class Fold>
auto gradient_of(const In& input, F f, Fold fold) {
  return autodiff::gradient_edge<In, F, Fold>{&input, std::move(f), std::move(fold)};
}

// Records `out` as computed from the edges' inputs, when recording and at
// least one input is tracked. Returns out (moved when given an rvalue), so an
// operation can end with `return record(std::move(out), ...)`.
template <class Out, class... In, class... F, class... Fold>
std::decay_t<Out> record(Out&& out, const char* what, autodiff::gradient_edge<In, F, Fold>... edges) {
  using out_t = std::decay_t<Out>;
  if (!autodiff::recording() || !(edges.input->tracked() || ...)) return out_t(std::forward<Out>(out));
  auto n = autodiff::make_node(what);
  auto add_edge = [&](auto& e) {
    using in_t = std::remove_cvref_t<decltype(*e.input)>;
    if (!e.input->tracked()) return;
    n->edges.push_back(
        {e.input->node(), [f = std::move(e.f), fold = std::move(e.fold)](const std::any& g, autodiff::node& in) {
           autodiff::push_contribution<in_t>(autodiff::held_gradient<out_t>(g), in, f, fold);
         }});
  };
  (add_edge(edges), ...);
  out_t result(std::forward<Out>(out));
  result.set_node(std::move(n));
  return result;
}

namespace autodiff {
// Every node reachable from `root`, newest first. The list owns them, so the
// pass can drop edges as it goes.
inline std::vector<std::shared_ptr<node>> reachable(const std::shared_ptr<node>& root) {
  std::vector<std::shared_ptr<node>> order, stack{root};
  std::unordered_set<node*> seen{root.get()};
  while (!stack.empty()) {
    auto n = std::move(stack.back());
    stack.pop_back();
    for (auto& e : n->edges) {
      if (seen.insert(e.input.get()).second) stack.push_back(e.input);
    }
    order.push_back(std::move(n));
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a->order > b->order; });
  return order;
}
}  // namespace autodiff

// Runs the tape backward from `loss`, seeded with d(loss)/d(loss) = 1 (or with
// `seed`, a tensor of loss's type). Afterwards every tracked leaf that the
// loss depends on holds its gradient in grad(), added to what it held before;
// intermediate gradients are freed, and so is the recorded graph.
template <class T, class S, class L, class M>
void backward(const tensor<T, S, L, M>& loss, const tensor<T, S, L, M>* seed = nullptr) {
  if (!loss.tracked()) {
    throw error("backward: the loss does not depend on any tensor that requires a gradient");
  }
  no_grad pause;
  tensor<T, S, L, M> one = seed ? seed->detached() : tensor<T, S, L, M>(loss.mesh(), loss.shape());
  if (!seed) backend::fill(one.space(), one.data(), one.local_size(), T{1});
  auto order = autodiff::reachable(loss.node());
  autodiff::accumulate<tensor<T, S, L, M>>(*order.front(), std::move(one));
  for (const auto& n : order) {
    if (n->is_leaf()) continue;
    if (n->grad.has_value()) {
      for (auto& e : n->edges) {
        e.push(n->grad, *e.input);
        // Drop what this edge kept (often another input's values) before the
        // next edge runs: a variable whose values no other tensor still
        // shares can take its step in place (optim::sgd::minimize).
        e.push = nullptr;
      }
    }
    n->grad.reset();
    n->edges.clear();  // the graph is used once
  }
}

// The gradients of `loss` with respect to xs, as a tuple (one tensor each, of
// the x's type); the xs' own grad() is left as it was.
template <class Loss, class... X>
auto grad(const Loss& loss, const X&... xs) {
  auto check = [](const auto& x) {
    if (!x.tracked()) {
      throw error("grad: an argument does not require a gradient (call requires_grad or make it a variable)");
    }
  };
  (check(xs), ...);
  std::vector<std::any> saved;
  ((saved.push_back(xs.tracked() ? xs.node()->grad : std::any{}), xs.tracked() ? xs.node()->grad.reset() : void()),
   ...);
  // Put the xs' own gradients back however this ends.
  struct restore {
    std::vector<std::any>& saved;
    std::tuple<const X&...> xs;
    ~restore() {
      std::size_t i = 0;
      std::apply([&](const auto&... x) { ((x.node()->grad = std::move(saved[i++])), ...); }, xs);
    }
  } guard{saved, std::tie(xs...)};
  backward(loss);
  return std::make_tuple(X(xs.grad().detached())...);
}

}  // namespace typemesh

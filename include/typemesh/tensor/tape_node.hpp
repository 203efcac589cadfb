// Reverse-mode autodiff, the type-erased part that a tensor holds (the rest
// of autodiff, recording and backward, is in autodiff/ above the tensor
// layer): every tensor that needs a
// gradient points at a node; an operation on such tensors records a node for
// its result with one gradient function per input. The nodes of one device
// form its tape: each node has a sequence number on that device's thread, and
// `backward` runs them from the newest to the oldest.
//
// Gradients follow one convention everywhere: a device holds its slice of the
// gradient of the whole (logical) tensor, so replicas of a tensor hold equal
// gradients. That makes the dual of each collective what docs/ops.md lists
// (allreduce <-> identity, reduce_scatter <-> allgather, allconcat <->
// allsplit, alltoall <-> the reverse alltoall, a mesh replacement <-> the
// reverse replacement).
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

namespace typemesh::autodiff {

struct node {
  // Sequence number on this device: inputs always have smaller ones.
  std::uint64_t order = 0;
  // What made the value ("einsum", "relu", or a variable's name).
  std::string what;
  // The gradient accumulated so far: a tensor of the value's type, or empty.
  std::any grad;
  // For each input that needs a gradient: its node, and the function that
  // adds this node's contribution to it (given this node's gradient).
  struct edge {
    std::shared_ptr<node> input;
    std::function<void(const std::any& out_grad, node& input)> push;
  };
  std::vector<edge> edges;

  // Set on a variable's node by optim::sgd::minimize for one backward pass:
  // a contribution whose operation can add a multiple of itself to an array
  // (einsum's GEMMs) goes straight into the variable's values, `values +=
  // scale * contribution`, instead of into `grad`. `type` is the variable's
  // canonical tensor type, the one a contribution must have; `sole_values`
  // gives the variable's local elements, or null while another tensor shares
  // them (writing would copy them first: then the contribution is held, and
  // applied after the pass).
  struct descent {
    const std::type_info* type = nullptr;
    double scale = 0;
    std::function<void*()> sole_values;
    bool folded = false;  // whether a contribution went into the values
  };
  std::shared_ptr<descent> descend;

  bool is_leaf() const { return edges.empty(); }
};

}  // namespace typemesh::autodiff

namespace typemesh::autodiff_detail {
inline std::uint64_t& counter() {
  thread_local std::uint64_t n = 0;
  return n;
}
inline int& paused() {
  thread_local int depth = 0;
  return depth;
}
}  // namespace typemesh::autodiff_detail

namespace typemesh::autodiff {

inline std::shared_ptr<node> make_node(std::string what) {
  auto n = std::make_shared<node>();
  n->order = ++autodiff_detail::counter();
  n->what = std::move(what);
  return n;
}

// Whether operations record nodes now (false inside a no_grad scope).
inline bool recording() { return autodiff_detail::paused() == 0; }

}  // namespace typemesh::autodiff

namespace typemesh {

// Within its scope no operation records a node: for evaluation, optimizer
// steps and the backward pass itself.
class no_grad {
 public:
  no_grad() { ++autodiff_detail::paused(); }
  ~no_grad() { --autodiff_detail::paused(); }
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;
};

}  // namespace typemesh

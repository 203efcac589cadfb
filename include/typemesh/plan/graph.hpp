// The network graph of the strategy search: layers are vertices with an
// iteration space (named dims with sizes), edges carry the tensors between
// them and say which iteration dims of the producer and of the consumer each
// tensor dim follows.
//
// A layer's configuration assigns a split count to every iteration dim. A
// tensor dim's split under a configuration is the product of the splits of
// the iteration dims it is mapped to (none: 1, whole on every device; several:
// a flattened dim such as the output of a reshape).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "typemesh/core/error.hpp"

namespace typemesh {

// A malformed graph, configuration or plan; the message names the layer, the
// dim or the line.
class plan_error : public error {
 public:
  using error::error;
};

namespace plan {

// The cost model handles layers and tensors of at most this many dims.
inline constexpr std::size_t max_rank = 16;

// The most memory a graph (its layers, their outputs and the edges) may take;
// the builder and the reader refuse a graph that would need more before
// allocating it.
inline constexpr std::uint64_t default_graph_bytes = std::uint64_t{256} << 20;

namespace graph_detail {
// a · b, or a plan_error naming both sizes and what they are the sizes of.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw plan_error(detail::cat(what, ": ", a, " * ", b, " overflows a 64-bit size"));
  return r;
}
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    throw plan_error(detail::cat(what, ": ", a, " + ", b, " overflows a 64-bit size"));
  return r;
}
// The product of sizes, overflow-checked.
inline std::int64_t checked_product(const std::vector<std::int64_t>& sizes, const std::string& what) {
  std::int64_t n = 1;
  for (auto d : sizes) n = checked_mul(n, d, detail::cat(what, " ", detail::list(sizes)));
  return n;
}
// Bytes a tensor's shape and map take in a graph: the vectors, and their
// buffers counted at 32 bytes or more each (the allocator's overhead).
inline std::uint64_t tensor_bytes(std::size_t rank, std::size_t mapped_dims) {
  return 2 * (sizeof(std::vector<int>) + 32) + rank * (sizeof(std::int64_t) + sizeof(std::vector<int>) + 32) +
         mapped_dims * sizeof(int);
}
}  // namespace graph_detail

enum class layer_kind {
  conv,          // convolution, costed as a GEMM (m = b·h·w, n = filters, k = c·r·s)
  pooling,       // max/avg pooling with halo exchange
  fc,            // fully connected, a GEMM over (batch dims…, n, k)
  einsum,        // a two-operand contraction (also the embedding lookup)
  elementwise,   // add/mul of two equal tensors
  norm,          // layer or batch normalisation along one axis
  reduce_mean,   // mean over some axes
  softmax,       // softmax along one axis
  softmax_xent,  // softmax + cross-entropy loss along the last axis
  concat,        // concatenation; the concatenated dim is never split
  stack,         // stacking along a new unsplit dim
  unstack,       // the inverse of stack
  ravel,         // reshape into one dim; only contiguous splits
  unravel,       // reshape out of one dim; only contiguous splits
  lstm,          // a multi-layer LSTM, one fused GEMM per cell
};

inline const char* kind_name(layer_kind k) {
  switch (k) {
    case layer_kind::conv: return "conv";
    case layer_kind::pooling: return "pooling";
    case layer_kind::fc: return "fc";
    case layer_kind::einsum: return "einsum";
    case layer_kind::elementwise: return "elementwise";
    case layer_kind::norm: return "norm";
    case layer_kind::reduce_mean: return "reduce_mean";
    case layer_kind::softmax: return "softmax";
    case layer_kind::softmax_xent: return "softmax_xent";
    case layer_kind::concat: return "concat";
    case layer_kind::stack: return "stack";
    case layer_kind::unstack: return "unstack";
    case layer_kind::ravel: return "ravel";
    case layer_kind::unravel: return "unravel";
    case layer_kind::lstm: return "lstm";
  }
  return "?";
}

// One dim of an iteration space. A dim that is not splittable keeps its size
// (it counts in the costs) but always has split 1.
struct dim {
  std::string name;
  std::int64_t size = 1;
  bool splittable = true;
};

// A group of iteration dims that acts as one GEMM dim: extent = scale·∏ sizes,
// split = ∏ splits.
struct dim_group {
  std::vector<int> dims;
  double scale = 1.0;
};

// The GEMM view of a contraction-like layer: independent batch dims, then the
// m, n and k groups; pw_ops pointwise ops follow the GEMM on its m×n output.
struct gemm_view {
  std::vector<int> batch;
  dim_group m, n, k;
  int pw_ops = 0;
};

// How a tensor's dims follow a layer's iteration dims: map[i] lists the
// iteration dims whose splits multiply into the split of tensor dim i.
using tensor_map = std::vector<std::vector<int>>;

struct layer {
  std::string name;
  layer_kind kind = layer_kind::elementwise;
  std::vector<dim> dims;
  // Kind parameters.
  gemm_view gemm;                  // conv, fc, einsum, lstm
  int pw_ops = 0;                  // elementwise
  int axis = -1;                   // norm, softmax
  std::vector<int> axes;           // reduce_mean
  std::int64_t window_r = 0, window_s = 0;  // pooling
  std::vector<std::int64_t> input_shape;    // pooling (halo of the input)
  // Output tensors: shape and map onto this layer's dims.
  std::vector<std::vector<std::int64_t>> out_shapes;
  std::vector<tensor_map> out_maps;

  int find_dim(const std::string& n) const {
    for (std::size_t i = 0; i < dims.size(); ++i)
      if (dims[i].name == n) return static_cast<int>(i);
    return -1;
  }
};

// What the cost model reads of a layer, per kind: its dims, the GEMM view of
// conv, fc, einsum and lstm, the axis of norm and softmax, the axes of
// reduce_mean, the window and input of pooling. Throws plan_error naming the
// layer and what is missing or out of range.
inline void validate_layer(const layer& l) {
  const std::string who = detail::cat("layer ", l.name, " (", kind_name(l.kind), ")");
  const int rank = static_cast<int>(l.dims.size());
  if (l.dims.empty()) throw plan_error(detail::cat(who, " has no iteration dims"));
  if (l.dims.size() > max_rank)
    throw plan_error(detail::cat(who, " has ", l.dims.size(), " dims; at most ", max_rank, " are supported"));
  for (const auto& d : l.dims)
    if (d.size < 1) throw plan_error(detail::cat(who, ": dim ", d.name, " has size ", d.size));
  auto in_range = [&](int d, const char* what) {
    if (d < 0 || d >= rank)
      throw plan_error(detail::cat(who, ": ", what, " names dim #", d, " but the layer has ", rank, " dims"));
  };
  auto distinct = [&](const std::vector<int>& ds, const char* what) {
    for (int d : ds) in_range(d, what);
    for (std::size_t i = 0; i < ds.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (ds[i] == ds[j])
          throw plan_error(detail::cat(who, ": ", what, " names dim ", l.dims[static_cast<std::size_t>(ds[i])].name,
                                       " twice"));
  };
  switch (l.kind) {
    case layer_kind::conv:
    case layer_kind::fc:
    case layer_kind::einsum:
    case layer_kind::lstm: {
      const auto& g = l.gemm;
      if (g.m.dims.empty()) throw plan_error(detail::cat(who, " needs gemm.m (the dims of the GEMM's m)"));
      if (g.n.dims.empty()) throw plan_error(detail::cat(who, " needs gemm.n (the dims of the GEMM's n)"));
      std::vector<int> all = g.batch;
      for (const auto* gr : {&g.m, &g.n, &g.k}) {
        all.insert(all.end(), gr->dims.begin(), gr->dims.end());
        if (!(gr->scale > 0) || !std::isfinite(gr->scale))
          throw plan_error(detail::cat(who, ": a GEMM group's scale ", gr->scale, " must be positive and finite"));
      }
      distinct(all, "the GEMM view (gemm.batch, gemm.m, gemm.n, gemm.k together)");
      if (g.pw_ops < 0) throw plan_error(detail::cat(who, ": gemm.pw ", g.pw_ops, " is negative"));
      if (l.kind == layer_kind::lstm && rank != 5)
        throw plan_error(detail::cat(who, " has ", rank, " dims; an lstm needs five: layer, seq, b, n, k"));
      break;
    }
    case layer_kind::pooling:
      if (rank != 4) throw plan_error(detail::cat(who, " has ", rank, " dims; pooling needs four: b, c, h, w"));
      if (l.input_shape.size() != 4)
        throw plan_error(detail::cat(who, " needs input (the input's shape b x c x h x w, for the halo), has rank ",
                                     l.input_shape.size()));
      for (auto x : l.input_shape)
        if (x < 1) throw plan_error(detail::cat(who, ": input ", detail::list(l.input_shape), " has a size below 1"));
      if (l.window_r < 1 || l.window_s < 1)
        throw plan_error(detail::cat(who, " needs window (RxS, both at least 1), has ", l.window_r, "x", l.window_s));
      break;
    case layer_kind::norm:
    case layer_kind::softmax:
      if (l.axis < 0) throw plan_error(detail::cat(who, " needs axis (the dim it normalises along)"));
      in_range(l.axis, "axis");
      break;
    case layer_kind::reduce_mean:
      if (l.axes.empty()) throw plan_error(detail::cat(who, " needs axes (the dims it averages over)"));
      distinct(l.axes, "axes");
      break;
    case layer_kind::elementwise:
      if (l.pw_ops < 0) throw plan_error(detail::cat(who, ": pw ", l.pw_ops, " is negative"));
      break;
    case layer_kind::softmax_xent:
    case layer_kind::concat:
    case layer_kind::stack:
    case layer_kind::unstack:
    case layer_kind::ravel:
    case layer_kind::unravel:
      break;
  }
}

// A tensor from layer src (its output port src_port) into layer dst.
struct edge {
  int src = 0, dst = 0;
  int src_port = 0;
  std::vector<std::int64_t> shape;
  tensor_map src_map, dst_map;
};

struct graph {
  std::string name;
  std::vector<layer> layers;
  std::vector<edge> edges;
  // Smallest slice a split may leave: a dim of size d may be split e ways when
  // e divides d and d / e >= cutoff.
  double cutoff = 4.0;

  int size() const { return static_cast<int>(layers.size()); }

  // Every structural invariant; throws plan_error naming the layer or edge.
  void validate() const {
    if (!(cutoff > 0) || !std::isfinite(cutoff))
      throw plan_error(detail::cat("graph ", name, ": cutoff ", cutoff, " must be a positive finite number"));
    auto check_map = [&](const layer& l, const tensor_map& m, const std::vector<std::int64_t>& shape,
                         const char* what) {
      if (m.size() != shape.size())
        throw plan_error(detail::cat("layer ", l.name, ": ", what, " tensor of rank ", shape.size(),
                                     " has a map of rank ", m.size()));
      if (shape.size() > max_rank)
        throw plan_error(detail::cat("layer ", l.name, ": ", what, " tensor ", detail::list(shape), " has rank ",
                                     shape.size(), "; at most ", max_rank, " are supported"));
      for (auto x : shape)
        if (x < 1)
          throw plan_error(detail::cat("layer ", l.name, ": ", what, " tensor ", detail::list(shape),
                                       " has a size below 1"));
      // A split iteration dim splits one tensor dim: each dim appears once.
      std::vector<char> used(l.dims.size(), 0);
      for (const auto& ds : m)
        for (int d : ds) {
          if (d < 0 || d >= static_cast<int>(l.dims.size()))
            throw plan_error(detail::cat("layer ", l.name, ": ", what, " tensor maps onto dim #", d,
                                         " but the layer has ", l.dims.size(), " dims"));
          if (used[static_cast<std::size_t>(d)]++)
            throw plan_error(detail::cat("layer ", l.name, ": ", what, " tensor maps onto dim ",
                                         l.dims[static_cast<std::size_t>(d)].name, " twice"));
        }
    };
    for (const auto& l : layers) {
      validate_layer(l);
      if (l.out_shapes.size() != l.out_maps.size())
        throw plan_error(detail::cat("layer ", l.name, ": outputs and their maps differ in number"));
      for (std::size_t i = 0; i < l.out_shapes.size(); ++i)
        check_map(l, l.out_maps[i], l.out_shapes[i], "output");
    }
    for (const auto& e : edges) {
      if (e.src < 0 || e.src >= size() || e.dst < 0 || e.dst >= size())
        throw plan_error(detail::cat("edge ", e.src, " -> ", e.dst, " names a layer that does not exist"));
      if (e.src == e.dst)
        throw plan_error(detail::cat("layer ", layers[e.src].name, " feeds itself"));
      check_map(layers[e.src], e.src_map, e.shape, "edge source");
      check_map(layers[e.dst], e.dst_map, e.shape, "edge target");
    }
  }
};

// Builds graphs op by op, the way a model is written: each op adds one layer
// and returns its output tensors; an input tensor given to an op adds the edge
// from its producer. Tensors from input() have no producer (no edge).
class graph_builder {
 public:
  struct tensor {
    int layer = -1;  // producer, -1 for a graph input
    int port = 0;
    std::vector<std::int64_t> shape;
    std::size_t rank() const { return shape.size(); }
    std::int64_t operator[](std::size_t i) const { return shape[i]; }
  };

  explicit graph_builder(std::string name, double cutoff = 4.0) {
    g_.name = std::move(name);
    g_.cutoff = cutoff;
  }

  tensor input(std::vector<std::int64_t> shape) const { return tensor{-1, 0, std::move(shape)}; }

  // Adds a layer whose inputs are `ins` (each with its map onto the layer's
  // dims). Returns the new layer's index. A second tensor from the same
  // producer replaces the first edge (one edge per pair of layers).
  int add(layer l, const std::vector<std::pair<tensor, tensor_map>>& ins) {
    const int id = g_.size();
    if (l.name.empty()) l.name = detail::cat(kind_name(l.kind), id);
    g_.layers.push_back(std::move(l));
    for (const auto& [t, m] : ins) {
      if (t.layer < 0) continue;
      if (t.layer >= id)
        throw plan_error(detail::cat("layer ", g_.layers.back().name, ": input from unknown layer #", t.layer));
      edge e{t.layer, id, t.port, t.shape, g_.layers[t.layer].out_maps.at(t.port), m};
      bool replaced = false;
      for (auto& old : g_.edges)
        if (old.src == e.src && old.dst == e.dst) {
          old = e;
          replaced = true;
        }
      if (!replaced) g_.edges.push_back(std::move(e));
    }
    return id;
  }

  tensor out(int layer_id, int port = 0) const {
    return tensor{layer_id, port, g_.layers.at(layer_id).out_shapes.at(port)};
  }

  graph& get() { return g_; }
  graph finish() {
    g_.validate();
    return std::move(g_);
  }

  // ---- ops --------------------------------------------------------------

  static std::int64_t conv_out(std::int64_t h, std::int64_t r, std::int64_t stride, std::int64_t pad) {
    const std::string what = detail::cat("window ", r, " with pad ", pad, " over extent ", h);
    if (h < 1 || r < 1 || pad < 0)
      throw plan_error(detail::cat(what, ": extent and window must be positive, the pad non-negative"));
    const std::int64_t x = graph_detail::checked_add(h - r, graph_detail::checked_mul(2, pad, what), what);
    if (x < 0 || stride < 1)
      throw plan_error(detail::cat("window ", r, " with pad ", pad, " does not fit extent ", h));
    return x / stride + 1;
  }

  // img (b, c, h, w), filter (n, c, r, s). Iteration space (b, c, h, w, r, s,
  // n) with h, w the output extents; h and w are never split (no halo).
  tensor conv(const tensor& img, std::array<std::int64_t, 4> f, std::array<std::int64_t, 2> stride = {1, 1},
              std::array<std::int64_t, 2> pad = {0, 0}, int pw_ops = 0, std::string name = {}) {
    need_rank(img, 4, "conv", name);
    if (img[1] != f[1])
      throw plan_error(detail::cat("conv ", name, ": image has ", img[1], " channels, filter expects ", f[1]));
    const auto ho = conv_out(img[2], f[2], stride[0], pad[0]);
    const auto wo = conv_out(img[3], f[3], stride[1], pad[1]);
    layer l;
    l.name = std::move(name);
    l.kind = layer_kind::conv;
    l.dims = {{"b", img[0]}, {"c", img[1]}, {"h", ho, false}, {"w", wo, false},
              {"r", f[2]},   {"s", f[3]},   {"n", f[0]}};
    l.gemm = gemm_view{{}, {{0, 2, 3}}, {{6}}, {{1, 4, 5}}, pw_ops};
    l.out_shapes = {{img[0], f[0], ho, wo}};
    l.out_maps = {{{0}, {6}, {2}, {3}}};
    return out(add(std::move(l), {{img, {{0}, {1}, {2}, {3}}}}));
  }
  tensor conv(const tensor& img, std::array<std::int64_t, 4> f, std::int64_t stride, std::int64_t pad = 0,
              int pw_ops = 0, std::string name = {}) {
    return conv(img, f, {stride, stride}, {pad, pad}, pw_ops, std::move(name));
  }

  tensor pooling(const tensor& img, std::array<std::int64_t, 2> window, std::int64_t stride = 1,
                 std::int64_t pad = 0, std::string name = {}) {
    need_rank(img, 4, "pooling", name);
    const auto ho = conv_out(img[2], window[0], stride, pad);
    const auto wo = conv_out(img[3], window[1], stride, pad);
    layer l;
    l.name = std::move(name);
    l.kind = layer_kind::pooling;
    l.dims = {{"b", img[0]}, {"c", img[1]}, {"h", ho}, {"w", wo}};
    l.window_r = window[0];
    l.window_s = window[1];
    l.input_shape = img.shape;
    l.out_shapes = {{img[0], img[1], ho, wo}};
    l.out_maps = {identity(4)};
    return out(add(std::move(l), {{img, identity(4)}}));
  }

  // x (batch dims…, k) times a k×n weight: iteration space (batch dims…, n, k).
  tensor fc(const tensor& x, std::int64_t units, int pw_ops = 0, std::string name = {}) {
    if (x.rank() < 2) throw plan_error(detail::cat("fc ", name, ": input needs rank >= 2, has ", x.rank()));
    const int nb = static_cast<int>(x.rank()) - 1;
    layer l;
    l.name = std::move(name);
    l.kind = layer_kind::fc;
    tensor_map in, o;
    std::vector<int> m;
    for (int i = 0; i < nb; ++i) {
      l.dims.push_back({i == 0 ? "b" : detail::cat("b", i), x[i]});
      m.push_back(i);
      in.push_back({i});
      o.push_back({i});
    }
    l.dims.push_back({"n", units});
    l.dims.push_back({"k", x[nb]});
    in.push_back({nb + 1});
    o.push_back({nb});
    l.gemm = gemm_view{{}, {m}, {{nb}}, {{nb + 1}}, pw_ops};
    auto shape = x.shape;
    shape.back() = units;
    l.out_shapes = {shape};
    l.out_maps = {o};
    return out(add(std::move(l), {{x, in}}));
  }

  // Two-operand contraction, "ble,ef->blf". Iteration space: the output's
  // letters, then the contracted letters. Each operand needs a letter of its
  // own (an m and an n dim).
  tensor einsum(const std::string& eq, const tensor& a, const tensor& b, int pw_ops = 0, std::string name = {}) {
    const auto arrow = eq.find("->");
    const auto comma = eq.find(',');
    if (arrow == std::string::npos || comma == std::string::npos || comma > arrow)
      throw plan_error(detail::cat("einsum ", name, ": equation '", eq, "' is not of the form ab,bc->ac"));
    const std::string sa = eq.substr(0, comma), sb = eq.substr(comma + 1, arrow - comma - 1),
                      so = eq.substr(arrow + 2);
    if (sa.size() != a.rank() || sb.size() != b.rank())
      throw plan_error(detail::cat("einsum ", name, ": '", eq, "' does not match operand ranks ", a.rank(),
                                   " and ", b.rank()));
    std::map<char, std::int64_t> size;
    auto note = [&](const std::string& s, const tensor& t) {
      for (std::size_t i = 0; i < s.size(); ++i) {
        auto [it, fresh] = size.emplace(s[i], t[i]);
        if (!fresh && it->second != t[i])
          throw plan_error(detail::cat("einsum ", name, ": dim '", s[i], "' has sizes ", it->second, " and ", t[i]));
      }
    };
    note(sa, a);
    note(sb, b);
    auto has = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
    for (char c : sa + sb)
      if (!(has(sa, c) && has(sb, c)) && !has(so, c))
        throw plan_error(detail::cat("einsum ", name, ": '", eq, "' drops dim '", c,
                                     "' of one operand (sum it out with a reduction first)"));
    for (char c : so)
      if (std::count(so.begin(), so.end(), c) != 1)
        throw plan_error(detail::cat("einsum ", name, ": output dim '", c, "' repeats"));
    std::string dims = so;
    for (char c : sa)
      if (has(sb, c) && !has(so, c)) dims += c;
    layer l;
    l.name = std::move(name);
    l.kind = layer_kind::einsum;
    for (char c : dims) {
      if (!size.count(c))
        throw plan_error(detail::cat("einsum ", l.name, ": output dim '", c, "' is in neither operand"));
      l.dims.push_back({std::string(1, c), size[c]});
    }
    auto idx = [&](char c) { return static_cast<int>(dims.find(c)); };
    gemm_view gv;
    gv.pw_ops = pw_ops;
    for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
      const char c = dims[i];
      const bool ia = has(sa, c), ib = has(sb, c), io = has(so, c);
      if (ia && ib && io) gv.batch.push_back(i);
      else if (ia && ib) gv.k.dims.push_back(i);
      else if (ia) gv.m.dims.push_back(i);
      else gv.n.dims.push_back(i);
    }
    if (gv.m.dims.empty() || gv.n.dims.empty())
      throw plan_error(detail::cat("einsum ", l.name, ": '", eq, "' needs a dim of each operand's own"));
    l.gemm = gv;
    auto map_of = [&](const std::string& s) {
      tensor_map m;
      for (char c : s) m.push_back({idx(c)});
      return m;
    };
    std::vector<std::int64_t> shape;
    for (char c : so) shape.push_back(size[c]);
    l.out_shapes = {shape};
    l.out_maps = {map_of(so)};
    return out(add(std::move(l), {{a, map_of(sa)}, {b, map_of(sb)}}));
  }

  // Embedding lookup as a one-hot contraction: (batch…, vocab) × (vocab, d).
  tensor embedding(const tensor& ids, std::int64_t vocab, std::int64_t d, std::string name = {}) {
    static const std::string letters = "abcdefghijklmnopqrstuvwxyz";
    const std::size_t r = ids.rank();
    if (r + 2 > letters.size()) throw plan_error(detail::cat("embedding ", name, ": rank too large"));
    auto shape = ids.shape;
    shape.push_back(vocab);
    const std::string in = letters.substr(0, r + 1);
    const std::string eq = in + "," + letters.substr(r, 2) + "->" + letters.substr(0, r) + letters[r + 1];
    if (ids.layer >= 0) throw plan_error(detail::cat("embedding ", name, ": ids must be a graph input"));
    const auto t = einsum(eq, input(shape), input({vocab, d}), 0, std::move(name));
    // Dims: the ids' dims, the embedding dim, the vocabulary.
    auto& dims = g_.layers[t.layer].dims;
    for (std::size_t i = 0; i < r; ++i) dims[i].name = i == 0 ? "b" : detail::cat("b", i);
    dims[r].name = "e";
    dims[r + 1].name = "vocab";
    return t;
  }

  tensor elementwise(const tensor& a, const tensor& b, int pw_ops = 0, std::string name = {}) {
    if (a.shape != b.shape)
      throw plan_error(detail::cat("elementwise ", name, ": shapes ", detail::list(a.shape), " and ",
                                   detail::list(b.shape), " differ"));
    layer l = plain(layer_kind::elementwise, a.shape, std::move(name));
    l.pw_ops = pw_ops;
    const auto m = identity(a.rank());
    return out(add(std::move(l), {{a, m}, {b, m}}));
  }

  tensor norm(const tensor& x, int axis = -1, std::string name = {}) {
    if (x.rank() < 2) throw plan_error(detail::cat("norm ", name, ": input needs rank >= 2"));
    layer l = plain(layer_kind::norm, x.shape, std::move(name));
    l.axis = fix_axis(axis, x.rank(), l.name);
    return out(add(std::move(l), {{x, identity(x.rank())}}));
  }
  tensor batch_norm(const tensor& x, std::string name = {}) { return norm(x, 0, std::move(name)); }

  tensor reduce_mean(const tensor& x, std::vector<int> axes, bool keepdims = false, std::string name = {}) {
    layer l = plain(layer_kind::reduce_mean, x.shape, std::move(name));
    for (auto& a : axes) a = fix_axis(a, x.rank(), l.name);
    l.axes = axes;
    std::vector<std::int64_t> shape;
    tensor_map m;
    for (int i = 0; i < static_cast<int>(x.rank()); ++i) {
      const bool red = std::find(axes.begin(), axes.end(), i) != axes.end();
      if (!red) {
        shape.push_back(x[i]);
        m.push_back({i});
      } else if (keepdims) {
        shape.push_back(1);
        m.push_back({});
      }
    }
    if (shape.empty()) {
      shape = {1};
      m = {{}};
    }
    l.out_shapes = {shape};
    l.out_maps = {m};
    return out(add(std::move(l), {{x, identity(x.rank())}}));
  }

  tensor softmax(const tensor& x, int axis, std::string name = {}) {
    layer l = plain(layer_kind::softmax, x.shape, std::move(name));
    l.axis = fix_axis(axis, x.rank(), l.name);
    return out(add(std::move(l), {{x, identity(x.rank())}}));
  }

  tensor softmax_xent(const tensor& x, std::string name = {}) {
    layer l = plain(layer_kind::softmax_xent, x.shape, std::move(name));
    return out(add(std::move(l), {{x, identity(x.rank())}}));
  }

  tensor concat(const std::vector<tensor>& xs, int axis, std::string name = {}) {
    if (xs.size() < 2) throw plan_error(detail::cat("concat ", name, ": needs two or more tensors"));
    const auto r = xs[0].rank();
    const int a = fix_axis(axis, r, name);
    auto shape = xs[0].shape;
    shape[a] = 0;
    for (const auto& t : xs) {
      if (t.rank() != r) throw plan_error(detail::cat("concat ", name, ": tensors differ in rank"));
      for (std::size_t i = 0; i < r; ++i)
        if (static_cast<int>(i) != a && t[i] != xs[0][i])
          throw plan_error(detail::cat("concat ", name, ": dim #", i, " differs: ", t[i], " vs ", xs[0][i]));
      shape[a] = graph_detail::checked_add(shape[a], t[a], detail::cat("concat ", name, ": the concatenated dim"));
    }
    layer l = plain(layer_kind::concat, xs[0].shape, std::move(name));
    l.dims[a].splittable = false;
    l.out_shapes = {shape};
    std::vector<std::pair<tensor, tensor_map>> ins;
    for (const auto& t : xs) ins.push_back({t, identity(r)});
    return out(add(std::move(l), ins));
  }

  // Stacks equal tensors along a new (unsplit) dim `axis`.
  tensor stack(const std::vector<tensor>& xs, int axis = 0, std::string name = {}) {
    if (xs.empty()) throw plan_error(detail::cat("stack ", name, ": nothing to stack"));
    for (const auto& t : xs)
      if (t.shape != xs[0].shape) throw plan_error(detail::cat("stack ", name, ": tensors differ in shape"));
    const auto r = xs[0].rank();
    const int a = fix_axis(axis, r + 1, name);
    auto dom = xs[0].shape;
    dom.insert(dom.begin() + a, 1);
    layer l = plain(layer_kind::stack, dom, std::move(name));
    l.dims[a].splittable = false;
    dom[a] = static_cast<std::int64_t>(xs.size());
    l.out_shapes = {dom};
    tensor_map in;
    for (int i = 0; i < static_cast<int>(r + 1); ++i)
      if (i != a) in.push_back({i});
    std::vector<std::pair<tensor, tensor_map>> ins;
    for (const auto& t : xs) ins.push_back({t, in});
    return out(add(std::move(l), ins));
  }

  std::vector<tensor> unstack(const tensor& x, int axis = 0, std::string name = {}) {
    const int a = fix_axis(axis, x.rank(), name);
    auto dom = x.shape;
    const auto count = dom[a];
    const auto per_output = graph_detail::tensor_bytes(x.rank() - 1, x.rank() - 1);
    if (static_cast<std::uint64_t>(count) > default_graph_bytes / per_output)
      throw plan_error(detail::cat("unstack ", name, ": ", count, " outputs of ", detail::list(x.shape),
                                   " would need more than the graph's memory limit of ", default_graph_bytes >> 20,
                                   " MiB"));
    dom[a] = 1;
    layer l = plain(layer_kind::unstack, dom, std::move(name));
    l.dims[a].splittable = false;
    auto oshape = x.shape;
    oshape.erase(oshape.begin() + a);
    tensor_map om;
    for (int i = 0; i < static_cast<int>(x.rank()); ++i)
      if (i != a) om.push_back({i});
    l.out_shapes.assign(static_cast<std::size_t>(count), oshape);
    l.out_maps.assign(static_cast<std::size_t>(count), om);
    const int id = add(std::move(l), {{x, identity(x.rank())}});
    std::vector<tensor> r;
    for (std::int64_t i = 0; i < count; ++i) r.push_back(out(id, static_cast<int>(i)));
    return r;
  }

  // Reshape = ravel into one dim, then unravel into `shape` (two layers).
  tensor reshape(const tensor& x, std::vector<std::int64_t> shape, std::string name = {}) {
    const auto n = graph_detail::checked_product(x.shape, detail::cat("reshape ", name, ": elements of"));
    const auto n2 = graph_detail::checked_product(shape, detail::cat("reshape ", name, ": elements of"));
    if (n != n2)
      throw plan_error(detail::cat("reshape ", name, ": ", detail::list(x.shape), " has ", n, " elements, ",
                                   detail::list(shape), " has ", n2));
    layer r = plain(layer_kind::ravel, x.shape, name.empty() ? std::string{} : name + ".ravel");
    std::vector<int> all(x.rank());
    for (int i = 0; i < static_cast<int>(x.rank()); ++i) all[i] = i;
    r.out_shapes = {{n}};
    r.out_maps = {{all}};
    const auto flat = out(add(std::move(r), {{x, identity(x.rank())}}));
    layer u = plain(layer_kind::unravel, shape, name.empty() ? std::string{} : name + ".unravel");
    std::vector<int> all2(shape.size());
    for (int i = 0; i < static_cast<int>(shape.size()); ++i) all2[i] = i;
    return out(add(std::move(u), {{flat, {all2}}}));
  }

  // x (batch, seq, units) through `layers` LSTM layers of `units` units.
  // Iteration space (layer, seq, batch, n, k); seq is never split.
  tensor lstm(const tensor& x, std::int64_t units, std::int64_t layers, std::string name = {}) {
    need_rank(x, 3, "lstm", name);
    if (x[2] != units)
      throw plan_error(detail::cat("lstm ", name, ": input has ", x[2], " features, the cell has ", units, " units"));
    layer l;
    l.name = std::move(name);
    l.kind = layer_kind::lstm;
    l.dims = {{"layer", layers}, {"seq", x[1], false}, {"b", x[0]}, {"n", units}, {"k", units}};
    // Four gates fused along n, input and recurrent weights along k.
    l.gemm = gemm_view{{0}, {{1, 2}}, {{3}, 4.0}, {{4}, 2.0}, 3};
    l.out_shapes = {x.shape};
    l.out_maps = {{{2}, {1}, {3}}};
    return out(add(std::move(l), {{x, {{2}, {1}, {4}}}}));
  }

 private:
  static tensor_map identity(std::size_t r) {
    tensor_map m(r);
    for (std::size_t i = 0; i < r; ++i) m[i] = {static_cast<int>(i)};
    return m;
  }
  static int fix_axis(int axis, std::size_t rank, const std::string& name) {
    const int r = static_cast<int>(rank);
    const int a = axis < 0 ? axis + r : axis;
    if (a < 0 || a >= r) throw plan_error(detail::cat("layer ", name, ": axis ", axis, " out of range for rank ", r));
    return a;
  }
  static void need_rank(const tensor& t, std::size_t r, const char* op, const std::string& name) {
    if (t.rank() != r)
      throw plan_error(detail::cat(op, " ", name, ": input ", detail::list(t.shape), " needs rank ", r));
  }
  static layer plain(layer_kind k, const std::vector<std::int64_t>& shape, std::string name) {
    layer l;
    l.name = std::move(name);
    l.kind = k;
    static const char* names[] = {"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"};
    for (std::size_t i = 0; i < shape.size(); ++i)
      l.dims.push_back({i < 8 ? names[i] : detail::cat("d", i), shape[i]});
    l.out_shapes = {shape};
    l.out_maps = {identity(shape.size())};
    return l;
  }

  graph g_;
};

}  // namespace plan
}  // namespace typemesh

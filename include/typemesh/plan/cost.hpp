// The cost model of the search (PaSE, Eq. 1): for a strategy φ,
//   cost(φ) = Σ_layers t_l(φ_l) + Σ_edges r · words(φ_src, φ_dst),
// everything in FLOP units per device. t_l is a layer's computation (forward
// and backward) plus its intra-layer communication; r = peak FLOP/s divided by
// the link bandwidth in words/s, so that a word moved costs r FLOPs. An
// all-reduce of w words over P devices moves 2·(P-1)·w/P words per device.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "typemesh/plan/config.hpp"
#include "typemesh/plan/graph.hpp"

namespace typemesh::plan {

struct machine {
  double tflops = 10.0;       // peak per device, TFLOP/s
  double bandwidth_gb = 16.0; // per link, GB/s
  // FLOPs per word moved (words of 8 bytes).
  double r() const { return (tflops * 1000.0) / (bandwidth_gb / 8.0); }
};

// Throws plan_error unless both parameters, and the FLOPs per word they give,
// are positive and finite.
inline void check_machine(const machine& m) {
  if (!(m.tflops > 0) || !std::isfinite(m.tflops))
    throw plan_error(detail::cat("machine: tflops (--flops) is ", m.tflops, "; it must be a positive finite number"));
  if (!(m.bandwidth_gb > 0) || !std::isfinite(m.bandwidth_gb))
    throw plan_error(detail::cat("machine: bandwidth_gb (--bw) is ", m.bandwidth_gb,
                                 "; it must be a positive finite number"));
  const double r = m.r();
  if (!(r > 0) || !std::isfinite(r))
    throw plan_error(detail::cat("machine: tflops ", m.tflops, " over bandwidth_gb ", m.bandwidth_gb,
                                 " gives ", r, " FLOPs per word; it must be positive and finite"));
}

// The most memory build_problem may allocate: configurations, their costs and
// the edges' cost tables, checked before each allocation.
struct problem_limits {
  std::uint64_t max_bytes = std::uint64_t{4} << 30;
  std::uint64_t max_configs = default_max_configs;  // per layer
};

namespace cost_detail {

inline double allreduce(double r, double words, double procs) { return r * ((words / procs) * (2.0 * (procs - 1.0))); }

// Words the target must receive: its slice less what it already holds. When the
// target uses more devices than the source, some device holds nothing.
inline double area_needed(const double* src_pp, const double* dst_pp, std::size_t rank, double src_procs,
                          double dst_procs) {
  double area = 1.0, inter = 1.0;
  for (std::size_t i = 0; i < rank; ++i) {
    area *= dst_pp[i];
    inter *= std::min(dst_pp[i], src_pp[i]);
  }
  if (dst_procs > src_procs) inter = 0.0;
  return std::max(area - inter, 0.0);
}

struct group_val {
  double extent_pp;  // per-device extent
  double splits;
};

inline group_val group(const layer& l, const dim_group& g, const split_t* c) {
  double ext = 1.0, sp = 1.0;
  for (int d : g.dims) {
    ext *= static_cast<double>(l.dims[d].size);
    sp *= c[d];
  }
  return {g.scale * ext / sp, sp};
}

// GEMM cost: 1 GEMM forward, 2 backward; 3 ops per pointwise op on the output;
// all-reduces of the output over k, of the input gradient over n, of the
// weight gradient over m; all of it once per batch slice.
inline double gemm(double r, const layer& l, const gemm_view& g, const split_t* c) {
  double batches = 1.0;
  for (int d : g.batch) batches *= static_cast<double>(l.dims[d].size) / c[d];
  const auto m = group(l, g.m, c), n = group(l, g.n, c), k = group(l, g.k, c);
  double comp = m.extent_pp * n.extent_pp * k.extent_pp * 3.0;
  if (g.pw_ops > 0) comp += (3 * g.pw_ops) * (m.extent_pp * n.extent_pp);
  double comm = allreduce(r, m.extent_pp * n.extent_pp, k.splits);
  comm += allreduce(r, m.extent_pp * k.extent_pp, n.splits);
  comm += allreduce(r, n.extent_pp * k.extent_pp, m.splits);
  return batches * (comp + comm);
}

}  // namespace cost_detail

// The cost of one layer under one configuration.
inline double layer_cost(const layer& l, const split_t* c, double r) {
  using namespace cost_detail;
  const std::size_t n = l.dims.size();
  double pp[16];
  if (n > 16) throw plan_error(detail::cat("layer ", l.name, " has ", n, " dims; at most 16 are supported"));
  double elems = 1.0;
  for (std::size_t i = 0; i < n; ++i) {
    pp[i] = static_cast<double>(l.dims[i].size) / c[i];
    elems *= pp[i];
  }
  switch (l.kind) {
    case layer_kind::conv:
    case layer_kind::fc:
    case layer_kind::einsum:
      return gemm(r, l, l.gemm, c);
    case layer_kind::lstm: {
      // Cells: the fused GEMM; then each cell's output (b, n) is reshaped into
      // the next cell's input (b, k), once per layer and step.
      double cost = gemm(r, l, l.gemm, c);
      const int b = 2, nd = 3, kd = 4;
      const double out_pp[2] = {pp[b], pp[nd]}, in_pp[2] = {pp[b], pp[kd]};
      const double words = area_needed(out_pp, in_pp, 2, double(c[b]) * c[nd], double(c[b]) * c[kd]);
      cost += static_cast<double>(l.dims[0].size) * static_cast<double>(l.dims[1].size) * (r * words);
      return cost;
    }
    case layer_kind::pooling: {
      double cost = elems;
      // Halo: the input slice grows by the window along each split spatial dim.
      const auto& in = l.input_shape;
      double t[4];
      for (int i = 0; i < 4; ++i) t[i] = static_cast<double>(in[i]) / c[i];
      const double h = t[2] + (c[2] > 1 ? static_cast<double>(l.window_r) : 0.0);
      const double w = t[3] + (c[3] > 1 ? static_cast<double>(l.window_s) : 0.0);
      double ghost = h * w - t[2] * t[3];
      ghost *= t[0];
      ghost *= t[1];
      return cost + r * ghost;
    }
    case layer_kind::elementwise:
      return (1 + l.pw_ops) * elems;
    case layer_kind::norm: {
      const int a = l.axis;
      double others = 1.0;
      for (std::size_t i = 0; i < n; ++i)
        if (static_cast<int>(i) != a) others *= c[i];
      double cost = (2 * 8.0) * elems;
      cost += 4.0 * allreduce(r, elems / pp[a], c[a]);
      cost += 4.0 * allreduce(r, pp[a], others);
      return cost;
    }
    case layer_kind::reduce_mean: {
      double procs = 1.0;
      for (int a : l.axes) procs *= c[a];
      return allreduce(r, elems, procs);
    }
    case layer_kind::softmax: {
      const int a = l.axis;
      const double len = static_cast<double>(l.dims[a].size);
      double rest = 1.0;
      for (std::size_t i = 0; i < n; ++i)
        if (static_cast<int>(i) != a) rest *= pp[i];
      double cost = (3.0 + 1) * elems;
      cost += elems * len;
      cost += allreduce(r, rest, c[a]);
      cost += allreduce(r, rest * len, c[a]);
      cost += allreduce(r, rest, c[a]);
      return cost;
    }
    case layer_kind::softmax_xent: {
      double batch = 1.0;
      for (std::size_t i = 0; i + 1 < n; ++i) batch *= pp[i];
      double cost = (3.0 + 1) * elems;
      cost += batch;
      cost += batch;
      if (c[n - 1] > 1) cost += r * (2.0 * batch);
      return cost;
    }
    case layer_kind::concat:
    case layer_kind::stack:
    case layer_kind::unstack:
    case layer_kind::ravel:
    case layer_kind::unravel:
      return 0.0;
  }
  return 0.0;
}

// Words redistributed along an edge, forward and backward, times r.
inline double edge_cost(const std::vector<std::int64_t>& shape, const split_t* src_split, const split_t* dst_split,
                        double r) {
  const std::size_t n = shape.size();
  double s[16], d[16], sp = 1.0, dp = 1.0;
  if (n > 16) throw plan_error(detail::cat("tensor of rank ", n, "; at most 16 are supported"));
  for (std::size_t i = 0; i < n; ++i) {
    s[i] = static_cast<double>(shape[i]) / src_split[i];
    d[i] = static_cast<double>(shape[i]) / dst_split[i];
    sp *= src_split[i];
    dp *= dst_split[i];
  }
  return r * (cost_detail::area_needed(s, d, n, sp, dp) * 2.0);
}

// ---- the costed problem ----------------------------------------------------

// An edge's costs, compressed: configurations that give a tensor the same
// splits share a layout; cost(cs, cd) = table[src_layout[cs] * dst_layouts +
// dst_layout[cd]].
struct edge_table {
  int src = 0, dst = 0;
  std::vector<std::int32_t> src_layout, dst_layout;
  int src_layouts = 0, dst_layouts = 0;
  std::vector<double> table;
  double at(std::size_t cs, std::size_t cd) const {
    return table[static_cast<std::size_t>(src_layout[cs]) * dst_layouts + dst_layout[cd]];
  }
};

// What the search needs: per layer its configurations and their costs, per edge
// its compressed cost table.
struct problem {
  std::vector<config_table> configs;
  std::vector<std::vector<double>> vertex_costs;
  std::vector<edge_table> edges;
  std::vector<std::string> names;  // optional, for messages
  int size() const { return static_cast<int>(vertex_costs.size()); }
  std::string name(int v) const {
    return v >= 0 && v < static_cast<int>(names.size()) ? names[v] : detail::cat("#", v);
  }
};

namespace cost_detail {
// Distinct tensor splits over a layer's configurations.
// Ids in order of first appearance.
inline std::pair<std::vector<std::int32_t>, std::vector<std::vector<split_t>>> layouts(const config_table& t,
                                                                                        const tensor_map& m) {
  std::vector<std::int32_t> id(t.size());
  std::vector<std::vector<split_t>> distinct;
  std::map<std::vector<split_t>, std::int32_t> seen;
  std::vector<split_t> cur(m.size());
  for (std::size_t i = 0; i < t.size(); ++i) {
    tensor_splits(m, t.row(i), cur.data());
    auto [it, fresh] = seen.emplace(cur, static_cast<std::int32_t>(distinct.size()));
    if (fresh) distinct.push_back(cur);
    id[i] = it->second;
  }
  return {std::move(id), std::move(distinct)};
}

// Counts the bytes build_problem allocates against its limit.
struct budget {
  std::uint64_t left;
  void take(std::uint64_t count, std::uint64_t each, const std::string& what) {
    if (each != 0 && count > left / each)
      throw plan_error(detail::cat(what, " would take ", count, " x ", each, " bytes, more than the ", left,
                                   " bytes left of the problem's memory limit"));
    left -= count * each;
  }
};

inline std::string config_text(const config_table& t, std::size_t i) { return config_string(t.row(i), t.rank); }
}  // namespace cost_detail

// Every cost is checked to be finite: sizes so large that a cost overflows a
// double are refused, naming the layer or edge.
inline problem build_problem(const graph& g, std::int64_t procs, const machine& mach = {},
                             const problem_limits& limits = {}) {
  g.validate();
  check_procs(procs, "graph " + g.name);
  check_machine(mach);
  const double r = mach.r();
  cost_detail::budget bytes{limits.max_bytes};
  problem p;
  p.configs.reserve(g.layers.size());
  for (const auto& l : g.layers) {
    const std::uint64_t per_config = l.dims.size() * sizeof(split_t) + sizeof(double);
    const std::uint64_t room = std::min<std::uint64_t>(limits.max_configs, bytes.left / per_config);
    p.configs.push_back(enumerate_configs(l, procs, g.cutoff, room));
    const auto& t = p.configs.back();
    bytes.take(t.size(), per_config, detail::cat("the configurations of layer ", l.name));
    std::vector<double> c(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
      c[i] = layer_cost(l, t.row(i), r);
      if (!std::isfinite(c[i]))
        throw plan_error(detail::cat("layer ", l.name, ": the cost of configuration ", cost_detail::config_text(t, i),
                                     " is ", c[i], "; its sizes are too large for the cost model"));
    }
    p.vertex_costs.push_back(std::move(c));
    p.names.push_back(l.name);
  }
  for (const auto& e : g.edges) {
    const std::string what = detail::cat("edge ", g.layers[e.src].name, " -> ", g.layers[e.dst].name);
    edge_table et;
    et.src = e.src;
    et.dst = e.dst;
    bytes.take(p.configs[e.src].size() + p.configs[e.dst].size(), sizeof(std::int32_t) + sizeof(split_t) * e.shape.size(),
               "the layouts of " + what);
    auto [sid, sl] = cost_detail::layouts(p.configs[e.src], e.src_map);
    auto [did, dl] = cost_detail::layouts(p.configs[e.dst], e.dst_map);
    et.src_layout = std::move(sid);
    et.dst_layout = std::move(did);
    et.src_layouts = static_cast<int>(sl.size());
    et.dst_layouts = static_cast<int>(dl.size());
    if (dl.size() != 0 && sl.size() > std::numeric_limits<std::uint64_t>::max() / dl.size())
      throw plan_error(detail::cat(what, ": ", sl.size(), " x ", dl.size(), " layouts overflow"));
    bytes.take(sl.size() * dl.size(), sizeof(double), detail::cat("the cost table of ", what, " (", sl.size(), " x ",
                                                                  dl.size(), " layouts)"));
    et.table.resize(sl.size() * dl.size());
    for (std::size_t i = 0; i < sl.size(); ++i)
      for (std::size_t j = 0; j < dl.size(); ++j) {
        const double c = edge_cost(e.shape, sl[i].data(), dl[j].data(), r);
        if (!std::isfinite(c))
          throw plan_error(detail::cat(what, ": the cost of moving ", detail::list(e.shape), " is ", c,
                                       "; its sizes are too large for the cost model"));
        et.table[i * dl.size() + j] = c;
      }
    p.edges.push_back(std::move(et));
  }
  return p;
}

// The cost of a full assignment (one configuration index per layer).
inline double strategy_cost(const problem& p, const std::vector<int>& choice) {
  if (static_cast<int>(choice.size()) != p.size())
    throw plan_error(detail::cat("strategy has ", choice.size(), " entries for ", p.size(), " layers"));
  double c = 0.0;
  for (int v = 0; v < p.size(); ++v) c += p.vertex_costs[v].at(static_cast<std::size_t>(choice[v]));
  for (const auto& e : p.edges) c += e.at(choice[e.src], choice[e.dst]);
  return c;
}

}  // namespace typemesh::plan

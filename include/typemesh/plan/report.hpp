// Renderings of a graph and of a found strategy: a per-layer table, JSON, and
// the graph in dot format.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <charconv>
#include <ostream>
#include <string>
#include <vector>

#include "typemesh/plan/search.hpp"

namespace typemesh::plan {

namespace report_detail {
// The shortest text that reads back as the same double (the machine parameters).
inline std::string exact(double x) {
  char buf[32];
  auto end = std::to_chars(buf, buf + sizeof buf, x).ptr;
  return std::string(buf, end);
}
inline std::string json_string(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      r += buf;
    } else {
      r += c;
    }
  }
  return r + "\"";
}
inline std::string fixed2(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}
}  // namespace report_detail

// The layer's split of each iteration dim, e.g. "b=4 n=2".
inline std::string splits_string(const layer& l, const split_t* c) {
  std::string s;
  for (std::size_t i = 0; i < l.dims.size(); ++i) {
    if (c[i] == 1) continue;
    if (!s.empty()) s += ' ';
    s += l.dims[i].name + "=" + std::to_string(c[i]);
  }
  return s.empty() ? "-" : s;
}

inline void write_table(std::ostream& os, const graph& g, const problem& p, const search_result& r) {
  os << "layer\tname\tkind\tconfig\tsplits\tcost\n";
  for (int v = 0; v < g.size(); ++v) {
    const auto& l = g.layers[v];
    const auto* c = p.configs[v].row(static_cast<std::size_t>(r.choice[v]));
    os << v << '\t' << l.name << '\t' << kind_name(l.kind) << '\t' << config_string(c, p.configs[v].rank) << '\t'
       << splits_string(l, c) << '\t' << report_detail::fixed2(p.vertex_costs[v][r.choice[v]]) << '\n';
  }
  os << "Total cost: " << report_detail::fixed2(r.cost) << '\n';
}

// The plan as JSON: graph, processors, total cost, and per layer its dims with
// their sizes and splits.
inline void write_json(std::ostream& os, const graph& g, const problem& p, const search_result& r,
                       std::int64_t procs, std::int64_t batch, const machine& m) {
  using report_detail::json_string;
  os << "{\n  \"format\": \"typemesh-plan/1\",\n  \"graph\": " << json_string(g.name) << ",\n  \"procs\": " << procs
     << ",\n  \"batch\": " << batch << ",\n  \"tflops\": " << report_detail::exact(m.tflops)
     << ",\n  \"bandwidth_gb\": " << report_detail::exact(m.bandwidth_gb)
     << ",\n  \"total_cost\": " << report_detail::fixed2(r.cost) << ",\n  \"layers\": [";
  for (int v = 0; v < g.size(); ++v) {
    const auto& l = g.layers[v];
    const auto* c = p.configs[v].row(static_cast<std::size_t>(r.choice[v]));
    os << (v ? "," : "") << "\n    {\"id\": " << v << ", \"name\": " << json_string(l.name)
       << ", \"kind\": " << json_string(kind_name(l.kind)) << ", \"cost\": "
       << report_detail::fixed2(p.vertex_costs[v][r.choice[v]]) << ", \"dims\": [";
    for (std::size_t i = 0; i < l.dims.size(); ++i)
      os << (i ? ", " : "") << "{\"name\": " << json_string(l.dims[i].name) << ", \"size\": " << l.dims[i].size
         << ", \"split\": " << c[i] << "}";
    os << "]}";
  }
  os << "\n  ],\n  \"edges\": [";
  for (std::size_t i = 0; i < g.edges.size(); ++i) {
    const auto& e = g.edges[i];
    os << (i ? "," : "") << "\n    {\"src\": " << e.src << ", \"dst\": " << e.dst << ", \"shape\": [";
    for (std::size_t j = 0; j < e.shape.size(); ++j) os << (j ? ", " : "") << e.shape[j];
    os << "], \"cost\": " << report_detail::fixed2(p.edges[i].at(r.choice[e.src], r.choice[e.dst])) << "}";
  }
  os << "\n  ]\n}\n";
}

// The graph in dot format; with a result, each layer shows its splits.
inline void write_dot(std::ostream& os, const graph& g, const problem* p = nullptr, const search_result* r = nullptr) {
  os << "digraph " << report_detail::json_string(g.name) << " {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (int v = 0; v < g.size(); ++v) {
    const auto& l = g.layers[v];
    std::string label = l.name + "\\n" + kind_name(l.kind);
    if (p && r) label += "\\n" + splits_string(l, p->configs[v].row(static_cast<std::size_t>(r->choice[v])));
    os << "  n" << v << " [label=\"" << label << "\"];\n";
  }
  for (const auto& e : g.edges) {
    std::string s;
    for (std::size_t j = 0; j < e.shape.size(); ++j) {
      if (j) s += 'x';
      s += std::to_string(e.shape[j]);
    }
    os << "  n" << e.src << " -> n" << e.dst << " [label=\"" << s << "\"];\n";
  }
  os << "}\n";
}

namespace report_detail {
inline std::string identifier(const std::string& s) {
  std::string r;
  for (char c : s) r += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (r.empty() || std::isdigit(static_cast<unsigned char>(r[0]))) r = "_" + r;
  return r;
}
}  // namespace report_detail

// A C++ header of the plan for a model program: per layer, a mesh type with
// one axis per split iteration dim (plus one replica axis when the layer uses
// fewer than `procs` devices), its shape, and the layout of the layer's
// iteration dims on those axes.
//
//   namespace plan_alexnet::conv1 {
//     using mesh = typemesh::mesh<"conv1", axes::a0>;
//     inline constexpr std::array<int, 1> mesh_shape{8};
//     using layout = typemesh::layout<dims::b(axes::a0)>;
//   }
inline void write_header(std::ostream& os, const graph& g, const problem& p, const search_result& r,
                         std::int64_t procs) {
  using report_detail::identifier;
  const std::string ns = "plan_" + identifier(g.name) + "_p" + std::to_string(procs);
  std::vector<std::string> dim_names;
  std::size_t max_axes = 1;
  for (int v = 0; v < g.size(); ++v) {
    const auto& l = g.layers[v];
    const auto* c = p.configs[v].row(static_cast<std::size_t>(r.choice[v]));
    std::size_t used = 1;
    for (std::size_t i = 0; i < l.dims.size(); ++i) {
      if (std::find(dim_names.begin(), dim_names.end(), l.dims[i].name) == dim_names.end())
        dim_names.push_back(l.dims[i].name);
      used += c[i] > 1;
    }
    max_axes = std::max(max_axes, used);
  }
  os << "// Generated by typemesh-plan: graph " << g.name << ", " << procs << " devices, total cost "
     << report_detail::fixed2(r.cost) << ".\n#pragma once\n\n#include <array>\n\n"
     << "#include \"typemesh/core/layout.hpp\"\n#include \"typemesh/core/mesh.hpp\"\n\nnamespace " << ns
     << " {\n\ninline constexpr int devices = " << procs << ";\n\nnamespace dims {\n";
  for (const auto& d : dim_names) os << "struct " << identifier(d) << " : typemesh::dim<\"" << d << "\"> {};\n";
  os << "}  // namespace dims\n\nnamespace axes {\n";
  for (std::size_t a = 0; a < max_axes; ++a) os << "struct a" << a << " : typemesh::axis<\"a" << a << "\"> {};\n";
  os << "}  // namespace axes\n";
  for (int v = 0; v < g.size(); ++v) {
    const auto& l = g.layers[v];
    const auto* c = p.configs[v].row(static_cast<std::size_t>(r.choice[v]));
    std::vector<std::string> axes, entries;
    std::vector<std::int64_t> shape;
    std::int64_t used = 1;
    for (std::size_t i = 0; i < l.dims.size(); ++i) {
      if (c[i] == 1) continue;
      const std::string a = "axes::a" + std::to_string(axes.size());
      entries.push_back("dims::" + identifier(l.dims[i].name) + "(" + a + ")");
      axes.push_back(a);
      shape.push_back(c[i]);
      used *= c[i];
    }
    // Replicas fill the devices the splits leave over (when they divide).
    const bool replicas = procs % used == 0 && (used < procs || axes.empty());
    if (replicas) {
      axes.push_back("axes::a" + std::to_string(axes.size()));
      shape.push_back(procs / used);
    }
    os << "\n// " << l.name << " (" << kind_name(l.kind) << "), splits " << splits_string(l, c);
    if (!replicas && used < procs) os << "; uses " << used << " of the " << procs << " devices";
    os << "\nnamespace "
       << identifier(l.name) << " {\nusing mesh = typemesh::mesh<\"" << l.name << "\"";
    for (const auto& a : axes) os << ", " << a;
    os << ">;\ninline constexpr std::array<int, " << shape.size() << "> mesh_shape{";
    for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
    os << "};\nusing layout = typemesh::layout<";
    for (std::size_t i = 0; i < entries.size(); ++i) os << (i ? ", " : "") << entries[i];
    os << ">;\n}  // namespace " << identifier(l.name) << "\n";
  }
  os << "\n}  // namespace " << ns << "\n";
}

}  // namespace typemesh::plan

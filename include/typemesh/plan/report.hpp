// Renderings of a graph and of a found strategy: a per-layer table, JSON, and
// the graph in dot format.
#pragma once

#include <cstdio>
#include <ostream>
#include <string>

#include "typemesh/plan/search.hpp"

namespace typemesh::plan {

namespace detail_report {
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
}  // namespace detail_report

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
       << splits_string(l, c) << '\t' << detail_report::fixed2(p.vertex_costs[v][r.choice[v]]) << '\n';
  }
  os << "Total cost: " << detail_report::fixed2(r.cost) << '\n';
}

// The plan as JSON: graph, processors, total cost, and per layer its dims with
// their sizes and splits.
inline void write_json(std::ostream& os, const graph& g, const problem& p, const search_result& r,
                       std::int64_t procs, std::int64_t batch, const machine& m) {
  using detail_report::json_string;
  os << "{\n  \"format\": \"typemesh-plan/1\",\n  \"graph\": " << json_string(g.name) << ",\n  \"procs\": " << procs
     << ",\n  \"batch\": " << batch << ",\n  \"tflops\": " << m.tflops << ",\n  \"bandwidth_gb\": " << m.bandwidth_gb
     << ",\n  \"total_cost\": " << detail_report::fixed2(r.cost) << ",\n  \"layers\": [";
  for (int v = 0; v < g.size(); ++v) {
    const auto& l = g.layers[v];
    const auto* c = p.configs[v].row(static_cast<std::size_t>(r.choice[v]));
    os << (v ? "," : "") << "\n    {\"id\": " << v << ", \"name\": " << json_string(l.name)
       << ", \"kind\": " << json_string(kind_name(l.kind)) << ", \"cost\": "
       << detail_report::fixed2(p.vertex_costs[v][r.choice[v]]) << ", \"dims\": [";
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
    os << "], \"cost\": " << detail_report::fixed2(p.edges[i].at(r.choice[e.src], r.choice[e.dst])) << "}";
  }
  os << "\n  ]\n}\n";
}

// The graph in dot format; with a result, each layer shows its splits.
inline void write_dot(std::ostream& os, const graph& g, const problem* p = nullptr, const search_result* r = nullptr) {
  os << "digraph " << detail_report::json_string(g.name) << " {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (int v = 0; v < g.size(); ++v) {
    const auto& l = g.layers[v];
    std::string label = l.name + "\\n" + kind_name(l.kind);
    if (p && r) label += "\\n" + splits_string(l, p->configs[v].row(static_cast<std::size_t>(r->choice[v])));
    os << "  n" << v << " [label=\"" << label << "\"];\n";
  }
  for (const auto& e : g.edges) {
    std::string s;
    for (std::size_t j = 0; j < e.shape.size(); ++j) s += (j ? "x" : "") + std::to_string(e.shape[j]);
    os << "  n" << e.src << " -> n" << e.dst << " [label=\"" << s << "\"];\n";
  }
  os << "}\n";
}

}  // namespace typemesh::plan

// Reading the strategy search's inputs and outputs back from files: a graph in
// a small line-oriented text format (and its writer), and a plan from the JSON
// that report.hpp's write_json produces.
//
// ---- The graph text format ----------------------------------------------
//
// Documented, with every keyword and attribute and an example, in docs/plan.md
// ("The graph text format"). write_graph writes every graph in it
// (read_graph(write_graph(g)) equals g), so the built-in networks can be
// dumped and edited.
//
// ---- The plan JSON ----------------------------------------------------------
//
// read_plan accepts exactly what write_json writes ("format":
// "typemesh-plan/1"): every field present once, no other fields, the right
// types, ids in order, splits that divide their dims and fit on the
// processors. plan_choice maps a plan back onto a graph's configurations.
//
// Every malformed input throws typemesh::plan_error naming the source, the
// line (and column, and for JSON the field) and what was expected; an input
// larger than read_limits::max_bytes, or one that would build more than that,
// is refused before it is allocated. E.g.
//   typemesh: alexnet.graph:7:31: layer fc6: expected DIM=SIZE with a positive integer size, got 'k=x'
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <istream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "typemesh/plan/config.hpp"
#include "typemesh/plan/cost.hpp"
#include "typemesh/plan/graph.hpp"

namespace typemesh::plan {

// The most memory a reading may take: the input text and what is built from
// it (a graph, or a plan's JSON values). A larger input is refused, naming the
// limit, before the memory is allocated.
struct read_limits {
  std::uint64_t max_bytes = default_graph_bytes;
};

namespace parse_detail {

[[noreturn]] inline void fail(const std::string& source, int line, int col, const std::string& what) {
  if (line <= 0) throw plan_error(detail::cat(source, ": ", what));
  if (col > 0) throw plan_error(detail::cat(source, ":", line, ":", col, ": ", what));
  throw plan_error(detail::cat(source, ":", line, ": ", what));
}

inline bool parse_i64(std::string_view s, std::int64_t& out) {
  if (s.empty()) return false;
  const auto* b = s.data();
  const auto* e = s.data() + s.size();
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc{} && p == e;
}

// Locale-independent where the library allows (from_chars / to_chars for
// floating point), strtod / %.17g otherwise; both round-trip exactly.
inline bool parse_double(std::string_view s, double& out) {
  if (s.empty() || s[0] == '+' || std::isspace(static_cast<unsigned char>(s[0]))) return false;
#if defined(__cpp_lib_to_chars)
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size() && std::isfinite(out);
#else
  const std::string t(s);
  char* end = nullptr;
  errno = 0;
  out = std::strtod(t.c_str(), &end);
  return errno == 0 && end == t.c_str() + t.size() && std::isfinite(out);
#endif
}

inline std::string g17(double x) {
  char buf[64];
#if defined(__cpp_lib_to_chars)
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, x);
  if (ec == std::errc{}) return std::string(buf, p);
#endif
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

inline std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> r;
  std::size_t b = 0;
  for (;;) {
    const auto e = s.find(sep, b);
    r.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return r;
    b = e + 1;
  }
}

inline bool bad_layer_name(const std::string& n) {
  return n.empty() || n == "|" || n.find_first_of(" \t\r\n#:") != std::string::npos;
}
inline bool bad_dim_name(const std::string& n) {
  return n.empty() || n == "-" || n == "()" || n.find_first_of(" \t\r\n#,*=:") != std::string::npos;
}

struct token {
  std::string_view text;
  int col = 0;  // 1-based
};

// One statement, with what is needed to report an error in it.
struct line_ctx {
  const std::string* source;
  int line;
  std::string where;  // "layer fc6: " once known
  [[noreturn]] void fail(const token& t, const std::string& what) const {
    parse_detail::fail(*source, line, t.col, where + what);
  }
  [[noreturn]] void fail_at(int col, const std::string& what) const { parse_detail::fail(*source, line, col, where + what); }
};

inline std::vector<std::int64_t> parse_shape(const line_ctx& c, const token& t, std::string_view s,
                                             const std::string& what) {
  std::vector<std::int64_t> r;
  if (s == "()") return r;
  for (auto part : split(s, 'x')) {
    std::int64_t v = 0;
    if (!parse_i64(part, v) || v < 1)
      c.fail(t, detail::cat("expected ", what, " as positive sizes joined by 'x' (e.g. 128x3x227x227), got '", s,
                            "'"));
    r.push_back(v);
  }
  return r;
}

inline int dim_index(const line_ctx& c, const token& t, const layer& l, std::string_view n) {
  const int d = l.find_dim(std::string(n));
  if (d < 0) {
    std::vector<std::string> names;
    for (const auto& x : l.dims) names.push_back(x.name);
    c.fail(t, detail::cat("layer ", l.name, " has no dim '", n, "'; expected one of ", detail::list(names)));
  }
  return d;
}

inline std::vector<int> parse_dim_list(const line_ctx& c, const token& t, const layer& l, std::string_view s) {
  std::vector<int> r;
  if (s.empty()) c.fail(t, "expected a comma-separated list of dim names, got nothing");
  for (auto part : split(s, ',')) r.push_back(dim_index(c, t, l, part));
  return r;
}

inline tensor_map parse_map(const line_ctx& c, const token& t, const layer& l, std::string_view s) {
  tensor_map m;
  if (s == "()") return m;
  if (s.empty()) c.fail(t, "expected a map (dim names per tensor dim, '*' to join, '-' for none), got nothing");
  std::vector<char> used(l.dims.size(), 0);
  for (auto item : split(s, ',')) {
    std::vector<int> ds;
    if (item != "-")
      for (auto n : split(item, '*')) {
        const int d = dim_index(c, t, l, n);
        // A split iteration dim splits one tensor dim.
        if (used[static_cast<std::size_t>(d)]++) c.fail(t, detail::cat("the map names dim ", n, " twice"));
        ds.push_back(d);
      }
    m.push_back(std::move(ds));
  }
  return m;
}

inline std::string join_dims(const layer& l, const std::vector<int>& ds, char sep) {
  std::string s;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    if (i) s += sep;
    s += l.dims.at(static_cast<std::size_t>(ds[i])).name;
  }
  return s;
}

inline std::string map_string(const layer& l, const tensor_map& m) {
  if (m.empty()) return "()";
  std::string s;
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (i) s += ',';
    s += m[i].empty() ? std::string("-") : join_dims(l, m[i], '*');
  }
  return s;
}

inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return "()";
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

inline std::vector<std::int64_t> dim_sizes(const layer& l) {
  std::vector<std::int64_t> r;
  for (const auto& d : l.dims) r.push_back(d.size);
  return r;
}

inline tensor_map identity_map(std::size_t r) {
  tensor_map m(r);
  for (std::size_t i = 0; i < r; ++i) m[i] = {static_cast<int>(i)};
  return m;
}

// Which layer kinds a parameter applies to (nullptr: every kind).
inline const char* parameter_kinds(const std::string& key) {
  if (key.substr(0, 5) == "gemm.") return "conv, fc, einsum and lstm";
  if (key == "pw") return "elementwise";
  if (key == "axis") return "norm and softmax";
  if (key == "axes") return "reduce_mean";
  if (key == "window" || key == "input") return "pooling";
  return nullptr;
}
inline bool applies_to(const char* kinds, layer_kind k) {
  const std::string_view list(kinds), name(kind_name(k));
  for (std::size_t b = 0; b < list.size();) {
    auto e = list.find_first_of(", ", b);
    if (e == std::string_view::npos) e = list.size();
    if (list.substr(b, e - b) == name) return true;
    b = e + 1;
  }
  return false;
}

// Reads at most `max_bytes` of `in`; more is an error before it is read.
inline std::string read_all(std::istream& in, const std::string& source, std::uint64_t max_bytes) {
  std::string text;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    const auto got = static_cast<std::uint64_t>(in.gcount());
    if (got > max_bytes - text.size())
      throw plan_error(detail::cat(source, ": the input is larger than the limit of ", max_bytes, " bytes"));
    text.append(buf, static_cast<std::size_t>(got));
  }
  if (in.bad()) throw plan_error(detail::cat(source, ": read error"));
  return text;
}

// The bytes a reading has allocated so far, against the reader's limit.
struct memory_count {
  std::uint64_t limit, used;
  const std::string* source;
  void add(std::uint64_t count, std::uint64_t each, const std::string& what) {
    if (!fits(count, each)) fail(*source, 0, 0, message(count, each, what));
    used += count * each;
  }
  void add(std::uint64_t count, std::uint64_t each, const std::string& what, const line_ctx& c, const token& t) {
    if (!fits(count, each)) c.fail(t, message(count, each, what));
    used += count * each;
  }
  bool fits(std::uint64_t count, std::uint64_t each) const {
    return used <= limit && (each == 0 || count <= (limit - used) / each);
  }
  std::string message(std::uint64_t count, std::uint64_t each, const std::string& what) const {
    return detail::cat(what, " would need ", count, " x ", each, " more bytes, beyond the reader's limit of ", limit,
                       " bytes");
  }
};

struct pending_edge {
  int line;
  token src, dst;  // src without the port
  int port = 0;
  token map_tok;
  std::string_view map_text;
  bool has_shape = false, has_src = false;
  token shape_tok, src_tok;
  std::string_view shape_text, src_text;
};

}  // namespace parse_detail

// Reads a graph in the text format of docs/plan.md. `source` names the input
// in error messages (a file name). The input and the graph it describes may
// take at most limits.max_bytes; more is refused before it is allocated.
inline graph read_graph(std::istream& in, const std::string& source = "<graph>", const read_limits& limits = {}) {
  using namespace parse_detail;
  graph g;
  bool have_header = false;
  std::map<std::string, int> by_name, layer_line;
  std::vector<pending_edge> edges;
  // Edge statements are resolved at the end: they keep views into `text`.
  const std::string text = read_all(in, source, std::min<std::uint64_t>(limits.max_bytes, 0x7fffffff));
  memory_count used{limits.max_bytes, text.size(), &source};
  std::vector<std::string_view> lines;
  for (std::size_t b = 0; b < text.size();) {
    const auto e = text.find('\n', b);
    lines.push_back(std::string_view(text).substr(b, e == std::string::npos ? std::string::npos : e - b));
    used.add(1, sizeof(std::string_view), "the lines of the input");
    b = e == std::string::npos ? text.size() : e + 1;
  }
  const int lineno = static_cast<int>(lines.size());
  for (int li = 0; li < static_cast<int>(lines.size()); ++li) {
    const std::string_view full = lines[static_cast<std::size_t>(li)];
    const int line = li + 1;
    const std::string_view body = full.substr(0, full.find('#'));
    std::vector<token> toks;
    for (std::size_t i = 0; i < body.size();) {
      if (body[i] == ' ' || body[i] == '\t' || body[i] == '\r') {
        ++i;
        continue;
      }
      const std::size_t b = i;
      while (i < body.size() && body[i] != ' ' && body[i] != '\t' && body[i] != '\r') ++i;
      toks.push_back({body.substr(b, i - b), static_cast<int>(b) + 1});
    }
    if (toks.empty()) continue;
    line_ctx c{&source, line, {}};
    const auto kw = toks[0].text;
    if (kw == "graph") {
      if (have_header) c.fail(toks[0], "a second 'graph' statement; expected one, on the first line");
      if (!g.layers.empty() || !edges.empty())
        c.fail(toks[0], "'graph' must come before any layer or edge");
      if (toks.size() < 2) c.fail_at(static_cast<int>(body.size()) + 1, "expected the graph's name after 'graph'");
      g.name = std::string(toks[1].text);
      for (std::size_t i = 2; i < toks.size(); ++i) {
        const auto t = toks[i].text;
        double x = 0;
        if (t.substr(0, 7) != "cutoff=" || !parse_double(t.substr(7), x) || x <= 0)
          c.fail(toks[i], detail::cat("expected cutoff=X with a positive number X, got '", t, "'"));
        g.cutoff = x;
      }
      have_header = true;
      continue;
    }
    if (!have_header)
      c.fail(toks[0], detail::cat("expected 'graph NAME' as the first statement, got '", kw, "'"));
    if (kw == "layer") {
      if (toks.size() < 2) c.fail_at(static_cast<int>(body.size()) + 1, "expected a layer name after 'layer'");
      layer l;
      l.name = std::string(toks[1].text);
      if (bad_layer_name(l.name))
        c.fail(toks[1], detail::cat("layer name '", l.name, "' may not contain ':' and may not be '|'"));
      c.where = "layer " + l.name + ": ";
      if (by_name.count(l.name))
        c.fail(toks[1], detail::cat("a second layer named ", l.name, " (the first is on line ",
                                    layer_line[l.name], "); layer names must be unique"));
      if (toks.size() < 3) c.fail_at(static_cast<int>(body.size()) + 1, "expected the layer's kind after its name");
      bool kind_ok = false;
      for (int k = 0; k <= static_cast<int>(layer_kind::lstm); ++k)
        if (toks[2].text == kind_name(static_cast<layer_kind>(k))) {
          l.kind = static_cast<layer_kind>(k);
          kind_ok = true;
        }
      if (!kind_ok)
        c.fail(toks[2], detail::cat("unknown layer kind '", toks[2].text,
                                    "'; expected conv, pooling, fc, einsum, elementwise, norm, reduce_mean, softmax, "
                                    "softmax_xent, concat, stack, unstack, ravel, unravel or lstm"));
      std::size_t i = 3;
      for (; i < toks.size() && toks[i].text != "|"; ++i) {
        const auto t = toks[i].text;
        const auto eq = t.find('=');
        std::int64_t v = 0;
        if (eq == std::string_view::npos || eq == 0 || !parse_i64(t.substr(eq + 1), v) || v < 1)
          c.fail(toks[i], detail::cat("expected DIM=SIZE with a positive integer size, got '", t, "'"));
        const std::string n(t.substr(0, eq));
        if (bad_dim_name(n)) c.fail(toks[i], detail::cat("dim name '", n, "' may not contain , * : or be '-'"));
        if (l.find_dim(n) >= 0) c.fail(toks[i], detail::cat("dim ", n, " appears twice"));
        if (l.dims.size() == max_rank)
          c.fail(toks[i], detail::cat("more than ", max_rank, " dims; the cost model supports at most ", max_rank));
        l.dims.push_back({n, v, true});
      }
      if (l.dims.empty())
        c.fail_at(i < toks.size() ? toks[i].col : static_cast<int>(body.size()) + 1,
                  "expected at least one DIM=SIZE after the kind");
      bool any_out = false, no_out = false;
      std::map<std::string, int> seen;
      struct repeated_output {
        std::int64_t count;
        std::vector<std::int64_t> shape;
        tensor_map map;
      };
      std::vector<repeated_output> outs;
      for (++i; i < toks.size(); ++i) {
        const auto& tk = toks[i];
        const auto t = tk.text;
        const auto eq = t.find('=');
        if (eq == std::string_view::npos || eq == 0)
          c.fail(tk, detail::cat("expected KEY=VALUE after '|', got '", t, "'"));
        const std::string key(t.substr(0, eq));
        const auto val = t.substr(eq + 1);
        if (key != "out" && seen[key]++)
          c.fail(tk, detail::cat("parameter ", key, " given twice"));
        if (const char* kinds = parameter_kinds(key); kinds && !applies_to(kinds, l.kind))
          c.fail(tk, detail::cat("parameter ", key, " does not apply to a ", kind_name(l.kind), " layer (it is for ",
                                 kinds, ")"));
        auto int_val = [&](int lo) {
          std::int64_t v = 0;
          if (!parse_i64(val, v) || v < lo || v > 1000000)
            c.fail(tk, detail::cat("expected ", key, "=N with an integer N >= ", lo, ", got '", t, "'"));
          return static_cast<int>(v);
        };
        auto group_of = [&](const std::string& k) -> dim_group* {
          if (k == "m") return &l.gemm.m;
          if (k == "n") return &l.gemm.n;
          if (k == "k") return &l.gemm.k;
          return nullptr;
        };
        if (key == "fixed") {
          for (int d : parse_dim_list(c, tk, l, val)) l.dims[static_cast<std::size_t>(d)].splittable = false;
        } else if (key == "gemm.batch") {
          l.gemm.batch = parse_dim_list(c, tk, l, val);
        } else if (key.size() == 6 && key.substr(0, 5) == "gemm." && group_of(key.substr(5))) {
          group_of(key.substr(5))->dims = parse_dim_list(c, tk, l, val);
        } else if (key.size() == 12 && key.substr(0, 5) == "gemm." && key.substr(6) == ".scale" &&
                   group_of(key.substr(5, 1))) {
          double x = 0;
          if (!parse_double(val, x) || x <= 0)
            c.fail(tk, detail::cat("expected ", key, "=X with a positive number X, got '", t, "'"));
          group_of(key.substr(5, 1))->scale = x;
        } else if (key == "gemm.pw") {
          l.gemm.pw_ops = int_val(0);
        } else if (key == "pw") {
          l.pw_ops = int_val(0);
        } else if (key == "axis") {
          l.axis = dim_index(c, tk, l, val);
        } else if (key == "axes") {
          l.axes = parse_dim_list(c, tk, l, val);
        } else if (key == "window") {
          const auto w = parse_shape(c, tk, val, "the window");
          if (w.size() != 2) c.fail(tk, detail::cat("expected window=RxS (two sizes), got '", t, "'"));
          l.window_r = w[0];
          l.window_s = w[1];
        } else if (key == "input") {
          l.input_shape = parse_shape(c, tk, val, "the input shape");
        } else if (key == "out") {
          if (val == "none") {
            if (any_out || no_out) c.fail(tk, "out=none with other out= parameters");
            no_out = true;
            continue;
          }
          if (no_out) c.fail(tk, "out= after out=none");
          any_out = true;
          std::string_view rest = val;
          std::int64_t count = 1;
          const auto star = rest.find('*');
          const auto colon = rest.find(':');
          if (colon == std::string_view::npos)
            c.fail(tk, detail::cat("expected out=[N*]SHAPE:MAP, got '", t, "'"));
          if (star != std::string_view::npos && star < colon) {
            if (!parse_i64(rest.substr(0, star), count) || count < 1 || count > 1000000)
              c.fail(tk, detail::cat("expected a positive repeat count N in out=N*SHAPE:MAP, got '", t, "'"));
            rest = rest.substr(star + 1);
          }
          const auto col2 = rest.find(':');
          auto shape = parse_shape(c, tk, rest.substr(0, col2), "the output shape");
          auto m = parse_map(c, tk, l, rest.substr(col2 + 1));
          if (m.size() != shape.size())
            c.fail(tk, detail::cat("output of rank ", shape.size(), " has a map of rank ", m.size()));
          std::size_t mapped = 0;
          for (const auto& ds : m) mapped += ds.size();
          // Counted now, allocated once the whole line is counted.
          used.add(count, graph_detail::tensor_bytes(shape.size(), mapped), detail::cat("the outputs of layer ", l.name),
                   c, tk);
          outs.push_back({count, std::move(shape), std::move(m)});
        } else {
          c.fail(tk, detail::cat("unknown parameter '", key,
                                 "'; expected fixed, gemm.batch, gemm.m, gemm.n, gemm.k, gemm.m.scale, "
                                 "gemm.n.scale, gemm.k.scale, gemm.pw, pw, axis, axes, window, input or out"));
        }
      }
      for (const auto& o : outs) {
        l.out_shapes.insert(l.out_shapes.end(), static_cast<std::size_t>(o.count), o.shape);
        l.out_maps.insert(l.out_maps.end(), static_cast<std::size_t>(o.count), o.map);
      }
      if (!any_out && !no_out) {
        l.out_shapes = {dim_sizes(l)};
        l.out_maps = {identity_map(l.dims.size())};
      }
      used.add(1, sizeof(layer) + 128 + l.dims.size() * (sizeof(dim) + 16) + graph_detail::tensor_bytes(16, 16),
               "the layers", c, toks[1]);
      // What the cost model needs of this kind, reported on this line.
      try {
        validate_layer(l);
      } catch (const plan_error& err) {
        fail(source, line, 0, std::string(err.what()).substr(10));
      }
      by_name[l.name] = static_cast<int>(g.layers.size());
      layer_line[l.name] = line;
      g.layers.push_back(std::move(l));
      continue;
    }
    if (kw == "edge") {
      pending_edge e;
      e.line = line;
      if (toks.size() < 3)
        c.fail_at(static_cast<int>(body.size()) + 1, "expected 'edge SRC[:PORT] DST map=MAP'");
      e.src = toks[1];
      const auto colon = e.src.text.find(':');
      if (colon != std::string_view::npos) {
        std::int64_t port = 0;
        if (!parse_i64(e.src.text.substr(colon + 1), port) || port < 0 || port > 1000000)
          c.fail(toks[1], detail::cat("expected SRC:PORT with a port number, got '", e.src.text, "'"));
        e.port = static_cast<int>(port);
        e.src.text = e.src.text.substr(0, colon);
      }
      e.dst = toks[2];
      bool has_map = false;
      for (std::size_t i = 3; i < toks.size(); ++i) {
        const auto t = toks[i].text;
        auto take = [&](std::string_view key, bool& flag, token& tok, std::string_view& val) {
          if (t.substr(0, key.size()) != key) return false;
          if (flag) c.fail(toks[i], detail::cat(key.substr(0, key.size() - 1), "= given twice"));
          flag = true;
          tok = toks[i];
          val = t.substr(key.size());
          return true;
        };
        if (!take("map=", has_map, e.map_tok, e.map_text) && !take("shape=", e.has_shape, e.shape_tok, e.shape_text) &&
            !take("src=", e.has_src, e.src_tok, e.src_text))
          c.fail(toks[i], detail::cat("expected map=MAP, shape=SHAPE or src=MAP, got '", t, "'"));
      }
      if (!has_map) c.fail_at(static_cast<int>(body.size()) + 1, "edge without map=MAP (the map onto DST's dims)");
      used.add(1, sizeof(pending_edge) + sizeof(edge), "the edges", c, toks[0]);
      edges.push_back(e);
      continue;
    }
    c.fail(toks[0], detail::cat("expected 'graph', 'layer' or 'edge', got '", kw, "'"));
  }
  if (!have_header) fail(source, lineno + 1, 0, "expected 'graph NAME' and layers; the input is empty");
  if (g.layers.empty()) fail(source, lineno + 1, 0, "expected at least one layer");
  for (const auto& pe : edges) {
    line_ctx c{&source, pe.line, "edge: "};
    auto find = [&](const token& t) {
      const auto it = by_name.find(std::string(t.text));
      if (it == by_name.end()) c.fail(t, detail::cat("no layer named '", t.text, "'"));
      return it->second;
    };
    edge e;
    e.src = find(pe.src);
    e.dst = find(pe.dst);
    if (e.src == e.dst) c.fail(pe.dst, detail::cat("layer ", pe.dst.text, " feeds itself"));
    c.where = detail::cat("edge ", pe.src.text, " -> ", pe.dst.text, ": ");
    const auto& s = g.layers[static_cast<std::size_t>(e.src)];
    const auto& d = g.layers[static_cast<std::size_t>(e.dst)];
    e.src_port = pe.port;
    const bool port_ok = pe.port < static_cast<int>(s.out_shapes.size());
    if ((!pe.has_shape || !pe.has_src) && !port_ok)
      c.fail(pe.src, detail::cat("layer ", s.name, " has ", s.out_shapes.size(), " outputs, no port ", pe.port));
    e.shape = pe.has_shape ? parse_shape(c, pe.shape_tok, pe.shape_text, "the tensor's shape")
                           : s.out_shapes[static_cast<std::size_t>(pe.port)];
    e.src_map = pe.has_src ? parse_map(c, pe.src_tok, s, pe.src_text) : s.out_maps[static_cast<std::size_t>(pe.port)];
    e.dst_map = parse_map(c, pe.map_tok, d, pe.map_text);
    if (e.src_map.size() != e.shape.size())
      c.fail(pe.has_src ? pe.src_tok : pe.src,
             detail::cat("the tensor has rank ", e.shape.size(), " but its map onto ", s.name, " has rank ",
                         e.src_map.size()));
    if (e.dst_map.size() != e.shape.size())
      c.fail(pe.map_tok, detail::cat("the tensor ", shape_string(e.shape), " has rank ", e.shape.size(),
                                     " but map= gives ", e.dst_map.size(), " items"));
    used.add(3, graph_detail::tensor_bytes(e.shape.size(), 2 * e.shape.size()), "the edges' tensors", c, pe.src);
    g.edges.push_back(std::move(e));
  }
  try {
    g.validate();
  } catch (const plan_error& err) {
    throw plan_error(detail::cat(source, ": ", std::string(err.what()).substr(10)));
  }
  return g;
}

inline graph read_graph_text(const std::string& text, const std::string& source = "<graph>",
                             const read_limits& limits = {}) {
  std::istringstream in(text);
  return read_graph(in, source, limits);
}

inline graph read_graph_file(const std::string& path, const read_limits& limits = {}) {
  std::ifstream in(path);
  if (!in) throw plan_error(detail::cat("cannot open graph file ", path));
  return read_graph(in, path, limits);
}

// Writes g in the text format; throws plan_error for a graph the format cannot
// express (names with blanks or separators, repeated names).
inline void write_graph(std::ostream& os, const graph& g) {
  using namespace parse_detail;
  g.validate();
  if (g.name.empty() || g.name.find_first_of(" \t\r\n#") != std::string::npos)
    throw plan_error(detail::cat("graph name '", g.name, "' cannot be written: it is empty or has a blank or '#'"));
  std::map<std::string, int> names;
  for (const auto& l : g.layers) {
    if (bad_layer_name(l.name))
      throw plan_error(detail::cat("layer name '", l.name, "' cannot be written: it has a blank, '#' or ':'"));
    if (names[l.name]++) throw plan_error(detail::cat("layer name '", l.name, "' is used twice"));
    for (std::size_t i = 0; i < l.dims.size(); ++i) {
      if (bad_dim_name(l.dims[i].name))
        throw plan_error(detail::cat("layer ", l.name, ": dim name '", l.dims[i].name, "' cannot be written"));
      if (l.find_dim(l.dims[i].name) != static_cast<int>(i))
        throw plan_error(detail::cat("layer ", l.name, ": dim name '", l.dims[i].name, "' is used twice"));
    }
    const int rank = static_cast<int>(l.dims.size());
    auto check = [&](const std::vector<int>& ds, const char* what) {
      for (int d : ds)
        if (d < 0 || d >= rank)
          throw plan_error(detail::cat("layer ", l.name, ": ", what, " names dim #", d, " of ", rank));
    };
    check(l.gemm.batch, "gemm.batch");
    check(l.gemm.m.dims, "gemm.m");
    check(l.gemm.n.dims, "gemm.n");
    check(l.gemm.k.dims, "gemm.k");
    check(l.axes, "axes");
    if (l.axis >= rank) check({l.axis}, "axis");
  }
  os << "# typemesh graph, " << g.layers.size() << " layers, " << g.edges.size() << " edges\n";
  os << "graph " << g.name << " cutoff=" << g17(g.cutoff) << "\n";
  for (const auto& l : g.layers) {
    os << "layer " << l.name << ' ' << kind_name(l.kind);
    for (const auto& d : l.dims) os << ' ' << d.name << '=' << d.size;
    std::vector<std::string> attrs;
    std::vector<int> fixed;
    for (std::size_t i = 0; i < l.dims.size(); ++i)
      if (!l.dims[i].splittable) fixed.push_back(static_cast<int>(i));
    if (!fixed.empty()) attrs.push_back("fixed=" + join_dims(l, fixed, ','));
    if (!l.gemm.batch.empty()) attrs.push_back("gemm.batch=" + join_dims(l, l.gemm.batch, ','));
    const std::pair<const char*, const dim_group*> groups[] = {{"m", &l.gemm.m}, {"n", &l.gemm.n}, {"k", &l.gemm.k}};
    for (const auto& [n, gr] : groups)
      if (!gr->dims.empty()) attrs.push_back(detail::cat("gemm.", n, "=", join_dims(l, gr->dims, ',')));
    for (const auto& [n, gr] : groups)
      if (gr->scale != 1.0) attrs.push_back(detail::cat("gemm.", n, ".scale=", g17(gr->scale)));
    if (l.gemm.pw_ops != 0) attrs.push_back(detail::cat("gemm.pw=", l.gemm.pw_ops));
    if (l.pw_ops != 0) attrs.push_back(detail::cat("pw=", l.pw_ops));
    if (l.axis >= 0) attrs.push_back("axis=" + l.dims.at(static_cast<std::size_t>(l.axis)).name);
    if (!l.axes.empty()) attrs.push_back("axes=" + join_dims(l, l.axes, ','));
    if (l.window_r != 0 || l.window_s != 0) attrs.push_back(detail::cat("window=", l.window_r, "x", l.window_s));
    if (!l.input_shape.empty()) attrs.push_back("input=" + shape_string(l.input_shape));
    const bool default_out = l.out_shapes.size() == 1 && l.out_shapes[0] == dim_sizes(l) &&
                             l.out_maps[0] == identity_map(l.dims.size());
    if (l.out_shapes.empty()) {
      attrs.push_back("out=none");
    } else if (!default_out) {
      for (std::size_t i = 0; i < l.out_shapes.size();) {
        std::size_t j = i + 1;
        while (j < l.out_shapes.size() && l.out_shapes[j] == l.out_shapes[i] && l.out_maps[j] == l.out_maps[i]) ++j;
        attrs.push_back(detail::cat("out=", j - i > 1 ? detail::cat(j - i, "*") : std::string{},
                                    shape_string(l.out_shapes[i]), ":", map_string(l, l.out_maps[i])));
        i = j;
      }
    }
    for (const auto& a : attrs) {
      const std::string key = a.substr(0, a.find('='));
      if (const char* kinds = parameter_kinds(key); kinds && !applies_to(kinds, l.kind))
        throw plan_error(detail::cat("layer ", l.name, ": ", key, " cannot be written for a ", kind_name(l.kind),
                                     " layer (it is for ", kinds, ")"));
    }
    if (!attrs.empty()) {
      os << " |";
      for (const auto& a : attrs) os << ' ' << a;
    }
    os << '\n';
  }
  for (const auto& e : g.edges) {
    const auto& s = g.layers[static_cast<std::size_t>(e.src)];
    const auto& d = g.layers[static_cast<std::size_t>(e.dst)];
    os << "edge " << s.name;
    if (e.src_port != 0) os << ':' << e.src_port;
    os << ' ' << d.name << " map=" << map_string(d, e.dst_map);
    const bool port_ok = e.src_port >= 0 && e.src_port < static_cast<int>(s.out_shapes.size());
    if (!port_ok || s.out_shapes[static_cast<std::size_t>(e.src_port)] != e.shape)
      os << " shape=" << shape_string(e.shape);
    if (!port_ok || s.out_maps[static_cast<std::size_t>(e.src_port)] != e.src_map)
      os << " src=" << map_string(s, e.src_map);
    os << '\n';
  }
}

inline std::string graph_text(const graph& g) {
  std::ostringstream os;
  write_graph(os, g);
  return os.str();
}

// ---- plans ----------------------------------------------------------------

struct plan_dim {
  std::string name;
  std::int64_t size = 1;
  std::int64_t split = 1;
};

struct plan_layer {
  int id = 0;
  std::string name;
  layer_kind kind = layer_kind::elementwise;
  double cost = 0.0;
  std::vector<plan_dim> dims;

  // The split of dim `n`; throws plan_error when the layer has no such dim.
  std::int64_t split(const std::string& n) const {
    for (const auto& d : dims)
      if (d.name == n) return d.split;
    throw plan_error(detail::cat("plan layer ", name, " has no dim '", n, "'"));
  }
  // The size of dim `n`; throws plan_error when the layer has no such dim.
  std::int64_t size(const std::string& n) const {
    for (const auto& d : dims)
      if (d.name == n) return d.size;
    throw plan_error(detail::cat("plan layer ", name, " has no dim '", n, "'"));
  }
  std::vector<split_t> splits() const {
    std::vector<split_t> r;
    for (const auto& d : dims) {
      if (d.split < 1 || d.split > max_procs)
        throw plan_error(detail::cat("plan layer ", name, ": split ", d.split, " of dim ", d.name,
                                     " is not between 1 and ", max_procs));
      r.push_back(static_cast<split_t>(d.split));
    }
    return r;
  }
  // Devices the configuration uses: the product of the splits.
  std::int64_t devices() const {
    std::int64_t p = 1;
    for (const auto& d : dims) p = graph_detail::checked_mul(p, d.split, detail::cat("plan layer ", name, ": splits"));
    return p;
  }
};

struct plan_edge {
  int src = 0, dst = 0;
  std::vector<std::int64_t> shape;
  double cost = 0.0;
};

// A plan as write_json writes it.
struct plan_file {
  std::string format;  // "typemesh-plan/1"
  std::string graph;
  std::int64_t procs = 0, batch = 0;
  double tflops = 0.0, bandwidth_gb = 0.0, total_cost = 0.0;
  std::vector<plan_layer> layers;
  std::vector<plan_edge> edges;

  const plan_layer& layer(const std::string& n) const {
    for (const auto& l : layers)
      if (l.name == n) return l;
    throw plan_error(detail::cat("plan of ", graph, " has no layer '", n, "'"));
  }
};

namespace parse_detail {

struct jvalue {
  enum kind_t { object, array, string, number, boolean, null } kind = null;
  int line = 0, col = 0;
  std::string text;  // string contents, or a number's literal
  // An object's field names with their positions; the values are in items.
  std::vector<std::string> keys;
  std::vector<int> key_line, key_col;
  std::vector<jvalue> items;  // an array's values, or an object's
};

inline const char* jkind_name(jvalue::kind_t k) {
  switch (k) {
    case jvalue::object: return "an object";
    case jvalue::array: return "an array";
    case jvalue::string: return "a string";
    case jvalue::number: return "a number";
    case jvalue::boolean: return "a boolean";
    case jvalue::null: return "null";
  }
  return "?";
}

class json_parser {
 public:
  json_parser(std::string text, const std::string& source, std::uint64_t max_bytes = default_graph_bytes)
      : s_(std::move(text)), source_(source), max_values_(max_bytes / sizeof(jvalue)) {}

  jvalue document() {
    ws();
    jvalue v = value(0);
    ws();
    if (i_ < s_.size()) err("expected the end of the input after the top-level value");
    return v;
  }

 private:
  [[noreturn]] void err(const std::string& what) const { fail(source_, line_, col(), what); }
  int col() const { return static_cast<int>(i_ - line_start_) + 1; }
  std::string found() const {
    if (i_ >= s_.size()) return "the end of the input";
    const char ch = s_[i_];
    if (static_cast<unsigned char>(ch) < 0x20) return detail::cat("control character ", static_cast<int>(ch));
    return detail::cat("'", ch, "'");
  }
  void ws() {
    while (i_ < s_.size()) {
      const char ch = s_[i_];
      if (ch == '\n') {
        ++i_;
        ++line_;
        line_start_ = i_;
      } else if (ch == ' ' || ch == '\t' || ch == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }
  void expect(char ch, const char* what) {
    if (i_ >= s_.size() || s_[i_] != ch) err(detail::cat("expected ", what, ", got ", found()));
    ++i_;
  }
  jvalue value(int depth) {
    if (depth > 64) err("nesting deeper than 64 levels");
    if (++values_ > max_values_)
      err(detail::cat("more than ", max_values_, " values; the reader's memory limit allows no more"));
    jvalue v;
    v.line = line_;
    v.col = col();
    if (i_ >= s_.size()) err("expected a value, got the end of the input");
    const char ch = s_[i_];
    if (ch == '{') {
      v.kind = jvalue::object;
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return v;
      }
      for (;;) {
        ws();
        const int kl = line_, kc = col();
        if (i_ >= s_.size() || s_[i_] != '"') err(detail::cat("expected a field name in quotes, got ", found()));
        std::string key = string_body();
        for (const auto& k : v.keys)
          if (k == key) fail(source_, kl, kc, detail::cat("field \"", key, "\" appears twice"));
        ws();
        expect(':', "':' after a field name");
        ws();
        jvalue x = value(depth + 1);
        v.keys.push_back(std::move(key));
        v.items.push_back(std::move(x));
        v.key_line.push_back(kl);
        v.key_col.push_back(kc);
        ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        expect('}', "',' or '}' in an object");
        return v;
      }
    }
    if (ch == '[') {
      v.kind = jvalue::array;
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return v;
      }
      for (;;) {
        ws();
        v.items.push_back(value(depth + 1));
        ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        expect(']', "',' or ']' in an array");
        return v;
      }
    }
    if (ch == '"') {
      v.kind = jvalue::string;
      v.text = string_body();
      return v;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
      v.kind = jvalue::number;
      const std::size_t b = i_;
      if (s_[i_] == '-') ++i_;
      auto digits = [&] {
        const std::size_t d = i_;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        return i_ - d;
      };
      const std::size_t int_start = i_;
      if (digits() == 0) err("expected a digit in a number");
      if (s_[int_start] == '0' && i_ - int_start > 1) {
        i_ = int_start + 1;
        err("a number may not have a leading zero");
      }
      if (i_ < s_.size() && s_[i_] == '.') {
        ++i_;
        if (digits() == 0) err("expected a digit after the decimal point");
      }
      if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
        ++i_;
        if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
        if (digits() == 0) err("expected a digit in the exponent");
      }
      v.text = s_.substr(b, i_ - b);
      return v;
    }
    auto word = [&](const char* w, jvalue::kind_t k) {
      const std::string_view sv(w);
      if (s_.compare(i_, sv.size(), sv) != 0) return false;
      v.kind = k;
      v.text = w;
      i_ += sv.size();
      return true;
    };
    if (word("true", jvalue::boolean) || word("false", jvalue::boolean) || word("null", jvalue::null)) return v;
    err(detail::cat("expected a value (object, array, string, number, true, false or null), got ", found()));
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  unsigned hex4() {
    unsigned cp = 0;
    for (int k = 0; k < 4; ++k) {
      if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_])))
        err(detail::cat("expected four hex digits after \\u, got ", found()));
      const char h = s_[i_++];
      cp = cp * 16 + static_cast<unsigned>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return cp;
  }
  std::string string_body() {
    ++i_;  // the opening quote
    std::string r;
    for (;;) {
      if (i_ >= s_.size()) err("expected the closing '\"' of a string, got the end of the input");
      const char ch = s_[i_];
      if (ch == '"') {
        ++i_;
        return r;
      }
      if (static_cast<unsigned char>(ch) < 0x20) err(detail::cat("expected '\"' or a character, got ", found()));
      if (ch != '\\') {
        r += ch;
        ++i_;
        continue;
      }
      ++i_;
      if (i_ >= s_.size()) err("expected an escape after '\\', got the end of the input");
      const char e = s_[i_++];
      switch (e) {
        case '"': r += '"'; break;
        case '\\': r += '\\'; break;
        case '/': r += '/'; break;
        case 'b': r += '\b'; break;
        case 'f': r += '\f'; break;
        case 'n': r += '\n'; break;
        case 'r': r += '\r'; break;
        case 't': r += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (s_.compare(i_, 2, "\\u") != 0) err("expected a low surrogate \\uDC00..\\uDFFF");
            i_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) err("expected a low surrogate \\uDC00..\\uDFFF");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            err("a lone low surrogate in \\u escape");
          }
          utf8(r, cp);
          break;
        }
        default:
          --i_;
          err(detail::cat("expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u after '\\', got ", found()));
      }
    }
  }

  std::string s_;
  const std::string& source_;
  std::size_t i_ = 0, line_start_ = 0;
  int line_ = 1;
  std::uint64_t max_values_, values_ = 0;
};

// Field access with the schema's checks; `path` names the field in messages.
struct jreader {
  const std::string& source;

  [[noreturn]] void fail_at(const jvalue& v, const std::string& path, const std::string& what) const {
    fail(source, v.line, v.col, path + ": " + what);
  }
  void need(const jvalue& v, jvalue::kind_t k, const std::string& path) const {
    if (v.kind != k) fail_at(v, path, detail::cat("expected ", jkind_name(k), ", got ", jkind_name(v.kind)));
  }
  // The object's fields, exactly `names`, in any order.
  std::vector<const jvalue*> fields(const jvalue& v, const std::string& path,
                                    const std::vector<std::string>& names) const {
    need(v, jvalue::object, path.empty() ? "the plan" : path);
    std::vector<const jvalue*> r(names.size(), nullptr);
    for (std::size_t m = 0; m < v.keys.size(); ++m) {
      std::size_t k = 0;
      while (k < names.size() && names[k] != v.keys[m]) ++k;
      if (k == names.size())
        fail(source, v.key_line[m], v.key_col[m],
             detail::cat(path.empty() ? "the plan" : path, ": unknown field \"", v.keys[m], "\"; expected ",
                         detail::list(names)));
      r[k] = &v.items[m];
    }
    for (std::size_t k = 0; k < names.size(); ++k)
      if (!r[k])
        fail_at(v, path.empty() ? "the plan" : path, detail::cat("missing field \"", names[k], "\""));
    return r;
  }
  static std::string sub(const std::string& path, const std::string& f) { return path.empty() ? f : path + "." + f; }
  std::string str(const jvalue& v, const std::string& path) const {
    need(v, jvalue::string, path);
    return v.text;
  }
  std::int64_t integer(const jvalue& v, const std::string& path, std::int64_t lo) const {
    need(v, jvalue::number, path);
    std::int64_t x = 0;
    if (!parse_i64(v.text, x)) fail_at(v, path, detail::cat("expected an integer, got ", v.text));
    if (x < lo) fail_at(v, path, detail::cat("expected an integer >= ", lo, ", got ", v.text));
    return x;
  }
  double number(const jvalue& v, const std::string& path, bool positive) const {
    need(v, jvalue::number, path);
    double x = 0;
    if (!parse_double(v.text, x)) fail_at(v, path, detail::cat("expected a finite number, got ", v.text));
    if (positive ? !(x > 0) : !(x >= 0))
      fail_at(v, path, detail::cat("expected a ", positive ? "positive" : "non-negative", " number, got ", v.text));
    return x;
  }
  const std::vector<jvalue>& array(const jvalue& v, const std::string& path) const {
    need(v, jvalue::array, path);
    return v.items;
  }
};

}  // namespace parse_detail

// Reads a plan written by write_json. `source` names the input in messages.
// The input and its parsed values may take at most limits.max_bytes.
inline plan_file read_plan(std::istream& in, const std::string& source = "<plan>", const read_limits& limits = {}) {
  using namespace parse_detail;
  std::string text = read_all(in, source, std::min<std::uint64_t>(limits.max_bytes, 0x7fffffff));
  const auto left = limits.max_bytes - text.size();
  const jvalue doc = json_parser(std::move(text), source, left).document();
  const jreader rd{source};
  const auto top = rd.fields(doc, "", {"format", "graph", "procs", "batch", "tflops", "bandwidth_gb", "total_cost",
                                       "layers", "edges"});
  plan_file p;
  p.format = rd.str(*top[0], "format");
  if (p.format != "typemesh-plan/1")
    rd.fail_at(*top[0], "format", detail::cat("expected \"typemesh-plan/1\", got \"", p.format, "\""));
  p.graph = rd.str(*top[1], "graph");
  p.procs = rd.integer(*top[2], "procs", 1);
  if (p.procs > max_procs) rd.fail_at(*top[2], "procs", detail::cat("expected at most ", max_procs, ", got ", p.procs));
  p.batch = rd.integer(*top[3], "batch", 1);
  p.tflops = rd.number(*top[4], "tflops", true);
  p.bandwidth_gb = rd.number(*top[5], "bandwidth_gb", true);
  p.total_cost = rd.number(*top[6], "total_cost", false);
  const auto& layers = rd.array(*top[7], "layers");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string path = detail::cat("layers[", i, "]");
    const auto f = rd.fields(layers[i], path, {"id", "name", "kind", "cost", "dims"});
    plan_layer l;
    l.id = static_cast<int>(rd.integer(*f[0], path + ".id", 0));
    if (l.id != static_cast<int>(i)) rd.fail_at(*f[0], path + ".id", detail::cat("expected ", i, ", got ", l.id));
    l.name = rd.str(*f[1], path + ".name");
    const auto kind = rd.str(*f[2], path + ".kind");
    bool kind_ok = false;
    for (int k = 0; k <= static_cast<int>(layer_kind::lstm); ++k)
      if (kind == kind_name(static_cast<layer_kind>(k))) {
        l.kind = static_cast<layer_kind>(k);
        kind_ok = true;
      }
    if (!kind_ok) rd.fail_at(*f[2], path + ".kind", detail::cat("unknown layer kind \"", kind, "\""));
    l.cost = rd.number(*f[3], path + ".cost", false);
    const auto& dims = rd.array(*f[4], path + ".dims");
    if (dims.empty()) rd.fail_at(*f[4], path + ".dims", "expected at least one dim");
    std::int64_t used = 1;
    for (std::size_t j = 0; j < dims.size(); ++j) {
      const std::string dp = detail::cat(path, ".dims[", j, "]");
      const auto df = rd.fields(dims[j], dp, {"name", "size", "split"});
      plan_dim d{rd.str(*df[0], dp + ".name"), rd.integer(*df[1], dp + ".size", 1),
                 rd.integer(*df[2], dp + ".split", 1)};
      if (d.size % d.split != 0)
        rd.fail_at(*df[2], dp + ".split", detail::cat("split ", d.split, " does not divide size ", d.size));
      // used * split > procs, without the product (it may overflow).
      if (d.split > p.procs / used)
        rd.fail_at(*df[2], dp + ".split",
                   detail::cat("the splits of layer ", l.name, " need more than the plan's ", p.procs, " processors"));
      used *= d.split;
      l.dims.push_back(std::move(d));
    }
    p.layers.push_back(std::move(l));
  }
  const auto& edges = rd.array(*top[8], "edges");
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const std::string path = detail::cat("edges[", i, "]");
    const auto f = rd.fields(edges[i], path, {"src", "dst", "shape", "cost"});
    plan_edge e;
    const auto n = static_cast<std::int64_t>(p.layers.size());
    auto layer_ref = [&](const jvalue& v, const std::string& fp) {
      const auto x = rd.integer(v, fp, 0);
      if (x >= n) rd.fail_at(v, fp, detail::cat("expected a layer id below ", n, ", got ", x));
      return static_cast<int>(x);
    };
    e.src = layer_ref(*f[0], path + ".src");
    e.dst = layer_ref(*f[1], path + ".dst");
    const auto& shape = rd.array(*f[2], path + ".shape");
    for (std::size_t j = 0; j < shape.size(); ++j) e.shape.push_back(rd.integer(shape[j], detail::cat(path, ".shape[", j, "]"), 1));
    e.cost = rd.number(*f[3], path + ".cost", false);
    p.edges.push_back(std::move(e));
  }
  return p;
}

inline plan_file read_plan_text(const std::string& text, const std::string& source = "<plan>",
                                const read_limits& limits = {}) {
  std::istringstream in(text);
  return read_plan(in, source, limits);
}

inline plan_file read_plan_file(const std::string& path, const read_limits& limits = {}) {
  std::ifstream in(path);
  if (!in) throw plan_error(detail::cat("cannot open plan file ", path));
  return read_plan(in, path, limits);
}

// The configuration index of each of g's layers that the plan chose, in the
// problem built from g on the plan's processors. Throws plan_error when the
// plan is for another graph (layers, names or dims differ) or names a
// configuration the search does not consider.
inline std::vector<int> plan_choice(const plan_file& pl, const graph& g, const problem& p) {
  if (pl.layers.size() != g.layers.size())
    throw plan_error(detail::cat("the plan has ", pl.layers.size(), " layers, graph ", g.name, " has ",
                                 g.layers.size()));
  std::vector<int> choice;
  for (std::size_t v = 0; v < g.layers.size(); ++v) {
    const auto& gl = g.layers[v];
    const auto& pl_l = pl.layers[v];
    if (gl.name != pl_l.name || gl.dims.size() != pl_l.dims.size())
      throw plan_error(detail::cat("plan layer #", v, " is ", pl_l.name, " with ", pl_l.dims.size(),
                                   " dims; the graph's is ", gl.name, " with ", gl.dims.size()));
    for (std::size_t i = 0; i < gl.dims.size(); ++i)
      if (gl.dims[i].name != pl_l.dims[i].name || gl.dims[i].size != pl_l.dims[i].size)
        throw plan_error(detail::cat("plan layer ", pl_l.name, ": dim #", i, " is ", pl_l.dims[i].name, "=",
                                     pl_l.dims[i].size, ", the graph's is ", gl.dims[i].name, "=", gl.dims[i].size));
    const auto want = pl_l.splits();
    const auto& t = p.configs.at(v);
    int found = -1;
    for (std::size_t c = 0; c < t.size() && found < 0; ++c)
      if (std::equal(want.begin(), want.end(), t.row(c))) found = static_cast<int>(c);
    if (found < 0)
      throw plan_error(detail::cat("plan layer ", pl_l.name, ": configuration ",
                                   config_string(want.data(), static_cast<int>(want.size())),
                                   " is not one the search considers"));
    choice.push_back(found);
  }
  return choice;
}

}  // namespace typemesh::plan

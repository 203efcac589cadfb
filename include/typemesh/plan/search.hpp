// The exact search for the cheapest strategy (PaSE's FindBestStrategy): the
// layers are eliminated one at a time in a fixed order; eliminating v joins
// every cost table that mentions v, adds v's own cost, and minimises over v's
// configurations for each combination of the configurations of the tables'
// other layers (v's neighbours in the graph filled in by the eliminations
// before it). The argmin of each step is kept, so that the cheapest strategy
// is read back in reverse order. The result is the exact minimum of Eq. (1);
// the order only decides the sizes of the tables.
//
// The default order is PaSE's GenerateSeq: repeatedly the layer with the
// fewest not-yet-eliminated (filled-in) neighbours, ties to the lowest index.
// Breadth-first order (from layer 0) is there for comparison.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <utility>
#include <thread>
#include <vector>

#include "typemesh/plan/cost.hpp"

namespace typemesh::plan {

enum class vertex_order { generate_seq, breadth_first };

struct search_options {
  vertex_order order = vertex_order::generate_seq;
  // Refuse to build a table with more entries than this (memory guard).
  std::uint64_t max_table_entries = std::uint64_t{1} << 27;
  // Refuse to go on when the live tables and the kept argmins would take more
  // bytes than this (checked before each table is allocated).
  std::uint64_t max_bytes = std::uint64_t{16} << 30;
  // Refuse an elimination that would take more than this many additions
  // (table entries x configurations x tables); 0: no limit.
  std::uint64_t max_work = 0;
  // Threads for the large eliminations; 0: one per hardware thread.
  unsigned threads = 0;
};

struct search_result {
  double cost = 0.0;
  std::vector<int> choice;  // configuration index per layer
  std::vector<int> order;   // elimination order
  std::uint64_t largest_table = 0;  // entries of the largest table built
  std::uint64_t peak_bytes = 0;     // peak bytes of live tables and argmins
};

// Undirected neighbour sets of the problem's graph.
inline std::vector<std::set<int>> neighbours(const problem& p) {
  std::vector<std::set<int>> nb(static_cast<std::size_t>(p.size()));
  for (const auto& e : p.edges) {
    if (e.src == e.dst) continue;
    nb[e.src].insert(e.dst);
    nb[e.dst].insert(e.src);
  }
  return nb;
}

// GenerateSeq: minimum fill-in degree first.
inline std::vector<int> generate_seq(const problem& p) {
  const int n = p.size();
  auto nb = neighbours(p);
  std::vector<int> count(n);
  // (count, layer): the first is the next to eliminate, in O(log n).
  std::set<std::pair<int, int>> queue;
  for (int v = 0; v < n; ++v) {
    count[v] = static_cast<int>(nb[v].size());
    queue.emplace(count[v], v);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!queue.empty()) {
    const int best = queue.begin()->second;
    queue.erase(queue.begin());
    order.push_back(best);
    const auto around = std::move(nb[best]);
    nb[best].clear();
    for (int u : around) {
      auto& s = nb[u];
      queue.erase({count[u], u});
      s.insert(around.begin(), around.end());
      s.erase(best);
      s.erase(u);
      count[u] = static_cast<int>(s.size());
      queue.emplace(count[u], u);
    }
  }
  return order;
}

// Breadth-first from layer 0 (then from the lowest unreached layer).
inline std::vector<int> breadth_first(const problem& p) {
  const int n = p.size();
  auto nb = neighbours(p);
  std::vector<char> seen(n, 0);
  std::vector<int> order;
  order.reserve(n);
  for (int root = 0; root < n; ++root) {
    if (seen[root]) continue;
    seen[root] = 1;
    std::size_t head = order.size();
    order.push_back(root);
    while (head < order.size()) {
      const int v = order[head++];
      for (int u : nb[v])
        if (!seen[u]) {
          seen[u] = 1;
          order.push_back(u);
        }
    }
  }
  return order;
}

namespace search_detail {

// A cost table over some layers. Entry for configurations (c_1 … c_k) of
// scope (u_1 … u_k) is data[Σ strides[i] · map_i(c_i)], map_i the identity or
// a configuration → layout map.
struct factor {
  std::vector<int> scope;
  std::vector<const std::int32_t*> maps;
  std::vector<std::int64_t> strides;
  const double* data = nullptr;
  std::vector<double> own;
  bool live = true;

  int where(int v) const {
    for (std::size_t i = 0; i < scope.size(); ++i)
      if (scope[i] == v) return static_cast<int>(i);
    return -1;
  }
  std::int64_t offset(int i, std::int64_t c) const { return strides[i] * (maps[i] ? maps[i][c] : c); }
};

struct step {
  int v = 0;
  std::vector<int> scope;
  std::vector<std::int64_t> strides;
  std::vector<std::int32_t> argmin;
};

}  // namespace search_detail

inline search_result find_best_strategy(const problem& p, const std::vector<int>& order,
                                        const search_options& opt = {}) {
  using search_detail::factor;
  const int n = p.size();
  if (static_cast<int>(order.size()) != n)
    throw plan_error(detail::cat("elimination order has ", order.size(), " layers, the graph ", n));
  {
    std::vector<char> seen(n, 0);
    for (int v : order) {
      if (v < 0 || v >= n || seen[v])
        throw plan_error(detail::cat("elimination order names layer ", p.name(v), " twice or out of range"));
      seen[v] = 1;
    }
  }
  std::vector<std::int64_t> ncfg(n);
  for (int v = 0; v < n; ++v) {
    ncfg[v] = static_cast<std::int64_t>(p.vertex_costs[v].size());
    if (ncfg[v] == 0) throw plan_error(detail::cat("layer ", p.name(v), " has no configuration"));
  }

  std::vector<std::vector<double>> unary = p.vertex_costs;
  std::vector<factor> factors;
  factors.reserve(p.edges.size() + static_cast<std::size_t>(n));
  std::vector<std::vector<int>> touching(n);  // factor ids per layer
  std::uint64_t live_bytes = 0;
  search_result res;
  for (const auto& e : p.edges) {
    if (e.src < 0 || e.src >= n || e.dst < 0 || e.dst >= n || e.src == e.dst)
      throw plan_error(detail::cat("edge ", p.name(e.src), " -> ", p.name(e.dst), " is not between two layers"));
    if (e.src_layout.size() != static_cast<std::size_t>(ncfg[e.src]) ||
        e.dst_layout.size() != static_cast<std::size_t>(ncfg[e.dst]) ||
        e.table.size() != static_cast<std::size_t>(e.src_layouts) * static_cast<std::size_t>(e.dst_layouts))
      throw plan_error(detail::cat("edge ", p.name(e.src), " -> ", p.name(e.dst), ": cost table of the wrong size"));
    factor f;
    f.scope = {e.src, e.dst};
    f.maps = {e.src_layout.data(), e.dst_layout.data()};
    f.strides = {e.dst_layouts, 1};
    f.data = e.table.data();
    const int id = static_cast<int>(factors.size());
    factors.push_back(std::move(f));
    touching[e.src].push_back(id);
    touching[e.dst].push_back(id);
  }

  std::vector<int> pos(n);
  for (int i = 0; i < n; ++i) pos[order[i]] = i;
  std::vector<search_detail::step> steps;
  steps.reserve(n);
  std::vector<char> gone(n, 0);
  double constant = 0.0;
  for (int v : order) {
    std::vector<int> fs;
    for (int id : touching[v])
      if (factors[id].live) fs.push_back(id);
    std::sort(fs.begin(), fs.end());
    fs.erase(std::unique(fs.begin(), fs.end()), fs.end());
    std::vector<int> scope;
    for (int id : fs)
      for (int u : factors[id].scope)
        if (u != v) scope.push_back(u);
    std::sort(scope.begin(), scope.end());
    scope.erase(std::unique(scope.begin(), scope.end()), scope.end());
    // The layer eliminated soonest runs fastest: when it is eliminated, its
    // entries in this table are contiguous.
    std::sort(scope.begin(), scope.end(), [&](int a, int b) { return pos[a] > pos[b]; });
    for (int u : scope)
      if (gone[u]) throw plan_error(detail::cat("internal: table mentions eliminated layer ", p.name(u)));
    const int k = static_cast<int>(scope.size());
    std::vector<std::int64_t> strides(k);
    std::uint64_t entries = 1;
    for (int j = k - 1; j >= 0; --j) {
      strides[j] = static_cast<std::int64_t>(entries);
      entries *= static_cast<std::uint64_t>(ncfg[scope[j]]);
      if (entries > opt.max_table_entries)
        throw plan_error(detail::cat("eliminating layer ", p.name(v), " needs a table over ", k,
                                     " layers with more than ", opt.max_table_entries, " entries"));
    }
    res.largest_table = std::max(res.largest_table, entries);
    constexpr std::uint64_t entry_bytes = sizeof(double) + sizeof(std::int32_t);
    if (entries > opt.max_bytes / entry_bytes || live_bytes > opt.max_bytes - entries * entry_bytes)
      throw plan_error(detail::cat("eliminating layer ", p.name(v), " needs a table of ", entries, " entries; with ",
                                   live_bytes, " bytes of tables kept that is more than the search's limit of ",
                                   opt.max_bytes, " bytes"));

    // Per factor: v's offsets, and per scope position the offsets of its
    // configurations (empty when the factor does not mention that layer).
    const std::int64_t nv = ncfg[v];
    const std::size_t nf = fs.size();
    std::vector<std::vector<std::int64_t>> voff(nf);
    std::vector<std::vector<std::vector<std::int64_t>>> contrib(nf, std::vector<std::vector<std::int64_t>>(k));
    std::vector<char> dense(nf, 0);  // v's entries contiguous in this factor
    std::vector<const double*> fdata(nf);
    std::vector<std::vector<double>> gathered(nf);
    for (std::size_t a = 0; a < nf; ++a) {
      const factor& f = factors[fs[a]];
      const int wv = f.where(v);
      fdata[a] = f.data;
      voff[a].resize(nv);
      for (std::int64_t c = 0; c < nv; ++c) voff[a][c] = f.offset(wv, c);
      dense[a] = !f.maps[wv] && f.strides[wv] == 1;
      if (!dense[a] && f.scope.size() == 2) {
        // An edge: copy its rows out in v's configuration order, one row per
        // layout of the other end, so that the inner loop reads contiguously.
        const int wu = 1 - wv;
        std::int64_t nrows = 1;
        const std::int64_t ncu = ncfg[f.scope[wu]];
        for (std::int64_t c = 0; c < ncu; ++c)
          nrows = std::max<std::int64_t>(nrows, (f.maps[wu] ? f.maps[wu][c] : c) + 1);
        auto& gt = gathered[a];
        gt.resize(static_cast<std::size_t>(nrows * nv));
        for (std::int64_t r = 0; r < nrows; ++r)
          for (std::int64_t c = 0; c < nv; ++c) gt[r * nv + c] = f.data[f.strides[wu] * r + voff[a][c]];
        fdata[a] = gt.data();
        dense[a] = 1;
        const int j = static_cast<int>(std::find(scope.begin(), scope.end(), f.scope[wu]) - scope.begin());
        auto& cv = contrib[a][j];
        cv.resize(ncu);
        for (std::int64_t c = 0; c < ncu; ++c) cv[c] = (f.maps[wu] ? f.maps[wu][c] : c) * nv;
        continue;
      }
      for (int j = 0; j < k; ++j) {
        const int w = f.where(scope[j]);
        if (w < 0) continue;
        auto& cv = contrib[a][j];
        cv.resize(ncfg[scope[j]]);
        for (std::int64_t c = 0; c < ncfg[scope[j]]; ++c) cv[c] = f.offset(w, c);
      }
    }

    search_detail::step st;
    st.v = v;
    st.scope = scope;
    st.strides = strides;
    st.argmin.resize(entries);
    factor nfct;
    nfct.own.resize(entries);
    const double* uv = unary[v].data();
    // Entries [e0, e1) of the new table.
    auto run = [&](std::uint64_t e0, std::uint64_t e1) {
      std::vector<std::int64_t> digit(k, 0), base(nf, 0);
      std::vector<double> acc(nv);
      std::uint64_t rest = e0;
      for (int j = 0; j < k; ++j) {
        digit[j] = static_cast<std::int64_t>(rest / static_cast<std::uint64_t>(strides[j]));
        rest %= static_cast<std::uint64_t>(strides[j]);
      }
      for (std::size_t a = 0; a < nf; ++a)
        for (int j = 0; j < k; ++j)
          if (!contrib[a][j].empty()) base[a] += contrib[a][j][digit[j]];
      std::vector<const double*> ptr(nf);
      bool all_dense = true;
      for (std::size_t a = 0; a < nf; ++a) all_dense = all_dense && dense[a];
      for (std::uint64_t e = e0; e < e1; ++e) {
        std::int64_t best = 0;
        double bv = std::numeric_limits<double>::infinity();
        // One pass: the sum of v's row in every table, and its first minimum.
        auto scan = [&](auto&& value) {
          for (std::int64_t c = 0; c < nv; ++c) {
            const double x = value(c);
            if (x < bv) {
              bv = x;
              best = c;
            }
          }
        };
        for (std::size_t a = 0; a < nf; ++a) ptr[a] = fdata[a] + base[a];
        if (all_dense && nf == 1) {
          const double* __restrict p0 = ptr[0];
          scan([&](std::int64_t c) { return uv[c] + p0[c]; });
        } else if (all_dense && nf == 2) {
          const double *__restrict p0 = ptr[0], *__restrict p1 = ptr[1];
          scan([&](std::int64_t c) { return uv[c] + p0[c] + p1[c]; });
        } else if (all_dense && nf == 3) {
          const double *__restrict p0 = ptr[0], *__restrict p1 = ptr[1], *__restrict p2 = ptr[2];
          scan([&](std::int64_t c) { return uv[c] + p0[c] + p1[c] + p2[c]; });
        } else {
          double* __restrict ac = acc.data();
          std::copy(uv, uv + nv, ac);
          for (std::size_t a = 0; a < nf; ++a) {
            const double* __restrict d = ptr[a];
            if (dense[a]) {
              for (std::int64_t c = 0; c < nv; ++c) ac[c] += d[c];
            } else {
              const std::int64_t* __restrict o = voff[a].data();
              for (std::int64_t c = 0; c < nv; ++c) ac[c] += d[o[c]];
            }
          }
          scan([&](std::int64_t c) { return ac[c]; });
        }
        nfct.own[e] = bv;
        st.argmin[e] = static_cast<std::int32_t>(best);
        // Next combination: the last scope layer runs fastest.
        for (int j = k - 1; j >= 0; --j) {
          const std::int64_t old = digit[j];
          std::int64_t nw = old + 1;
          if (nw == ncfg[scope[j]]) nw = 0;
          digit[j] = nw;
          for (std::size_t a = 0; a < nf; ++a)
            if (!contrib[a][j].empty()) base[a] += contrib[a][j][nw] - contrib[a][j][old];
          if (nw != 0) break;
        }
      }
    };
    const double work = static_cast<double>(entries) * static_cast<double>(nv) * static_cast<double>(nf + 1);
    if (opt.max_work && work > static_cast<double>(opt.max_work))
      throw plan_error(detail::cat("eliminating layer ", p.name(v), " takes ", work,
                                   " additions, more than the search's limit of ", opt.max_work));
    unsigned nthreads = opt.threads ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
    if (work < 4e6) nthreads = 1;
    nthreads = static_cast<unsigned>(std::min<std::uint64_t>(nthreads, entries));
    if (nthreads <= 1) {
      run(0, entries);
    } else {
      std::vector<std::thread> pool;
      const std::uint64_t chunk = (entries + nthreads - 1) / nthreads;
      for (unsigned t = 0; t < nthreads; ++t) {
        const std::uint64_t e0 = t * chunk, e1 = std::min(entries, e0 + chunk);
        if (e0 < e1) pool.emplace_back(run, e0, e1);
      }
      for (auto& th : pool) th.join();
    }

    for (int id : fs) {
      factor& f = factors[id];
      f.live = false;
      live_bytes -= f.own.size() * sizeof(double);
      f.own.clear();
      f.own.shrink_to_fit();
    }
    gone[v] = 1;
    live_bytes += entries * (sizeof(double) + sizeof(std::int32_t));
    res.peak_bytes = std::max(res.peak_bytes, live_bytes);
    live_bytes -= entries * sizeof(double);  // the table may fold into a vertex below
    if (k == 0) {
      constant += nfct.own[0];
    } else if (k == 1) {
      auto& u = unary[scope[0]];
      for (std::int64_t c = 0; c < ncfg[scope[0]]; ++c) u[c] += nfct.own[c];
    } else {
      nfct.scope = scope;
      nfct.maps.assign(k, nullptr);
      nfct.strides = strides;
      nfct.data = nfct.own.data();
      live_bytes += entries * sizeof(double);
      const int id = static_cast<int>(factors.size());
      factors.push_back(std::move(nfct));
      for (int u : scope) touching[u].push_back(id);
    }
    steps.push_back(std::move(st));
  }

  res.cost = constant;
  res.order = order;
  res.choice.assign(n, 0);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    std::int64_t idx = 0;
    for (std::size_t j = 0; j < it->scope.size(); ++j) idx += it->strides[j] * res.choice[it->scope[j]];
    res.choice[it->v] = it->argmin[static_cast<std::size_t>(idx)];
  }
  return res;
}

inline search_result find_best_strategy(const problem& p, const search_options& opt = {}) {
  const auto order = opt.order == vertex_order::generate_seq ? generate_seq(p) : breadth_first(p);
  return find_best_strategy(p, order, opt);
}

// Exhaustive search, for tests on small problems.
inline search_result brute_force(const problem& p) {
  const int n = p.size();
  search_result res;
  res.cost = std::numeric_limits<double>::infinity();
  std::vector<int> cur(n, 0);
  while (true) {
    const double c = strategy_cost(p, cur);
    if (c < res.cost) {
      res.cost = c;
      res.choice = cur;
    }
    int j = n - 1;
    for (; j >= 0; --j) {
      if (++cur[j] < static_cast<int>(p.vertex_costs[j].size())) break;
      cur[j] = 0;
    }
    if (j < 0) break;
  }
  return res;
}

}  // namespace typemesh::plan

// Tests of the strategy search (plan/): configurations, costs, the dynamic
// program against exhaustive search, and the PaSE tool's minimum costs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "typemesh/plan/networks.hpp"
#include "typemesh/plan/report.hpp"
#include "typemesh/plan/search.hpp"

namespace tp = typemesh::plan;

namespace {

std::string data_dir() {
#ifdef TYPEMESH_PLAN_DATA_DIR
  return TYPEMESH_PLAN_DATA_DIR;
#else
  std::string f = __FILE__;
  const auto slash = f.find_last_of('/');
  return (slash == std::string::npos ? std::string(".") : f.substr(0, slash)) + "/plan";
#endif
}

void expect_dp_equals_brute_force(const tp::problem& p, const std::string& what) {
  const auto bf = tp::brute_force(p);
  for (auto order : {tp::vertex_order::generate_seq, tp::vertex_order::breadth_first}) {
    tp::search_options o;
    o.order = order;
    const auto dp = tp::find_best_strategy(p, o);
    const double tol = 1e-9 * std::max(1.0, std::abs(bf.cost));
    EXPECT_NEAR(dp.cost, bf.cost, tol) << what << " order " << static_cast<int>(order);
    ASSERT_EQ(dp.choice.size(), static_cast<std::size_t>(p.size()));
    EXPECT_NEAR(tp::strategy_cost(p, dp.choice), dp.cost, tol) << what << ": the returned strategy has another cost";
  }
}

std::uint64_t search_space(const tp::problem& p) {
  std::uint64_t n = 1;
  for (const auto& c : p.vertex_costs) n *= c.size();
  return n;
}

// ---- small graphs from the builder ----------------------------------------

tp::graph chain(std::mt19937& rng, int layers) {
  tp::graph_builder g("chain", 2.0);
  std::uniform_int_distribution<int> pick(0, 2);
  auto x = g.input({8, 8});
  for (int i = 0; i < layers; ++i) x = g.fc(x, pick(rng) == 0 ? 4 : 8, pick(rng) % 2);
  g.softmax_xent(x);
  return g.finish();
}

tp::graph diamond(std::mt19937& rng) {
  tp::graph_builder g("diamond", 2.0);
  std::uniform_int_distribution<int> pick(0, 1);
  auto x = g.fc(g.input({8, 4}), 8, pick(rng));
  auto a = g.fc(x, 8, pick(rng));
  auto b = g.fc(x, 8, 0);
  if (pick(rng)) b = g.norm(b, -1);
  auto y = g.elementwise(a, b, pick(rng));
  g.softmax_xent(g.norm(y, 0));
  return g.finish();
}

tp::graph fork(std::mt19937& rng) {
  // Inception-like: branches of conv/pooling joined by a concat.
  tp::graph_builder g("fork", 2.0);
  std::uniform_int_distribution<int> pick(0, 1);
  auto x = g.conv(g.input({4, 2, 6, 6}), {4, 2, 1, 1}, 1, 0, pick(rng));
  auto b1 = g.conv(x, {4, 4, 1, 1});
  auto b2 = g.conv(x, {4, 4, 3, 3}, 1, 1);
  auto b3 = g.pooling(x, {3, 3}, 1, 1);
  auto y = g.concat({b1, b2, b3}, 1);
  y = g.reduce_mean(y, {2, 3});
  g.fc(y, 4);
  return g.finish();
}

tp::graph attention_like() {
  tp::graph_builder g("attention", 2.0);
  auto x = g.input({4, 4, 4});  // b l e
  auto qkv = g.einsum("ble,shek->sbhlk", x, g.input({3, 2, 4, 2}));
  auto parts = g.unstack(qkv, 0);
  auto logits = g.einsum("bhlk,bhmk->bhlm", parts[0], parts[1]);
  auto w = g.softmax(logits, 3);
  auto y = g.einsum("bhlm,bhmk->bhlk", w, parts[2]);
  y = g.einsum("bhlk,hek->ble", y, g.input({2, 4, 2}));
  g.softmax_xent(g.elementwise(x, y));
  return g.finish();
}

tp::graph pipeline_like() {
  tp::graph_builder g("pipeline", 1.0);
  auto x = g.embedding(g.input({4, 2}), 4, 4);
  x = g.lstm(x, 4, 2);
  x = g.reshape(x, {32});
  g.reshape(x, {8, 4});
  return g.finish();
}

// ---- random problems --------------------------------------------------------

tp::problem random_problem(std::mt19937& rng, int n, int extra_edges) {
  std::uniform_int_distribution<int> ncfg(1, 5);
  std::uniform_real_distribution<double> cost(0.0, 100.0);
  tp::problem p;
  for (int v = 0; v < n; ++v) {
    const int k = ncfg(rng);
    tp::config_table t;
    t.rank = 1;
    for (int i = 0; i < k; ++i) t.splits.push_back(i + 1);
    p.configs.push_back(t);
    std::vector<double> c(k);
    for (auto& x : c) x = cost(rng);
    p.vertex_costs.push_back(c);
  }
  auto add_edge = [&](int a, int b) {
    tp::edge_table e;
    e.src = a;
    e.dst = b;
    std::uniform_int_distribution<int> la(1, static_cast<int>(p.vertex_costs[a].size()));
    std::uniform_int_distribution<int> lb(1, static_cast<int>(p.vertex_costs[b].size()));
    e.src_layouts = la(rng);
    e.dst_layouts = lb(rng);
    for (std::size_t i = 0; i < p.vertex_costs[a].size(); ++i)
      e.src_layout.push_back(static_cast<int>(i) % e.src_layouts);
    for (std::size_t i = 0; i < p.vertex_costs[b].size(); ++i)
      e.dst_layout.push_back(static_cast<int>((i * 7 + 3) % static_cast<std::size_t>(e.dst_layouts)));
    for (int i = 0; i < e.src_layouts * e.dst_layouts; ++i) e.table.push_back(cost(rng));
    p.edges.push_back(e);
  };
  for (int v = 1; v < n; ++v) {
    std::uniform_int_distribution<int> parent(0, v - 1);
    add_edge(parent(rng), v);
  }
  std::uniform_int_distribution<int> any(0, n - 1);
  for (int i = 0; i < extra_edges; ++i) {
    int a = any(rng), b = any(rng);
    if (a == b) continue;
    if (a > b) std::swap(a, b);
    bool dup = false;
    for (const auto& e : p.edges) dup |= e.src == a && e.dst == b;
    if (!dup) add_edge(a, b);
  }
  return p;
}

struct reference_row {
  std::string graph;
  std::int64_t procs = 0;
  std::int64_t batch = 128;
  double cost = 0.0;
  int line = 0;
};

// Reads graph, procs, total_cost (tab- or space-separated; an optional header
// names the columns, and may add a batch column; '#' starts a comment).
std::vector<reference_row> read_reference(const std::string& path) {
  std::ifstream in(path);
  std::vector<reference_row> rows;
  if (!in) return rows;
  std::string line;
  int col_graph = 0, col_procs = 1, col_cost = 2, col_batch = -1;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::vector<std::string> f;
    for (std::string w; ls >> w;) f.push_back(w);
    if (f.size() < 3) continue;
    bool header = false;
    for (auto& w : f) header |= w == "procs" || w == "graph" || w == "total_cost";
    if (header) {
      for (int i = 0; i < static_cast<int>(f.size()); ++i) {
        if (f[i] == "graph") col_graph = i;
        if (f[i] == "procs" || f[i] == "p") col_procs = i;
        if (f[i] == "total_cost" || f[i] == "cost") col_cost = i;
        if (f[i] == "batch") col_batch = i;
      }
      continue;
    }
    reference_row r;
    r.line = lineno;
    r.graph = f.at(col_graph);
    try {
      r.procs = std::stoll(f.at(col_procs));
      r.cost = std::stod(f.at(col_cost));
      if (col_batch >= 0) r.batch = std::stoll(f.at(col_batch));
    } catch (const std::exception&) {
      continue;  // a row without a cost (a run that did not finish)
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

// ---- configurations and costs -------------------------------------------------

TEST(PlanConfig, Divisors) {
  EXPECT_EQ(tp::divisors(12), (std::vector<std::int64_t>{1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(tp::divisors(1), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(tp::divisors(49), (std::vector<std::int64_t>{1, 7, 49}));
}

TEST(PlanConfig, CutoffAndUnsplittableDims) {
  EXPECT_EQ(tp::dim_splits({"b", 128}, 64, 4.0), (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(tp::dim_splits({"c", 3}, 64, 4.0), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(tp::dim_splits({"c", 3}, 64, 1.0), (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(tp::dim_splits({"h", 64, false}, 64, 1.0), (std::vector<std::int64_t>{1}));
}

TEST(PlanConfig, ProductAtMostProcs) {
  const auto g = tp::alexnet(128);
  for (std::int64_t p : {4, 8, 16}) {
    for (const auto& l : g.layers) {
      const auto t = tp::enumerate_configs(l, p, g.cutoff);
      for (std::size_t i = 0; i < t.size(); ++i) EXPECT_LE(t.procs(i), p) << l.name;
    }
  }
}

// Configuration counts per layer as the PaSE tool reports them (AlexNet, p = 4).
TEST(PlanConfig, AlexNetCountsMatchTheTool) {
  const auto g = tp::alexnet(128);
  const std::vector<std::size_t> want{7, 9, 11, 6, 11, 12, 11, 6, 3, 3, 11, 10, 10, 6};
  ASSERT_EQ(g.layers.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(tp::enumerate_configs(g.layers[i], 4, g.cutoff).size(), want[i]) << g.layers[i].name;
}

TEST(PlanConfig, ReshapeKeepsContiguousSplits) {
  tp::graph_builder g("r", 1.0);
  g.reshape(g.input({4, 4}), {16});
  const auto gr = g.finish();
  const auto t = tp::enumerate_configs(gr.layers[0], 8, gr.cutoff);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const auto c = t.at(i);
    EXPECT_TRUE(c[1] == 1 || c[0] == 4) << tp::config_string(c.data(), 2);
  }
}

TEST(PlanCost, EdgeCostCountsMissingWordsBothWays) {
  const double r = tp::machine{}.r();
  EXPECT_DOUBLE_EQ(r, 5000.0);
  const std::vector<std::int64_t> shape{8, 8};
  const tp::split_t a[] = {2, 1}, b[] = {1, 2}, one[] = {1, 1}, four[] = {4, 1};
  // Target slice 8×4, of which min(4,8)·min(8,4) = 16 words are local.
  EXPECT_DOUBLE_EQ(tp::edge_cost(shape, a, b, r), r * 2.0 * (32 - 16));
  EXPECT_DOUBLE_EQ(tp::edge_cost(shape, a, a, r), 0.0);
  // More target devices than source devices: nothing is assumed local.
  EXPECT_DOUBLE_EQ(tp::edge_cost(shape, a, four, r), r * 2.0 * 16);
  EXPECT_DOUBLE_EQ(tp::edge_cost(shape, a, one, r), r * 2.0 * (64 - 32));
}

TEST(PlanCost, GemmCostOfAnFcLayer) {
  tp::graph_builder g("fc", 1.0);
  g.fc(g.input({8, 16}), 4);  // dims (b=8, n=4, k=16)
  const auto gr = g.finish();
  const double r = 2.0;
  const tp::split_t whole[] = {1, 1, 1}, data[] = {2, 1, 1}, red[] = {1, 1, 2};
  EXPECT_DOUBLE_EQ(tp::layer_cost(gr.layers[0], whole, r), 3.0 * 8 * 4 * 16);
  // Data parallel: half the work, and the weight gradient (n·k) all-reduced.
  EXPECT_DOUBLE_EQ(tp::layer_cost(gr.layers[0], data, r), 3.0 * 4 * 4 * 16 + r * (4 * 16 / 2.0) * 2.0);
  // Split reduction: the output (m·n) all-reduced.
  EXPECT_DOUBLE_EQ(tp::layer_cost(gr.layers[0], red, r), 3.0 * 8 * 4 * 8 + r * (8 * 4 / 2.0) * 2.0);
}

// ---- the dynamic program ---------------------------------------------------------

TEST(PlanSearch, GenerateSeqOnAChainGoesInOrder) {
  std::mt19937 rng(1);
  const auto p = tp::build_problem(chain(rng, 4), 4);
  const auto o = tp::generate_seq(p);
  EXPECT_EQ(o, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(PlanSearch, EqualsBruteForceOnChains) {
  std::mt19937 rng(7);
  for (int t = 0; t < 6; ++t) {
    const auto p = tp::build_problem(chain(rng, 2 + t % 4), 4, {10.0, 16.0});
    ASSERT_LE(search_space(p), 2'000'000u);
    expect_dp_equals_brute_force(p, "chain " + std::to_string(t));
  }
}

TEST(PlanSearch, EqualsBruteForceOnDiamonds) {
  std::mt19937 rng(11);
  for (int t = 0; t < 6; ++t) {
    const auto p = tp::build_problem(diamond(rng), 4, {1.0, 64.0});
    ASSERT_LE(search_space(p), 4'000'000u);
    expect_dp_equals_brute_force(p, "diamond " + std::to_string(t));
  }
}

TEST(PlanSearch, EqualsBruteForceOnForks) {
  std::mt19937 rng(13);
  for (int t = 0; t < 3; ++t) {
    const auto p = tp::build_problem(fork(rng), 2, {10.0, 4.0});
    ASSERT_LE(search_space(p), 4'000'000u);
    expect_dp_equals_brute_force(p, "fork " + std::to_string(t));
  }
}

TEST(PlanSearch, EqualsBruteForceOnAttentionAndPipelineGraphs) {
  const auto a = tp::build_problem(attention_like(), 2);
  ASSERT_LE(search_space(a), 4'000'000u);
  expect_dp_equals_brute_force(a, "attention");
  const auto b = tp::build_problem(pipeline_like(), 2);
  ASSERT_LE(search_space(b), 4'000'000u);
  expect_dp_equals_brute_force(b, "pipeline");
}

TEST(PlanSearch, EqualsBruteForceOnRandomProblems) {
  std::mt19937 rng(2024);
  for (int t = 0; t < 40; ++t) {
    const int n = 3 + t % 6;
    const auto p = random_problem(rng, n, t % 7);
    expect_dp_equals_brute_force(p, "random " + std::to_string(t));
  }
}

TEST(PlanSearch, AnyOrderGivesTheSameMinimum) {
  std::mt19937 rng(5);
  const auto p = random_problem(rng, 8, 6);
  const double best = tp::brute_force(p).cost;
  std::vector<int> order(8);
  for (int i = 0; i < 8; ++i) order[i] = i;
  for (int t = 0; t < 10; ++t) {
    std::shuffle(order.begin(), order.end(), rng);
    EXPECT_NEAR(tp::find_best_strategy(p, order).cost, best, 1e-9 * best);
  }
}

// Breadth-first elimination builds tables over whole fronts: fine on the
// chains, far too large on ResNet, Inception and the Transformer.
TEST(PlanSearch, BreadthFirstAgreesOnTheChainNetworks) {
  for (const std::string name : {"alexnet", "rnnlm"}) {
    const auto p = tp::build_problem(tp::network(name, 128), 4);
    tp::search_options bfs;
    bfs.order = tp::vertex_order::breadth_first;
    const auto a = tp::find_best_strategy(p);
    const auto b = tp::find_best_strategy(p, bfs);
    EXPECT_NEAR(a.cost, b.cost, 1e-9 * a.cost) << name;
    EXPECT_NEAR(tp::strategy_cost(p, a.choice), a.cost, 1e-9 * a.cost) << name;
  }
}

TEST(PlanSearch, ThreadsDoNotChangeTheResult) {
  const auto p = tp::build_problem(tp::transformer(128), 16);
  tp::search_options one, many;
  one.threads = 1;
  many.threads = 4;
  const auto a = tp::find_best_strategy(p, one);
  const auto b = tp::find_best_strategy(p, many);
  EXPECT_EQ(a.cost, b.cost);
  EXPECT_EQ(a.choice, b.choice);
}

TEST(PlanReport, TableJsonAndDot) {
  const auto g = tp::alexnet(128);
  const auto p = tp::build_problem(g, 4);
  const auto r = tp::find_best_strategy(p);
  std::ostringstream table, json, dot;
  tp::write_table(table, g, p, r);
  tp::write_json(json, g, p, r, 4, 128, {});
  tp::write_dot(dot, g, &p, &r);
  EXPECT_NE(table.str().find("Total cost: 148215719552.00"), std::string::npos) << table.str();
  EXPECT_NE(json.str().find("\"total_cost\": 148215719552.00"), std::string::npos);
  EXPECT_NE(json.str().find("\"name\": \"conv1\""), std::string::npos);
  EXPECT_NE(dot.str().find("n0 -> n1"), std::string::npos);
  EXPECT_NE(dot.str().find("conv1\\nconv\\nb=4"), std::string::npos) << dot.str();
}

TEST(PlanReport, HeaderOfMeshesAndLayouts) {
  const auto g = tp::alexnet(128);
  const auto p = tp::build_problem(g, 16);
  const auto r = tp::find_best_strategy(p);
  std::ostringstream h;
  tp::write_header(h, g, p, r, 16);
  const auto s = h.str();
  EXPECT_NE(s.find("namespace plan_alexnet_p16 {"), std::string::npos);
  EXPECT_NE(s.find("struct b : typemesh::dim<\"b\"> {};"), std::string::npos);
  // The reference's plan for AlexNet on 16 devices: conv1 data parallel, fc6 split (n=2, k=8).
  EXPECT_NE(s.find("using mesh = typemesh::mesh<\"conv1\", axes::a0>;\n"
                   "inline constexpr std::array<int, 1> mesh_shape{16};\n"
                   "using layout = typemesh::layout<dims::b(axes::a0)>;"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("inline constexpr std::array<int, 2> mesh_shape{2, 8};\n"
                   "using layout = typemesh::layout<dims::n(axes::a0), dims::k(axes::a1)>;"),
            std::string::npos)
      << s;
}

// ---- the reference's minimum costs -----------------------------------------------

TEST(PlanReference, MinimumCostsOfTheFiveNetworks) {
  const std::string path = data_dir() + "/reference_costs.tsv";
  const auto rows = read_reference(path);
  if (rows.empty()) GTEST_SKIP() << "no reference rows in " << path;
  for (const auto& r : rows) {
    SCOPED_TRACE(path + ":" + std::to_string(r.line) + " " + r.graph + " p=" + std::to_string(r.procs));
    const auto p = tp::build_problem(tp::network(r.graph, r.batch), r.procs);
    const auto res = tp::find_best_strategy(p);
    // The tool prints the cost with two decimals.
    EXPECT_NEAR(res.cost, r.cost, std::max(0.01, 1e-12 * r.cost));
  }
}

// ---- errors -----------------------------------------------------------------------

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const typemesh::plan_error& e) {
    return e.what();
  }
  return {};
}

TEST(PlanErrors, MessagesNameTheLayerAndDim) {
  tp::graph_builder g("bad");
  auto a = g.input({4, 8});
  auto b = g.input({4, 6});
  EXPECT_NE(error_of([&] { g.elementwise(a, b, 0, "add1"); }).find("add1"), std::string::npos);
  EXPECT_NE(error_of([&] { g.concat({g.input({4, 8, 2}), g.input({4, 8, 3})}, 1, "cat"); }), "");
  const auto msg = error_of([&] { g.concat({g.input({4, 8, 2}), g.input({5, 8, 2})}, 2, "cat2"); });
  EXPECT_NE(msg.find("cat2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dim #0"), std::string::npos) << msg;
  const auto em = error_of([&] { g.einsum("ab,bc->ac", a, g.input({6, 3}), 0, "mm"); });
  EXPECT_NE(error_of([&] { g.einsum("ab,bc->a", a, g.input({8, 3}), 0, "drop"); }).find("'c'"), std::string::npos);
  EXPECT_NE(em.find("mm"), std::string::npos) << em;
  EXPECT_NE(em.find("'b'"), std::string::npos) << em;
  EXPECT_NE(error_of([&] { g.conv(g.input({4, 3, 8, 8}), {8, 4, 3, 3}, 1, 0, 0, "c1"); }).find("c1"),
            std::string::npos);
  EXPECT_NE(error_of([] { tp::network("vgg", 128); }).find("vgg"), std::string::npos);
  EXPECT_NE(error_of([] { tp::network("alexnet", 0); }), "");
}

TEST(PlanErrors, ValidateRejectsBadEdges) {
  std::mt19937 rng(3);
  auto g = chain(rng, 2);
  g.edges[0].dst_map = {{0}};  // rank 1 map for a rank 2 tensor
  const auto m = error_of([&] { g.validate(); });
  EXPECT_NE(m.find(g.layers[g.edges[0].dst].name), std::string::npos) << m;
  auto g2 = chain(rng, 2);
  g2.edges[0].dst = 99;
  EXPECT_NE(error_of([&] { g2.validate(); }).find("99"), std::string::npos);
  auto g3 = chain(rng, 2);
  g3.layers[1].dims[0].size = 0;
  const auto m3 = error_of([&] { g3.validate(); });
  EXPECT_NE(m3.find(g3.layers[1].dims[0].name), std::string::npos) << m3;
}

TEST(PlanErrors, TableSizeGuard) {
  const auto p = tp::build_problem(tp::transformer(128), 8);
  tp::search_options o;
  o.max_table_entries = 10;
  const auto m = error_of([&] { tp::find_best_strategy(p, o); });
  EXPECT_NE(m.find("eliminating layer"), std::string::npos) << m;
  EXPECT_THROW(tp::find_best_strategy(p, std::vector<int>{0, 1}), typemesh::plan_error);
  // The message names the layer (the Transformer's layers have names).
  bool named = false;
  for (const auto& n : p.names) named |= !n.empty() && m.find(n) != std::string::npos;
  EXPECT_TRUE(named) << m;
}

TEST(PlanErrors, SearchRejectsMalformedProblems) {
  std::mt19937 rng(9);
  auto p = random_problem(rng, 4, 0);
  auto q = p;
  q.edges[0].dst = q.edges[0].src;
  EXPECT_THROW(tp::find_best_strategy(q), typemesh::plan_error);
  q = p;
  q.edges[0].table.pop_back();
  EXPECT_THROW(tp::find_best_strategy(q), typemesh::plan_error);
  q = p;
  q.vertex_costs[1].clear();
  EXPECT_THROW(tp::find_best_strategy(q), typemesh::plan_error);
}

// ---- sizes, overflow and limits ---------------------------------------------------

namespace {

// Divisors of n up to `limit` by a plain loop (the reference).
std::vector<std::int64_t> divisors_by_loop(std::int64_t n, std::int64_t limit) {
  std::vector<std::int64_t> r;
  for (std::int64_t e = 1; e <= n && e <= limit; ++e)
    if (n % e == 0) r.push_back(e);
  return r;
}

// GenerateSeq as first written: a linear scan for the minimum each step.
std::vector<int> generate_seq_by_scan(const tp::problem& p) {
  const int n = p.size();
  auto nb = tp::neighbours(p);
  std::vector<int> count(n);
  for (int v = 0; v < n; ++v) count[v] = static_cast<int>(nb[v].size());
  std::vector<char> done(n, 0);
  std::vector<int> order;
  for (int step = 0; step < n; ++step) {
    int best = -1;
    for (int v = 0; v < n; ++v)
      if (!done[v] && (best < 0 || count[v] < count[best])) best = v;
    order.push_back(best);
    done[best] = 1;
    const auto around = nb[best];
    for (int u : around) {
      auto& s = nb[u];
      s.insert(around.begin(), around.end());
      s.erase(best);
      s.erase(u);
      count[u] = static_cast<int>(s.size());
    }
  }
  return order;
}

// The configurations of a layer by nested loops over every combination (the
// reference for the pruned enumeration).
std::size_t configs_by_loop(const tp::layer& l, std::int64_t procs, double cutoff) {
  std::vector<std::vector<std::int64_t>> choice;
  for (const auto& d : l.dims) choice.push_back(tp::dim_splits(d, procs, cutoff));
  std::vector<std::size_t> at(choice.size(), 0);
  std::size_t count = 0;
  for (;;) {
    std::vector<tp::split_t> c;
    std::int64_t prod = 1;
    for (std::size_t i = 0; i < at.size(); ++i) {
      c.push_back(static_cast<tp::split_t>(choice[i][at[i]]));
      prod *= choice[i][at[i]];
    }
    const bool reshape = l.kind == tp::layer_kind::ravel || l.kind == tp::layer_kind::unravel;
    if (prod <= procs && (!reshape || tp::contiguous_split(l, c.data()))) ++count;
    std::size_t j = 0;
    while (j < at.size() && ++at[j] == choice[j].size()) at[j++] = 0;
    if (j == at.size()) return count;
  }
}

}  // namespace

TEST(PlanConfig, DivisorsAgreeWithAPlainLoop) {
  for (std::int64_t n = 1; n <= 3000; ++n)
    for (std::int64_t limit : {std::int64_t{1}, std::int64_t{7}, std::int64_t{64}, n})
      ASSERT_EQ(tp::divisors(n, limit), divisors_by_loop(n, limit)) << n << " up to " << limit;
}

TEST(PlanConfig, DivisorsOfSizesNearTwoToTheSixtyThree) {
  // A loop to the square root takes minutes here; factorisation microseconds.
  const std::int64_t big_prime = 9223372036854775783;  // the largest prime below 2^63
  EXPECT_EQ(tp::divisors(big_prime), (std::vector<std::int64_t>{1, big_prime}));
  EXPECT_EQ(tp::divisors(big_prime, 8), (std::vector<std::int64_t>{1}));
  std::vector<std::int64_t> powers;
  for (int i = 0; i <= 62; ++i) powers.push_back(std::int64_t{1} << i);
  EXPECT_EQ(tp::divisors(std::int64_t{1} << 62), powers);
  // 2^63 - 1 = 7^2 * 73 * 127 * 337 * 92737 * 649657: 3 * 2^5 divisors.
  const std::int64_t m = 9223372036854775807;
  const auto d = tp::divisors(m);
  EXPECT_EQ(d.size(), 96u);
  for (auto e : d) EXPECT_EQ(m % e, 0) << e;
  EXPECT_TRUE(std::is_sorted(d.begin(), d.end()));
  // Products of two primes near 2^31 (the hardest case for trial division).
  const std::int64_t p1 = 2147483647, p2 = 2147483629;
  EXPECT_EQ(tp::divisors(p1 * p2), (std::vector<std::int64_t>{1, p2, p1, p1 * p2}));
  EXPECT_EQ(tp::dim_splits({"b", m}, 8, 1.0), (std::vector<std::int64_t>{1, 7}));
}

TEST(PlanConfig, PrunedEnumerationCountsEveryCombination) {
  for (const auto& name : tp::network_names()) {
    const auto g = tp::network(name, 128);
    for (std::int64_t p : {4, 16})
      for (const auto& l : g.layers)
        ASSERT_EQ(tp::enumerate_configs(l, p, g.cutoff).size(), configs_by_loop(l, p, g.cutoff))
            << name << " " << l.name << " p=" << p;
  }
}

TEST(PlanConfig, ProcessorsAndConfigurationsAreBounded) {
  const auto g = tp::alexnet(128);
  EXPECT_NE(error_of([&] { tp::enumerate_configs(g.layers[0], 2147483648, 4.0); }).find("between 1 and 2147483647"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tp::build_problem(g, 0); }).find("processor count 0"), std::string::npos);
  const auto m = error_of([&] { tp::enumerate_configs(g.layers[0], 64, 1.0, 10); });
  EXPECT_NE(m.find("layer conv1 has more than 10 configurations"), std::string::npos) << m;
  EXPECT_NO_THROW(tp::enumerate_configs(g.layers[0], 2147483647, 4.0));
}

TEST(PlanSearch, GenerateSeqIsTheOrderOfTheLinearScan) {
  std::mt19937 rng(17);
  for (int i = 0; i < 50; ++i) {
    const auto p = random_problem(rng, 2 + i % 12, i % 7);
    EXPECT_EQ(tp::generate_seq(p), generate_seq_by_scan(p)) << i;
  }
  for (const auto& name : tp::network_names()) {
    const auto p = tp::build_problem(tp::network(name, 128), 4);
    EXPECT_EQ(tp::generate_seq(p), generate_seq_by_scan(p)) << name;
  }
}

TEST(PlanErrors, BuilderProductsAreOverflowChecked) {
  tp::graph_builder g("big");
  const std::int64_t big = std::int64_t{1} << 62;
  const auto m = error_of([&] { g.reshape(g.input({big, 4}), {big, 4}, "flat"); });
  EXPECT_NE(m.find("reshape flat: elements of [4611686018427387904 4]"), std::string::npos) << m;
  EXPECT_NE(m.find("overflows"), std::string::npos) << m;
  const auto c = error_of([&] { g.concat({g.input({4, big}), g.input({4, big})}, 1, "cat"); });
  EXPECT_NE(c.find("concat cat"), std::string::npos) << c;
  EXPECT_NE(c.find("overflows"), std::string::npos) << c;
  const auto v = error_of([&] { g.conv(g.input({4, 3, 8, 8}), {8, 3, 3, 3}, 1, big, 0, "c1"); });
  EXPECT_NE(v.find("pad 4611686018427387904"), std::string::npos) << v;
  const auto u = error_of([&] { g.unstack(g.input({big, 4}), 0, "u"); });
  EXPECT_NE(u.find("unstack u: 4611686018427387904 outputs"), std::string::npos) << u;
  EXPECT_NE(u.find("memory limit"), std::string::npos) << u;
  // A batch near 2^63 overflows AlexNet's flatten, named.
  const auto a = error_of([] { tp::network("alexnet", 9223372036854775807); });
  EXPECT_NE(a.find("reshape flatten"), std::string::npos) << a;
}

TEST(PlanCost, MachineParametersArePositiveAndFinite) {
  const auto g = tp::alexnet(128);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (double bad : {inf, -inf, nan, 0.0, -1.0}) {
    EXPECT_NE(error_of([&] { tp::build_problem(g, 4, tp::machine{bad, 16}); }).find("tflops (--flops)"),
              std::string::npos)
        << bad;
    EXPECT_NE(error_of([&] { tp::build_problem(g, 4, tp::machine{10, bad}); }).find("bandwidth_gb (--bw)"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(error_of([&] { tp::build_problem(g, 4, tp::machine{1e300, 1e-300}); }).find("FLOPs per word"),
            std::string::npos);
}

TEST(PlanCost, ProblemMemoryIsLimited) {
  const auto g = tp::transformer(128);
  tp::problem_limits lim;
  lim.max_bytes = 100000;
  const auto m = error_of([&] { tp::build_problem(g, 16, {}, lim); });
  EXPECT_NE(m.find("memory limit"), std::string::npos) << m;
  // Within the limit the problem is the same as without one.
  lim.max_bytes = std::uint64_t{1} << 30;
  const auto a = tp::build_problem(g, 16, {}, lim), b = tp::build_problem(g, 16);
  EXPECT_EQ(a.vertex_costs, b.vertex_costs);
}

TEST(PlanSearch, MemoryAndWorkAreLimited) {
  const auto p = tp::build_problem(tp::transformer(128), 8);
  tp::search_options o;
  o.max_bytes = 4096;
  const auto m = error_of([&] { tp::find_best_strategy(p, o); });
  EXPECT_NE(m.find("more than the search's limit of 4096 bytes"), std::string::npos) << m;
  o = {};
  o.max_work = 1000;
  const auto w = error_of([&] { tp::find_best_strategy(p, o); });
  EXPECT_NE(w.find("more than the search's limit of 1000"), std::string::npos) << w;
  o = {};
  o.max_work = std::uint64_t{1} << 40;
  EXPECT_EQ(tp::find_best_strategy(p, o).cost, tp::find_best_strategy(p).cost);
}

// Tests of the plan file formats (plan/parse.hpp): the graph text format and
// the plan JSON round-trip, and malformed inputs name their line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "typemesh/plan/networks.hpp"
#include "typemesh/plan/parse.hpp"
#include "typemesh/plan/report.hpp"
#include "typemesh/plan/search.hpp"

namespace tp = typemesh::plan;

namespace {

void expect_same_graph(const tp::graph& a, const tp::graph& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.cutoff, b.cutoff);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (std::size_t v = 0; v < a.layers.size(); ++v) {
    const auto &x = a.layers[v], &y = b.layers[v];
    SCOPED_TRACE(x.name);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.kind, y.kind);
    ASSERT_EQ(x.dims.size(), y.dims.size());
    for (std::size_t i = 0; i < x.dims.size(); ++i) {
      EXPECT_EQ(x.dims[i].name, y.dims[i].name);
      EXPECT_EQ(x.dims[i].size, y.dims[i].size);
      EXPECT_EQ(x.dims[i].splittable, y.dims[i].splittable);
    }
    EXPECT_EQ(x.gemm.batch, y.gemm.batch);
    EXPECT_EQ(x.gemm.m.dims, y.gemm.m.dims);
    EXPECT_EQ(x.gemm.n.dims, y.gemm.n.dims);
    EXPECT_EQ(x.gemm.k.dims, y.gemm.k.dims);
    EXPECT_EQ(x.gemm.m.scale, y.gemm.m.scale);
    EXPECT_EQ(x.gemm.n.scale, y.gemm.n.scale);
    EXPECT_EQ(x.gemm.k.scale, y.gemm.k.scale);
    EXPECT_EQ(x.gemm.pw_ops, y.gemm.pw_ops);
    EXPECT_EQ(x.pw_ops, y.pw_ops);
    EXPECT_EQ(x.axis, y.axis);
    EXPECT_EQ(x.axes, y.axes);
    EXPECT_EQ(x.window_r, y.window_r);
    EXPECT_EQ(x.window_s, y.window_s);
    EXPECT_EQ(x.input_shape, y.input_shape);
    EXPECT_EQ(x.out_shapes, y.out_shapes);
    EXPECT_EQ(x.out_maps, y.out_maps);
  }
  ASSERT_EQ(a.edges.size(), b.edges.size());
  for (std::size_t i = 0; i < a.edges.size(); ++i) {
    const auto &x = a.edges[i], &y = b.edges[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(x.src, y.src);
    EXPECT_EQ(x.dst, y.dst);
    EXPECT_EQ(x.src_port, y.src_port);
    EXPECT_EQ(x.shape, y.shape);
    EXPECT_EQ(x.src_map, y.src_map);
    EXPECT_EQ(x.dst_map, y.dst_map);
  }
}

// The message of the plan_error that `read` throws ("" if none).
template <class Read>
std::string error_of(Read read) {
  try {
    read();
  } catch (const typemesh::plan_error& e) {
    return e.what();
  }
  return "";
}

std::string graph_error(const std::string& text) {
  return error_of([&] { tp::read_graph_text(text, "g.txt"); });
}

std::string plan_error_of(const std::string& text) {
  return error_of([&] { tp::read_plan_text(text, "p.json"); });
}

std::string plan_json(const std::string& net, std::int64_t procs) {
  const auto g = tp::network(net, 128);
  const auto p = tp::build_problem(g, procs);
  const auto r = tp::find_best_strategy(p);
  std::ostringstream os;
  tp::write_json(os, g, p, r, procs, 128, tp::machine{});
  return os.str();
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// The 1-based line of the first occurrence of `what` in s.
int line_of(const std::string& s, const std::string& what) {
  const auto at = s.find(what);
  return 1 + static_cast<int>(std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

}  // namespace

// ---- the graph text format ---------------------------------------------

class PlanGraphText : public ::testing::TestWithParam<std::string> {};

TEST_P(PlanGraphText, NetworkRoundTripsWithTheSameSearchResult) {
  const auto g = tp::network(GetParam(), 128);
  const auto text = tp::graph_text(g);
  const auto back = tp::read_graph_text(text, GetParam() + ".graph");
  expect_same_graph(g, back);
  EXPECT_EQ(tp::graph_text(back), text) << "writing the graph read back gives other text";
  for (std::int64_t procs : {4, 8}) {
    const auto p1 = tp::build_problem(g, procs), p2 = tp::build_problem(back, procs);
    const auto r1 = tp::find_best_strategy(p1), r2 = tp::find_best_strategy(p2);
    EXPECT_EQ(r1.cost, r2.cost) << "p = " << procs;
    EXPECT_EQ(r1.choice, r2.choice) << "p = " << procs;
  }
}

INSTANTIATE_TEST_SUITE_P(Networks, PlanGraphText, ::testing::ValuesIn(tp::network_names()));

TEST(PlanGraphText, DocumentedExampleReads) {
  const auto g = tp::read_graph_text(R"(# AlexNet's head
graph alexnet cutoff=4
layer fc7 fc b=128 n=4096 k=4096 | gemm.m=b gemm.n=n gemm.k=k gemm.pw=1 out=128x4096:b,n
layer fc8 fc b=128 n=1024 k=4096 | gemm.m=b gemm.n=n gemm.k=k out=128x1024:b,n
layer loss softmax_xent d0=128 d1=1024
edge fc7 fc8 map=b,k
edge fc8 loss map=d0,d1
)");
  ASSERT_EQ(g.size(), 3);
  ASSERT_EQ(g.edges.size(), 2u);
  EXPECT_EQ(g.layers[0].gemm.pw_ops, 1);
  EXPECT_EQ(g.edges[0].shape, (std::vector<std::int64_t>{128, 4096}));  // fc7's output
  EXPECT_EQ(g.edges[0].src_map, (tp::tensor_map{{0}, {1}}));
  EXPECT_EQ(g.edges[0].dst_map, (tp::tensor_map{{0}, {2}}));
  // The same layers from the builder.
  tp::graph_builder b("alexnet");
  b.softmax_xent(b.fc(b.fc(b.input({128, 4096}), 4096, 1, "fc7"), 1024, 0, "fc8"), "loss");
  expect_same_graph(b.finish(), g);
  const auto r = tp::find_best_strategy(tp::build_problem(g, 8));
  EXPECT_GT(r.cost, 0.0);
}

TEST(PlanGraphText, GeneralEdgesAndOutputsRoundTrip) {
  // Ports, repeated outputs, explicit shapes and source maps, flattened and
  // unmapped tensor dims, no outputs, edges before their layers.
  const std::string text = R"(graph odd cutoff=1.5
edge split:2 join map=a*b,- shape=12x1 src=x*y,-
edge split:1 join map=a,b
layer split unstack x=3 y=4 z=1 | fixed=z out=2*3x4:x,y out=4x3:y,x
layer join elementwise a=3 b=4 | pw=2 out=none
)";
  const auto g = tp::read_graph_text(text);
  ASSERT_EQ(g.size(), 2);
  EXPECT_EQ(g.cutoff, 1.5);
  EXPECT_EQ(g.layers[0].out_shapes.size(), 3u);
  EXPECT_FALSE(g.layers[0].dims[2].splittable);
  EXPECT_TRUE(g.layers[1].out_shapes.empty());
  ASSERT_EQ(g.edges.size(), 2u);
  EXPECT_EQ(g.edges[0].src_port, 2);
  EXPECT_EQ(g.edges[0].dst_map, (tp::tensor_map{{0, 1}, {}}));
  EXPECT_EQ(g.edges[0].src_map, (tp::tensor_map{{0, 1}, {}}));
  EXPECT_EQ(g.edges[1].shape, (std::vector<std::int64_t>{3, 4}));
  expect_same_graph(g, tp::read_graph_text(tp::graph_text(g)));
  // Numbers are written so that they read back exactly.
  auto h = g;
  h.cutoff = 0.1;
  h.layers[0].gemm.n.scale = 1.0 / 3.0;
  const auto text2 = tp::graph_text(h);
  EXPECT_NE(text2.find("cutoff=0.1\n"), std::string::npos) << text2;
  expect_same_graph(h, tp::read_graph_text(text2));
}

TEST(PlanGraphText, MalformedInputsNameTheLine) {
  const std::string head = "graph t\nlayer a fc b=8 n=8 k=8 | gemm.m=b gemm.n=n gemm.k=k\n";
  struct bad {
    std::string text;
    int line;
    std::string says;
  };
  const std::vector<bad> cases = {
      {"layer a fc b=8\n", 1, "expected 'graph NAME'"},
      {"graph t\n\n# c\nlayer a fc b=x\n", 4, "expected DIM=SIZE"},
      {"graph t\nlayer a fc b=0\n", 2, "positive integer size"},
      {head + "layer c fcc d0=8\n", 3, "unknown layer kind 'fcc'"},
      {head + "layer a softmax d0=8\n", 3, "a second layer named a (the first is on line 2)"},
      {head + "layer c softmax d0=8 | axis=d1\n", 3, "has no dim 'd1'"},
      {head + "layer c softmax d0=8 | colour=red\n", 3, "unknown parameter 'colour'"},
      {head + "layer c softmax d0=8 d0=4\n", 3, "dim d0 appears twice"},
      {head + "layer c softmax d0=8\nedge a c map=d0\n", 4, "has rank 3 but map= gives 1"},
      {head + "layer c softmax d0=8\n\nedge a x map=d0\n", 5, "no layer named 'x'"},
      {head + "layer c softmax d0=8\nedge a c\n", 4, "edge without map="},
      {head + "layer c softmax d0=8\nedge a:1 c map=d0,-\n", 4, "has 1 outputs, no port 1"},
      {head + "frobnicate\n", 3, "expected 'graph', 'layer' or 'edge'"},
      {head + "graph u\n", 3, "a second 'graph'"},
      {"graph t cutoff=-1\n", 1, "cutoff=X"},
      {head + "layer c pooling b=8 | window=3\n", 3, "window=RxS"},
      {head + "layer c stack b=8 | out=8x8:b\n", 3, "rank 2 has a map of rank 1"},
      {"# only a comment\n", 2, "the input is empty"},
  };
  for (const auto& c : cases) {
    const auto msg = graph_error(c.text);
    EXPECT_NE(msg.find("g.txt:" + std::to_string(c.line) + ":"), std::string::npos)
        << "input:\n" << c.text << "message: " << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << "input:\n" << c.text << "message: " << msg;
  }
  // The column points at the offending token.
  EXPECT_NE(graph_error("graph t\nlayer a fc b=8 n=?\n").find("g.txt:2:16:"), std::string::npos);
}

TEST(PlanGraphText, WriterRefusesNamesTheFormatCannotHold) {
  tp::graph_builder b("g");
  auto x = b.input({8, 8});
  b.softmax_xent(b.fc(x, 8, 0, "has space"));
  EXPECT_THROW(tp::graph_text(b.finish()), typemesh::plan_error);
}

// ---- the plan JSON --------------------------------------------------------

class PlanJsonFile : public ::testing::TestWithParam<std::string> {};

TEST_P(PlanJsonFile, ReadBackGivesTheSameConfigurations) {
  const std::int64_t procs = 8;
  const auto g = tp::network(GetParam(), 128);
  const auto p = tp::build_problem(g, procs);
  const auto r = tp::find_best_strategy(p);
  std::ostringstream os;
  tp::write_json(os, g, p, r, procs, 128, tp::machine{});
  const auto pl = tp::read_plan_text(os.str(), GetParam() + ".json");
  EXPECT_EQ(pl.format, "typemesh-plan/1");
  EXPECT_EQ(pl.graph, g.name);
  EXPECT_EQ(pl.procs, procs);
  EXPECT_EQ(pl.batch, 128);
  EXPECT_NEAR(pl.total_cost, r.cost, 0.005 + 1e-12 * r.cost);
  ASSERT_EQ(pl.layers.size(), g.layers.size());
  for (int v = 0; v < g.size(); ++v) {
    const auto& l = pl.layers[v];
    EXPECT_EQ(l.name, g.layers[v].name);
    EXPECT_EQ(l.kind, g.layers[v].kind);
    const auto want = p.configs[v].at(static_cast<std::size_t>(r.choice[v]));
    EXPECT_EQ(l.splits(), want) << l.name;
    EXPECT_LE(l.devices(), procs);
  }
  EXPECT_EQ(tp::plan_choice(pl, g, p), r.choice);
  ASSERT_EQ(pl.edges.size(), g.edges.size());
  for (std::size_t i = 0; i < g.edges.size(); ++i) {
    EXPECT_EQ(pl.edges[i].src, g.edges[i].src);
    EXPECT_EQ(pl.edges[i].dst, g.edges[i].dst);
    EXPECT_EQ(pl.edges[i].shape, g.edges[i].shape);
  }
}

INSTANTIATE_TEST_SUITE_P(Networks, PlanJsonFile, ::testing::ValuesIn(tp::network_names()));

TEST(PlanJsonFile, PlanOfAnotherGraphIsRefused) {
  const auto pl = tp::read_plan_text(plan_json("alexnet", 8));
  const auto g = tp::network("rnnlm", 128);
  EXPECT_THROW(tp::plan_choice(pl, g, tp::build_problem(g, 8)), typemesh::plan_error);
  EXPECT_THROW(pl.layer("nope"), typemesh::plan_error);
  EXPECT_THROW(pl.layer("fc6").split("nope"), typemesh::plan_error);
}

TEST(PlanJsonFile, MalformedInputsNameTheLineAndField) {
  const auto good = plan_json("alexnet", 8);
  ASSERT_EQ(plan_error_of(good), "");
  struct bad {
    std::string text;
    int line;
    std::string says;
  };
  const std::string conv1 = "{\"id\": 0, \"name\": \"conv1\"";
  const int conv1_line = line_of(good, conv1);
  const int edges_line = line_of(good, "\"edges\"");
  const std::vector<bad> cases = {
      {"", 1, "expected a value"},
      {replace_once(good, "\"typemesh-plan/1\"", "\"typemesh-plan/2\""), 2, "format: expected \"typemesh-plan/1\""},
      {replace_once(good, "\"procs\": 8", "\"procs\": 8.5"), 4, "procs: expected an integer"},
      {replace_once(good, "\"procs\": 8", "\"procs\": \"8\""), 4, "procs: expected a number, got a string"},
      {replace_once(good, "\"batch\": 128,\n", ""), 1, "missing field \"batch\""},
      {replace_once(good, "\"batch\": 128,", "\"batch\": 128, \"extra\": 1,"), 5, "unknown field \"extra\""},
      {replace_once(good, "\"batch\": 128,", "\"batch\": 128, \"batch\": 128,"), 5, "field \"batch\" appears twice"},
      {replace_once(good, conv1, "{\"id\": 3, \"name\": \"conv1\""), conv1_line, "layers[0].id: expected 0"},
      {replace_once(good, "\"kind\": \"conv\"", "\"kind\": \"convolution\""), conv1_line, "layers[0].kind"},
      {replace_once(good, "\"split\": 8}", "\"split\": 7}"), conv1_line, "does not divide"},
      {replace_once(good, "\"split\": 1}", "\"split\": 1"), conv1_line, "expected a field name in quotes, got '{'"},
      {replace_once(good, "\"split\": 1}]}", "\"split\": 1}}"), conv1_line, "expected ',' or ']' in an array"},
      {replace_once(good, "\"src\": 0", "\"src\": 99"), edges_line + 1, "edges[0].src: expected a layer id below"},
      {replace_once(good, "\"name\": \"conv1\"", "\"name\": \"conv1\n\""), conv1_line, "expected '\"' or a character"},
      {good + "{}", line_of(good + "{}", "{}") + 0, "expected the end of the input"},
      {replace_once(good, "\"tflops\": 10", "\"tflops\": 010"), 6, "leading zero"},
  };
  for (const auto& c : cases) {
    const auto msg = plan_error_of(c.text);
    EXPECT_NE(msg.find("p.json:" + std::to_string(c.line) + ":"), std::string::npos) << "message: " << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << "message: " << msg;
  }
}

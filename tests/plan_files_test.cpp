// Tests of the plan file formats (plan/parse.hpp): the graph text format and
// the plan JSON round-trip, and malformed inputs name their line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "typemesh/plan/cli.hpp"
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
  tp::graph_builder b("scaled");
  b.fc(b.input({8, 8}), 8, 0, "f");
  auto h = b.finish();
  h.cutoff = 0.1;
  h.layers[0].gemm.n.scale = 1.0 / 3.0;
  const auto text2 = tp::graph_text(h);
  EXPECT_NE(text2.find("cutoff=0.1\n"), std::string::npos) << text2;
  expect_same_graph(h, tp::read_graph_text(text2));
  // A parameter the layer's kind does not use is not written.
  auto odd = g;
  odd.layers[0].gemm.n.scale = 2.0;
  EXPECT_NE(error_of([&] { tp::graph_text(odd); }).find("gemm.n.scale cannot be written for a unstack layer"),
            std::string::npos);
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
      {head + "layer c softmax_xent d0=8 | colour=red\n", 3, "unknown parameter 'colour'"},
      {head + "layer c softmax_xent d0=8 d0=4\n", 3, "dim d0 appears twice"},
      {head + "layer c softmax_xent d0=8\nedge a c map=d0\n", 4, "has rank 3 but map= gives 1"},
      {head + "layer c softmax_xent d0=8\n\nedge a x map=d0\n", 5, "no layer named 'x'"},
      {head + "layer c softmax_xent d0=8\nedge a c\n", 4, "edge without map="},
      {head + "layer c softmax_xent d0=8\nedge a:1 c map=d0,-\n", 4, "has 1 outputs, no port 1"},
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

// ---- what each layer kind needs, sizes and limits ------------------------------

namespace {

std::string kind_case(const std::string& layer_line) { return "graph t\n# a layer\n" + layer_line + "\n"; }

std::string file_next_to_this_test(const std::string& name) {
  std::string f = __FILE__;
  const auto slash = f.find_last_of('/');
  return (slash == std::string::npos ? std::string(".") : f.substr(0, slash)) + "/" + name;
}

std::string contents(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  EXPECT_TRUE(in) << path;
  return s.str();
}

}  // namespace

TEST(PlanGraphChecks, EachKindNeedsWhatItsCostReads) {
  struct bad {
    std::string layer;
    std::string says;
  };
  const std::vector<bad> cases = {
      {"layer p pooling b=8 c=8 h=8 w=8 | window=3x3", "layer p (pooling) needs input"},
      {"layer p pooling b=8 c=8 h=8 w=8 | input=8x8x10x10", "layer p (pooling) needs window"},
      {"layer p pooling b=8 c=8 h=8 | window=3x3 input=8x8x10", "pooling needs four: b, c, h, w"},
      {"layer p pooling b=8 c=8 h=8 w=8 | window=3x3 input=8x8x10", "needs input (the input's shape b x c x h x w"},
      {"layer n norm b=8 c=8", "layer n (norm) needs axis"},
      {"layer s softmax b=8 c=8", "layer s (softmax) needs axis"},
      {"layer l lstm b=8 n=8 k=8 | gemm.m=b gemm.n=n gemm.k=k", "an lstm needs five: layer, seq, b, n, k"},
      {"layer l lstm layer=2 seq=4 b=8 n=8 k=8", "layer l (lstm) needs gemm.m"},
      {"layer f fc b=8 n=8 k=8 | gemm.m=b gemm.k=k", "layer f (fc) needs gemm.n"},
      {"layer f fc b=8 n=8 k=8 | gemm.m=b gemm.n=n,b gemm.k=k", "names dim b twice"},
      {"layer r reduce_mean a=8 b=8", "layer r (reduce_mean) needs axes"},
      {"layer r reduce_mean a=8 b=8 | axes=a,a", "axes names dim a twice"},
      {"layer f fc b=8 n=8 k=8 | gemm.m=b gemm.n=n axis=b", "parameter axis does not apply to a fc layer"},
      {"layer e elementwise a=8 | window=2x2", "parameter window does not apply to a elementwise layer"},
      {"layer n norm a=8 b=8 | axis=a gemm.pw=1", "parameter gemm.pw does not apply to a norm layer"},
      {"layer x softmax_xent d0=2 d1=2 d2=2 d3=2 d4=2 d5=2 d6=2 d7=2 d8=2 d9=2 d10=2 d11=2 d12=2 d13=2 d14=2 d15=2 "
       "d16=2",
       "more than 16 dims"},
  };
  for (const auto& c : cases) {
    const auto msg = graph_error(kind_case(c.layer));
    EXPECT_NE(msg.find("g.txt:3:"), std::string::npos) << c.layer << "\nmessage: " << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.layer << "\nmessage: " << msg;
  }
  // The same layers with what they need read and cost finitely.
  for (const std::string ok : {"layer p pooling b=8 c=8 h=8 w=8 | window=3x3 input=8x8x10x10",
                               "layer n norm b=8 c=8 | axis=c", "layer s softmax b=8 c=8 | axis=b",
                               "layer l lstm layer=2 seq=4 b=8 n=8 k=8 | gemm.batch=layer gemm.m=seq,b gemm.n=n "
                               "gemm.k=k fixed=seq",
                               "layer r reduce_mean a=8 b=8 | axes=a,b"}) {
    const auto g = tp::read_graph_text(kind_case(ok), "g.txt");
    const auto r = tp::find_best_strategy(tp::build_problem(g, 4));
    EXPECT_TRUE(std::isfinite(r.cost) && r.cost >= 0) << ok << ": " << r.cost;
  }
}

TEST(PlanGraphChecks, BuiltGraphsAreCheckedToo) {
  // A graph assembled by hand (not read) is held to the same rules when it is
  // validated or costed.
  auto g = tp::read_graph_text(kind_case("layer n norm b=8 c=8 | axis=c"));
  g.layers[0].axis = -1;
  EXPECT_NE(error_of([&] { g.validate(); }).find("layer n (norm) needs axis"), std::string::npos);
  EXPECT_THROW(tp::build_problem(g, 4), typemesh::plan_error);
  g.layers[0].axis = 2;
  EXPECT_NE(error_of([&] { g.validate(); }).find("axis names dim #2"), std::string::npos);
  auto h = tp::read_graph_text(kind_case("layer p pooling b=8 c=8 h=8 w=8 | window=3x3 input=8x8x10x10"));
  h.layers[0].input_shape.pop_back();
  EXPECT_NE(error_of([&] { tp::build_problem(h, 4); }).find("needs input"), std::string::npos);
}

TEST(PlanGraphChecks, AMapNamesEachDimOnce) {
  const auto msg = graph_error(
      "graph t\nlayer a softmax_xent x=8 y=8\nlayer c softmax_xent d0=8 d1=8\nedge a c map=d0,d0\n");
  EXPECT_NE(msg.find("g.txt:4:10: edge a -> c: the map names dim d0 twice"), std::string::npos) << msg;
  const auto m2 = graph_error("graph t\nlayer a softmax_xent x=4 y=4 | out=4x4:x*x,y\n");
  EXPECT_NE(m2.find("g.txt:2:32: layer a: the map names dim x twice"), std::string::npos) << m2;
  // A graph built in memory is checked when validated.
  auto g = tp::read_graph_text("graph t\nlayer a softmax_xent x=4 y=4\n");
  g.layers[0].out_maps[0] = {{0}, {0}};
  EXPECT_NE(error_of([&] { g.validate(); }).find("output tensor maps onto dim x twice"), std::string::npos);
}

TEST(PlanGraphChecks, RepeatedOutputsAreRefusedBeforeAllocating) {
  // 20 outputs repeated a million times each: gigabytes from 427 bytes. The
  // reader counts them against its limit and names the line and token.
  const auto text = contents(file_next_to_this_test("plan/bad/repeated_outputs.graph"));
  ASSERT_LT(text.size(), 500u);
  const auto msg = graph_error(text);
  EXPECT_NE(msg.find("g.txt:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the outputs of layer u"), std::string::npos) << msg;
  EXPECT_NE(msg.find("limit of 268435456 bytes"), std::string::npos) << msg;
}

TEST(PlanGraphChecks, ReaderLimitsInputAndWhatItBuilds) {
  const std::string small = "graph t\nlayer a softmax_xent d0=8 d1=8\n";
  const tp::read_limits tiny{16};
  EXPECT_NE(error_of([&] { tp::read_graph_text(small, "g.txt", tiny); }).find("larger than the limit of 16 bytes"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { tp::read_graph_text(small, "g.txt"); }), "");
  // Edges that copy a wide tensor multiply a little text into a lot of memory.
  std::string wide = "graph t\nlayer a softmax_xent";
  std::string map;
  for (int i = 0; i < 16; ++i) {
    wide += " d" + std::to_string(i) + "=2";
    map += (i ? ",-" : "-");
  }
  wide += "\nlayer b softmax_xent x=2\n";
  for (int i = 0; i < 2000; ++i) wide += "edge a b map=" + map + "\n";
  const auto msg = error_of([&] { tp::read_graph_text(wide, "g.txt", tp::read_limits{200000}); });
  EXPECT_NE(msg.find("beyond the reader's limit of 200000 bytes"), std::string::npos) << msg;
}

TEST(PlanGraphChecks, SizesNearTwoToTheSixtyThreeAreRefusedOrSearchedQuickly) {
  // Divisors of sizes near 2^63 come from a factorisation, not a loop to the
  // square root; a cost that overflows a double names its layer.
  const auto g = tp::read_graph_text(kind_case(
      "layer f fc b=9223372036854775807 n=9223372036854775783 k=4611686018427387904 | gemm.m=b gemm.n=n gemm.k=k"));
  const auto r = tp::find_best_strategy(tp::build_problem(g, 2147483647));
  EXPECT_TRUE(std::isfinite(r.cost));
  const auto huge = tp::read_graph_text(kind_case(
      "layer f fc b=9223372036854775807 n=9223372036854775783 k=4611686018427387904 | gemm.m=b gemm.n=n gemm.k=k "
      "gemm.m.scale=1e300"));
  const auto msg = error_of([&] { tp::build_problem(huge, 8); });
  EXPECT_NE(msg.find("layer f: the cost of configuration"), std::string::npos) << msg;
  EXPECT_NE(msg.find("too large for the cost model"), std::string::npos) << msg;
}

TEST(PlanJsonFile, SplitsThatOverflowAreRefused) {
  // Two splits of 2^32 multiply to 2^64, which wraps to 0 in 64 bits: the
  // "more than the plan's processors" check must not be bypassed.
  const std::string text = R"({
  "format": "typemesh-plan/1", "graph": "g", "procs": 4611686018427387904, "batch": 1, "tflops": 10,
  "bandwidth_gb": 16, "total_cost": 0,
  "layers": [{"id": 0, "name": "f", "kind": "fc", "cost": 0, "dims": [
    {"name": "b", "size": 4294967296, "split": 4294967296},
    {"name": "n", "size": 4294967296, "split": 4294967296},
    {"name": "k", "size": 4294967296, "split": 4294967296}]}],
  "edges": []
})";
  const auto msg = plan_error_of(text);
  EXPECT_NE(msg.find("p.json:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("procs: expected at most 2147483647"), std::string::npos) << msg;
  auto within = replace_once(text, "4611686018427387904", "2147483647");
  const auto m2 = plan_error_of(within);
  EXPECT_NE(m2.find("layers[0].dims[0].split"), std::string::npos) << m2;
  EXPECT_NE(m2.find("need more than the plan's 2147483647 processors"), std::string::npos) << m2;
  // Splits within the processors pass; their product is checked in devices().
  tp::plan_layer l{0, "f", tp::layer_kind::fc, 0.0, {{"b", 1, 4294967296}, {"n", 1, 4294967296}}};
  EXPECT_NE(error_of([&] { l.devices(); }).find("overflows"), std::string::npos);
  EXPECT_THROW(l.splits(), typemesh::plan_error);
}

TEST(PlanJsonFile, ValuesAreCountedAgainstTheLimit) {
  const auto good = plan_json("alexnet", 8);
  EXPECT_EQ(plan_error_of(good), "");
  const auto msg = error_of([&] { tp::read_plan_text(good, "p.json", tp::read_limits{good.size() + 2000}); });
  EXPECT_NE(msg.find("values; the reader's memory limit"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { tp::read_plan_text(good, "p.json", tp::read_limits{100}); }).find("larger than the limit"),
            std::string::npos);
}

// ---- the command line ------------------------------------------------------------

namespace {

struct cli_run {
  int status = -1;
  std::string out, err;
};

// Runs typemesh-plan's command line in memory; FILE arguments read `files`.
cli_run run_cli(std::vector<std::string> args, const std::map<std::string, std::string>& files = {},
                std::function<void()> on_open = {}) {
  std::ostringstream out, err;
  tp::cli_io io;
  io.out = &out;
  io.err = &err;
  io.report_resources = false;
  io.open_input = [&](const std::string& name) -> std::unique_ptr<std::istream> {
    if (on_open) on_open();
    const auto it = files.find(name);
    return it == files.end() ? nullptr : std::make_unique<std::istringstream>(it->second);
  };
  io.open_output = [&](const std::string&) -> std::unique_ptr<std::ostream> {
    return std::make_unique<std::ostringstream>();
  };
  cli_run r;
  r.status = tp::run_plan_cli(args, io);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace

TEST(PlanCli, PrintsWhatTheSearchFinds) {
  const auto r = run_cli({"-g", "rnnlm", "-p", "4"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto g = tp::network("rnnlm", 128);
  const auto p = tp::build_problem(g, 4);
  std::ostringstream want;
  tp::write_table(want, g, p, tp::find_best_strategy(p));
  EXPECT_EQ(r.out, want.str());
}

TEST(PlanCli, MachineParametersMustBePositiveAndFinite) {
  for (const std::string flag : {"--flops", "--bw"})
    for (const std::string v : {"inf", "-inf", "nan", "0", "-1", "1e999", "x", ""}) {
      const auto r = run_cli({flag, v, "-p", "4"});
      EXPECT_EQ(r.status, 2) << flag << " " << v;
      EXPECT_NE(r.err.find("option " + flag + " needs a positive finite number, got '" + v + "'"), std::string::npos)
          << r.err;
      EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
    }
  // Finite parameters whose ratio is not are refused too.
  const auto r = run_cli({"--flops", "1e300", "--bw", "1e-300"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("FLOPs per word"), std::string::npos) << r.err;
}

TEST(PlanCli, SizesAndCountsAreBounded) {
  for (const std::string p : {"0", "-3", "2147483648", "9223372036854775808"}) {
    const auto r = run_cli({"-p", p});
    EXPECT_EQ(r.status, 2) << p;
    EXPECT_NE(r.err.find("option -p needs an integer from 1 to 2147483647"), std::string::npos) << r.err;
  }
  // A batch near 2^63: an overflow names its sizes, or the search finishes.
  for (const auto& net : tp::network_names()) {
    const auto r = run_cli({"-g", net, "-b", "9223372036854775807", "-p", "8"});
    EXPECT_TRUE(r.status == 0 || r.status == 2) << net << ": " << r.err;
    if (r.status == 2) {
      EXPECT_NE(r.err.find("overflow"), std::string::npos) << net << ": " << r.err;
    }
  }
  const auto r = run_cli({"-g", "transformer", "-p", "64", "--max-memory", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("limit"), std::string::npos) << r.err;
}

TEST(PlanCli, MalformedGraphFilesEndInAMessage) {
  for (const std::string name : {"pooling_without_input", "norm_without_axis", "softmax_without_axis",
                                 "lstm_three_dims", "repeated_outputs"}) {
    const std::string file = name + ".graph";
    const auto r = run_cli({"--graph-file", file, "-p", "4"},
                           {{file, contents(file_next_to_this_test("plan/bad/" + file))}});
    EXPECT_EQ(r.status, 2) << name;
    EXPECT_NE(r.err.find("typemesh: " + file + ":3:"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << name;
  }
  const auto missing = run_cli({"--graph-file", "nowhere.graph"});
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("cannot open graph file nowhere.graph"), std::string::npos);
}

TEST(PlanCli, EveryExceptionIsReported) {
  const auto oom = run_cli({"--graph-file", "g"}, {}, [] { throw std::bad_alloc(); });
  EXPECT_EQ(oom.status, 3);
  EXPECT_NE(oom.err.find("typemesh-plan: out of memory"), std::string::npos) << oom.err;
  const auto other = run_cli({"--graph-file", "g"}, {}, [] { throw std::runtime_error("disk on fire"); });
  EXPECT_EQ(other.status, 4);
  EXPECT_NE(other.err.find("disk on fire"), std::string::npos) << other.err;
  const auto odd = run_cli({"--graph-file", "g"}, {}, [] { throw 7; });
  EXPECT_EQ(odd.status, 4);
}

TEST(PlanGraphText, ExamplesOfTheDocumentationRead) {
  // Every ```text block of "The graph text format" in docs/plan.md that is a
  // graph reads, costs and searches.
  const auto doc = contents(file_next_to_this_test("../docs/plan.md"));
  const auto begin = doc.find("## The graph text format");
  ASSERT_NE(begin, std::string::npos);
  const auto end = doc.find("\n## ", begin + 1);
  const auto section = doc.substr(begin, end - begin);
  int graphs = 0;
  for (std::size_t at = section.find("```text\n"); at != std::string::npos; at = section.find("```text\n", at)) {
    at += 8;
    const auto close = section.find("```", at);
    const auto block = section.substr(at, close - at);
    at = close + 3;
    if (block.find("\ngraph ") == std::string::npos && block.rfind("graph ", 0) != 0) continue;
    SCOPED_TRACE(block);
    const auto g = tp::read_graph_text(block, "plan.md");
    const auto r = tp::find_best_strategy(tp::build_problem(g, 4));
    EXPECT_TRUE(std::isfinite(r.cost));
    expect_same_graph(g, tp::read_graph_text(tp::graph_text(g)));
    ++graphs;
  }
  EXPECT_EQ(graphs, 2);
}

// typemesh-plan: finds the cheapest hybrid-parallel strategy for one of the
// built-in networks, like the PaSE search tool, and prints the per-layer
// configurations and the total cost.
//
//   typemesh-plan -g transformer -p 16 [-b 128] [--flops 10] [--bw 16]
//                 [--order gen|bfs] [--json] [-d [file.dot]] [--emit-header file.hpp]
//   typemesh-plan --graph-file my.graph -p 16      (the text format of plan/parse.hpp)
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "typemesh/plan/networks.hpp"
#include "typemesh/plan/parse.hpp"
#include "typemesh/plan/report.hpp"
#include "typemesh/plan/search.hpp"

namespace {

void usage(std::ostream& os) {
  os << "usage: typemesh-plan [options]\n"
        "  -g, --graph NAME   alexnet | resnet101 | inception3 | rnnlm | transformer (alexnet)\n"
        "      --graph-file FILE  search the graph in FILE (text format of typemesh/plan/parse.hpp)\n"
        "                     instead of a built-in network; -b does not apply to it\n"
        "  -p, --procs N      processors (8)\n"
        "  -b, --batch N      batch size (128)\n"
        "  -m, --model N      model size (128; accepted for compatibility, no graph uses it)\n"
        "      --flops T      peak TFLOP/s per device (10)\n"
        "      --bw G         link bandwidth in GB/s (16)\n"
        "      --order O      gen (GenerateSeq, default) | bfs (breadth-first)\n"
        "      --algo 0|1     same as --order gen|bfs\n"
        "      --json         print the plan as JSON instead of a table\n"
        "      --emit-header FILE  also write a C++ header of the plan's meshes and layouts\n"
        "  -d, --dump-graph [FILE]  write the graph with the plan in dot format (graph.dot)\n"
        "  -h, --help\n";
}

long long to_int(const std::string& flag, const std::string& v) {
  try {
    std::size_t n = 0;
    const long long x = std::stoll(v, &n);
    if (n == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw typemesh::plan_error("option " + flag + " needs an integer, got '" + v + "'");
}

double to_double(const std::string& flag, const std::string& v) {
  try {
    std::size_t n = 0;
    const double x = std::stod(v, &n);
    if (n == v.size() && x > 0) return x;
  } catch (const std::exception&) {
  }
  throw typemesh::plan_error("option " + flag + " needs a positive number, got '" + v + "'");
}

}  // namespace

int main(int argc, char** argv) {
  namespace tp = typemesh::plan;
  std::string graph_name = "alexnet", graph_file, dot_file, header_file;
  long long procs = 8, batch = 128;
  tp::machine mach;
  tp::search_options opt;
  bool json = false, dump = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw typemesh::plan_error("option " + a + " needs a value");
        return argv[++i];
      };
      if (a == "-g" || a == "--graph") graph_name = value();
      else if (a == "--graph-file") graph_file = value();
      else if (a == "-p" || a == "--procs") procs = to_int(a, value());
      else if (a == "-b" || a == "--batch") batch = to_int(a, value());
      else if (a == "-m" || a == "--model") (void)to_int(a, value());
      else if (a == "--flops") mach.tflops = to_double(a, value());
      else if (a == "--bw") mach.bandwidth_gb = to_double(a, value());
      else if (a == "--json") json = true;
      else if (a == "--emit-header") header_file = value();
      else if (a == "--order" || a == "--algo") {
        const auto v = value();
        if (v == "gen" || v == "0") opt.order = tp::vertex_order::generate_seq;
        else if (v == "bfs" || v == "1") opt.order = tp::vertex_order::breadth_first;
        else throw typemesh::plan_error("option " + a + ": unknown order '" + v + "'");
      } else if (a == "-d" || a == "--dump-graph") {
        dump = true;
        if (i + 1 < argc && argv[i + 1][0] != '-') dot_file = argv[++i];
      } else if (a == "-h" || a == "--help") {
        usage(std::cout);
        return 0;
      } else {
        throw typemesh::plan_error("unknown option '" + a + "'");
      }
    }
    if (procs < 1) throw typemesh::plan_error("option -p needs a positive processor count");

    const auto t0 = std::chrono::steady_clock::now();
    const auto g = graph_file.empty() ? tp::network(graph_name, batch) : tp::read_graph_file(graph_file);
    const auto p = tp::build_problem(g, procs, mach);
    const auto t1 = std::chrono::steady_clock::now();
    const auto r = tp::find_best_strategy(p, opt);
    const auto t2 = std::chrono::steady_clock::now();

    if (json) {
      tp::write_json(std::cout, g, p, r, procs, batch, mach);
    } else {
      tp::write_table(std::cout, g, p, r);
    }
    if (!header_file.empty()) {
      std::ofstream f(header_file);
      if (!f) throw typemesh::plan_error("cannot write " + header_file);
      tp::write_header(f, g, p, r, procs);
    }
    if (dump) {
      if (dot_file.empty()) dot_file = "graph.dot";
      std::ofstream f(dot_file);
      if (!f) throw typemesh::plan_error("cannot write " + dot_file);
      tp::write_dot(f, g, &p, &r);
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::fprintf(stderr,
                 "graph %s, p = %lld: %d layers, %zu edges; costs %.3f s, search %.3f s; largest table %llu "
                 "entries; peak RSS %.1f MiB\n",
                 g.name.c_str(), procs, g.size(), g.edges.size(), std::chrono::duration<double>(t1 - t0).count(),
                 std::chrono::duration<double>(t2 - t1).count(), static_cast<unsigned long long>(r.largest_table),
                 static_cast<double>(ru.ru_maxrss) / 1024.0);
  } catch (const typemesh::error& e) {
    std::cerr << e.what() << "\n";
    usage(std::cerr);
    return 2;
  }
  return 0;
}

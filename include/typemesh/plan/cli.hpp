// The command line of typemesh-plan as a function, so that the tool, its tests
// and its fuzzer run the same code: run_plan_cli parses the arguments, reads
// the graph, searches and prints, and turns every failure into a message and
// a non-zero status (it never throws).
//
//   status 0  the plan was printed (or --help)
//   status 2  a typemesh error: a bad flag, graph, size or limit (the message
//             names it) and the usage
//   status 3  out of memory (std::bad_alloc) despite the limits
//   status 4  any other exception (a bug: the message says what was thrown)
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#if __has_include(<sys/resource.h>)
#include <sys/resource.h>
#define TYPEMESH_PLAN_HAVE_RUSAGE 1
#endif

#include "typemesh/plan/networks.hpp"
#include "typemesh/plan/parse.hpp"
#include "typemesh/plan/report.hpp"
#include "typemesh/plan/search.hpp"

namespace typemesh::plan {

// Where the command line reads and writes. The defaults are the process's
// streams and files; a test or a fuzzer substitutes memory.
struct cli_io {
  std::ostream* out = &std::cout;
  std::ostream* err = &std::cerr;
  // Opens FILE of --graph-file; nullptr when it cannot be opened.
  std::function<std::unique_ptr<std::istream>(const std::string&)> open_input = [](const std::string& path) {
    auto f = std::make_unique<std::ifstream>(path);
    return *f ? std::unique_ptr<std::istream>(std::move(f)) : nullptr;
  };
  // Opens FILE of --emit-header and -d; nullptr when it cannot be written.
  std::function<std::unique_ptr<std::ostream>(const std::string&)> open_output = [](const std::string& path) {
    auto f = std::make_unique<std::ofstream>(path);
    return *f ? std::unique_ptr<std::ostream>(std::move(f)) : nullptr;
  };
  // The largest --max-memory accepted, and the limit without the flag (MiB;
  // 0: the library's defaults: reading 256 MiB, the problem 4 GiB, the search
  // 16 GiB).
  std::uint64_t max_memory_mib_cap = std::uint64_t{1} << 40;
  std::uint64_t default_memory_mib = 0;
  // The most additions one elimination of the search may do and the most
  // configurations of one layer (0: the library's defaults); threads (0: one
  // per hardware thread).
  std::uint64_t max_search_work = 0;
  std::uint64_t max_configs_per_layer = 0;
  unsigned threads = 0;
  // Print the line of timings and memory on err after the plan.
  bool report_resources = true;
};

inline void plan_cli_usage(std::ostream& os) {
  os << "usage: typemesh-plan [options]\n"
        "  -g, --graph NAME   alexnet | resnet101 | inception3 | rnnlm | transformer (alexnet)\n"
        "      --graph-file FILE  search the graph in FILE (the graph text format of docs/plan.md)\n"
        "                     instead of a built-in network; -b does not apply to it\n"
        "  -p, --procs N      processors, 1 to 2147483647 (8)\n"
        "  -b, --batch N      batch size (128)\n"
        "  -m, --model N      model size (128; accepted for compatibility, no graph uses it)\n"
        "      --flops T      peak TFLOP/s per device, positive and finite (10)\n"
        "      --bw G         link bandwidth in GB/s, positive and finite (16)\n"
        "      --max-memory M  MiB the reading, the cost tables and the search may each use\n"
        "                     (default: 256 reading, 4096 tables, 16384 search)\n"
        "      --order O      gen (GenerateSeq, default) | bfs (breadth-first)\n"
        "      --algo 0|1     same as --order gen|bfs\n"
        "      --json         print the plan as JSON instead of a table\n"
        "      --emit-header FILE  also write a C++ header of the plan's meshes and layouts\n"
        "  -d, --dump-graph [FILE]  write the graph with the plan in dot format (graph.dot)\n"
        "  -h, --help\n";
}

namespace cli_detail {

inline long long to_int(const std::string& flag, const std::string& v, long long lo, long long hi) {
  std::int64_t x = 0;
  if (!parse_detail::parse_i64(v, x) || x < lo || x > hi)
    throw plan_error(detail::cat("option ", flag, " needs an integer from ", lo, " to ", hi, ", got '", v, "'"));
  return x;
}

inline double to_double(const std::string& flag, const std::string& v) {
  double x = 0;
  // parse_double refuses inf and nan (and so does the check below, for
  // overflowing literals such as 1e999).
  if (!parse_detail::parse_double(v, x) || !(x > 0) || !std::isfinite(x))
    throw plan_error(detail::cat("option ", flag, " needs a positive finite number, got '", v, "'"));
  return x;
}

}  // namespace cli_detail

inline int run_plan_cli(const std::vector<std::string>& args, const cli_io& io = {}) {
  std::ostream& out = *io.out;
  std::ostream& err = *io.err;
  try {
    std::string graph_name = "alexnet", graph_file, dot_file, header_file;
    long long procs = 8, batch = 128;
    std::uint64_t memory_mib = io.default_memory_mib;
    machine mach;
    search_options opt;
    opt.threads = io.threads;
    bool json = false, dump = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw plan_error("option " + a + " needs a value");
        return args[++i];
      };
      constexpr long long any = std::numeric_limits<long long>::max();
      if (a == "-g" || a == "--graph") graph_name = value();
      else if (a == "--graph-file") graph_file = value();
      else if (a == "-p" || a == "--procs") procs = cli_detail::to_int(a, value(), 1, max_procs);
      else if (a == "-b" || a == "--batch") batch = cli_detail::to_int(a, value(), 1, any);
      else if (a == "-m" || a == "--model") (void)cli_detail::to_int(a, value(), 1, any);
      else if (a == "--flops") mach.tflops = cli_detail::to_double(a, value());
      else if (a == "--bw") mach.bandwidth_gb = cli_detail::to_double(a, value());
      else if (a == "--max-memory")
        memory_mib = static_cast<std::uint64_t>(
            cli_detail::to_int(a, value(), 1, static_cast<long long>(std::min<std::uint64_t>(io.max_memory_mib_cap, any))));
      else if (a == "--json") json = true;
      else if (a == "--emit-header") header_file = value();
      else if (a == "--order" || a == "--algo") {
        const auto& v = value();
        if (v == "gen" || v == "0") opt.order = vertex_order::generate_seq;
        else if (v == "bfs" || v == "1") opt.order = vertex_order::breadth_first;
        else throw plan_error("option " + a + ": unknown order '" + v + "'; expected gen, bfs, 0 or 1");
      } else if (a == "-d" || a == "--dump-graph") {
        dump = true;
        if (i + 1 < args.size() && !args[i + 1].empty() && args[i + 1][0] != '-') dot_file = args[++i];
      } else if (a == "-h" || a == "--help") {
        plan_cli_usage(out);
        return 0;
      } else {
        throw plan_error("unknown option '" + a + "'");
      }
    }
    check_machine(mach);
    read_limits rl;
    problem_limits pl;
    if (memory_mib) {
      const std::uint64_t bytes = memory_mib << 20;
      rl.max_bytes = pl.max_bytes = opt.max_bytes = bytes;
    }
    if (io.max_configs_per_layer) pl.max_configs = io.max_configs_per_layer;

    const auto t0 = std::chrono::steady_clock::now();
    graph g;
    if (graph_file.empty()) {
      g = network(graph_name, batch);
    } else {
      auto in = io.open_input(graph_file);
      if (!in) throw plan_error("cannot open graph file " + graph_file);
      g = read_graph(*in, graph_file, rl);
    }
    const auto p = build_problem(g, procs, mach, pl);
    const auto t1 = std::chrono::steady_clock::now();
    if (io.max_search_work) opt.max_work = io.max_search_work;
    const auto r = find_best_strategy(p, opt);
    const auto t2 = std::chrono::steady_clock::now();

    if (json) {
      write_json(out, g, p, r, procs, batch, mach);
    } else {
      write_table(out, g, p, r);
    }
    if (!header_file.empty()) {
      auto f = io.open_output(header_file);
      if (!f) throw plan_error("cannot write " + header_file);
      write_header(*f, g, p, r, procs);
    }
    if (dump) {
      if (dot_file.empty()) dot_file = "graph.dot";
      auto f = io.open_output(dot_file);
      if (!f) throw plan_error("cannot write " + dot_file);
      write_dot(*f, g, &p, &r);
    }
    if (io.report_resources) {
      double rss_mib = 0;
#ifdef TYPEMESH_PLAN_HAVE_RUSAGE
      rusage ru{};
      getrusage(RUSAGE_SELF, &ru);
      rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
#endif
      char line[512];
      std::snprintf(line, sizeof line,
                    "graph %s, p = %lld: %d layers, %zu edges; costs %.3f s, search %.3f s; largest table %llu "
                    "entries; peak RSS %.1f MiB\n",
                    g.name.c_str(), procs, g.size(), g.edges.size(), std::chrono::duration<double>(t1 - t0).count(),
                    std::chrono::duration<double>(t2 - t1).count(), static_cast<unsigned long long>(r.largest_table),
                    rss_mib);
      err << line;
    }
  } catch (const typemesh::error& e) {
    err << e.what() << "\n";
    plan_cli_usage(err);
    return 2;
  } catch (const std::bad_alloc& e) {
    err << "typemesh-plan: out of memory (" << e.what()
        << "); use fewer processors, a smaller graph or a lower --max-memory\n";
    return 3;
  } catch (const std::exception& e) {
    err << "typemesh-plan: unexpected error: " << e.what() << "\n";
    return 4;
  } catch (...) {
    err << "typemesh-plan: unexpected error of an unknown type\n";
    return 4;
  }
  return 0;
}

}  // namespace typemesh::plan

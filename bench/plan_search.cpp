// typemesh-bench-plan_search: the strategy search (plan/) on the PaSE tool's
// five networks, against the reference tool's RECORDED costs and times.
//
// The reference is PaSE's scheduler.py (baidu-research/PaSE). It is not part
// of this project and is not run here: its minimum costs, wall-clock seconds
// and peak RSS were recorded once, on this kind of machine, by running it with
// the command in the header of tests/plan/reference_costs.tsv, and are read
// from that file. So the two sides are NOT measured in the same run; the
// speed ratio is indicative only. The reference's seconds are the wall time of
// its whole process (Python start-up and graph construction included: its
// smallest rows take 3-7 s in all), ours are the in-process time of the cost
// tables plus the dynamic program.
//
// Per (graph, p), in a forked child process (so that its peak RSS is its own):
// --reps repetitions (5; fewer once a row has taken 8 s, at least 1) of
//   tables: tp::network(graph, 128) + tp::build_problem(g, p) (the
//           configurations, layer costs and compressed edge cost tables);
//   DP:     tp::find_best_strategy(problem) (GenerateSeq order, all cores);
// and the MEDIAN of each is reported (total: median of the sums). The result
// is checked: the returned strategy's cost must equal the DP's minimum, and
// the minimum must equal the reference's recorded cost (as printed, two
// decimals; within 1e-12 relative counts as equal, marked "~"). A mismatch
// makes the program exit with status 1, which is all the ctest smoke test
// (bench.plan_search_quick) asserts: never a time.
//
// Columns:
//   graph p      the network and the processor count (batch 128, 10 TFLOP/s,
//                16 GB/s: the tool's defaults)
//   layers       layers of the graph
//   tables DP total   median seconds (see above)
//   table        entries of the largest table the DP built
//   search mem   search_result::peak_bytes: peak bytes of live DP tables and
//                argmins (not counting the problem's own cost tables)
//   RSS          the child process's peak resident set (getrusage ru_maxrss)
//   cost         our minimum total cost (Eq. (1), FLOP units)
//   ref cost     the reference's recorded "Total cost", "-" when not recorded
//   =            yes / ~ / NO: our cost equals the reference's
//   ref s, ref RSS    the reference's recorded wall seconds and peak RSS
//   speedup      ref s / our total seconds
//
//   typemesh-bench-plan_search [--quick] [--reps N] [--reference FILE]
//   --quick: alexnet, rnnlm and inception3 at p = 4 and 8, one repetition.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "typemesh/plan/networks.hpp"
#include "typemesh/plan/report.hpp"
#include "typemesh/plan/search.hpp"

namespace tp = typemesh::plan;

namespace {

using clk = std::chrono::steady_clock;

std::string reference_path() {
#ifdef TYPEMESH_PLAN_REFERENCE
  return TYPEMESH_PLAN_REFERENCE;
#else
  std::string f = __FILE__;
  const auto slash = f.find_last_of('/');
  return (slash == std::string::npos ? std::string(".") : f.substr(0, slash)) + "/../tests/plan/reference_costs.tsv";
#endif
}

struct ref_row {
  std::string cost_text;
  double cost = 0, seconds = 0, rss_kib = 0;
};

struct reference {
  std::map<std::pair<std::string, int>, ref_row> rows;
  std::vector<std::string> notes;  // header lines worth repeating
  bool found = false;
};

reference read_reference(const std::string& path) {
  reference ref;
  std::ifstream in(path);
  if (!in) return ref;
  ref.found = true;
  std::string line;
  bool command_next = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (command_next || line.find("Reference:") != std::string::npos || line.find("missing:") != std::string::npos)
        ref.notes.push_back(line.substr(std::min<std::size_t>(line.size(), 2)));
      command_next = line.find("Command") != std::string::npos;
      continue;
    }
    std::istringstream s(line);
    std::string g, p, c, sec, rss;
    if (!std::getline(s, g, '\t') || !std::getline(s, p, '\t') || !std::getline(s, c, '\t')) continue;
    if (g == "graph") continue;  // column names
    std::getline(s, sec, '\t');
    std::getline(s, rss, '\t');
    ref_row r;
    r.cost_text = c;
    r.cost = std::atof(c.c_str());
    r.seconds = sec.empty() ? NAN : std::atof(sec.c_str());
    r.rss_kib = rss.empty() ? NAN : std::atof(rss.c_str());
    ref.rows[{g, std::atoi(p.c_str())}] = r;
  }
  return ref;
}

// What a child reports back through its pipe.
struct measurement {
  int ok = 0;  // 1: measured; 0: failed (message in what)
  int layers = 0;
  int reps = 0;
  double tables_s = 0, dp_s = 0, total_s = 0;
  double cost = 0, strategy_cost = 0;
  unsigned long long largest_table = 0, peak_bytes = 0;
  long rss_kib = 0;
  char what[256] = {};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

measurement measure(const std::string& name, int procs, int max_reps) {
  measurement m;
  try {
    std::vector<double> tables, dp, total;
    const auto start = clk::now();
    for (int rep = 0; rep < max_reps; ++rep) {
      const auto t0 = clk::now();
      const auto g = tp::network(name, 128);
      const auto p = tp::build_problem(g, procs);
      const auto t1 = clk::now();
      const auto r = tp::find_best_strategy(p);
      const auto t2 = clk::now();
      tables.push_back(std::chrono::duration<double>(t1 - t0).count());
      dp.push_back(std::chrono::duration<double>(t2 - t1).count());
      total.push_back(std::chrono::duration<double>(t2 - t0).count());
      m.layers = g.size();
      m.cost = r.cost;
      m.strategy_cost = tp::strategy_cost(p, r.choice);
      m.largest_table = r.largest_table;
      m.peak_bytes = r.peak_bytes;
      if (std::chrono::duration<double>(clk::now() - start).count() > 8.0) break;
    }
    m.reps = static_cast<int>(total.size());
    m.tables_s = median(tables);
    m.dp_s = median(dp);
    m.total_s = median(total);
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    m.rss_kib = ru.ru_maxrss;
    m.ok = 1;
  } catch (const std::exception& e) {
    std::snprintf(m.what, sizeof m.what, "%s", e.what());
  }
  return m;
}

// Runs measure() in a child process, so that ru_maxrss is this row's alone.
measurement measure_forked(const std::string& name, int procs, int max_reps) {
  int fd[2];
  if (pipe(fd) != 0) return measure(name, procs, max_reps);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return measure(name, procs, max_reps);
  }
  if (pid == 0) {
    close(fd[0]);
    const measurement m = measure(name, procs, max_reps);
    const char* b = reinterpret_cast<const char*>(&m);
    std::size_t left = sizeof m;
    while (left > 0) {
      const ssize_t w = write(fd[1], b, left);
      if (w <= 0) _exit(3);
      b += w;
      left -= static_cast<std::size_t>(w);
    }
    _exit(0);
  }
  close(fd[1]);
  measurement m;
  char* b = reinterpret_cast<char*>(&m);
  std::size_t got = 0;
  while (got < sizeof m) {
    const ssize_t r = read(fd[0], b + got, sizeof m - got);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof m) {
    m = measurement{};
    std::snprintf(m.what, sizeof m.what, "child process died (status %d)", status);
  }
  return m;
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string seconds(double s) {
  char buf[32];
  if (std::isnan(s)) return "-";
  if (s < 0.01) std::snprintf(buf, sizeof buf, "%.4f", s);
  else std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

[[noreturn]] void usage(const char* problem, int status) {
  std::fprintf(status ? stderr : stdout,
               "%s%susage: typemesh-bench-plan_search [--quick] [--reps N] [--reference FILE]\n"
               "  --quick           alexnet, rnnlm, inception3 at p = 4, 8; one repetition\n"
               "  --reps N          repetitions per row (5; fewer when a row passes 8 s)\n"
               "  --reference FILE  the reference tool's recorded table (tests/plan/reference_costs.tsv)\n",
               problem, *problem ? "\n" : "");
  std::exit(status);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int reps = 5;
  std::string ref_file = reference_path();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--reference" && i + 1 < argc) ref_file = argv[++i];
    else if (a == "-h" || a == "--help") usage("", 0);
    else usage(("unknown or incomplete argument '" + a + "'").c_str(), 2);
  }
  if (quick) reps = 1;
  const std::vector<std::string> graphs =
      quick ? std::vector<std::string>{"alexnet", "rnnlm", "inception3"} : tp::network_names();
  const std::vector<int> procs = quick ? std::vector<int>{4, 8} : std::vector<int>{4, 8, 16, 32, 64};

  const auto start = clk::now();
  const reference ref = read_reference(ref_file);
  std::printf("typemesh-bench-plan_search: PaSE strategy search, batch 128, 10 TFLOP/s, 16 GB/s, GenerateSeq\n");
  std::printf("machine: %u hardware threads; the DP uses all of them for its large tables\n",
              std::thread::hardware_concurrency());
#if defined(__GNUC__) && !defined(__OPTIMIZE__)
  std::printf("WARNING: built without optimization; the times mean little\n");
#endif
  std::printf("ours: median of up to %d repetition(s) per row, each row in its own process\n", reps);
  if (ref.found) {
    std::printf("reference: %s\n", ref_file.c_str());
    std::printf("  The reference columns (ref cost, ref s, ref RSS) were RECORDED earlier on this kind of machine by\n"
                "  running the reference tool, PaSE's scheduler.py, which is not part of this project; they were NOT\n"
                "  measured in this run. ref s is its whole process's wall time (Python start-up included).\n");
    for (const auto& n : ref.notes) std::printf("  %s\n", n.c_str());
  } else {
    std::printf("reference: %s not found; the reference columns are \"-\"\n", ref_file.c_str());
  }
  std::printf("\n%-11s %3s %6s %8s %8s %8s %7s %10s %9s %18s %18s %3s %8s %10s %8s\n", "graph", "p", "layers",
              "tables", "DP", "total", "table", "search_mem", "RSS", "cost", "ref_cost", "=", "ref_s", "ref_RSS",
              "speedup");

  int failures = 0;
  for (const auto& g : graphs)
    for (int p : procs) {
      const measurement m = measure_forked(g, p, reps);
      if (!m.ok) {
        std::printf("%-11s %3d  FAILED: %s\n", g.c_str(), p, m.what);
        ++failures;
        continue;
      }
      const auto it = ref.rows.find({g, p});
      const ref_row* r = it == ref.rows.end() ? nullptr : &it->second;
      char cost[32];
      std::snprintf(cost, sizeof cost, "%.2f", m.cost);
      std::string same = "-", ref_cost = "-", ref_s = "-", ref_rss = "-", speedup = "-";
      if (r) {
        ref_cost = r->cost_text;
        if (ref_cost == cost) same = "yes";
        else if (std::abs(m.cost - r->cost) <= std::max(0.01, 1e-12 * r->cost)) same = "~";
        else same = "NO", ++failures;
        ref_s = seconds(r->seconds);
        if (!std::isnan(r->rss_kib)) ref_rss = mib(r->rss_kib * 1024.0);
        if (!std::isnan(r->seconds) && m.total_s > 0) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.0fx", r->seconds / m.total_s);
          speedup = buf;
        }
      }
      if (std::abs(m.strategy_cost - m.cost) > 1e-9 * std::max(1.0, std::abs(m.cost))) {
        std::printf("%-11s %3d  WRONG: the returned strategy costs %.2f, the DP's minimum is %.2f\n", g.c_str(), p,
                    m.strategy_cost, m.cost);
        ++failures;
      }
      std::printf("%-11s %3d %6d %8s %8s %8s %7llu %10s %9s %18s %18s %3s %8s %10s %8s\n", g.c_str(), p, m.layers,
                  seconds(m.tables_s).c_str(), seconds(m.dp_s).c_str(), seconds(m.total_s).c_str(), m.largest_table,
                  mib(static_cast<double>(m.peak_bytes)).c_str(), mib(m.rss_kib * 1024.0).c_str(), cost,
                  ref_cost.c_str(), same.c_str(), ref_s.c_str(), ref_rss.c_str(), speedup.c_str());
    }
  std::printf("\nwall time: %.2f s\n", std::chrono::duration<double>(clk::now() - start).count());
  if (failures) {
    std::printf("%d row(s) FAILED\n", failures);
    return 1;
  }
  return 0;
}

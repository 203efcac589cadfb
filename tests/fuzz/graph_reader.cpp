// Fuzzes the graph text reader: any input either reads as a graph or throws
// typemesh::plan_error. A graph that reads back must write and read again to
// the same text, and cost and search to a finite, non-negative total (or
// stop at a stated limit with a plan_error). Anything else (another
// exception, a crash, a sanitizer report, a hang) is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_limits.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tp = typemesh::plan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  tp::graph g;
  try {
    g = tp::read_graph_text(text, "fuzz.graph", fuzz::read_limits());
  } catch (const typemesh::plan_error&) {
    return 0;
  }
  try {
    const auto written = tp::graph_text(g);
    const auto back = tp::read_graph_text(written, "written.graph", fuzz::read_limits());
    if (tp::graph_text(back) != written) fuzz::broken("a written graph reads back as another graph");
  } catch (const typemesh::plan_error&) {
    // Names the writer cannot express (it says so).
  }
  for (std::int64_t procs : {1, 4, 6}) {
    try {
      const auto p = tp::build_problem(g, procs, {}, fuzz::problem_limits());
      const auto r = tp::find_best_strategy(p, fuzz::search_options());
      if (!std::isfinite(r.cost) || r.cost < 0) fuzz::broken("the search returned a cost that is not finite");
      if (std::abs(tp::strategy_cost(p, r.choice) - r.cost) > 1e-6 * std::max(1.0, r.cost))
        fuzz::broken("the strategy returned does not cost what the search says");
    } catch (const typemesh::plan_error&) {
    }
  }
  return 0;
}

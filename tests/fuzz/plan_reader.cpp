// Fuzzes the plan JSON reader: any input either reads as a plan or throws
// typemesh::plan_error. A plan that reads has splits that divide their dims
// and fit on its processors.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_limits.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tp = typemesh::plan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto p = tp::read_plan_text(text, "fuzz.json", fuzz::read_limits());
    for (const auto& l : p.layers) {
      if (l.devices() > p.procs) fuzz::broken("a plan layer uses more devices than the plan has");
      for (const auto& d : l.dims)
        if (d.split < 1 || d.size % d.split != 0) fuzz::broken("a split does not divide its dim");
      if (l.splits().size() != l.dims.size()) fuzz::broken("splits() lost a dim");
    }
    for (const auto& e : p.edges)
      if (e.src < 0 || e.dst < 0 || e.src >= static_cast<int>(p.layers.size()) ||
          e.dst >= static_cast<int>(p.layers.size()))
        fuzz::broken("an edge names a layer the plan does not have");
  } catch (const typemesh::plan_error&) {
  }
  return 0;
}

// typemesh-plan: finds the cheapest hybrid-parallel strategy for one of the
// built-in networks, like the PaSE search tool, and prints the per-layer
// configurations and the total cost.
//
//   typemesh-plan -g transformer -p 16 [-b 128] [--flops 10] [--bw 16]
//                 [--order gen|bfs] [--json] [-d [file.dot]] [--emit-header file.hpp]
//   typemesh-plan --graph-file my.graph -p 16      (the graph text format of docs/plan.md)
//
// The command line lives in typemesh/plan/cli.hpp, shared with the tests and
// the fuzzer; it reports every failure (bad input, limits, out of memory) with
// a message and a non-zero status.
#include <string>
#include <vector>

#include "typemesh/plan/cli.hpp"

int main(int argc, char** argv) {
  try {
    return typemesh::plan::run_plan_cli(std::vector<std::string>(argv + 1, argv + argc));
  } catch (...) {
    // Copying the arguments failed (out of memory): nothing can be reported.
    return 3;
  }
}

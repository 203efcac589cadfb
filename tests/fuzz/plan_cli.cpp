// Fuzzes typemesh-plan's command line. The input is the arguments, one per
// line, then an empty line, then the contents of any file the command reads
// (--graph-file NAME reads them whatever NAME is); files it writes go to
// memory. The command must end with status 0 or 2 (a typemesh error, reported):
// 3 (out of memory) or 4 (an unexpected exception) is a finding, as is a
// crash, a sanitizer report or a hang.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_limits.hpp"
#include "typemesh/plan/cli.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tp = typemesh::plan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto blank = text.find("\n\n");
  const std::string head = text.substr(0, blank);
  const std::string file = blank == std::string::npos ? std::string{} : text.substr(blank + 2);
  std::vector<std::string> args;
  for (std::size_t b = 0; b <= head.size();) {
    auto e = head.find('\n', b);
    if (e == std::string::npos) e = head.size();
    if (e > b || e < head.size()) args.push_back(head.substr(b, e - b));
    b = e + 1;
  }
  if (args.size() > 64) return 0;
  std::ostringstream out, err;
  tp::cli_io io;
  io.out = &out;
  io.err = &err;
  io.open_input = [&](const std::string&) -> std::unique_ptr<std::istream> {
    return std::make_unique<std::istringstream>(file);
  };
  io.open_output = [](const std::string&) -> std::unique_ptr<std::ostream> {
    return std::make_unique<std::ostringstream>();
  };
  io.max_memory_mib_cap = fuzz::memory_bytes >> 20;
  io.default_memory_mib = fuzz::memory_bytes >> 20;
  // Per input, well under a second even on the largest networks under the
  // sanitizers.
  io.max_search_work = std::uint64_t{1} << 18;
  io.max_configs_per_layer = 4096;
  io.threads = 1;
  io.report_resources = false;
  const int status = tp::run_plan_cli(args, io);
  if (status != 0 && status != 2) {
    std::fprintf(stderr, "%s", err.str().c_str());
    fuzz::broken("typemesh-plan ended with a status other than 0 or 2");
  }
  if (status == 2 && err.str().rfind("typemesh: ", 0) != 0) fuzz::broken("an error without the typemesh: message");
  return 0;
}

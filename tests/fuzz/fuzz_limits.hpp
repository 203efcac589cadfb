// Limits that keep one fuzz input to milliseconds and megabytes: the readers,
// the problem and the search refuse more (with a plan_error) before
// allocating or looping, which is the behaviour being fuzzed.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstdio>

#include "typemesh/plan/cost.hpp"
#include "typemesh/plan/parse.hpp"
#include "typemesh/plan/search.hpp"

namespace fuzz {

inline constexpr std::uint64_t memory_bytes = std::uint64_t{8} << 20;

inline typemesh::plan::read_limits read_limits() { return {memory_bytes}; }

inline typemesh::plan::problem_limits problem_limits() {
  typemesh::plan::problem_limits l;
  l.max_bytes = memory_bytes;
  l.max_configs = 4096;
  return l;
}

inline typemesh::plan::search_options search_options() {
  typemesh::plan::search_options o;
  o.max_table_entries = std::uint64_t{1} << 16;
  o.max_bytes = memory_bytes;
  o.max_work = std::uint64_t{1} << 20;
  o.threads = 1;
  return o;
}

// A broken promise: report it as a crash so that libFuzzer keeps the input.
[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "fuzz: %s\n", what);
  std::abort();
}

}  // namespace fuzz

// What the benchmark programs (collectives.cpp, conversions.cpp) share: flag
// parsing, formatting, the machine line, and the timing of synchronised
// repetitions over eight simulated devices (see "Method" in either source's
// header comment).
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#include "typemesh/core/devices.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/runtime/device.hpp"

namespace typemesh_bench {

using clock_type = std::chrono::steady_clock;
constexpr int devices = 8;

// ---------------------------------------------------------------- flags

// The program's name and its usage line (after "usage: ").
struct program_info {
  const char* name;
  const char* synopsis;
};

[[noreturn]] inline void usage(const program_info& p, const std::string& problem, int status = 2) {
  std::fprintf(status ? stderr : stdout, "%s: %s\nusage: %s\n", p.name, problem.c_str(), p.synopsis);
  std::exit(status);
}

// A byte count such as 1048576, 1M, 64MiB or 2G given to `flag`; a bad one
// ends the program with a usage message.
inline std::size_t parse_byte_count(const program_info& p, std::string_view flag, const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) {
    usage(p, std::string(flag) + " wants a byte count such as 1048576, 1M or 64MiB, not '" + text + "'");
  }
  std::string unit;
  for (char c : text.substr(digits)) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB")) unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit.ends_with("B")) unit.resize(1);
  const int shift = unit.empty() || unit == "B" ? 0 : unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : -1;
  if (shift < 0) usage(p, "unknown unit '" + text.substr(digits) + "' in " + std::string(flag) + " (use K, M or G)");
  return static_cast<std::size_t>(std::stoull(text.substr(0, digits))) << shift;
}

// The flags every benchmark takes.
struct repeat_options {
  bool quick = false;
  double min_time_s = 0;  // timed work per measurement
  int min_reps = 1;       // at least this many timed repetitions
  int max_reps = 1;       // at most this many
};

// Parses --quick, --min-time-ms T, --min-reps R and --help / -h (which prints
// `help` and exits 0); hands every other argument to
// extra(std::string_view arg, value), where value() returns the next argument
// (or exits when there is none), and exits with status 2 when extra returns
// false. With --quick, unless given: --min-time-ms 2, --min-reps 2; and at
// most max(min_reps, 20) repetitions.
template <class Extra>
void parse_flags(int argc, char** argv, const program_info& p, const char* help, repeat_options& o, Extra&& extra) {
  bool time_given = false, reps_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(p, std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--quick") o.quick = true;
    else if (a == "--min-time-ms") o.min_time_s = std::atof(value().c_str()) / 1000.0, time_given = true;
    else if (a == "--min-reps") o.min_reps = std::max(1, std::atoi(value().c_str())), reps_given = true;
    else if (a == "--help" || a == "-h") usage(p, help, 0);
    else if (!extra(a, value)) usage(p, "unknown argument '" + std::string(a) + "'");
  }
  if (o.quick) {
    if (!time_given) o.min_time_s = 0.002;
    if (!reps_given) o.min_reps = 2;
    o.max_reps = std::max(o.min_reps, 20);
  }
}

// ---------------------------------------------------------------- formatting

inline std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024.0 && u < 3) b /= 1024.0, ++u;
  char buf[32];
  if (b == static_cast<double>(static_cast<long long>(b))) std::snprintf(buf, sizeof buf, "%.0f %s", b, units[u]);
  else std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

inline std::string human_time(double s) {
  char buf[32];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  return buf;
}

// ---------------------------------------------------------------- machine

inline int usable_cores() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
  return static_cast<int>(std::thread::hardware_concurrency());
}

// The "machine:" line, and a warning when built without optimization.
inline void print_machine() {
  const int cores = usable_cores();
  const unsigned online = std::thread::hardware_concurrency();
  std::printf("machine: %d usable cores (%u online); the %d devices are threads sharing them%s\n", cores, online,
              devices, cores < devices ? " (oversubscribed)" : "");
#if defined(__GNUC__) && !defined(__OPTIMIZE__)
  std::printf("WARNING: built without optimization; the numbers mean little\n");
#endif
}

inline void print_wall_time(clock_type::time_point t0) {
  const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::printf("\nwall time: %.2f s\n", wall);
}

// ---------------------------------------------------------------- timing

// Keeps the compiler from treating a buffer that is written and never read
// as dead.
inline void touch(const void* p) {
#if defined(__GNUC__)
  asm volatile("" : : "r"(p) : "memory");
#else
  (void)p;
#endif
}

// Arrays on 64-byte boundaries, for the memcpy references: glibc 2.36's
// memcpy runs up to 20x slower on AMD Zen 3 when its destination lies 1 to 31
// bytes past its source modulo 64 (backend/host/copy_bytes.hpp), and malloc's
// blocks are only 16-byte aligned, so a reference between two of them ran
// fast or slow by where they landed.
struct aligned_delete {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t{64}); }
};
template <class T>
using aligned_array = std::unique_ptr<T[], aligned_delete>;
template <class T>
aligned_array<T> make_aligned_array(std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T>);
  return aligned_array<T>(static_cast<T*>(::operator new[](std::max<std::size_t>(n, 1) * sizeof(T), std::align_val_t{64})));
}

// The memcpy reference: copies `bytes` (none: nothing) with std::memcpy and
// keeps the copy. Its ends must be aligned alike modulo 64 (above), as
// make_aligned_array's are.
inline void reference_copy(void* dst, const void* src, std::size_t bytes) {
  if (((reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src)) & 63) != 0) {
    std::fprintf(stderr, "memcpy reference between buffers not aligned alike modulo 64\n");
    std::abort();
  }
  if (bytes) std::memcpy(dst, src, bytes);
  touch(dst);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct timing {
  double median_s = 0;        // device 0 only
  int reps = 0;
  std::vector<double> spans;  // each repetition's time; device 0 only
};

// What the devices share while they time something together. Device 0
// decides how many repetitions to run; the barriers order every access.
struct rep_clock {
  std::array<clock_type::time_point, devices> start{}, end{};
  std::vector<double> spans;  // device 0 only
  bool go = false;
};

// The first wrong result any device saw.
struct first_failure {
  std::mutex mutex;
  std::string what;

  void record(const std::string& why) {
    std::lock_guard lk(mutex);
    if (what.empty()) what = why;
  }
};

// One device of a benchmark: the group of all devices and the synchronised
// repetitions over it.
class synced_device {
 public:
  synced_device(typemesh::device& dev, rep_clock& clock, const repeat_options& opt)
      : dev_(dev), clock_(clock), opt_(opt), all_{typemesh::devices::all(devices), "all"}, id_(dev.id()) {}

  int id() const { return id_; }
  typemesh::device& dev() { return dev_; }

  void barrier() { dev_.barrier(all_); }

  // Times f (run on every device at once) `inner` times per repetition: each
  // repetition starts at a barrier over all devices and lasts from the first
  // device's start to the last device's end; the result of f is destroyed
  // after the end time. Repeats until at least opt.min_reps repetitions and
  // opt.min_time_s of timed work, at most opt.max_reps (or as `o` says).
  // Returns the median and the repetitions' times on device 0 (per call of
  // f) and this device's repetition count.
  template <class F>
  timing time_it(F&& f, int inner = 1) {
    return time_it(opt_, std::forward<F>(f), inner);
  }
  template <class F>
  timing time_it(const repeat_options& o, F&& f, int inner = 1) {
    int reps = 0;
    if (id_ == 0) clock_.spans.clear();
    for (;;) {
      dev_.barrier(all_);  // the previous repetition's times are visible now
      if (id_ == 0) {
        if (reps > 0) clock_.spans.push_back(span() / inner);
        double total = std::accumulate(clock_.spans.begin(), clock_.spans.end(), 0.0) * inner;
        clock_.go = reps < o.max_reps && (reps < o.min_reps || total < o.min_time_s);
      }
      dev_.barrier(all_);  // the start line
      if (!clock_.go) break;
      clock_.start[id_] = clock_type::now();
      if constexpr (std::is_void_v<decltype(f())>) {
        for (int i = 0; i < inner; ++i) f();
        clock_.end[id_] = clock_type::now();
      } else {
        auto r = f();
        for (int i = 1; i < inner; ++i) r = f();
        clock_.end[id_] = clock_type::now();
      }
      ++reps;
    }
    timing t;
    t.reps = reps;
    if (id_ == 0) t.median_s = median(clock_.spans), t.spans = clock_.spans;
    return t;
  }

 protected:
  typemesh::device& dev_;
  rep_clock& clock_;
  const repeat_options& opt_;
  typemesh::group all_;
  int id_;

 private:
  double span() const {
    auto first = *std::min_element(clock_.start.begin(), clock_.start.end());
    auto last = *std::max_element(clock_.end.begin(), clock_.end.end());
    return std::chrono::duration<double>(last - first).count();
  }
};

}  // namespace typemesh_bench

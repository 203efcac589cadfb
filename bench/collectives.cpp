// typemesh-bench-collectives: the host-thread backend's collectives against
// memcpy, measured in the same run.
//
// Eight simulated devices (typemesh::launch(8, ...)) run allreduce (sum of
// float), allgather and alltoall through typemesh::device's typed collectives
// over the group of all eight, for buffer sizes 1 KiB, 2 KiB, ..., 64 MiB.
// The reference is memcpy under the same thread setup: the same eight device
// threads, started by the same barrier, each copying its own buffer of the
// same size at the same time. The eight devices share this machine's cores
// (the program prints how many), so both sides compete for the same cores and
// memory bandwidth and their ratio is what says how well the backend does.
//
// Method. Per (operation, size): one untimed warm-up call whose result is
// checked, then repetitions until at least --min-time-ms of timed work (50 ms
// by default) and at least --min-reps of them (3). Each repetition starts with
// dev.barrier over all eight devices; every device takes its own start and end
// time around the call, and the repetition's time is the last end minus the
// first start (the wall time of the whole collective, start skew included).
// The reported time is the MEDIAN over the repetitions.
//
// Every warm-up result is checked (a sample of elements against the exact
// expected values); a wrong one makes the program exit with status 1, which is
// all the ctest smoke test (bench.collectives_quick) asserts: never a time.
//
// Columns of the table (one memcpy row per size, the reference itself, then
// one row per collective):
//   op        the collective, or memcpy
//   size      bytes of each device's result buffer (allreduce and alltoall:
//             the input is as big; allgather: each device contributes size/8)
//   reps      timed repetitions
//   time      median time of one call
//   algbw     algorithm bandwidth: size / time
//   moved     bytes each device received in one call, as counted by the
//             device (dev.traffic()[kind].bytes_received, averaged over the
//             devices): 2*7/8*size for allreduce (reduce-scatter plus
//             allgather), 7/8*size for allgather and alltoall
//   moved/s   moved / time: the rate at which each device moves data
//   memcpy/s  size / time of the memcpy reference of the same size
//   ratio     (moved/s) / (memcpy/s): 1.0 means a device moves its bytes as
//             fast as a plain memcpy of its buffer under the same conditions
// Rates are in GB/s (10^9 bytes per second) per device; multiply by 8 for the
// machine-wide figure.
//
// Flags:
//   --quick          sizes up to 1 MiB, few short repetitions (smoke test)
//   --max-bytes N    largest size (suffixes K, M, G, with or without "iB")
//   --pow4           sizes in powers of 4 instead of 2 (--quick: always 4)
//   --min-time-ms T  timed work per row (default 50; --quick: 2)
//   --min-reps R     at least R timed repetitions (default 3)
#include <algorithm>
#include <array>
#include <chrono>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench_support.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/runtime/device.hpp"
#include "typemesh/runtime/launch.hpp"
#include "typemesh/runtime/traffic.hpp"

namespace {

using namespace typemesh_bench;
constexpr std::size_t min_size = 1024;  // 1 KiB: 32 floats per alltoall block

struct options : repeat_options {
  bool pow4 = false;
  std::size_t max_bytes = std::size_t{64} << 20;

  options() : repeat_options{.min_time_s = 0.050, .min_reps = 3, .max_reps = 100'000} {}
};

constexpr program_info program{
    "typemesh-bench-collectives",
    "typemesh-bench-collectives [--quick] [--max-bytes N[K|M|G]] [--pow4] [--min-time-ms T] [--min-reps R]"};

[[noreturn]] void usage(const std::string& problem) { typemesh_bench::usage(program, problem); }

options parse(int argc, char** argv) {
  options o;
  parse_flags(argc, argv, program, "measures the host backend's collectives against memcpy (see the source's header)", o,
              [&](std::string_view a, auto& value) {
                if (a == "--pow4") o.pow4 = true;
                else if (a == "--max-bytes") o.max_bytes = parse_byte_count(program, "--max-bytes", value());
                else return false;
                return true;
              });
  if (o.quick) {
    o.max_bytes = std::min(o.max_bytes, std::size_t{1} << 20);
    o.pow4 = true;
  }
  if (o.max_bytes < min_size) usage("--max-bytes must be at least 1K (1024)");
  return o;
}

std::vector<std::size_t> sizes(const options& o) {
  std::vector<std::size_t> v;
  for (std::size_t s = min_size; s <= o.max_bytes; s *= o.pow4 ? 4 : 2) v.push_back(s);
  return v;
}

enum class what { memcpy_ref, allreduce, allgather, alltoall };

constexpr std::string_view name_of(what w) {
  switch (w) {
    case what::memcpy_ref: return "memcpy";
    case what::allreduce: return "allreduce";
    case what::allgather: return "allgather";
    case what::alltoall: return "alltoall";
  }
  return "?";
}

struct result {
  double median_s = 0;
  int reps = 0;
  double moved = 0;  // bytes received per device per call
};

// What the devices share. Device 0 decides how many repetitions to run and
// prints; the barriers order every access.
struct shared_state {
  rep_clock clock;
  std::array<std::uint64_t, devices> moved{}, calls{};
  first_failure failure;
};

// The input of device d at element i: small integers, so sums are exact.
inline float input_value(int d, std::size_t i) { return static_cast<float>(d + 1 + static_cast<int>(i % 7)); }

class bench_device : public synced_device {
 public:
  bench_device(typemesh::device& dev, shared_state& sh, const options& opt)
      : synced_device(dev, sh.clock, opt), sh_(sh) {
    const std::size_t n = opt.max_bytes / sizeof(float);
    // Allocated and first touched by this device's own thread.
    in_ = make_aligned_array<float>(n);
    out_ = make_aligned_array<float>(n);
  }

  result run(what w, std::size_t bytes) {
    const std::size_t n = bytes / sizeof(float);
    prepare_input(w, n);
    call(w, n);  // warm-up
    check(w, n);

    const typemesh::op_traffic before = traffic(w);
    const timing t = time_it([&] { call(w, n); });
    const typemesh::op_traffic after = traffic(w);
    sh_.moved[id_] = after.bytes_received - before.bytes_received;
    sh_.calls[id_] = after.calls - before.calls;
    barrier();

    result r;
    if (id_ != 0) return r;
    r.reps = t.reps;
    r.median_s = t.median_s;
    if (w == what::memcpy_ref) {
      r.moved = static_cast<double>(bytes);
    } else {
      std::uint64_t moved = 0, calls = 0;
      for (int d = 0; d < devices; ++d) moved += sh_.moved[d], calls += sh_.calls[d];
      if (calls != static_cast<std::uint64_t>(devices) * static_cast<std::uint64_t>(r.reps)) {
        fail("the devices counted " + std::to_string(calls) + " " + std::string(name_of(w)) + " calls, expected " +
             std::to_string(devices * r.reps));
      }
      r.moved = calls ? static_cast<double>(moved) / static_cast<double>(calls) : 0.0;
    }
    return r;
  }

  void fail(const std::string& why) { sh_.failure.record(why); }

 private:

  typemesh::op_traffic traffic(what w) const {
    switch (w) {
      case what::allreduce: return dev_.traffic()[typemesh::op_kind::allreduce];
      case what::allgather: return dev_.traffic()[typemesh::op_kind::allgather];
      case what::alltoall: return dev_.traffic()[typemesh::op_kind::alltoall];
      case what::memcpy_ref: break;
    }
    return {};
  }

  // n: elements of the result buffer.
  std::size_t input_elements(what w, std::size_t n) const { return w == what::allgather ? n / devices : n; }

  void prepare_input(what w, std::size_t n) {
    const std::size_t m = input_elements(w, n);
    for (std::size_t i = 0; i < m; ++i) in_[i] = input_value(id_, i);
    std::fill_n(out_.get(), n, -1.0f);
  }

  void call(what w, std::size_t n) {
    float* in = in_.get();
    float* out = out_.get();
    switch (w) {
      case what::memcpy_ref:
        reference_copy(out, in, n * sizeof(float));
        break;
      case what::allreduce:
        dev_.allreduce<float>(all_, std::span<const float>(in, n), std::span<float>(out, n));
        break;
      case what::allgather:
        dev_.allgather<float>(all_, std::span<const float>(in, n / devices), std::span<float>(out, n));
        break;
      case what::alltoall:
        dev_.alltoall<float>(all_, std::span<const float>(in, n), std::span<float>(out, n));
        break;
    }
  }

  // The value element i of the result must have after the warm-up call.
  float expected(what w, std::size_t n, std::size_t i) const {
    switch (w) {
      case what::memcpy_ref: return input_value(id_, i);
      case what::allreduce: {
        float s = 0;
        for (int d = 0; d < devices; ++d) s += input_value(d, i);
        return s;
      }
      case what::allgather: {
        const std::size_t m = n / devices;
        return input_value(static_cast<int>(i / m), i % m);
      }
      case what::alltoall: {
        const std::size_t block = n / devices;
        const int from = static_cast<int>(i / block);
        return input_value(from, static_cast<std::size_t>(id_) * block + i % block);
      }
    }
    return 0;
  }

  // Checks a sample of the result: every element of small buffers, about
  // 4096 spread over large ones, always the ends of every block.
  void check(what w, std::size_t n) {
    const std::size_t stride = std::max<std::size_t>(1, n / 4096) | 1;
    const std::size_t block = n / devices;
    auto one = [&](std::size_t i) {
      float want = expected(w, n, i);
      if (out_[i] != want) {
        fail("device " + std::to_string(id_) + ": " + std::string(name_of(w)) + " of " + human_bytes(n * 4.0) +
             " left element " + std::to_string(i) + " = " + std::to_string(out_[i]) + ", expected " +
             std::to_string(want));
        return false;
      }
      return true;
    };
    for (std::size_t i = 0; i < n; i += stride)
      if (!one(i)) return;
    for (int b = 0; b < devices; ++b)
      if (!one(b * block) || !one(b * block + block - 1)) return;
  }

  shared_state& sh_;
  aligned_array<float> in_, out_;
};

void print_legend(const options& opt) {
  std::printf(
      "typemesh host backend: collectives over 8 devices vs memcpy, same run\n"
      "  op        collective over the group of all 8 devices (allreduce: sum of float)\n"
      "  size      bytes of each device's result buffer (allgather: each device sends size/8)\n"
      "  reps      timed repetitions (at least %d, and at least %.0f ms of timed work)\n"
      "  time      MEDIAN over the repetitions of (last device's end - first device's start),\n"
      "            every repetition starting at dev.barrier(all)\n"
      "  algbw     size / time                                 [GB/s per device]\n"
      "  moved     bytes each device received per call, from dev.traffic()[op].bytes_received\n"
      "  moved/s   moved / time                                [GB/s per device]\n"
      "  memcpy/s  size / time of 8 threads (the same device threads, same barrier) each\n"
      "            memcpy-ing its own buffer of `size` at once [GB/s per device]\n"
      "  ratio     moved/s / memcpy/s (1.0 = moves its bytes as fast as memcpy)\n"
      "  GB = 10^9 bytes; multiply per-device rates by 8 for the machine-wide rate\n",
      opt.min_reps, opt.min_time_s * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse(argc, argv);
  const auto t0 = clock_type::now();

  print_legend(opt);
  print_machine();
  std::printf("sizes: 1 KiB to %s in powers of %d%s\n\n", human_bytes(static_cast<double>(sizes(opt).back())).c_str(),
              opt.pow4 ? 4 : 2, opt.quick ? " (--quick)" : "");
  std::printf("%-10s %10s %6s %12s %9s %11s %9s %9s %7s\n", "op", "size", "reps", "time", "algbw", "moved", "moved/s",
              "memcpy/s", "ratio");
  std::fflush(stdout);

  shared_state sh;
  try {
    typemesh::launch(devices, [&](typemesh::device& dev) {
      bench_device b(dev, sh, opt);
      for (std::size_t bytes : sizes(opt)) {
        const result ref = b.run(what::memcpy_ref, bytes);
        const double memcpy_rate = static_cast<double>(bytes) / ref.median_s;
        if (dev.id() == 0) {
          std::printf("%-10s %10s %6d %12s %9.3f %11s %9s %9.3f %7s\n", "memcpy",
                      human_bytes(static_cast<double>(bytes)).c_str(), ref.reps, human_time(ref.median_s).c_str(),
                      memcpy_rate / 1e9, "-", "-", memcpy_rate / 1e9, "-");
        }
        for (what w : {what::allreduce, what::allgather, what::alltoall}) {
          const result r = b.run(w, bytes);
          if (dev.id() != 0) continue;
          const double moved_rate = r.moved / r.median_s;
          std::printf("%-10s %10s %6d %12s %9.3f %11s %9.3f %9.3f %7.3f\n", std::string(name_of(w)).c_str(),
                      human_bytes(static_cast<double>(bytes)).c_str(), r.reps, human_time(r.median_s).c_str(),
                      static_cast<double>(bytes) / r.median_s / 1e9, human_bytes(r.moved).c_str(), moved_rate / 1e9,
                      memcpy_rate / 1e9, moved_rate / memcpy_rate);
          std::fflush(stdout);
        }
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "typemesh-bench-collectives: %s\n", e.what());
    return 1;
  }

  print_wall_time(t0);
  if (!sh.failure.what.empty()) {
    std::fprintf(stderr, "typemesh-bench-collectives: WRONG RESULT: %s\n", sh.failure.what.c_str());
    return 1;
  }
  return 0;
}

// typemesh-bench-mpi_collectives: the MPI backend's collectives against the
// raw MPI calls a user would write instead, measured in the same run on the
// same buffers.
//
//   mpiexec -np 8 typemesh-bench-mpi_collectives [flags]
//
// Every rank is one device (typemesh::launch(N, ...) with N = the number of
// ranks). Over the group of all N devices it runs allreduce (sum of float),
// allgather and alltoall through typemesh::device's typed collectives, and
// the reference: MPI_Allreduce (MPI_FLOAT, MPI_SUM), MPI_Allgather and
// MPI_Alltoall on MPI_COMM_WORLD, blocking, from and into the very same
// buffers. Sizes are 1 KiB, 4 KiB, ..., 64 MiB (powers of 2 with --pow2).
// Point to point, devices 0 and 1 play ping-pong (device 0 sends, device 1
// returns what it received): through dev.send/dev.recv (a program tag) and
// dev.send_labelled/recv_labelled (the conversions' path: a label ahead of
// the data, with a conversion's description), against MPI_Send/MPI_Recv on
// the same buffers.
// What typemesh adds on top of MPI is what the ratio shows: the argument
// checks and byte counts of typemesh::device, its own communicator (a
// duplicate of the world), and nonblocking calls polled until a timeout
// instead of a blocking call (point-to-point messages for reductions and
// small calls, MPI's nonblocking collectives otherwise).
//
// Method. Per (operation, size): one untimed warm-up call of typemesh and one
// of raw MPI, each result checked; then timed repetitions that alternate
// between the two (typemesh then raw, raw then typemesh, ...), so that drift
// in the machine's load hits both alike. Each timed call starts right after
// an MPI_Barrier over all ranks; every rank times its own call, and the
// call's time is the slowest rank's (MPI_Allreduce with MPI_MAX, outside the
// timed span). Repetitions go on until both sides have at least
// --min-time-ms of timed work (50 ms by default) and at least --min-reps
// repetitions (3). The reported times are the MEDIANS over the repetitions.
//
// Fresh inputs. Before each timed call (outside its timed span) every rank
// writes its input buffer again, on both sides alike. A program sends what
// it has just computed, so the sender's core holds the lines modified and
// the receiver pays to fetch them from it: on a 2-core Xeon a raw 8 KiB
// MPI_Send/MPI_Recv round trip took 2.8-3.6 us from a buffer last written
// long before and 6.9-7.6 us from one written just before each send.
// Without the rewrite, device 0's leg of ping-pong re-sent a buffer written
// once at the start, which only raw MPI could exploit (typemesh's send
// copies the message or hands it over in pieces, so what it sends is always
// freshly written); device 1's leg already sent what it had just received.
//
// Checks. Inputs are small integers, so every float sum is exact whatever
// order MPI reduces in. After each warm-up a sample of the result (every
// element of small buffers, about 4096 spread over large ones, always the
// ends of every block) is compared with the exact expected values; a wrong
// one ends the job through launch's failure path (the message on stderr,
// MPI_Abort, non-zero exit). That is all the ctest smoke test
// (bench.mpi_collectives_quick) asserts: never a time.
//
// Columns of the table (printed by rank 0):
//   op        the collective, or pingpong / labelled (point to point)
//   size      bytes of each device's result buffer (allreduce and alltoall:
//             the input is as big; allgather: each device contributes size/N;
//             pingpong, labelled: each message)
//   reps      timed repetitions of each side
//   typemesh  median time of one typemesh call (dev.allreduce<float> etc.;
//             point to point: one round trip)
//   raw MPI   median time of one raw MPI call on the same buffers
//   tm GB/s   algorithm bandwidth of typemesh: size / typemesh time
//   raw GB/s  algorithm bandwidth of raw MPI: size / raw MPI time
//   ratio     raw MPI time / typemesh time, i.e. typemesh's throughput as a
//             fraction of raw MPI's (1.0 = as fast as raw MPI; above 1 is
//             noise or a better algorithm, not magic)
// GB = 10^9 bytes. With N not a power of two, allgather and alltoall round
// each block down to whole floats and their bandwidth counts the bytes
// actually moved.
//
// Flags:
//   --quick          sizes up to 1 MiB, few short repetitions (smoke test)
//   --max-bytes N    largest size (suffixes K, M, G, with or without "iB")
//   --pow2           sizes in powers of 2 instead of 4
//   --min-time-ms T  timed work per side and row (default 50; --quick: 2)
//   --min-reps R     at least R timed repetitions (default 3; --quick: 2)
//
// Flags are read before MPI starts, on every rank alike, so a bad flag or
// --help ends every rank the same way (each rank prints the message) without
// leaving an initialised MPI behind.
#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/mpi/environment.hpp>

#include "bench_support.hpp"
#include "typemesh/core/devices.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/runtime/device.hpp"
#include "typemesh/runtime/launch.hpp"

namespace {

using namespace typemesh_bench;
constexpr std::size_t min_size = 1024;  // 1 KiB

struct options : repeat_options {
  bool pow2 = false;
  std::size_t max_bytes = std::size_t{64} << 20;

  options() : repeat_options{.min_time_s = 0.050, .min_reps = 3, .max_reps = 100'000} {}
};

constexpr program_info program{
    "typemesh-bench-mpi_collectives",
    "mpiexec -np N typemesh-bench-mpi_collectives [--quick] [--max-bytes N[K|M|G]] [--pow2] [--min-time-ms T] "
    "[--min-reps R]"};

[[noreturn]] void usage(const std::string& problem) { typemesh_bench::usage(program, problem); }

// "65536", "64K", "64KiB", "64kb": a byte count.
options parse(int argc, char** argv) {
  options o;
  parse_flags(argc, argv, program,
              "measures the MPI backend's collectives against raw MPI calls (see the source's header)", o,
              [&](std::string_view a, auto& value) {
                if (a == "--pow2") o.pow2 = true;
                else if (a == "--max-bytes") o.max_bytes = parse_byte_count(program, "--max-bytes", value());
                else return false;
                return true;
              });
  if (o.quick) o.max_bytes = std::min(o.max_bytes, std::size_t{1} << 20);
  if (o.max_bytes < min_size) usage("--max-bytes must be at least 1K (1024)");
  // One MPI call counts its elements in an int.
  if (o.max_bytes / sizeof(float) > static_cast<std::size_t>(INT_MAX)) usage("--max-bytes must be below 8G");
  return o;
}

std::vector<std::size_t> sizes(const options& o) {
  std::vector<std::size_t> v;
  for (std::size_t s = min_size; s <= o.max_bytes; s *= o.pow2 ? 2 : 4) v.push_back(s);
  return v;
}

enum class what { allreduce, allgather, alltoall, pingpong, labelled };

// What the labelled messages belong to: descriptions as long as a
// conversion's (its label carries a hash of the whole text, and the text
// itself the first time).
constexpr std::string_view ping_what =
    "replace_mesh from mesh 'ping' [2] on devices [0 1] to mesh 'pong' [2] on devices [1 0], dims [batch=64 "
    "seq=2 k=2048], layout<batch(axis0)> to layout<batch(axis0)>";
constexpr std::string_view pong_what =
    "replace_mesh from mesh 'pong' [2] on devices [1 0] to mesh 'ping' [2] on devices [0 1], dims [batch=64 "
    "seq=2 k=2048], layout<batch(axis0)> to layout<batch(axis0)>";

constexpr bool point_to_point(what w) { return w == what::pingpong || w == what::labelled; }

constexpr std::string_view name_of(what w) {
  switch (w) {
    case what::allreduce: return "allreduce";
    case what::allgather: return "allgather";
    case what::alltoall: return "alltoall";
    case what::pingpong: return "pingpong";
    case what::labelled: return "labelled";
  }
  return "?";
}

// The input of device d at element i: small integers, so sums are exact.
float input_value(int d, std::size_t i) { return static_cast<float>(d + 1 + static_cast<int>(i % 7)); }

// The slowest rank's time of f, which every rank calls at once after a
// barrier. Every rank gets the same value, so decisions taken from it agree.
template <class F>
double time_call(F& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = clock_type::now();
  f();
  const double mine = std::chrono::duration<double>(clock_type::now() - start).count();
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

struct row {
  double typemesh_s = 0, raw_s = 0;  // medians
  int reps = 0;
};

// One device's side of the benchmark: its buffers, the two ways of calling
// each collective on them, and the checks.
class bench_rank {
 public:
  bench_rank(typemesh::device& dev, const options& opt)
      : dev_(dev), opt_(opt), ranks_(dev.count()), id_(dev.id()),
        all_{typemesh::devices::all(ranks_), "all"} {
    const std::size_t n = opt.max_bytes / sizeof(float);
    in_ = std::make_unique<float[]>(n);
    out_ = std::make_unique<float[]>(n);
  }

  // Elements each device contributes to allgather and exchanges with each
  // peer in alltoall; 0 when `bytes` is too small to give every rank a float.
  std::size_t block(std::size_t bytes) const { return bytes / sizeof(float) / static_cast<std::size_t>(ranks_); }

  // Elements of the result buffer (the input's too, but for allgather).
  std::size_t result_elements(what w, std::size_t bytes) const {
    if (w == what::allreduce || point_to_point(w)) return bytes / sizeof(float);
    return block(bytes) * static_cast<std::size_t>(ranks_);
  }

  row run(what w, std::size_t bytes) {
    const std::size_t n = result_elements(w, bytes);
    prepare_input(w, n);
    auto typemesh_call = [&] { call_typemesh(w, n); };
    auto raw_call = [&] { call_raw(w, n); };

    std::fill_n(out_.get(), n, -1.0f);
    typemesh_call();
    check(w, n, "typemesh");
    std::fill_n(out_.get(), n, -1.0f);
    raw_call();
    check(w, n, "raw MPI");

    std::vector<double> tm, raw;
    double tm_total = 0, raw_total = 0;
    while (static_cast<int>(tm.size()) < opt_.max_reps &&
           (static_cast<int>(tm.size()) < opt_.min_reps || tm_total < opt_.min_time_s ||
            raw_total < opt_.min_time_s)) {
      // Which side goes first alternates too, so neither always runs right
      // after the other's traffic.
      // Each call sends values its rank has just written, as a program's
      // messages do (see the top: fresh inputs).
      auto timed = [&](auto& call) {
        prepare_input(w, n);
        return time_call(call);
      };
      double t = 0, r = 0;
      if (tm.size() % 2 == 0) t = timed(typemesh_call), r = timed(raw_call);
      else r = timed(raw_call), t = timed(typemesh_call);
      tm.push_back(t);
      raw.push_back(r);
      tm_total += tm.back();
      raw_total += raw.back();
    }
    return {median(tm), median(raw), static_cast<int>(tm.size())};
  }

 private:
  void prepare_input(what w, std::size_t n) {
    const std::size_t m = w == what::allgather ? n / static_cast<std::size_t>(ranks_) : n;
    for (std::size_t i = 0; i < m; ++i) in_[i] = input_value(id_, i);
  }

  void call_typemesh(what w, std::size_t n) {
    const float* in = in_.get();
    float* out = out_.get();
    const std::size_t b = n / static_cast<std::size_t>(ranks_);
    switch (w) {
      case what::allreduce:
        dev_.allreduce<float>(all_, std::span<const float>(in, n), std::span<float>(out, n));
        break;
      case what::allgather:
        dev_.allgather<float>(all_, std::span<const float>(in, b), std::span<float>(out, n));
        break;
      case what::alltoall:
        dev_.alltoall<float>(all_, std::span<const float>(in, n), std::span<float>(out, n));
        break;
      case what::pingpong:
        if (id_ == 0) dev_.send<const float>(1, std::span<const float>(in, n)), dev_.recv<float>(1, std::span<float>(out, n));
        if (id_ == 1) dev_.recv<float>(0, std::span<float>(out, n)), dev_.send<float>(0, std::span<float>(out, n));
        break;
      case what::labelled:
        if (id_ == 0) {
          dev_.send_labelled<const float>(ping_what, 1, std::span<const float>(in, n));
          dev_.recv_labelled<float>(pong_what, 1, std::span<float>(out, n));
        }
        if (id_ == 1) {
          dev_.recv_labelled<float>(ping_what, 0, std::span<float>(out, n));
          dev_.send_labelled<float>(pong_what, 0, std::span<float>(out, n));
        }
        break;
    }
    touch(out);
  }

  // What a user would write without typemesh (MPI's default error handler
  // on MPI_COMM_WORLD aborts on failure).
  void call_raw(what w, std::size_t n) {
    const float* in = in_.get();
    float* out = out_.get();
    const int count = static_cast<int>(n), b = static_cast<int>(n / static_cast<std::size_t>(ranks_));
    switch (w) {
      case what::allreduce:
        MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case what::allgather:
        MPI_Allgather(in, b, MPI_FLOAT, out, b, MPI_FLOAT, MPI_COMM_WORLD);
        break;
      case what::alltoall:
        MPI_Alltoall(in, b, MPI_FLOAT, out, b, MPI_FLOAT, MPI_COMM_WORLD);
        break;
      case what::pingpong:
      case what::labelled:
        if (id_ == 0) {
          MPI_Send(in, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
          MPI_Recv(out, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        if (id_ == 1) {
          MPI_Recv(out, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(out, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
        }
        break;
    }
    touch(out);
  }

  // The value element i of the result must have after a call.
  float expected(what w, std::size_t n, std::size_t i) const {
    const std::size_t b = n / static_cast<std::size_t>(ranks_);
    switch (w) {
      case what::allreduce: {
        float s = 0;
        for (int d = 0; d < ranks_; ++d) s += input_value(d, i);
        return s;
      }
      case what::allgather: return input_value(static_cast<int>(i / b), i % b);
      case what::alltoall: return input_value(static_cast<int>(i / b), static_cast<std::size_t>(id_) * b + i % b);
      case what::pingpong:
      case what::labelled: return id_ <= 1 ? input_value(0, i) : -1.0f;  // devices 2.. take no part
    }
    return 0;
  }

  void check(what w, std::size_t n, const char* side) const {
    const std::size_t stride = std::max<std::size_t>(1, n / 4096) | 1;
    const std::size_t b = n / static_cast<std::size_t>(ranks_);
    auto one = [&](std::size_t i) {
      const float want = expected(w, n, i);
      if (out_[i] != want) {
        throw std::runtime_error("WRONG RESULT: " + std::string(side) + " " + std::string(name_of(w)) + " of " +
                                 human_bytes(static_cast<double>(n) * sizeof(float)) + " left element " +
                                 std::to_string(i) + " = " + std::to_string(out_[i]) + ", expected " +
                                 std::to_string(want));
      }
    };
    for (std::size_t i = 0; i < n; i += stride) one(i);
    if (point_to_point(w)) return one(n - 1);
    for (int r = 0; r < ranks_; ++r) one(r * b), one(r * b + b - 1);
  }

  typemesh::device& dev_;
  const options& opt_;
  int ranks_, id_;
  typemesh::group all_;
  std::unique_ptr<float[]> in_, out_;
};

// The "machine:" line: the cores of rank 0's node and how the ranks sit on
// the nodes. Collective: every rank calls it.
void print_machine(int rank, int ranks) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int on_node = 0, node_rank = 0, nodes = 0;
  MPI_Comm_size(node, &on_node);
  MPI_Comm_rank(node, &node_rank);
  const int leader = node_rank == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm_free(&node);
  if (rank != 0) return;

  const unsigned online = std::thread::hardware_concurrency();
  const int usable = usable_cores();  // after mpiexec's binding of rank 0
  std::printf("machine: %d rank%s, one device each, on %d node%s; rank 0's node runs %d of them on %u cores%s\n",
              ranks, ranks == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", on_node, online,
              static_cast<unsigned>(on_node) > online ? " (oversubscribed)" : "");
  if (static_cast<unsigned>(usable) < online) std::printf("         rank 0 is bound to %d of the cores\n", usable);
#if defined(__GNUC__) && !defined(__OPTIMIZE__)
  std::printf("WARNING: built without optimization; the numbers mean little\n");
#endif
}

void print_legend(const options& opt, int ranks) {
  std::printf(
      "typemesh MPI backend: collectives over %d ranks vs the raw MPI calls, same run, same buffers\n"
      "  op        collective over the group of all %d devices (allreduce: sum of float);\n"
      "            pingpong / labelled: device 0 sends to device 1, which sends it back, through\n"
      "            dev.send/recv (a tag) / dev.send_labelled/recv_labelled (the conversions' path)\n"
      "  size      bytes of each device's result buffer (allgather: each device sends size/%d)\n"
      "  reps      timed repetitions of each side (at least %d, and at least %.0f ms of timed work each),\n"
      "            typemesh and raw MPI alternating\n"
      "  typemesh  MEDIAN time of dev.allreduce<float> / allgather<float> / alltoall<float>\n"
      "  raw MPI   MEDIAN time of MPI_Allreduce(MPI_FLOAT, MPI_SUM) / MPI_Allgather / MPI_Alltoall\n"
      "            / MPI_Send+MPI_Recv ping-pong\n"
      "            on MPI_COMM_WORLD; each call timed from an MPI_Barrier, slowest rank's time\n"
      "  tm GB/s   size / typemesh time                        [GB/s per device]\n"
      "  raw GB/s  size / raw MPI time                         [GB/s per device]\n"
      "  ratio     raw MPI time / typemesh time (1.0 = as fast as raw MPI)\n"
      "  GB = 10^9 bytes\n",
      ranks, ranks, ranks, opt.min_reps, opt.min_time_s * 1e3);
}

int run_benchmark(const options& opt) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const auto t0 = clock_type::now();

  if (rank == 0) print_legend(opt, ranks);
  print_machine(rank, ranks);
  if (rank == 0) {
    std::printf("sizes: 1 KiB to %s in powers of %d%s\n\n",
                human_bytes(static_cast<double>(sizes(opt).back())).c_str(), opt.pow2 ? 2 : 4,
                opt.quick ? " (--quick)" : "");
    std::printf("%-10s %10s %6s %12s %12s %9s %9s %7s\n", "op", "size", "reps", "typemesh", "raw MPI", "tm GB/s",
                "raw GB/s", "ratio");
    std::fflush(stdout);
  }

  typemesh::launch(ranks, [&](typemesh::device& dev) {
    bench_rank b(dev, opt);
    for (std::size_t bytes : sizes(opt)) {
      for (what w : {what::allreduce, what::allgather, what::alltoall, what::pingpong, what::labelled}) {
        if (b.block(bytes) == 0 && (w == what::allgather || w == what::alltoall)) continue;  // more ranks than floats
        if (point_to_point(w) && ranks < 2) continue;
        const row r = b.run(w, bytes);
        if (dev.id() != 0) continue;
        const double moved = static_cast<double>(b.result_elements(w, bytes) * sizeof(float));
        std::printf("%-10s %10s %6d %12s %12s %9.3f %9.3f %7.3f\n", std::string(name_of(w)).c_str(),
                    human_bytes(static_cast<double>(bytes)).c_str(), r.reps, human_time(r.typemesh_s).c_str(),
                    human_time(r.raw_s).c_str(), moved / r.typemesh_s / 1e9, moved / r.raw_s / 1e9,
                    r.raw_s / r.typemesh_s);
        std::fflush(stdout);
      }
    }
  });

  if (rank == 0) print_wall_time(t0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse(argc, argv);

  // The raw MPI calls run on the device's own thread, the one that
  // initialised MPI, so MPI_THREAD_FUNNELED is enough; launch sees MPI
  // initialised, uses it and leaves finalising to `env`.
  boost::mpi::environment env(argc, argv, boost::mpi::threading::funneled);
  try {
    // Host threads would each call MPI: this program measures the MPI backend only.
    if (const char* backend = std::getenv("TYPEMESH_BACKEND"); backend && std::string_view(backend) == "host") {
      throw std::runtime_error("TYPEMESH_BACKEND=host: this benchmark measures the MPI backend; unset it");
    }
    return run_benchmark(opt);
  } catch (const std::exception& e) {
    // Only errors outside launch land here (inside, launch aborts the job
    // with the rank's message); every rank sees the same one.
    std::fprintf(stderr, "typemesh-bench-mpi_collectives: %s\n", e.what());
    return 1;
  }
}

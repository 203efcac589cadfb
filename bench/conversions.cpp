// typemesh-bench-conversions: relayouts and mesh replacements of the reference
// benchmarks on the host-thread backend, against memcpy of the bytes that
// must move, measured in the same run.
//
// Eight simulated devices (typemesh::launch(8, ...)) convert a float tensor
// between the placements the PaSE benchmarks use (baidu-research/PaSE,
// benchmarks/rnnlm.py, transformer.py, rnnlm_gnmt.py):
//
//   1  rnnlm       the embedding -> LSTM move: [batch, seq, k] with k split 8
//                  ways on the embed mesh [1,1,8] (all devices) to batch split
//                  4 ways on the lstm0 mesh [4,1,1] (devices 0..3), through
//                  replace_mesh<..., independent_axes>; 1r is the reverse
//                  (the gradient's way).
//   2  transformer strategy 1, the move between its 1-d mesh [8] and its 2-d
//                  mesh [4,2] over the same devices: [batch, seq, d_model]
//                  with d_model split 8 ways on [8] to batch split on axis0 of
//                  [4,2] (whole, replicated, along axis1), independent_axes;
//                  2r is the reverse. This is PaSE's Mesh0ToMesh1 /
//                  Mesh1ToMesh0 in the transformer.py version whose strategy
//                  1 for 8 GPUs uses meshes [8] and [4,2]. 2z is what the
//                  newest transformer.py does instead for 8 GPUs (mesh1 [8] to
//                  mesh0 [dim1, dim2] = [8,1]): the replicated embedding to
//                  batch split on axis0. Every device already holds its part,
//                  so nothing crosses devices: the row shows the cost of a
//                  conversion that only copies locally.
//   3  gnmt        the pipeline move: batch split on the interleaved halves
//                  [8] (devices 0 4 1 5 2 6 3 7) to batch split on every other
//                  device of it ([4] over 0 1 2 3), through
//                  replace_mesh<..., pipeline>; 3r is the reverse.
//   4  relayout    within the mesh [2,4]: layout<batch(axis0), k(axis1)> to
//                  layout<batch(axis1), k(axis0)>.
//
// The reference is memcpy under the same thread setup: in the same launch,
// every device copies, at the same time as the others, exactly as many bytes
// as it receives in the conversion (from dev.traffic().bytes_received() of the
// checked warm-up conversion), between buffers its own thread allocated and
// touched. Devices that receive nothing copy nothing.
//
// A conversion also copies what a device keeps (the part of its target slice
// its source slice already holds) into the new tensor, which that reference
// leaves out, unless the target shares the source's elements (its whole
// slice is one run of at least half the source slice: 3r's first stage). So
// a second reference, measured the same way: every device copies as many
// bytes as it writes into its target slice (received + kept, or received
// alone where it shares). Its ratio says how close a conversion comes to that
// floor; the first one cannot reach 1.0 where devices copy what they keep.
//
// The performance target (every case at 0.8 of memcpy or more from 1 MiB)
// reads `ratio w` here: the eight devices share one memory, so a kept byte
// costs a conversion exactly what a received one does, and `ratio` caps the
// cases that keep much (3 and 3r at 0.5, 2r at 0.75). Where devices have
// memories of their own, what crosses between them is what `ratio` counts
// (docs/performance.md, "Which ratio the conversions target reads").
//
// Method (as typemesh-bench-collectives). Per case: import the tensor, one
// untimed warm-up conversion whose result is checked, then the conversion,
// both memcpy references and the floor (below) take turns: --rounds rounds
// (5 by default; --quick: 1), in each of which every one of the four runs
// repetitions until at least its share of --min-time-ms (200 ms by default,
// so 40 ms a round) and of --min-reps (5) is done; each round starts one
// further along the four. Each repetition starts with dev.barrier over all
// eight devices; every device takes its own start and end time around the call
// (devices outside both meshes too: they return at once), and the
// repetition's time is the last end minus the first start. The converted
// tensor is destroyed after the end time. The reported times are MEDIANS
// over all repetitions; a ratio is taken round by round (one median over
// another, measured milliseconds apart) and reported as the median of the
// rounds' ratios, with the lowest and highest for `ratio w`. On a shared
// machine whose speed changes from second to second, blocks of one
// measurement after another had put the same case anywhere from 0.6 to 1.2
// of memcpy from one run to the next. The plan-only time is measured once,
// after the rounds, the same way.
//
// The floor: what a conversion would cost with nothing but its copies. Every
// device copies its pieces of the plan with the conversion's own copy
// function (typemesh::detail::copy_pieces, the same kernels) from the other
// devices' source slices into a target slice kept from the warm-up, and
// waits only as the exchange must: for each source it reads to be ready (a
// flag per device and repetition, set as it starts) and, before it ends,
// for its readers to have read its own (a second flag). No plan lookup, no
// allocation, no meeting place, no locks. `of floor` = floor / time says
// what share of a conversion's time its copies and these waits take; the
// rest is the transfer's own machinery.
//
// Plan only: the part of the conversion that decides who sends what. Every
// device of either mesh calls typemesh::detail::plan_of, exactly as
// typemesh::transfer does on every call: it builds the two
// typemesh::runtime_placement values and looks the plan up in the thread's
// memo, where the first call for these meshes and shape made it
// (convert/memo.hpp). One repetition runs it `inner` times in a row (so
// that the span is not just barrier skew); the time is span / inner.
//
// Checks (the only thing the ctest smoke test bench.conversions_quick relies
// on; it never asserts on time): the warm-up result exported with
// typemesh::export_tensor equals the original on every device of the target
// mesh (and is empty elsewhere), and so does the floor's target after its
// repetitions; each device's received bytes equal what the plan says it
// receives; every timed repetition moves the same bytes again.
// A failure makes the program exit with status 1.
//
// Columns:
//   case      the case (above)
//   total     bytes of the whole tensor
//   max recv  the most bytes one device received in one conversion
//             (dev.traffic().bytes_received(), every kind of operation)
//   reps      timed repetitions of the conversion, over all rounds
//   time      median time of one conversion
//   recv/s    max recv / time                              [GB/s]
//   memcpy    median time of the memcpy reference
//   memcpy/s  max recv / memcpy time                       [GB/s]
//   ratio     memcpy / time, round by round (1.0 = the conversion moves its
//             bytes as fast as the devices memcpy them under the same
//             conditions)
//   written   the most bytes one device writes into its target slice
//             (received + kept; only what it received where its target
//             shares the source's elements, a kept run of half the source
//             slice or more)
//   memcpy w  median time of the second reference (every device memcpys
//             the bytes it writes)
//   ratio w   memcpy w / time, round by round (1.0 = the conversion writes its
//             target slices as fast as memcpy)
//   rounds w  the lowest and highest of the rounds' ratio w
//   floor     median time of the floor (above)
//   of floor  floor / time, round by round (1.0 = the transfer costs nothing
//             beyond its copies and the waits they need)
//   pieces    boxes in the transfer plan (local copies included)
//   plan      median time of the plan only (its lookup)
//   plan%     plan / time
// GB = 10^9 bytes.
//
// Flags:
//   --quick          small tensors (a few KiB to 256 KiB), short repetitions
//   --min-time-ms T  timed work per measurement (default 200; --quick: 2)
//   --min-reps R     at least R timed repetitions (default 5; --quick: 2)
//   --case C         only case C (1, 1r, 2, 2r, 2z, 3, 3r or 4); may be given
//                    more than once
//   --rounds R       rounds in which the measurements take turns (1 to 100;
//                    default 5, --quick 1)
//   --tensor-bytes N the size of every case's tensor: a whole number of MiB
//                    from 1M to 256M (default 32M). The seq dim scales with it
//                    (no case splits seq): [64, 2 per MiB, 2048] and
//                    [32, 8 per MiB, 1024]. Not with --quick.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "bench_support.hpp"
#include "typemesh/convert/relayout.hpp"
#include "typemesh/convert/replace_mesh.hpp"
#include "typemesh/convert/transfer.hpp"
#include "typemesh/convert/transfer_plan.hpp"
#include "typemesh/core/devices.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/core/layout.hpp"
#include "typemesh/core/mesh.hpp"
#include "typemesh/core/shape.hpp"
#include "typemesh/runtime/device.hpp"
#include "typemesh/runtime/launch.hpp"
#include "typemesh/runtime/traffic.hpp"
#include "typemesh/tensor/host_tensor.hpp"
#include "typemesh/tensor/import_export.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace {

using namespace typemesh_bench;
using typemesh::layout;

struct batch : typemesh::dim<"batch"> {};
struct seq : typemesh::dim<"seq"> {};
struct k : typemesh::dim<"k"> {};
struct d_model : typemesh::dim<"d_model"> {};
struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};
struct axis2 : typemesh::axis<"axis2"> {};

using rnn_shape = typemesh::shape<batch, seq, k>;
using trf_shape = typemesh::shape<batch, seq, d_model>;

using embed_mesh = typemesh::mesh<"embed", axis0, axis1, axis2>;
using lstm0_mesh = typemesh::mesh<"lstm0", axis0, axis1, axis2>;
using flat_mesh = typemesh::mesh<"mesh1d", axis0>;
using grid_mesh = typemesh::mesh<"mesh2d", axis0, axis1>;
using interleaved_mesh = typemesh::mesh<"interleaved", axis0>;
using half_mesh = typemesh::mesh<"every_other", axis0>;

struct options : repeat_options {
  double plan_rep_s = 0.002;       // aim of one plan-only repetition
  std::vector<std::string> cases;  // --case: only these (all when empty)
  std::size_t tensor_mib = 32;     // --tensor-bytes, in MiB
  int rounds = 5;                  // --rounds

  // What one measurement does in each round: its share of the time and
  // repetitions.
  repeat_options per_round() const {
    repeat_options o = *this;
    o.min_time_s = min_time_s / rounds;
    o.min_reps = std::max(1, (min_reps + rounds - 1) / rounds);
    return o;
  }

  bool runs(std::string_view name) const {
    return cases.empty() || std::find(cases.begin(), cases.end(), name) != cases.end();
  }

  options() : repeat_options{.min_time_s = 0.200, .min_reps = 5, .max_reps = 10'000} {}
};

constexpr std::string_view case_names[] = {"1", "1r", "2", "2r", "2z", "3", "3r", "4"};

constexpr program_info program{"typemesh-bench-conversions",
                               "typemesh-bench-conversions [--quick] [--min-time-ms T] [--min-reps R] [--case C]... "
                               "[--tensor-bytes N] [--rounds R]"};

options parse(int argc, char** argv) {
  options o;
  bool tensor_bytes_given = false, rounds_given = false;
  parse_flags(argc, argv, program, "measures relayouts and mesh replacements against memcpy (see the source's header)",
              o, [&](std::string_view a, auto& value) {
                if (a == "--case") {
                  o.cases.push_back(value());
                  return true;
                }
                if (a == "--rounds") {
                  const std::string v = value();
                  o.rounds = std::atoi(v.c_str());
                  if (o.rounds < 1 || o.rounds > 100) usage(program, "--rounds wants 1 to 100, not '" + v + "'");
                  rounds_given = true;
                  return true;
                }
                if (a != "--tensor-bytes") return false;
                const std::size_t bytes = parse_byte_count(program, a, value());
                constexpr std::size_t mib = std::size_t(1) << 20;
                if (bytes % mib != 0 || bytes < mib || bytes > 256 * mib) {
                  usage(program, "--tensor-bytes wants a whole number of MiB from 1M to 256M, not " +
                                     std::to_string(bytes) + " bytes");
                }
                o.tensor_mib = bytes / mib;
                tensor_bytes_given = true;
                return true;
              });
  if (tensor_bytes_given && o.quick) usage(program, "--tensor-bytes and --quick do not go together (--quick has its own sizes)");
  for (const std::string& c : o.cases) {
    if (std::count(std::begin(case_names), std::end(case_names), c)) continue;
    std::string known;
    for (std::string_view n : case_names) known += " " + std::string(n);
    usage(program, "unknown case '" + c + "' (cases:" + known + ")");
  }
  if (o.quick) o.plan_rep_s = 0.0002;
  if (o.quick && !rounds_given) o.rounds = 1;
  return o;
}

std::string rate(double bytes, double s) {
  if (bytes <= 0 || s <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", bytes / s / 1e9);
  return buf;
}

// One measurement over the rounds (device 0): every repetition's time, and
// each round's median.
struct series {
  std::vector<double> spans, round_medians;
  int reps = 0;

  void add(const timing& t) {
    spans.insert(spans.end(), t.spans.begin(), t.spans.end());
    round_medians.push_back(t.median_s);
    reps += t.reps;
  }
  double median_s() const { return spans.empty() ? 0 : median(spans); }
};

// a's round medians over b's, round by round (a ratio of times measured a
// few milliseconds apart): their median, lowest and highest.
struct ratio_over_rounds {
  double median = 0, low = 0, high = 0;
};
ratio_over_rounds ratios(const series& a, const series& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.round_medians.size() && i < b.round_medians.size(); ++i) {
    if (b.round_medians[i] > 0) r.push_back(a.round_medians[i] / b.round_medians[i]);
  }
  if (r.empty()) return {};
  return {median(r), *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end())};
}

// What the devices of one case share. Device 0 decides how many repetitions
// to run; the barriers order every access.
struct shared_state {
  rep_clock clock;
  std::array<std::uint64_t, devices> received{}, written{};
  bool ok = true;
  int plan_inner = 1;
  std::size_t pieces = 0;
  std::string from, to;  // the tensors' descriptions, from device 0
  series conversion, reference, reference_written, floor;
  timing plan;
  // The floor's: each device's source slice, and the repetition each device
  // has shown its source for and finished reading in.
  std::array<const void*, devices> sources{};
  std::array<std::atomic<int>, devices> shown{}, read{};
  first_failure failure;
};

struct row {
  std::string name, note;
  std::uint64_t total = 0, max_received = 0, max_written = 0;
  std::size_t pieces = 0;
  series conversion, reference, reference_written, floor;
  timing plan;
  int plan_inner = 1;
  std::string from, to;
};

class bench_device : public synced_device {
 public:
  bench_device(typemesh::device& dev, shared_state& sh, const options& opt)
      : synced_device(dev, sh.clock, opt), sh_(sh) {}

  void fail(const std::string& why) {
    sh_.failure.record(why);
    sh_.ok = false;
  }

  // Every device decides the same: whether all devices' checks passed.
  bool all_ok() {
    barrier();
    const bool ok = sh_.ok;
    barrier();
    return ok;
  }

 private:
  shared_state& sh_;
};

// The value of element i of every test tensor: exact in float, and different
// for neighbouring elements of every dim.
inline float value_at(std::size_t i) { return static_cast<float>(i % 16'777'213); }

// One case: `x` imported under SrcLayout on `from`, converted by `convert`
// onto `to`. Everything runs inside one launch of 8 devices.
template <class SrcLayout, class Shape, class From, class To, class Convert>
row run_case(const options& opt, std::string name, const Shape& s, const From& from, const To& to, Convert convert) {
  using T = float;
  constexpr std::size_t rank = Shape::rank;
  typemesh::host_tensor<T, Shape> whole(s);
  for (std::size_t i = 0; i < whole.values().size(); ++i) whole.values()[i] = value_at(i);

  shared_state sh;
  typemesh::launch(devices, [&](typemesh::device& dev) {
    bench_device b(dev, sh, opt);
    const int me = b.id();
    auto x = typemesh::import_tensor<SrcLayout>(from, whole);
    using X = decltype(x);
    using Y = decltype(convert(x, to));

    // Warm-up, checked.
    dev.traffic().reset();
    std::uint64_t received = 0, written = 0;
    {
      Y y = convert(x, to);
      received = dev.traffic().bytes_received();
      // A target that shares its source's elements (a kept run of them,
      // nothing received) writes nothing.
      const T *yp = std::as_const(y).data(), *xp = std::as_const(x).data();
      const bool shares = y.local_size() > 0 && yp >= xp && yp + y.local_size() <= xp + x.local_size();
      written = shares ? received : static_cast<std::uint64_t>(y.local_size()) * sizeof(T);
      sh.received[me] = received;
      sh.written[me] = written;
      if (me == 0) sh.from = x.describe(), sh.to = y.describe();
      auto back = typemesh::export_tensor(y);
      const bool right = to.contains(me) ? back == whole : back.empty();
      if (!right) {
        b.fail("device " + std::to_string(me) + ": " + name + ": the converted tensor does not export to the original");
      }
    }

    // The plan as typemesh::transfer gets it on every call (looked up), and
    // one made afresh, which the traffic is checked against.
    const bool takes_part = from.contains(me) || to.contains(me);
    auto look_up_plan = [&] { return typemesh::detail::plan_of<typename Y::layout_type>(x, to); };
    {
      const auto plan = typemesh::make_transfer_plan<rank>(
          s.sizes(), typemesh::runtime_placement<rank>::template of<typename X::geometry>(from),
          typemesh::runtime_placement<rank>::template of<typename Y::geometry>(to));
      const auto planned = static_cast<std::uint64_t>(plan.elements_received(me)) * sizeof(T);
      if (planned != received) {
        b.fail("device " + std::to_string(me) + ": " + name + ": received " + std::to_string(received) +
               " bytes, but the plan says " + std::to_string(planned));
      }
      if (me == 0) {
        sh.pieces = plan.pieces.size();
        // How many plans make one repetition of about opt.plan_rep_s.
        const int probe = 16;
        const auto t0 = clock_type::now();
        for (int i = 0; i < probe; ++i) touch(look_up_plan()->plan.pieces.data());
        const double each = std::chrono::duration<double>(clock_type::now() - t0).count() / probe;
        sh.plan_inner = static_cast<int>(std::clamp(opt.plan_rep_s / std::max(each, 1e-9), 1.0, 100'000.0));
      }
    }
    if (!b.all_ok()) return;

    // The memcpy references copy this device's received bytes, then its
    // target slice's bytes, between buffers of its own.
    struct copy_buffers {
      std::size_t bytes;
      aligned_array<std::byte> src, dst;
      copy_buffers(std::size_t n, int fill)
          : bytes(n), src(make_aligned_array<std::byte>(n)), dst(make_aligned_array<std::byte>(n)) {
        std::memset(src.get(), fill, n);
        std::memset(dst.get(), 0, n);
        std::memcpy(dst.get(), src.get(), n);  // warm-up
      }
      void copy() { reference_copy(dst.get(), src.get(), bytes); }
      bool right() const { return !bytes || (dst[0] == src[0] && dst[bytes - 1] == src[bytes - 1]); }
    } received_copy(received, me + 1), written_copy(written, me + 1);

    // The floor: the conversion's copies with only the waits they need, into
    // a target kept from one conversion.
    Y kept = convert(x, to);
    const auto planned = typemesh::detail::plan_of<typename Y::layout_type>(x, to);
    const auto& route = planned->route;
    const typemesh::detail::local_slice<const T, rank> in{std::as_const(x).data(), x.slice()};
    const bool shares = typemesh::detail::kept_in_place(route, in) >= 0;
    // Written only where the target does not share the source's elements
    // (then it receives nothing and keeps its part in place).
    const typemesh::detail::local_slice<T, rank> out{shares ? nullptr : kept.data(), kept.slice()};
    sh.sources[me] = in.data;
    sh.shown[me] = 0;
    sh.read[me] = 0;
    int floor_rep = 0;
    auto floor = [&] {
      const int rep = ++floor_rep;
      sh.shown[me].store(rep, std::memory_order_release);
      if (!shares) typemesh::detail::copy_pieces(x.space(), in.data, route.kept, out);
      for (const auto& [sender, pieces] : route.receives) {
        while (sh.shown[sender].load(std::memory_order_acquire) < rep) std::this_thread::yield();
        typemesh::detail::copy_pieces(x.space(), static_cast<const T*>(sh.sources[sender]), pieces, out);
      }
      sh.read[me].store(rep, std::memory_order_release);
      for (int reader : route.readers) {
        while (sh.read[reader].load(std::memory_order_acquire) < rep) std::this_thread::yield();
      }
    };
    b.barrier();

    // The four measurements take turns, a short block each per round, each
    // round starting one further along: on a machine whose speed changes
    // from second to second, a conversion and its references are then timed
    // under the same conditions, and their ratios are taken round by round.
    const repeat_options each = opt.per_round();
    const std::uint64_t before = dev.traffic().bytes_received();
    int conversions = 0;
    for (int round = 0; round < opt.rounds; ++round) {
      for (int turn = 0; turn < 4; ++turn) {
        switch ((round + turn) % 4) {
          case 0: {
            const timing t = b.time_it(each, [&] { return convert(x, to); });
            conversions += t.reps;
            if (me == 0) sh.conversion.add(t);
            break;
          }
          case 1: {
            const timing t = b.time_it(each, [&] { received_copy.copy(); });
            if (me == 0) sh.reference.add(t);
            break;
          }
          case 2: {
            const timing t = b.time_it(each, [&] { written_copy.copy(); });
            if (me == 0) sh.reference_written.add(t);
            break;
          }
          default: {
            const timing t = b.time_it(each, floor);
            if (me == 0) sh.floor.add(t);
          }
        }
      }
    }
    const std::uint64_t moved = dev.traffic().bytes_received() - before;
    if (!received_copy.right() || !written_copy.right()) b.fail("memcpy reference went wrong");
    auto back = typemesh::export_tensor(kept);  // sends and receives too
    if (!(to.contains(me) ? back == whole : back.empty())) {
      b.fail("device " + std::to_string(me) + ": " + name + ": the floor's target does not export to the original");
    }
    if (moved != received * static_cast<std::uint64_t>(conversions)) {
      b.fail("device " + std::to_string(me) + ": " + name + ": " + std::to_string(conversions) +
             " timed conversions received " + std::to_string(moved) + " bytes, not " + std::to_string(conversions) +
             " x " + std::to_string(received));
    }

    // The plan only.
    b.barrier();
    const int inner = sh.plan_inner;
    const timing p = b.time_it(
        [&] {
          if (takes_part) touch(look_up_plan()->plan.pieces.data());
        },
        inner);
    if (me == 0) sh.plan = p;
  });

  row r;
  r.name = std::move(name);
  r.total = s.elements() * sizeof(T);
  r.max_received = *std::max_element(sh.received.begin(), sh.received.end());
  r.max_written = *std::max_element(sh.written.begin(), sh.written.end());
  r.pieces = sh.pieces;
  r.conversion = sh.conversion;
  r.reference = sh.reference;
  r.reference_written = sh.reference_written;
  r.floor = sh.floor;
  r.plan = sh.plan;
  r.plan_inner = sh.plan_inner;
  r.from = sh.from;
  r.to = sh.to;
  if (!sh.failure.what.empty()) throw std::runtime_error("WRONG RESULT: " + sh.failure.what);
  return r;
}

void print_legend(const options& opt) {
  std::printf(
      "typemesh host backend: relayouts and mesh replacements on 8 devices vs memcpy, same run\n"
      "  rounds    the conversion, both memcpy references and the floor take turns, %d rounds\n"
      "            of at least %.0f ms of timed work each (%.0f ms in all); ratios are each\n"
      "            round's medians over each other, then their median over the rounds\n"
      "  total     bytes of the whole float tensor\n"
      "  max recv  most bytes one device receives per conversion (dev.traffic().bytes_received())\n"
      "  reps      timed repetitions of the conversion, over all rounds\n"
      "  time      MEDIAN over the repetitions of (last device's end - first device's start),\n"
      "            every repetition starting at dev.barrier(all)\n"
      "  recv/s    max recv / time                                   [GB/s]\n"
      "  memcpy    median time of 8 device threads (same launch, same barrier) each\n"
      "            memcpy-ing as many bytes as it receives in the conversion, at once\n"
      "  memcpy/s  max recv / memcpy time                            [GB/s]\n"
      "  ratio     memcpy / time (1.0 = moves its bytes as fast as memcpy)\n"
      "  written   most bytes one device writes into its target slice (received + kept;\n"
      "            nothing where the target shares its source's elements)\n"
      "  memcpy w  median time of the 8 devices each memcpy-ing as many bytes as it\n"
      "            writes, at once: the floor of any conversion into a new tensor\n"
      "  ratio w   memcpy w / time (what the 0.8 target reads on one host: docs/performance.md)\n"
      "  rounds w  the lowest and highest round's ratio w\n"
      "  floor     median time of the conversion's own copies between the same slices, each\n"
      "            device waiting only for the sources it reads and for its readers (flags):\n"
      "            no plan lookup, allocation, meeting place or locks\n"
      "  of floor  floor / time (1.0 = the transfer costs nothing beyond its copies)\n"
      "  pieces    boxes in the transfer plan (local copies included)\n"
      "  plan      median time of getting the transfer plan on every device of either mesh\n"
      "            at once, as transfer() does on each call: runtime_placement::of x2 and a\n"
      "            lookup in the thread's memo, which made the plan at its first call\n"
      "  plan%%     plan / time\n"
      "  GB = 10^9 bytes\n",
      opt.rounds, opt.per_round().min_time_s * 1e3, opt.min_time_s * 1e3);
}

void print_header() {
  std::printf("%-5s %10s %10s %5s %11s %8s %11s %9s %6s %10s %11s %7s %11s %11s %8s %6s %10s %6s\n", "case", "total",
              "max recv", "reps", "time", "recv/s", "memcpy", "memcpy/s", "ratio", "written", "memcpy w", "ratio w",
              "rounds w", "floor", "of floor", "pieces", "plan", "plan%");
}

void print_row(const row& r) {
  const double mr = static_cast<double>(r.max_received);
  const double time = r.conversion.median_s();
  char ratio_text[16] = "-", written_text[16] = "-", range_text[24] = "-";
  if (mr > 0) std::snprintf(ratio_text, sizeof ratio_text, "%.3f", ratios(r.reference, r.conversion).median);
  if (r.max_written > 0) {
    const ratio_over_rounds w = ratios(r.reference_written, r.conversion);
    std::snprintf(written_text, sizeof written_text, "%.3f", w.median);
    std::snprintf(range_text, sizeof range_text, "%.2f-%.2f", w.low, w.high);
  }
  std::printf("%-5s %10s %10s %5d %11s %8s %11s %9s %6s %10s %11s %7s %11s %11s %8.3f %6zu %10s %5.1f%%\n",
              r.name.c_str(), human_bytes(static_cast<double>(r.total)).c_str(), human_bytes(mr).c_str(),
              r.conversion.reps, human_time(time).c_str(), rate(mr, time).c_str(),
              human_time(r.reference.median_s()).c_str(), rate(mr, r.reference.median_s()).c_str(), ratio_text,
              human_bytes(static_cast<double>(r.max_written)).c_str(), human_time(r.reference_written.median_s()).c_str(),
              written_text, range_text, human_time(r.floor.median_s()).c_str(), ratios(r.floor, r.conversion).median,
              r.pieces, human_time(r.plan.median_s).c_str(), 100.0 * r.plan.median_s / time);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse(argc, argv);
  const auto t0 = clock_type::now();
  namespace dv = typemesh::devices;
  using typemesh::independent_axes;
  using typemesh::pipeline;

  print_legend(opt);
  print_machine();
  if (opt.quick) std::printf("sizes: small (--quick)\n\n");
  else std::printf("sizes: %zu MiB per tensor\n\n", opt.tensor_mib);

  // Sizes: the reference's feature widths (num_units = 2048 for the RNNLM
  // and GNMT, d_model = 1024 for the large transformer); seq sets the size.
  const auto mib = static_cast<std::int64_t>(opt.tensor_mib);
  const rnn_shape rnn = opt.quick ? rnn_shape{8, 8, 128} : rnn_shape{64, 2 * mib, 2048};
  const trf_shape trf = opt.quick ? trf_shape{8, 16, 64} : trf_shape{32, 8 * mib, 1024};

  const embed_mesh embed({1, 1, 8}, dv::all(8));
  const lstm0_mesh lstm0({4, 1, 1}, dv::first_half(8));
  const flat_mesh flat({8}, dv::all(8));
  const grid_mesh grid42({4, 2}, dv::all(8));
  const grid_mesh grid81({8, 1}, dv::all(8));
  const grid_mesh grid24({2, 4}, dv::all(8));
  const interleaved_mesh inter({8}, dv::interleave(dv::first_half(8), dv::second_half(8)));
  const half_mesh evens({4}, dv::first_half(8));

  std::vector<row> rows;
  try {
    // Measures case `name` (unless --case leaves it out) and prints its row.
    auto add = [&](std::string_view name, auto measure) {
      if (!opt.runs(name)) return;
      row r = measure(std::string(name));
      if (rows.empty()) print_header();
      rows.push_back(std::move(r));
      print_row(rows.back());
    };
    add("1", [&](std::string name) {
      return run_case<layout<k(axis2)>>(opt, name, rnn, embed, lstm0, [](const auto& x, const auto& to) {
        return typemesh::replace_mesh<layout<batch(axis0)>, independent_axes>(x, to);
      });
    });
    add("1r", [&](std::string name) {
      return run_case<layout<batch(axis0)>>(opt, name, rnn, lstm0, embed, [](const auto& x, const auto& to) {
        return typemesh::replace_mesh<layout<k(axis2)>, independent_axes>(x, to);
      });
    });
    add("2", [&](std::string name) {
      return run_case<layout<d_model(axis0)>>(opt, name, trf, flat, grid42, [](const auto& x, const auto& to) {
        return typemesh::replace_mesh<layout<batch(axis0)>, independent_axes>(x, to);
      });
    });
    add("2r", [&](std::string name) {
      return run_case<layout<batch(axis0)>>(opt, name, trf, grid42, flat, [](const auto& x, const auto& to) {
        return typemesh::replace_mesh<layout<d_model(axis0)>, independent_axes>(x, to);
      });
    });
    add("2z", [&](std::string name) {
      return run_case<typemesh::replicated>(opt, name, trf, flat, grid81, [](const auto& x, const auto& to) {
        return typemesh::replace_mesh<layout<batch(axis0)>, independent_axes>(x, to);
      });
    });
    add("3", [&](std::string name) {
      return run_case<layout<batch(axis0)>>(opt, name, rnn, inter, evens, [](const auto& x, const auto& to) {
        return typemesh::replace_mesh<layout<batch(axis0)>, pipeline>(x, to);
      });
    });
    add("3r", [&](std::string name) {
      return run_case<layout<batch(axis0)>>(opt, name, rnn, evens, inter, [](const auto& x, const auto& to) {
        return typemesh::replace_mesh<layout<batch(axis0)>, pipeline>(x, to);
      });
    });
    add("4", [&](std::string name) {
      return run_case<layout<batch(axis0), k(axis1)>>(opt, name, rnn, grid24, grid24, [](const auto& x, const auto&) {
        return typemesh::relayout<layout<batch(axis1), k(axis0)>>(x);
      });
    });
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "typemesh-bench-conversions: %s\n", e.what());
    return 1;
  }

  std::printf("\ncases (source -> target):\n");
  for (const row& r : rows) {
    std::printf("  %-3s %s\n      -> %s\n", r.name.c_str(), r.from.c_str(), r.to.c_str());
  }
  std::printf("plan-only repetitions ran `inner` plans each:");
  for (const row& r : rows) std::printf(" %s:%d", r.name.c_str(), r.plan_inner);
  std::printf("\n");

  print_wall_time(t0);
  return 0;
}

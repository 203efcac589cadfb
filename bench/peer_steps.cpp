// typemesh-bench-peer: one training step (forward + backward + SGD, float32,
// one device) of one of four networks, timed, for bench/peer.py to compare
// with PyTorch running the same step in the same run.
//
// The four networks (mlp, transformer, rnnlm, conv) and their fixed batches
// are defined in peer_networks.hpp, shared with typemesh-bench-gpu.
//
// Output, one line per step run:
//
//   peer_step step=mlp threads=1 warmup=2 steps=10 mean_ms=... min_ms=...
//     median_ms=... first_loss=... last_loss=... kernel_threads=1
//
// mean_ms, min_ms and median_ms: the mean, fastest and median time of the
// timed steps after the warm-up steps.
// The program checks that every loss is finite and that, over a run of two
// steps or more, the cross-entropy steps' loss has gone down (the batch never
// changes, so SGD must lower it); otherwise it exits with status 1. The Transformer's loss
// (a mean of layer-normed values) is flat by construction, so only its
// finiteness is checked.
//
// Threads: --threads N is launch_options::threads_per_device: the device's
// kernels and BLAS run on N threads. Without it the library divides the
// cores (or OPENBLAS_NUM_THREADS) among the devices; here there is one.
//
// Flags: --step mlp|transformer|rnnlm|conv|all (default all), --steps N
// (timed, default 10), --warmup N (default 2), --threads N (default: the
// library's choice), --quick (--steps 2 --warmup 1: the ctest smoke test).
//
// --overhead OPS instead times the per-op overhead: a chain of OPS small
// elementwise ops on an 8 x 8 variable with the tape on (y + x, y * 0.5,
// relu(y), in turn), then backward through the chain, --steps times after
// --warmup, and prints
//
//   peer_overhead ops=1000 elements=64 forward_us_per_op=... backward_us_per_op=...
//
// (the medians over the timed runs; bench/peer.py runs the same chain in
// PyTorch eager). It checks the gradient of x against the chain's own
// derivative, computed on the host.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <typemesh/typemesh.hpp>

#include "peer_networks.hpp"

namespace {

using typemesh_peer::ax;
using one_mesh = typemesh::mesh<"peer", ax>;
using clock_type = std::chrono::steady_clock;

struct options {
  std::string step = "all";
  int overhead_ops = 0;  // > 0: the per-op overhead chain instead of the steps
  int steps = 10;
  int warmup = 2;
  int threads = 0;  // 0: the library's choice
};

struct result {
  std::vector<double> seconds;  // the timed steps
  double first_loss = 0, last_loss = 0;
};

// Runs `step` (which returns the loss) warmup + steps times, timing the last
// `steps`. The first BLAS call inside the first step is where the library sets
// its thread count; the requested one is set right after it.
template <class Step>
result run(const options& o, Step&& step) {
  result r;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const auto t0 = clock_type::now();
    const double loss = step();
    const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (i == 0) r.first_loss = loss;
    r.last_loss = loss;
    if (i >= o.warmup) r.seconds.push_back(s);
  }
  return r;
}

[[noreturn]] void usage(const std::string& problem, int status = 2) {
  std::fprintf(status ? stderr : stdout,
               "typemesh-bench-peer: %s\nusage: typemesh-bench-peer [--step mlp|transformer|rnnlm|conv|all] "
               "[--steps N] [--warmup N] [--threads N] [--quick] [--overhead OPS]\n",
               problem.c_str());
  std::exit(status);
}

int positive(std::string_view flag, const char* text, int at_least) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < at_least || v > 100000) {
    usage(std::string(flag) + " wants a whole number from " + std::to_string(at_least) + " to 100000, not '" + text +
          "'");
  }
  return static_cast<int>(v);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--step") o.step = value();
    else if (a == "--steps") o.steps = positive(a, value(), 1);
    else if (a == "--warmup") o.warmup = positive(a, value(), 0);
    else if (a == "--threads") o.threads = positive(a, value(), 1);
    else if (a == "--quick") o.steps = 2, o.warmup = 1;
    else if (a == "--overhead") o.overhead_ops = positive(a, value(), 1);
    else if (a == "--help" || a == "-h") usage("one training step of a network, timed", 0);
    else usage("unknown argument '" + std::string(a) + "'");
  }
  if (o.step != "all" && o.step != "mlp" && o.step != "transformer" && o.step != "rnnlm" && o.step != "conv") {
    usage("--step wants mlp, transformer, rnnlm, conv or all, not '" + o.step + "'");
  }
  return o;
}

// The overhead chain (see the top of this file) on x: y + x, y * 0.5 and
// relu(y) in turn.
template <class X>
X overhead_chain(const X& x, int ops) {
  X y = x;
  for (int i = 0; i < ops; ++i) {
    if (i % 3 == 0) y = y + x;
    else if (i % 3 == 1) y = y * 0.5f;
    else y = typemesh::relu(y);
  }
  return y;
}

// d(sum of the chain)/dx, elementwise, in double on the host: the reference
// the benchmark's gradient is checked against.
double overhead_derivative(double x, int ops) {
  double y = x, dy = 1;  // y and dy/dx along the chain
  for (int i = 0; i < ops; ++i) {
    if (i % 3 == 0) y += x, dy += 1;
    else if (i % 3 == 1) y *= 0.5, dy *= 0.5;
    else if (y <= 0) y = 0, dy = 0;
  }
  return dy;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times the overhead chain; false if x's gradient is wrong.
bool run_overhead(const options& o, const one_mesh& m) {
  using namespace typemesh_peer;
  constexpr std::int64_t side = 8;
  auto x = typemesh::variable<whole>(m, "overhead/x", typemesh::shape<batch, features>{side, side},
                                     typemesh::init::normal{1.0}, seed);
  std::vector<double> forward, backward;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const auto t0 = clock_type::now();
    auto loss = typemesh::reduce_sum(overhead_chain(x, o.overhead_ops));
    const auto t1 = clock_type::now();
    typemesh::backward(loss);
    const auto t2 = clock_type::now();
    if (i >= o.warmup) {
      forward.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / o.overhead_ops);
      backward.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count() / o.overhead_ops);
    }
  }
  // backward adds into grad(): after n runs it holds n times the derivative.
  const auto values = typemesh::export_tensor(x).values();
  const auto grads = typemesh::export_tensor(x.grad()).values();
  const int runs = o.warmup + o.steps;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double want = runs * overhead_derivative(values[i], o.overhead_ops);
    if (std::abs(grads[i] - want) > 1e-3 * std::max(1.0, std::abs(want))) {
      std::fprintf(stderr, "typemesh-bench-peer: overhead chain: d/dx[%zu] is %g, the host's derivative %g\n", i,
                   double(grads[i]), want);
      return false;
    }
  }
  std::printf("peer_overhead ops=%d elements=%lld threads=%d steps=%d forward_us_per_op=%.3f "
              "backward_us_per_op=%.3f\n",
              o.overhead_ops, static_cast<long long>(side * side), o.threads, o.steps, median(forward),
              median(backward));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
#if defined(__GNUC__) && !defined(__OPTIMIZE__)
  std::printf("WARNING: built without optimization; the numbers mean little\n");
#endif
  bool ok = true;
  try {
    // threads 0: the library's own choice (the cores, or OPENBLAS_NUM_THREADS).
    typemesh::launch({.devices = 1, .threads_per_device = o.threads}, [&](typemesh::device&) {
      const one_mesh m({1});
      if (o.overhead_ops > 0) {
        ok = run_overhead(o, m);
        return;
      }
      for (const char* name : {"mlp", "transformer", "rnnlm", "conv"}) {
        if (o.step != "all" && o.step != name) continue;
        const result r = typemesh_peer::network(name, m, [&](auto&& step) { return run(o, step); });
        double total = 0, fastest = r.seconds.front();
        for (double t : r.seconds) total += t, fastest = std::min(fastest, t);
        std::printf("peer_step step=%s threads=%d warmup=%d steps=%d mean_ms=%.3f min_ms=%.3f median_ms=%.3f "
                    "first_loss=%.6g last_loss=%.6g kernel_threads=%d\n",
                    name, o.threads, o.warmup, o.steps, 1e3 * total / double(r.seconds.size()), 1e3 * fastest,
                    1e3 * median(r.seconds), r.first_loss, r.last_loss, typemesh::backend::host::kernel_threads());
        std::fflush(stdout);
        const bool finite = std::isfinite(r.first_loss) && std::isfinite(r.last_loss);
        if (!typemesh_peer::losses_plausible(name, o.warmup + o.steps, r.first_loss, r.last_loss)) {
          std::fprintf(stderr, "typemesh-bench-peer: step %s: loss %g after %d steps from %g: %s\n", name,
                       r.last_loss, o.warmup + o.steps, r.first_loss,
                       finite ? "SGD on a fixed batch did not lower it" : "not finite");
          ok = false;
        }
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "typemesh-bench-peer: %s\n", e.what());
    return 1;
  }
  return ok ? 0 : 1;
}

// typemesh-bench-peer: one training step (forward + backward + SGD, float32,
// one device) of one of four networks, timed, for bench/peer.py to compare
// with PyTorch running the same step in the same run.
//
//   mlp          x[256, 1024] -> dense 4096 + bias, relu -> dense 1024 + bias
//                -> softmax cross-entropy over 1024 classes, mean over the batch
//   transformer  one encoder layer, x[16, 128, 512] (a constant input), 8 heads
//                of 64, no projection biases: self-attention, add and layer
//                norm, relu feed-forward 512 -> 2048 -> 512 (no biases), add
//                and layer norm; loss = mean of the output
//   rnnlm        ids[32, 32] -> embedding 8192 x 512 -> 2 LSTM layers of 512
//                units (no bias, zero initial states) -> projection 512 -> 8192
//                (no bias) -> softmax cross-entropy, mean over batch and steps
//   conv         x[32, 32, 32, 64] NHWC -> 3x3 conv 64 -> 64 SAME (no bias),
//                relu -> 2x2 max pool -> dense to 10 classes + bias -> softmax
//                cross-entropy, mean over the batch
//
// Every step uses one fixed batch and SGD at rate 0.01 (0.001 for conv;
// PyTorch's side in peer.py does the same). Output, one line per step run:
//
//   peer_step step=mlp threads=1 warmup=2 steps=10 mean_ms=... min_ms=...
//     first_loss=... last_loss=... blas_threads=1
//
// mean_ms is the mean time of the timed steps after the warm-up steps.
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
#include <cblas.h>

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

namespace {

struct ax : typemesh::axis<"ax"> {};
using one_mesh = typemesh::mesh<"peer", ax>;
using typemesh::layout;
using typemesh::shape;
using whole = layout<>;

struct batch : typemesh::dim<"batch"> {};
struct features : typemesh::dim<"features"> {};
struct hidden : typemesh::dim<"hidden"> {};
struct classes : typemesh::dim<"classes"> {};
struct length : typemesh::dim<"length"> {};
struct memory_length : typemesh::dim<"memory_length"> {};
struct d_model : typemesh::dim<"d_model"> {};
struct heads : typemesh::dim<"heads"> {};
struct d_k : typemesh::dim<"d_k"> {};
struct d_v : typemesh::dim<"d_v"> {};
struct d_ff : typemesh::dim<"d_ff"> {};
struct seq : typemesh::dim<"seq"> {};
struct vocab : typemesh::dim<"vocab"> {};
struct k : typemesh::dim<"k"> {};  // LSTM units in
struct n : typemesh::dim<"n"> {};  // LSTM gate columns
struct height : typemesh::dim<"height"> {};
struct width : typemesh::dim<"width"> {};
struct channels : typemesh::dim<"channels"> {};
struct out_channels : typemesh::dim<"out_channels"> {};
struct fh : typemesh::dim<"fh"> {};
struct fw : typemesh::dim<"fw"> {};

using clock_type = std::chrono::steady_clock;
constexpr double learning_rate = 0.01;
constexpr double conv_learning_rate = 0.001;
constexpr std::uint64_t seed = 1;

struct options {
  std::string step = "all";
  int steps = 10;
  int warmup = 2;
  int threads = 0;  // 0: the library's choice
};

struct result {
  std::vector<double> seconds;  // the timed steps
  double first_loss = 0, last_loss = 0;
};

// Labels drawn from a fixed sequence, so both runs of a step see one batch.
template <class S>
typemesh::host_tensor<std::int32_t, S> labels(const S& s, std::int32_t count) {
  typemesh::host_tensor<std::int32_t, S> t(s);
  std::uint64_t state = 12345;
  for (auto& v : t.values()) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<std::int32_t>((state >> 33) % static_cast<std::uint64_t>(count));
  }
  return t;
}

template <class S>
typemesh::host_tensor<float, S> inputs(const S& s) {
  typemesh::host_tensor<float, S> t(s);
  for (std::size_t i = 0; i < t.size(); ++i) t.values()[i] = static_cast<float>(std::sin(0.37 * double(i)));
  return t;
}

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

template <class Loss>
double scalar(const Loss& loss) {
  return static_cast<double>(loss.local()[0]);
}

result mlp(const options& o, const one_mesh& m) {
  auto x = typemesh::import_tensor<whole>(m, inputs(shape<batch, features>{256, 1024}));
  auto y = typemesh::import_tensor<whole>(m, labels(shape<batch>{256}, 1024));
  auto w1 = typemesh::variable<whole>(m, "mlp/w1", shape<features, hidden>{1024, 4096},
                                      typemesh::init::glorot_uniform{1024, 4096}, seed);
  auto b1 = typemesh::variable<whole>(m, "mlp/b1", shape<hidden>{4096});
  auto w2 = typemesh::variable<whole>(m, "mlp/w2", shape<hidden, classes>{4096, 1024},
                                      typemesh::init::glorot_uniform{4096, 1024}, seed);
  auto b2 = typemesh::variable<whole>(m, "mlp/b2", shape<classes>{1024});
  typemesh::optim::sgd opt(learning_rate);
  return run(o, [&] {
    auto h = typemesh::dense(x, w1, b1, typemesh::activation::relu);
    auto logits = typemesh::dense(h, w2, b2);
    auto loss = typemesh::reduce_mean(typemesh::softmax_cross_entropy<classes>(logits, y));
    typemesh::backward(loss);
    opt.step(w1, b1, w2, b2);
    return scalar(loss);
  });
}

result transformer(const options& o, const one_mesh& m) {
  auto x = typemesh::import_tensor<whole>(m, inputs(shape<batch, length, d_model>{16, 128, 512}));
  const typemesh::init::glorot_uniform proj_init{512, 512};
  auto wq = typemesh::variable<whole>(m, "enc/wq", shape<d_model, heads, d_k>{512, 8, 64}, proj_init, seed);
  auto wk = typemesh::variable<whole>(m, "enc/wk", shape<d_model, heads, d_k>{512, 8, 64}, proj_init, seed);
  auto wv = typemesh::variable<whole>(m, "enc/wv", shape<d_model, heads, d_v>{512, 8, 64}, proj_init, seed);
  auto wo = typemesh::variable<whole>(m, "enc/wo", shape<heads, d_v, d_model>{8, 64, 512}, proj_init, seed);
  auto ln1_scale = typemesh::variable<whole>(m, "enc/ln1/scale", shape<d_model>{512}, typemesh::init::constant{1});
  auto ln1_bias = typemesh::variable<whole>(m, "enc/ln1/bias", shape<d_model>{512});
  auto w1 = typemesh::variable<whole>(m, "enc/ffn/w1", shape<d_model, d_ff>{512, 2048},
                                      typemesh::init::glorot_uniform{512, 2048}, seed);
  auto w2 = typemesh::variable<whole>(m, "enc/ffn/w2", shape<d_ff, d_model>{2048, 512},
                                      typemesh::init::glorot_uniform{2048, 512}, seed);
  auto ln2_scale = typemesh::variable<whole>(m, "enc/ln2/scale", shape<d_model>{512}, typemesh::init::constant{1});
  auto ln2_bias = typemesh::variable<whole>(m, "enc/ln2/bias", shape<d_model>{512});
  typemesh::optim::sgd opt(learning_rate);
  return run(o, [&] {
    auto attended = typemesh::self_attention<length, memory_length>(x, wq, wk, wv, wo);
    auto h = typemesh::layer_norm<d_model>(x + attended, ln1_scale, ln1_bias);
    auto y = typemesh::layer_norm<d_model>(h + typemesh::dense_relu_dense(h, w1, w2), ln2_scale, ln2_bias);
    auto loss = typemesh::reduce_mean(y);
    typemesh::backward(loss);
    opt.step(wq, wk, wv, wo, ln1_scale, ln1_bias, w1, w2, ln2_scale, ln2_bias);
    return scalar(loss);
  });
}

result rnnlm(const options& o, const one_mesh& m) {
  constexpr std::int64_t units = 512, words = 8192;
  auto ids = typemesh::import_tensor<whole>(m, labels(shape<batch, seq>{32, 32}, words));
  auto targets = typemesh::import_tensor<whole>(m, labels(shape<batch, seq>{32, 32}, words - 1));
  auto table = typemesh::variable<whole>(m, "rnnlm/embedding", shape<vocab, k>{words, units},
                                         typemesh::init::normal{1.0}, seed);
  const typemesh::init::glorot_uniform lstm_init{2 * units, 4 * units};
  auto w0 = typemesh::variable<whole>(m, "rnnlm/w0", shape<k, n>{2 * units, 4 * units}, lstm_init, seed);
  auto w1 = typemesh::variable<whole>(m, "rnnlm/w1", shape<k, n>{2 * units, 4 * units}, lstm_init, seed);
  auto proj = typemesh::variable<whole>(m, "rnnlm/proj", shape<k, vocab>{units, words},
                                        typemesh::init::glorot_uniform{units, words}, seed);
  typemesh::optim::sgd opt(learning_rate);
  return run(o, [&] {
    auto x = typemesh::embedding<k>(ids, table);  // [batch, seq, k]
    auto h = typemesh::lstm<seq>(x, std::vector{w0, w1});
    auto logits = typemesh::dense(h, proj);  // [batch, seq, vocab]
    auto loss = typemesh::reduce_mean(typemesh::softmax_cross_entropy<vocab>(logits, targets));
    typemesh::backward(loss);
    opt.step(table, w0, w1, proj);
    return scalar(loss);
  });
}

result conv(const options& o, const one_mesh& m) {
  auto x = typemesh::import_tensor<whole>(m, inputs(shape<batch, height, width, channels>{32, 32, 32, 64}));
  auto y = typemesh::import_tensor<whole>(m, labels(shape<batch>{32}, 10));
  auto filter = typemesh::variable<whole>(m, "conv/filter", shape<fh, fw, channels, out_channels>{3, 3, 64, 64},
                                          typemesh::init::glorot_uniform{9 * 64, 9 * 64}, seed);
  auto w = typemesh::variable<whole>(m, "conv/dense/w", shape<height, width, out_channels, classes>{16, 16, 64, 10},
                                     typemesh::init::glorot_uniform{16 * 16 * 64, 10}, seed);
  auto b = typemesh::variable<whole>(m, "conv/dense/b", shape<classes>{10});
  // The dense layer sums 16384 unnormalised features: at the other steps' rate
  // the first update overshoots and the loss rises.
  typemesh::optim::sgd opt(conv_learning_rate);
  return run(o, [&] {
    auto features_map = typemesh::relu(typemesh::conv2d<height, width, fh, fw>(x, filter));  // SAME, stride 1
    auto pooled = typemesh::max_pool2d<height, width>(features_map, {.window = {2, 2}});
    auto logits = typemesh::dense(pooled, w, b);  // sums height, width, out_channels
    auto loss = typemesh::reduce_mean(typemesh::softmax_cross_entropy<classes>(logits, y));
    typemesh::backward(loss);
    opt.step(filter, w, b);
    return scalar(loss);
  });
}

[[noreturn]] void usage(const std::string& problem, int status = 2) {
  std::fprintf(status ? stderr : stdout,
               "typemesh-bench-peer: %s\nusage: typemesh-bench-peer [--step mlp|transformer|rnnlm|conv|all] "
               "[--steps N] [--warmup N] [--threads N] [--quick]\n",
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
    else if (a == "--help" || a == "-h") usage("one training step of a network, timed", 0);
    else usage("unknown argument '" + std::string(a) + "'");
  }
  if (o.step != "all" && o.step != "mlp" && o.step != "transformer" && o.step != "rnnlm" && o.step != "conv") {
    usage("--step wants mlp, transformer, rnnlm, conv or all, not '" + o.step + "'");
  }
  return o;
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
      for (const char* name : {"mlp", "transformer", "rnnlm", "conv"}) {
        if (o.step != "all" && o.step != name) continue;
        const std::string_view s = name;
        const result r = s == "mlp" ? mlp(o, m) : s == "transformer" ? transformer(o, m) : s == "rnnlm" ? rnnlm(o, m)
                                                                                                      : conv(o, m);
        double total = 0, fastest = r.seconds.front();
        for (double t : r.seconds) total += t, fastest = std::min(fastest, t);
        std::printf("peer_step step=%s threads=%d warmup=%d steps=%d mean_ms=%.3f min_ms=%.3f first_loss=%.6g "
                    "last_loss=%.6g blas_threads=%d\n",
                    name, o.threads, o.warmup, o.steps, 1e3 * total / double(r.seconds.size()), 1e3 * fastest,
                    r.first_loss, r.last_loss, openblas_get_num_threads());
        std::fflush(stdout);
        const bool finite = std::isfinite(r.first_loss) && std::isfinite(r.last_loss);
        // One step alone has no later loss to compare with.
        const bool lowered = s == "transformer" || o.warmup + o.steps < 2 || r.last_loss < r.first_loss;
        if (!finite || !lowered) {
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

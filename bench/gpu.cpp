// typemesh-bench-gpu: typemesh on one CUDA GPU against references measured
// in the same run, printed as one markdown table (docs/gpu.md explains it).
//
// Rows, each a ratio to its reference (higher is better):
//
//   references   cuBLAS SGEMM at 4096^3 through cublasGemmEx directly, FP32
//                and TF32 compute: the GEMM peaks the layer rows are held to.
//   layers       forward + backward of one layer on a 1-device cuda_mesh.
//                dense, conv2d 3x3, one LSTM step and self-attention: FLOP/s
//                from their GEMM FLOPs counted analytically (see each row's
//                function), against SGEMM FP32 (and TF32 with --tf32, where
//                the layers run again under set_gpu_math(gpu_math::tf32)).
//                layer_norm and softmax cross-entropy do no GEMM: they are
//                bandwidth-bound, so bytes moved per second (the fewest bytes
//                forward and backward must read and write) against the
//                device-to-device cudaMemcpy bandwidth.
//   elementwise  x + y, relu(x) and x + bias at 64M floats: bytes moved per
//                second against cudaMemcpy device-to-device (bytes read +
//                written / time for both).
//   allreduce    256 MiB through the host communicator, 2 devices sharing
//                the GPU (staged through host memory), against a raw
//                cudaMemcpy round trip GPU -> host -> GPU of the same bytes;
//                the row for the NCCL communicator against raw NCCL says
//                "n/a" with the reason (fewer than 2 GPUs).
//   steps        one training step of each network of peer_networks.hpp on
//                1 GPU and on 1 host device (all cores); ratio = host ms /
//                GPU ms.
//
// Timing: GPU work is timed with CUDA events on the default stream (the
// stream typemesh's kernels, cuBLAS and copies use) after warm-up calls; a
// row repeats its call until the timed batch lasts about 0.25 s (--quick: one
// call). The waits for the timing events are bounded (60 s) and fail with
// the row's name instead of hanging. Results are checked (elementwise and allreduce
// values, finite and falling losses); a wrong or failed row prints its error
// in the table and the program exits 1.
//
// Without a CUDA GPU it prints "no CUDA GPU: skipped" and exits 0.
//
// Flags: --quick (every row once, small sizes), --tf32 (the layer rows again
// with TF32 GEMMs), --table FILE (also write the table to FILE).
#if !defined(__CUDACC__)
#error "typemesh-bench-gpu is CUDA source: compile it with nvcc (-x cu)"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "peer_networks.hpp"
#include "typemesh/backend/cuda/blas.hpp"
#include "typemesh/backend/cuda/runtime.hpp"

namespace {

using typemesh::import_tensor;
using typemesh::layout;
using typemesh::shape;
using typemesh::backend::cuda::check;
using typemesh_peer::ax;
using whole = layout<>;
using gpu_mesh = typemesh::cuda_mesh<"bench", ax>;
using host_mesh = typemesh::mesh<"bench", ax>;
using clock_type = std::chrono::steady_clock;

struct rows_dim : typemesh::dim<"rows"> {};
struct cols_dim : typemesh::dim<"cols"> {};
struct batch : typemesh::dim<"batch"> {};
struct k : typemesh::dim<"k"> {};
struct n : typemesh::dim<"n"> {};
struct height : typemesh::dim<"height"> {};
struct width : typemesh::dim<"width"> {};
struct channels : typemesh::dim<"channels"> {};
struct filters : typemesh::dim<"filters"> {};
struct fh : typemesh::dim<"fh"> {};
struct fw : typemesh::dim<"fw"> {};
struct length : typemesh::dim<"length"> {};
struct memory_length : typemesh::dim<"memory_length"> {};
struct d_model : typemesh::dim<"d_model"> {};
struct heads : typemesh::dim<"heads"> {};
struct d_k : typemesh::dim<"d_k"> {};
struct d_v : typemesh::dim<"d_v"> {};

constexpr std::chrono::seconds wait_limit{60};

struct options {
  bool quick = false;
  bool tf32 = false;
  std::string table_file;
  double batch_seconds() const { return quick ? 0.0 : 0.25; }
  int warmup() const { return quick ? 0 : 2; }
};

// ------------------------------------------------------------------ table

struct row {
  std::string what, size;
  double ms = NAN;           // time of one call
  std::string achieved;      // "41.2 TFLOP/s", "3.9 TB/s"
  std::string reference;     // "SGEMM FP32 51.0 TFLOP/s"
  std::string ratio;         // achieved / reference, or why there is none
};

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
std::string tflops(double flop, double seconds) { return fixed(flop / seconds / 1e12, 1) + " TFLOP/s"; }
std::string tbytes(double bytes, double seconds) { return fixed(bytes / seconds / 1e12, 2) + " TB/s"; }
std::string gbytes(double bytes, double seconds) { return fixed(bytes / seconds / 1e9, 1) + " GB/s"; }

// What a row is held against: a rate in units per second, and its label.
struct reference {
  std::string label;
  double rate = 0;  // FLOP/s or bytes/s
  std::string text;
};

std::string ratio_to(double rate, const reference& r) {
  if (!(r.rate > 0) || !std::isfinite(rate)) return "n/a (reference failed)";
  return fixed(rate / r.rate, 2);
}

// ------------------------------------------------------------------ timing

// Waits for `e` with a limit, so that a hung kernel fails the row with a
// message instead of hanging the program.
void wait_for(cudaEvent_t e, std::string_view what) {
  const auto deadline = clock_type::now() + wait_limit;
  while (true) {
    const cudaError_t s = cudaEventQuery(e);
    if (s == cudaSuccess) return;
    if (s != cudaErrorNotReady) check(s, "cudaEventQuery", what);
    if (clock_type::now() > deadline) {
      throw typemesh::device_error(typemesh::detail::cat("the GPU did not finish ", what, " within ",
                                                         wait_limit.count(), " s (cudaEventQuery still not ready)"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

class event_pair {
 public:
  explicit event_pair(std::string_view what) : what_(what) {
    check(cudaEventCreate(&start_), "cudaEventCreate", what_);
    const cudaError_t s = cudaEventCreate(&stop_);
    if (s != cudaSuccess) {
      (void)cudaEventDestroy(start_);
      check(s, "cudaEventCreate", what_);
    }
  }
  event_pair(const event_pair&) = delete;
  event_pair& operator=(const event_pair&) = delete;
  ~event_pair() {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
  }
  void start() { check(cudaEventRecord(start_, 0), "cudaEventRecord", what_); }
  // Seconds from start() to now on the GPU's default stream.
  double stop() {
    check(cudaEventRecord(stop_, 0), "cudaEventRecord", what_);
    wait_for(stop_, what_);
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime", what_);
    return 1e-3 * double(ms);
  }

 private:
  std::string what_;
  cudaEvent_t start_{}, stop_{};
};

void settle(std::string_view what) {
  event_pair e(what);
  e.start();
  (void)e.stop();
}

// Seconds per call of f on the GPU: warm-up calls, one timed call, then (but
// with --quick) a timed batch of as many calls as fill about batch_seconds.
template <class F>
double seconds_per_call(const options& o, std::string_view what, F&& f) {
  for (int i = 0; i < o.warmup(); ++i) f();
  settle(what);
  event_pair e(what);
  e.start();
  f();
  const double one = e.stop();
  if (o.batch_seconds() <= 0 || one >= o.batch_seconds()) return one;
  const int calls = static_cast<int>(std::clamp(o.batch_seconds() / std::max(one, 1e-6), 1.0, 1000.0));
  e.start();
  for (int i = 0; i < calls; ++i) f();
  return e.stop() / calls;
}

// ------------------------------------------------------------------ raw references

struct gpu_array {
  float* p = nullptr;
  explicit gpu_array(std::size_t count, std::string_view what) {
    check(cudaMalloc(&p, count * sizeof(float)), "cudaMalloc",
          typemesh::detail::cat("allocating ", count * sizeof(float), " bytes for ", what));
  }
  gpu_array(const gpu_array&) = delete;
  gpu_array& operator=(const gpu_array&) = delete;
  ~gpu_array() { (void)cudaFree(p); }
};

std::vector<float> wave(std::size_t count, double step = 0.37) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(std::sin(step * double(i)));
  return v;
}

class blas_handle {
 public:
  blas_handle() { typemesh::backend::cuda::check_blas(cublasCreate(&h_), "cublasCreate"); }
  blas_handle(const blas_handle&) = delete;
  blas_handle& operator=(const blas_handle&) = delete;
  ~blas_handle() { (void)cublasDestroy(h_); }
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_{};
};

// C = A B for n x n matrices with cublasGemmEx called directly: 2 n^3 FLOPs.
reference sgemm_peak(const options& o, std::vector<row>& rows, bool tf32) {
  const std::int64_t size = o.quick ? 512 : 4096;
  const std::string label = tf32 ? "SGEMM TF32" : "SGEMM FP32";
  const std::string what = "cuBLAS " + label + " " + std::to_string(size) + "^3";
  const std::size_t count = static_cast<std::size_t>(size * size);
  gpu_array a(count, what), b(count, what), c(count, what);
  const std::vector<float> init = wave(count);
  typemesh::backend::cuda::copy_bytes(a.p, init.data(), count * sizeof(float));
  typemesh::backend::cuda::copy_bytes(b.p, init.data(), count * sizeof(float));
  blas_handle h;
  const float one = 1, zero = 0;
  const int s = static_cast<int>(size);
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const double seconds = seconds_per_call(o, what, [&] {
    typemesh::backend::cuda::check_blas(cublasGemmEx(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, &one, a.p, CUDA_R_32F,
                                                     s, b.p, CUDA_R_32F, s, &zero, c.p, CUDA_R_32F, s, compute,
                                                     CUBLAS_GEMM_DEFAULT),
                                        "cublasGemmEx (" + what + ")");
  });
  const double flop = 2.0 * double(size) * double(size) * double(size);
  rows.push_back({"cuBLAS " + label + " (reference)", std::to_string(size) + "^3", 1e3 * seconds,
                  tflops(flop, seconds), "-", "1.00"});
  return {label, flop / seconds, label + " " + tflops(flop, seconds)};
}

// cudaMemcpy device to device of n floats: 2 n * 4 bytes moved (read and
// written) per copy.
reference memcpy_bandwidth(const options& o, std::vector<row>& rows, std::int64_t count) {
  const std::string what = "cudaMemcpy device to device";
  gpu_array a(static_cast<std::size_t>(count), what), b(static_cast<std::size_t>(count), what);
  check(cudaMemset(a.p, 0, static_cast<std::size_t>(count) * sizeof(float)), "cudaMemset", what);
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
  const double seconds = seconds_per_call(o, what, [&] {
    check(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync", what);
  });
  const double moved = 2.0 * double(bytes);
  rows.push_back({"cudaMemcpy device to device (reference)", std::to_string(count) + " floats", 1e3 * seconds,
                  tbytes(moved, seconds), "-", "1.00"});
  return {"D2D memcpy", moved / seconds, "D2D memcpy " + tbytes(moved, seconds)};
}

// ------------------------------------------------------------------ layers on one GPU

template <class S>
typemesh::host_tensor<float, S> host_wave(const S& s, double step = 0.37) {
  return typemesh::host_tensor<float, S>(s, wave(static_cast<std::size_t>(s.elements()), step));
}

// Runs body(mesh) on one device of a 1-GPU cuda_mesh and returns its result.
template <class Body>
auto on_one_gpu(Body&& body) {
  return typemesh::launch(1, [&] {
    const gpu_mesh m({1});
    return body(m);
  })[0];
}

// Forward + backward: loss = sum(y), gradients for every input, which are
// cleared before the next call so each call computes the same thing.
template <class Loss, class... Inputs>
void backward_and_clear(const Loss& loss, Inputs&... inputs) {
  typemesh::backward(loss);
  (inputs.zero_grad(), ...);
}

struct layer_result {
  double seconds = 0;
  double work = 0;  // FLOPs or bytes, as the row counts them
  std::string size;
};

// dense: y = x[B, K] . w[K, N] + b[N]. GEMM FLOPs: forward 2BKN, backward
// dx = dy w^T and dw = x^T dy, 2BKN each: 6BKN.
layer_result dense_layer(const options& o) {
  const std::int64_t B = o.quick ? 64 : 4096, K = o.quick ? 64 : 4096, N = o.quick ? 64 : 4096;
  return on_one_gpu([&](const gpu_mesh& m) {
    auto x = import_tensor<whole>(m, host_wave(shape<batch, k>{B, K}));
    auto w = import_tensor<whole>(m, host_wave(shape<k, n>{K, N}, 0.11));
    auto b = import_tensor<whole>(m, host_wave(shape<n>{N}, 0.7));
    x.requires_grad("x"), w.requires_grad("w"), b.requires_grad("b");
    const double s = seconds_per_call(o, "dense forward and backward", [&] {
      backward_and_clear(typemesh::reduce_sum(typemesh::dense(x, w, b)), x, w, b);
    });
    return layer_result{s, 6.0 * B * K * N, typemesh::detail::cat("x[", B, ",", K, "] w[", K, ",", N, "]")};
  });
}

// conv2d 3x3, SAME, stride 1, NHWC: x[B, H, W, C], f[3, 3, C, F]. Counted as
// the im2col GEMM: forward 2 B H W F (9 C) (padding taps included); backward
// dx and df are one product of the same size each: 3 times that.
layer_result conv_layer(const options& o) {
  const std::int64_t B = o.quick ? 2 : 32, H = o.quick ? 8 : 64, W = H, C = o.quick ? 8 : 128, F = C;
  return on_one_gpu([&](const gpu_mesh& m) {
    auto x = import_tensor<whole>(m, host_wave(shape<batch, height, width, channels>{B, H, W, C}));
    auto f = import_tensor<whole>(m, host_wave(shape<fh, fw, channels, filters>{3, 3, C, F}, 0.13));
    x.requires_grad("x"), f.requires_grad("f");
    const double s = seconds_per_call(o, "conv2d forward and backward", [&] {
      backward_and_clear(typemesh::reduce_sum(typemesh::conv2d<height, width, fh, fw>(x, f)), x, f);
    });
    return layer_result{s, 3.0 * 2.0 * B * H * W * F * 9.0 * C,
                        typemesh::detail::cat("x[", B, ",", H, ",", W, ",", C, "] f[3,3,", C, ",", F, "]")};
  });
}

// One LSTM step: gates[B, 4U] = [x, h][B, 2U] . w[2U, 4U], then the fused
// cell. GEMM FLOPs: forward 2 B (2U) (4U); backward d[x, h] and dw, the same
// each: 3 times that. The cell's elementwise work is not counted.
layer_result lstm_layer(const options& o) {
  const std::int64_t B = o.quick ? 8 : 512, U = o.quick ? 16 : 1024;
  return on_one_gpu([&](const gpu_mesh& m) {
    auto x = import_tensor<whole>(m, host_wave(shape<batch, k>{B, U}));
    auto h = import_tensor<whole>(m, host_wave(shape<batch, k>{B, U}, 0.21));
    auto c = import_tensor<whole>(m, host_wave(shape<batch, n>{B, U}, 0.29));
    auto w = import_tensor<whole>(m, host_wave(shape<k, n>{2 * U, 4 * U}, 0.017));
    x.requires_grad("x"), h.requires_grad("h"), c.requires_grad("c"), w.requires_grad("w");
    const double s = seconds_per_call(o, "LSTM step forward and backward", [&] {
      auto next = typemesh::lstm_step(x, h, c, w);
      backward_and_clear(typemesh::reduce_sum(next.h), x, h, c, w);
    });
    return layer_result{s, 3.0 * 2.0 * B * (2 * U) * (4 * U),
                        typemesh::detail::cat("batch ", B, ", ", U, " units")};
  });
}

// Self-attention, x[B, L, D], H heads of dk = dv. GEMM FLOPs forward:
// projections q, k, v: 3 * 2 B L D H dk; scores q k^T: 2 B H L L dk; context
// p v: 2 B H L L dv; output: 2 B L H dv D. Backward: every product has two
// operands that need a gradient, so twice forward: 3 times forward in all.
// The softmax is not counted.
layer_result attention_layer(const options& o) {
  const std::int64_t B = o.quick ? 2 : 8, L = o.quick ? 8 : 1024, D = o.quick ? 16 : 1024, H = o.quick ? 2 : 16,
                     dk = D / H;
  return on_one_gpu([&](const gpu_mesh& m) {
    auto x = import_tensor<whole>(m, host_wave(shape<batch, length, d_model>{B, L, D}));
    auto wq = import_tensor<whole>(m, host_wave(shape<d_model, heads, d_k>{D, H, dk}, 0.011));
    auto wk = import_tensor<whole>(m, host_wave(shape<d_model, heads, d_k>{D, H, dk}, 0.013));
    auto wv = import_tensor<whole>(m, host_wave(shape<d_model, heads, d_v>{D, H, dk}, 0.017));
    auto wo = import_tensor<whole>(m, host_wave(shape<heads, d_v, d_model>{H, dk, D}, 0.019));
    x.requires_grad("x"), wq.requires_grad("wq"), wk.requires_grad("wk"), wv.requires_grad("wv");
    wo.requires_grad("wo");
    const double s = seconds_per_call(o, "self-attention forward and backward", [&] {
      auto y = typemesh::self_attention<length, memory_length>(x, wq, wk, wv, wo);
      backward_and_clear(typemesh::reduce_sum(y), x, wq, wk, wv, wo);
    });
    const double forward = 3 * 2.0 * B * L * D * H * dk + 2.0 * B * H * L * L * dk + 2.0 * B * H * L * L * dk +
                           2.0 * B * L * H * dk * D;
    return layer_result{s, 3.0 * forward,
                        typemesh::detail::cat("x[", B, ",", L, ",", D, "], ", H, " heads of ", dk)};
  });
}

// layer_norm over d_model of x[R, D]: bytes counted are the fewest a forward
// and backward must move, 5 R D floats: forward reads x and writes y,
// backward reads dy and x and writes dx (scale and bias are D each). The
// loss's sum and its gradient are timed but not counted, so the ratio is a
// lower bound.
layer_result layer_norm_layer(const options& o) {
  const std::int64_t R = o.quick ? 64 : 8192, D = o.quick ? 64 : 4096;
  return on_one_gpu([&](const gpu_mesh& m) {
    auto x = import_tensor<whole>(m, host_wave(shape<batch, d_model>{R, D}));
    auto scale = import_tensor<whole>(m, host_wave(shape<d_model>{D}, 0.3));
    auto bias = import_tensor<whole>(m, host_wave(shape<d_model>{D}, 0.5));
    x.requires_grad("x"), scale.requires_grad("scale"), bias.requires_grad("bias");
    const double s = seconds_per_call(o, "layer_norm forward and backward", [&] {
      backward_and_clear(typemesh::reduce_sum(typemesh::layer_norm<d_model>(x, scale, bias)), x, scale, bias);
    });
    return layer_result{s, 5.0 * R * D * sizeof(float), typemesh::detail::cat("x[", R, ",", D, "]")};
  });
}

// Softmax cross-entropy of logits[B, C] against labels[B]: the fewest bytes
// are 3 B C floats: forward reads the logits, backward reads them again and
// writes their gradient (the labels and per-row losses are B each). The
// loss's mean is timed but not counted.
layer_result softmax_xent_layer(const options& o) {
  const std::int64_t B = o.quick ? 64 : 8192, C = o.quick ? 64 : 8192;
  return on_one_gpu([&](const gpu_mesh& m) {
    auto logits = import_tensor<whole>(m, host_wave(shape<batch, n>{B, C}));
    auto labels = import_tensor<whole>(m, typemesh_peer::labels(shape<batch>{B}, static_cast<std::int32_t>(C)));
    logits.requires_grad("logits");
    const double s = seconds_per_call(o, "softmax cross-entropy forward and backward", [&] {
      backward_and_clear(typemesh::reduce_mean(typemesh::softmax_cross_entropy<n>(logits, labels)), logits);
    });
    return layer_result{s, 3.0 * B * C * sizeof(float), typemesh::detail::cat("logits[", B, ",", C, "]")};
  });
}

// ------------------------------------------------------------------ elementwise

struct elementwise_result {
  double add = 0, relu = 0, add_bias = 0;  // seconds per op
  std::string wrong;                       // the first wrong value, if any
};

// x + y, relu(x) and x + bias[cols] on x[rows, cols]; each result is checked
// against the same arithmetic on the host at a spread of elements.
elementwise_result elementwise(const options& o, std::int64_t rows, std::int64_t cols) {
  return on_one_gpu([&](const gpu_mesh& m) {
    const auto xs = host_wave(shape<rows_dim, cols_dim>{rows, cols});
    const auto ys = host_wave(shape<rows_dim, cols_dim>{rows, cols}, 0.53);
    const auto bs = host_wave(shape<cols_dim>{cols}, 0.71);
    auto x = import_tensor<whole>(m, xs);
    auto y = import_tensor<whole>(m, ys);
    auto b = import_tensor<whole>(m, bs);
    elementwise_result r;
    auto verify = [&](const auto& got, const char* op, auto expected) {
      if (!r.wrong.empty()) return;
      const auto host = typemesh::export_tensor(got);
      const std::size_t count = host.values().size(), stride = std::max<std::size_t>(1, count / 4099);
      for (std::size_t i = 0; i < count; i += stride) {
        const float want = expected(i);
        if (host.values()[i] != want) {
          r.wrong = typemesh::detail::cat(op, ": element ", i, " is ", host.values()[i], ", not ", want);
          return;
        }
      }
    };
    r.add = seconds_per_call(o, "x + y", [&] { (void)(x + y); });
    verify(x + y, "x + y", [&](std::size_t i) { return xs.values()[i] + ys.values()[i]; });
    r.relu = seconds_per_call(o, "relu(x)", [&] { (void)typemesh::relu(x); });
    verify(typemesh::relu(x), "relu(x)", [&](std::size_t i) { return std::max(xs.values()[i], 0.0f); });
    r.add_bias = seconds_per_call(o, "x + bias", [&] { (void)(x + b); });
    verify(x + b, "x + bias", [&](std::size_t i) {
      return xs.values()[i] + bs.values()[i % static_cast<std::size_t>(cols)];
    });
    return r;
  });
}

// ------------------------------------------------------------------ allreduce

struct allreduce_result {
  double seconds = 0;
  std::string wrong;
};

// allreduce of a replicated 256 MiB tensor over 2 devices of a cuda_mesh
// (both on GPU 0 when there is one GPU): the host communicator stages GPU
// buffers through host memory. Each device's result must be twice its input.
allreduce_result host_staged_allreduce(const options& o, std::int64_t count) {
  using pair_mesh = typemesh::cuda_mesh<"pair", ax>;
  const auto xs = host_wave(shape<rows_dim>{count});
  const int reps = o.quick ? 1 : 3;
  const auto per_device = typemesh::launch(2, [&] {
    const pair_mesh m({2});
    auto x = import_tensor<whole>(m, xs);
    allreduce_result r;
    for (int i = 0; i < o.warmup(); ++i) (void)typemesh::allreduce<ax>(x);
    typemesh::backend::cuda::synchronize("the allreduce warm-up");
    // A one-element allreduce lines the two devices up before the clock starts.
    (void)typemesh::allreduce<ax>(import_tensor<whole>(m, typemesh::host_tensor<float, shape<rows_dim>>(shape<rows_dim>{1})));
    const auto t0 = clock_type::now();
    decltype(typemesh::allreduce<ax>(x)) sum = x;
    for (int i = 0; i < reps; ++i) sum = typemesh::allreduce<ax>(x);
    typemesh::backend::cuda::synchronize("the timed allreduce");
    r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count() / reps;
    std::vector<float> ends(4);
    typemesh::backend::cuda::copy_bytes(ends.data(), sum.data(), 2 * sizeof(float));
    typemesh::backend::cuda::copy_bytes(ends.data() + 2, sum.data() + count - 2, 2 * sizeof(float));
    const std::size_t at[4] = {0, 1, std::size_t(count) - 2, std::size_t(count) - 1};
    for (int i = 0; i < 4; ++i) {
      const float want = 2 * xs.values()[at[i]];
      if (ends[i] != want && r.wrong.empty()) {
        r.wrong = typemesh::detail::cat("allreduce: element ", at[i], " is ", ends[i], ", not ", want);
      }
    }
    return r;
  });
  allreduce_result slowest = per_device[0];
  for (const auto& r : per_device) {
    slowest.seconds = std::max(slowest.seconds, r.seconds);
    if (slowest.wrong.empty()) slowest.wrong = r.wrong;
  }
  return slowest;
}

// The raw reference: cudaMemcpy of the same bytes GPU -> host -> GPU, into
// pageable host memory as the host communicator's staging buffers are.
double memcpy_round_trip(const options& o, std::int64_t count) {
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
  gpu_array a(static_cast<std::size_t>(count), "the round-trip reference");
  std::vector<float> staged(static_cast<std::size_t>(count));
  check(cudaMemset(a.p, 0, bytes), "cudaMemset", "the round-trip reference");
  const int reps = o.quick ? 1 : 3;
  auto trip = [&] {
    check(cudaMemcpy(staged.data(), a.p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", "GPU to host, round trip");
    check(cudaMemcpy(a.p, staged.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy", "host to GPU, round trip");
  };
  for (int i = 0; i < o.warmup(); ++i) trip();
  const auto t0 = clock_type::now();
  for (int i = 0; i < reps; ++i) trip();
  return std::chrono::duration<double>(clock_type::now() - t0).count() / reps;
}

// ------------------------------------------------------------------ training steps

struct step_result {
  double seconds = 0;  // mean of the timed steps
  double first_loss = 0, last_loss = 0;
  int steps_run = 0;
};

// Runs a network's step warmup + timed times; `time_one` times one call.
template <class TimeOne>
auto step_timer(int warmup, int timed, TimeOne time_one) {
  return [=](auto&& step) {
    step_result r;
    double total = 0;
    for (int i = 0; i < warmup + timed; ++i) {
      double loss = 0;
      const double s = time_one([&] { loss = step(); });
      if (i == 0) r.first_loss = loss;
      r.last_loss = loss;
      if (i >= warmup) total += s;
    }
    r.steps_run = warmup + timed;
    r.seconds = total / timed;
    return r;
  };
}

step_result gpu_step(const options& o, std::string_view name) {
  return on_one_gpu([&](const gpu_mesh& m) {
    event_pair e(typemesh::detail::cat("a training step of ", name, " on the GPU"));
    return typemesh_peer::network(name, m, step_timer(o.quick ? 0 : 2, o.quick ? 1 : 5, [&](auto&& call) {
                                    e.start();
                                    call();
                                    return e.stop();
                                  }));
  });
}

step_result host_step(const options& o, std::string_view name) {
  // One host device with all of the process's cores (the library's default).
  return typemesh::launch(1, [&] {
    const host_mesh m({1});
    return typemesh_peer::network(name, m, step_timer(o.quick ? 0 : 1, o.quick ? 1 : 3, [](auto&& call) {
                                    const auto t0 = clock_type::now();
                                    call();
                                    return std::chrono::duration<double>(clock_type::now() - t0).count();
                                  }));
  })[0];
}

// ------------------------------------------------------------------ program

[[noreturn]] void usage(const std::string& problem, int status = 2) {
  std::fprintf(status ? stderr : stdout,
               "typemesh-bench-gpu: %s\nusage: typemesh-bench-gpu [--quick] [--tf32] [--table FILE]\n",
               problem.c_str());
  std::exit(status);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--quick") o.quick = true;
    else if (a == "--tf32") o.tf32 = true;
    else if (a == "--table") {
      if (i + 1 >= argc) usage("--table needs a file name");
      o.table_file = argv[++i];
    } else if (a == "--help" || a == "-h") usage("typemesh on one CUDA GPU against cuBLAS, cudaMemcpy and the host", 0);
    else usage("unknown argument '" + std::string(a) + "'");
  }
  return o;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

class bench {
 public:
  explicit bench(options o) : o_(std::move(o)) {}

  // Runs f, which adds rows; when it throws, one row named `what` says why
  // and the program will exit 1.
  template <class F>
  void attempt(const std::string& what, F&& f) {
    std::fprintf(stderr, "typemesh-bench-gpu: %s ...\n", what.c_str());
    const auto t0 = clock_type::now();
    const std::size_t first_new = rows_.size();
    try {
      f();
    } catch (const std::exception& e) {
      fail(what, e.what());
    }
    // The new rows at once, so that a run cut short still shows them.
    for (std::size_t i = first_new; i < rows_.size(); ++i) std::fputs(("  " + line(rows_[i])).c_str(), stderr);
    std::fprintf(stderr, "typemesh-bench-gpu: %s: %.1f s\n", what.c_str(),
                 std::chrono::duration<double>(clock_type::now() - t0).count());
  }

  void fail(const std::string& what, std::string why) {
    // One table cell: no line breaks, no column bars.
    for (char& c : why) c = c == '\n' ? ' ' : c == '|' ? '/' : c;
    rows_.push_back({what, "-", NAN, "-", "-", "FAILED: " + why});
    ok_ = false;
  }

  int run() {
    reference fp32{"SGEMM FP32"}, tf32{"SGEMM TF32"}, copy{"D2D memcpy"};
    const std::int64_t elements = o_.quick ? (1 << 20) : (std::int64_t(1) << 26);  // 64M floats
    attempt("cuBLAS SGEMM FP32", [&] { fp32 = sgemm_peak(o_, rows_, false); });
    attempt("cuBLAS SGEMM TF32", [&] { tf32 = sgemm_peak(o_, rows_, true); });
    attempt("cudaMemcpy device to device", [&] { copy = memcpy_bandwidth(o_, rows_, elements); });

    layers(fp32, copy, "FP32 GEMMs");
    if (o_.tf32) {
      typemesh::set_gpu_math(typemesh::gpu_math::tf32);
      layers(tf32, copy, "TF32 GEMMs");
      typemesh::set_gpu_math(typemesh::gpu_math::fp32);
    }

    attempt("elementwise", [&] {
      const std::int64_t cols = o_.quick ? 1024 : 8192;
      const auto r = elementwise(o_, elements / cols, cols);
      const double n = double(elements) * sizeof(float);
      const std::string size = typemesh::detail::cat(elements / cols, " x ", cols, " floats");
      bandwidth_row("x + y", size, r.add, 3 * n, copy);
      bandwidth_row("relu(x)", size, r.relu, 2 * n, copy);
      bandwidth_row("x + bias[cols]", size, r.add_bias, 2 * n, copy);
      if (!r.wrong.empty()) fail("elementwise values", r.wrong);
    });

    attempt("allreduce", [&] {
      const std::int64_t count = o_.quick ? (1 << 20) : (std::int64_t(1) << 26);  // 256 MiB of floats
      const double bytes = double(count) * sizeof(float);
      const double raw = memcpy_round_trip(o_, count);
      const allreduce_result r = host_staged_allreduce(o_, count);
      const std::string size = typemesh::detail::cat(count * 4 >> 20, " MiB");
      rows_.push_back({"cudaMemcpy round trip GPU -> host -> GPU (reference)", size, 1e3 * raw,
                       gbytes(2 * bytes, raw), "-", "1.00"});
      rows_.push_back({"allreduce, host communicator, 2 devices on " + gpus_phrase(), size, 1e3 * r.seconds,
                       gbytes(2 * bytes, r.seconds), "round trip " + gbytes(2 * bytes, raw),
                       fixed(raw / r.seconds, 2)});
      if (!r.wrong.empty()) fail("allreduce values", r.wrong);
    });
    rows_.push_back({"allreduce, NCCL communicator vs raw NCCL", "-", NAN, "-", "raw ncclAllReduce",
                     gpus_ < 2 ? "n/a (1 GPU)" : "n/a (no NCCL communicator in this build)"});

    for (std::string_view name : typemesh_peer::network_names) {
      const std::string what = typemesh::detail::cat("training step ", name);
      attempt(what, [&] {
        const step_result g = gpu_step(o_, name), h = host_step(o_, name);
        const double host_ms = 1e3 * h.seconds, gpu_ms = 1e3 * g.seconds;
        rows_.push_back({what + " (1 GPU vs 1 host device, " + std::to_string(std::thread::hardware_concurrency()) +
                             " cores)",
                         "peer_networks.hpp", gpu_ms, "-", "host " + fixed(host_ms, 1) + " ms",
                         fixed(host_ms / gpu_ms, 2)});
        for (const auto* r : {&g, &h}) {
          if (!typemesh_peer::losses_plausible(name, r->steps_run, r->first_loss, r->last_loss)) {
            fail(what, typemesh::detail::cat(r == &g ? "GPU" : "host", " loss ", r->last_loss, " after ",
                                             r->steps_run, " steps from ", r->first_loss,
                                             " (not finite, or SGD on a fixed batch did not lower it)"));
          }
        }
      });
    }
    print();
    return ok_ ? 0 : 1;
  }

  void describe_device() {
    check(cudaGetDeviceCount(&gpus_), "cudaGetDeviceCount", "describing the machine");
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties", "describing GPU 0");
    device_ = typemesh::detail::cat(p.name, ", ", (p.totalGlobalMem >> 30), " GiB, sm_", p.major, p.minor);
    int driver = 0, runtime = 0;
    check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion", "describing the machine");
    check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion", "describing the machine");
    versions_ = typemesh::detail::cat("CUDA driver ", driver / 1000, ".", driver % 1000 / 10, ", runtime ",
                                      runtime / 1000, ".", runtime % 1000 / 10);
  }

 private:
  std::string gpus_phrase() const { return gpus_ < 2 ? "1 GPU" : "GPUs 0 and 1"; }

  void layers(const reference& gemm, const reference& copy, const std::string& math) {
    struct gemm_row {
      const char* what;
      layer_result (*run)(const options&);
    };
    for (const gemm_row r : {gemm_row{"dense (matmul + bias)", dense_layer}, gemm_row{"conv2d 3x3", conv_layer},
                             gemm_row{"LSTM step", lstm_layer}, gemm_row{"self-attention", attention_layer}}) {
      const std::string what = typemesh::detail::cat(r.what, ", forward + backward, ", math);
      attempt(what, [&] {
        const layer_result l = r.run(o_);
        rows_.push_back({what, l.size, 1e3 * l.seconds, tflops(l.work, l.seconds), gemm.text,
                         ratio_to(l.work / l.seconds, gemm)});
      });
    }
    if (math != "FP32 GEMMs") return;  // no GEMM in these two
    for (const gemm_row r : {gemm_row{"layer_norm", layer_norm_layer},
                             gemm_row{"softmax cross-entropy", softmax_xent_layer}}) {
      const std::string what = typemesh::detail::cat(r.what, ", forward + backward (bytes moved)");
      attempt(what, [&] {
        const layer_result l = r.run(o_);
        bandwidth_row(what, l.size, l.seconds, l.work, copy);
      });
    }
  }

  void bandwidth_row(const std::string& what, const std::string& size, double seconds, double bytes,
                     const reference& copy) {
    rows_.push_back({what, size, 1e3 * seconds, tbytes(bytes, seconds), copy.text, ratio_to(bytes / seconds, copy)});
  }

  static std::string line(const row& r) {
    return typemesh::detail::cat("| ", r.what, " | ", r.size, " | ", std::isnan(r.ms) ? std::string("-") : fixed(r.ms, 3),
                                 " | ", r.achieved, " | ", r.reference, " | ", r.ratio, " |\n");
  }

  void print() const {
    std::string t;
    t += typemesh::detail::cat("typemesh-bench-gpu on ", device_, " (", gpus_, " GPU", gpus_ == 1 ? "" : "s",
                               "; ", versions_, "), ", utc_now(), o_.quick ? ", --quick" : "",
                               o_.tf32 ? ", --tf32" : "", "\n\n");
    t += "| measurement | size | ms | achieved | reference | ratio |\n";
    t += "| --- | --- | ---: | ---: | --- | ---: |\n";
    for (const row& r : rows_) t += line(r);
    std::fputs(t.c_str(), stdout);
    std::fflush(stdout);
    if (!o_.table_file.empty()) {
      std::ofstream out(o_.table_file);
      out << t;
      if (!out) std::fprintf(stderr, "typemesh-bench-gpu: could not write %s\n", o_.table_file.c_str());
    }
  }

  options o_;
  std::vector<row> rows_;
  bool ok_ = true;
  int gpus_ = 0;
  std::string device_ = "?", versions_ = "?";
};

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (typemesh::backend::cuda::gpu_count() == 0) {
    std::printf("no CUDA GPU: skipped\n");
    return 0;
  }
  try {
    check(cudaSetDevice(0), "cudaSetDevice", "choosing GPU 0 for the references");
    bench b(o);
    b.describe_device();
    return b.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "typemesh-bench-gpu: %s\n", e.what());
    return 1;
  }
}

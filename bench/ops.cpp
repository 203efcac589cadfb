// typemesh-bench-ops: operations through typemesh against direct references
// measured in the same run.
//
//   matmul  einsum<b, n>(x[b, k], w[k, n]) on one device against one direct
//           cblas_sgemm call of the same sizes (target: ratio >= 0.9); also
//           w stored as [n, k] (a transposed GEMM operand, used in place) and
//           the data-parallel case: 2 devices with b split, each device's
//           einsum against the same 2 threads each calling sgemm on its half.
//   elementwise  x + y, relu(x) and x + bias (broadcast by dim name) on one
//           device against memcpy of the output's bytes (target >= 0.5).
//   layers  the RNNLM's two-layer LSTM (forward + backward over all time
//           steps, per time step) and a 3x3 SAME conv2d (forward + backward)
//           on one device: their achieved GFLOP/s next to the sgemm rate of
//           the GEMM shape each one reduces to, measured in the same run
//           (ratio = layer rate / sgemm rate).
//
// The direct sgemm references run on as many OpenBLAS threads as the device
// has kernel threads. typemesh keeps OpenBLAS at one thread and runs a
// product's blocks on its own threads; its next product sets OpenBLAS back.
//
//   small m  einsum of 32 rows (an LSTM step's and a small batch's products,
//           which typemesh computes with its own unpacked kernels) against
//           cblas_sgemm of the same sizes.
//   attention products  the logits and the weighted values of every (batch
//           entry, head) through two einsums against one cblas_sgemm call per
//           product with the same strides, on one thread.
//
// Method: one untimed warm-up whose result is checked against a direct
// computation (a wrong one exits with status 1: all the ctest smoke test
// asserts); then repetitions until --min-time-ms of timed work and at least
// --min-reps; the MEDIAN time is reported. ratio = reference time / typemesh
// time (1.0: as fast as the reference). GFLOP/s counts 2*b*k*n per matmul.
//
// Flags: --quick (small sizes, short runs), --min-time-ms T (default 200),
// --min-reps R (default 3).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <typemesh/typemesh.hpp>

#include "bench_support.hpp"

namespace {

struct b : typemesh::dim<"b"> {};
struct k : typemesh::dim<"k"> {};
struct n : typemesh::dim<"n"> {};
struct ax : typemesh::axis<"ax"> {};
using one_mesh = typemesh::mesh<"bench", ax>;
using typemesh::layout;
using typemesh::shape;

using clock_type = std::chrono::steady_clock;

// OpenBLAS threads for the direct references: the calling device's kernel
// threads, or `threads` where given.
void reference_blas_threads(int threads = typemesh::backend::host::kernel_threads()) {
  openblas_set_num_threads(threads);
}

struct options {
  bool quick = false;
  double min_time_s = 0.2;
  int min_reps = 3;
};

// Median seconds of f over repetitions.
template <class F>
double time_median(const options& o, F&& f) {
  std::vector<double> t;
  double total = 0;
  while (static_cast<int>(t.size()) < o.min_reps || total < o.min_time_s) {
    auto t0 = clock_type::now();
    f();
    double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    t.push_back(s);
    total += s;
    if (t.size() > 10000) break;
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Keeps a result alive until its memory has been written.
template <class Tensor>
void keep(const Tensor& t) {
  typemesh_bench::touch(t.local().data());
}

int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "WRONG RESULT: %s\n", what.c_str());
    ++failures;
  }
}

std::vector<float> random_floats(std::size_t count, unsigned seed) {
  std::vector<float> v(count);
  unsigned x = seed * 2654435761u + 1;
  for (auto& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>((x >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return v;
}

void row(const char* op, const std::string& size, double ours, double ref, double flops) {
  std::printf("%-30s %-14s %12.3f %12.3f %8.3f", op, size.c_str(), ours * 1e3, ref * 1e3, ref / ours);
  if (flops > 0) std::printf(" %10.2f %10.2f", flops / ours / 1e9, flops / ref / 1e9);
  std::printf("\n");
}

// --- matmul ------------------------------------------------------------------------

void matmul(const options& o, int bs, int ks, int ns, int devices) {
  const auto xs = random_floats(std::size_t(bs) * ks, 1), ws = random_floats(std::size_t(ks) * ns, 2);
  typemesh::host_tensor<float, shape<b, k>> hx({bs, ks}, xs);
  typemesh::host_tensor<float, shape<k, n>> hw({ks, ns}, ws);
  std::vector<float> wt(std::size_t(ks) * ns);  // w as [n, k]
  for (int i = 0; i < ks; ++i)
    for (int j = 0; j < ns; ++j) wt[std::size_t(j) * ks + i] = ws[std::size_t(i) * ns + j];
  typemesh::host_tensor<float, shape<n, k>> hwt({ns, ks}, wt);
  const double flops = 2.0 * bs * ks * ns;
  const std::string size = std::to_string(bs) + "x" + std::to_string(ks) + "x" + std::to_string(ns);

  std::vector<double> ours(devices), ours_t(devices), ref(devices), ref_t(devices);
  typemesh::launch(devices, [&](typemesh::device& dev) {
    one_mesh m({devices});
    auto x = typemesh::import_tensor<layout<b(ax)>>(m, hx);
    auto w = typemesh::import_tensor<layout<>>(m, hw);
    auto w_t = typemesh::import_tensor<layout<>>(m, hwt);
    const int rows = bs / devices;
    std::vector<float> c(std::size_t(rows) * ns);
    typemesh::group all{typemesh::devices::all(devices), "all"};

    // Warm-up and check against the direct call.
    auto y = typemesh::einsum<b, n>(x, w);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, ns, ks, 1.0f, x.local().data(), ks, ws.data(), ns,
                0.0f, c.data(), ns);
    bool same = true;
    for (std::size_t i = 0; i < c.size(); ++i) same = same && std::abs(c[i] - y.local()[i]) <= 1e-3f;
    check(same, "einsum " + size + " differs from sgemm");
    auto y2 = typemesh::einsum<b, n>(x, w_t);
    same = true;
    for (std::size_t i = 0; i < c.size(); ++i) same = same && std::abs(c[i] - y2.local()[i]) <= 1e-3f;
    check(same, "einsum with w as [n, k] " + size + " differs from sgemm");

    // Every device times its own calls; all devices run at once, as in a
    // data-parallel step.
    auto timed = [&](auto f) {
      dev.barrier(all);
      double t = time_median(o, f);
      dev.barrier(all);
      return t;
    };
    ours[dev.id()] = timed([&] { keep(typemesh::einsum<b, n>(x, w)); });
    reference_blas_threads();
    ref[dev.id()] = timed([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, ns, ks, 1.0f, x.local().data(), ks, ws.data(), ns,
                  0.0f, c.data(), ns);
      typemesh_bench::touch(c.data());
    });
    ours_t[dev.id()] = timed([&] { keep(typemesh::einsum<b, n>(x, w_t)); });
    reference_blas_threads();
    ref_t[dev.id()] = timed([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, ns, ks, 1.0f, x.local().data(), ks, wt.data(), ks,
                  0.0f, c.data(), ns);
      typemesh_bench::touch(c.data());
    });
  });
  auto worst = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  const std::string label = devices == 1 ? (bs <= 32 ? "matmul, small m" : "matmul")
                                         : "matmul, " + std::to_string(devices) + " dev b split";
  row(label.c_str(), size, worst(ours), worst(ref), flops / devices);
  row((label + ", w [n,k]").c_str(), size, worst(ours_t), worst(ref_t), flops / devices);
}

// --- attention's per-head products ------------------------------------------------

struct entry : typemesh::dim<"entry"> {};  // a batch entry
struct heads : typemesh::dim<"heads"> {};
struct query : typemesh::dim<"query"> {};
struct memory : typemesh::dim<"memory"> {};
struct depth : typemesh::dim<"depth"> {};

// logits = q . k^T and out = logits . v for every (batch entry, head), as
// attention computes them (q, k, v [batch, length, heads, depth]), through
// typemesh's einsums against one cblas_sgemm call per product with the same
// strides. On one thread: typemesh spreads the products over its threads,
// and OpenBLAS would cut each one.
void attention_products(const options& o, int bs, int hs, int ls, int ds) {
  const std::size_t qkv = std::size_t(bs) * ls * hs * ds, per_head = std::size_t(ls) * ls;
  const auto qs = random_floats(qkv, 6), ks = random_floats(qkv, 7), vs = random_floats(qkv, 8);
  const double flops = 2.0 * 2.0 * bs * hs * ls * ls * ds;
  const std::string size = std::to_string(bs) + "x" + std::to_string(hs) + "x" + std::to_string(ls) + "x" +
                           std::to_string(ds);
  double ours = 0, ref = 0;
  typemesh::launch({.devices = 1, .threads_per_device = 1}, [&](typemesh::device&) {
    one_mesh m({1});
    using in_shape = shape<entry, query, heads, depth>;
    using memory_shape = shape<entry, memory, heads, depth>;
    auto q = typemesh::import_tensor<layout<>>(m, typemesh::host_tensor<float, in_shape>({bs, ls, hs, ds}, qs));
    auto k = typemesh::import_tensor<layout<>>(m, typemesh::host_tensor<float, memory_shape>({bs, ls, hs, ds}, ks));
    auto v = typemesh::import_tensor<layout<>>(m, typemesh::host_tensor<float, memory_shape>({bs, ls, hs, ds}, vs));
    std::vector<float> logits(std::size_t(bs) * hs * per_head), out(qkv);
    const int ld = hs * ds;
    auto reference = [&] {
      for (int bi = 0; bi < bs; ++bi) {
        for (int h = 0; h < hs; ++h) {
          const std::size_t in = std::size_t(bi) * ls * ld + std::size_t(h) * ds;
          float* p = logits.data() + (std::size_t(bi) * hs + h) * per_head;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ls, ls, ds, 1.0f, qs.data() + in, ld, ks.data() + in,
                      ld, 0.0f, p, ls);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ls, ds, ls, 1.0f, p, ls, vs.data() + in, ld, 0.0f,
                      out.data() + in, ld);
        }
      }
      typemesh_bench::touch(out.data());
    };
    auto products = [&] {
      return typemesh::einsum<entry, query, heads, depth>(typemesh::einsum<entry, heads, query, memory>(q, k), v);
    };
    // Warm-up and check against the direct calls.
    const auto y = products();
    reference_blas_threads();
    reference();
    bool same = true;
    for (std::size_t i = 0; i < out.size(); ++i) same = same && std::abs(out[i] - y.local()[i]) <= 1e-3f;
    check(same, "attention products " + size + " differ from sgemm");
    ours = time_median(o, [&] { keep(products()); });
    reference_blas_threads();
    ref = time_median(o, reference);
  });
  row("attention products, 1 thread", size, ours, ref, flops);
}

// --- elementwise -------------------------------------------------------------------

void elementwise(const options& o, int bs, int ns) {
  const auto xs = random_floats(std::size_t(bs) * ns, 3), ys = random_floats(std::size_t(bs) * ns, 4),
             bias = random_floats(std::size_t(ns), 5);
  const std::size_t bytes = std::size_t(bs) * ns * sizeof(float);
  const std::string size = std::to_string(bs) + "x" + std::to_string(ns);
  typemesh::launch(1, [&] {
    one_mesh m({1});
    auto x = typemesh::import_tensor<layout<>>(m, typemesh::host_tensor<float, shape<b, n>>({bs, ns}, xs));
    auto y = typemesh::import_tensor<layout<>>(m, typemesh::host_tensor<float, shape<b, n>>({bs, ns}, ys));
    auto v = typemesh::import_tensor<layout<>>(m, typemesh::host_tensor<float, shape<n>>({ns}, bias));
    auto src = typemesh_bench::make_aligned_array<float>(xs.size()), dst = typemesh_bench::make_aligned_array<float>(xs.size());
    std::copy(xs.begin(), xs.end(), src.get());
    const double copy = time_median(o, [&] { typemesh_bench::reference_copy(dst.get(), src.get(), bytes); });

    auto sum = x + y;
    auto r = typemesh::relu(x);
    auto bsum = x + v;
    bool ok = true;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      ok = ok && sum.local()[i] == xs[i] + ys[i] && r.local()[i] == std::max(xs[i], 0.0f) &&
           bsum.local()[i] == xs[i] + bias[i % ns];
    }
    check(ok, "elementwise results " + size);
    row("x + y", size, time_median(o, [&] { keep(x + y); }), copy, 0);
    row("relu(x)", size, time_median(o, [&] { keep(typemesh::relu(x)); }), copy, 0);
    row("x + bias[n]", size, time_median(o, [&] { keep(x + v); }), copy, 0);
  });
}

// --- layers --------------------------------------------------------------------------

struct t_dim : typemesh::dim<"time"> {};
struct h_dim : typemesh::dim<"h"> {};
struct w_dim : typemesh::dim<"w"> {};
struct c_dim : typemesh::dim<"c"> {};
struct fh : typemesh::dim<"fh"> {};
struct fw : typemesh::dim<"fw"> {};
struct a1 : typemesh::axis<"a1"> {};
struct a2 : typemesh::axis<"a2"> {};
using lstm_mesh0 = typemesh::mesh<"lstm0", ax, a1, a2>;

// The sgemm rate (FLOP/s) of an m x k times k x n product on `threads`
// threads, in this run.
double sgemm_rate(const options& o, int m, int kk, int nn, int threads) {
  reference_blas_threads(threads);
  const auto a = random_floats(std::size_t(m) * kk, 7), bm = random_floats(std::size_t(kk) * nn, 8);
  std::vector<float> c(std::size_t(m) * nn);
  const double t = time_median(o, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, nn, kk, 1.0f, a.data(), kk, bm.data(), nn, 0.0f,
                c.data(), nn);
    typemesh_bench::touch(c.data());
  });
  return 2.0 * m * kk * nn / t;
}

void lstm_step(const options& o, int batch, int units, int steps) {
  const auto xs = random_floats(std::size_t(batch) * steps * units, 9);
  double t = 0;
  int threads = 1;
  typemesh::launch(1, [&] {
    threads = typemesh::backend::host::kernel_threads();
    lstm_mesh0 m0({1, 1, 1});
    auto x = typemesh::import_tensor<layout<>>(
        m0, typemesh::host_tensor<float, shape<b, t_dim, k>>({batch, steps, units}, xs));
    auto w0 = typemesh::variable<layout<>>(m0, "w0", shape<k, n>{2 * units, 4 * units}, typemesh::init::normal{0.1});
    auto w1 = typemesh::variable<layout<>>(m0, "w1", shape<k, n>{2 * units, 4 * units}, typemesh::init::normal{0.1});
    auto step = [&] {
      auto y = typemesh::lstm<t_dim>(x, std::array{w0, w1});
      typemesh::backward(typemesh::reduce_sum(y));
      w0.zero_grad(), w1.zero_grad();
    };
    step();
    check(std::isfinite(typemesh::export_tensor(w0).values()[0]), "lstm weights");
    t = time_median(o, step) / steps;
  });
  // Per step and layer: the forward GEMM, and two of the same size backward.
  const double flops = 2.0 * 3 * 2.0 * batch * (2.0 * units) * (4.0 * units);
  const double ref = sgemm_rate(o, batch, 2 * units, 4 * units, threads);
  std::printf("%-30s %-14s %12.3f %12s %8.3f %10.2f %10.2f\n", "lstm 2 layers fwd+bwd / step",
              (std::to_string(batch) + "x" + std::to_string(units)).c_str(), t * 1e3, "-", flops / t / ref,
              flops / t / 1e9, ref / 1e9);
}

void conv_layer(const options& o, int batch, int side, int cin, int cout) {
  const auto xs = random_floats(std::size_t(batch) * side * side * cin, 10);
  double t = 0;
  int threads = 1;
  typemesh::launch(1, [&] {
    threads = typemesh::backend::host::kernel_threads();
    one_mesh m({1});
    auto x = typemesh::import_tensor<layout<>>(
        m, typemesh::host_tensor<float, shape<b, h_dim, w_dim, c_dim>>({batch, side, side, cin}, xs));
    auto f = typemesh::variable<layout<>>(m, "f", shape<fh, fw, c_dim, n>{3, 3, cin, cout}, typemesh::init::normal{0.1});
    auto step = [&] {
      auto y = typemesh::conv2d<h_dim, w_dim, fh, fw>(x, f, {.strides = {1, 1}, .padding = typemesh::padding::same});
      typemesh::backward(typemesh::reduce_sum(y));
      f.zero_grad();
    };
    step();
    t = time_median(o, step);
  });
  const double fwd = 2.0 * batch * side * side * cout * 9.0 * cin;
  const double ref = sgemm_rate(o, batch * side * side, 9 * cin, cout, threads);
  // Forward, and the two products of the same size backward (filter; the input is not tracked here).
  const double flops = 2 * fwd;
  std::printf("%-30s %-14s %12.3f %12s %8.3f %10.2f %10.2f\n", "conv2d 3x3 fwd+bwd(filter)",
              (std::to_string(batch) + "x" + std::to_string(side) + "^2x" + std::to_string(cin) + "->" +
               std::to_string(cout))
                  .c_str(),
              t * 1e3, "-", flops / t / ref, flops / t / 1e9, ref / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true, o.min_time_s = 0.002, o.min_reps = 2;
    } else if (a == "--min-time-ms" && i + 1 < argc) {
      o.min_time_s = std::atof(argv[++i]) / 1e3;
    } else if (a == "--min-reps" && i + 1 < argc) {
      o.min_reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--min-time-ms T] [--min-reps R]\n", argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  typemesh_bench::print_machine();
  std::printf("%-30s %-14s %12s %12s %8s %10s %10s\n", "op", "size", "typemesh ms", "reference ms", "ratio",
              "GFLOP/s", "ref GFLOP/s");
  const std::vector<int> sizes = o.quick ? std::vector<int>{64, 128} : std::vector<int>{256, 512, 1024, 2048};
  for (int s : sizes) matmul(o, s, s, s, 1);
  if (o.quick) {
    matmul(o, 32, 64, 128, 1);
  } else {
    matmul(o, 32, 512, 2048, 1);   // an LSTM step of 512 units: [x, h] times the four gates' weights
    matmul(o, 32, 1024, 4096, 1);
  }
  for (int s : sizes) matmul(o, s, s, s, 2);
  // The peer Transformer's (16 x 8 heads of 128 x 64).
  if (o.quick) attention_products(o, 2, 2, 32, 16);
  else attention_products(o, 16, 8, 128, 64);
  std::printf("(elementwise: reference = memcpy of the output's bytes)\n");
  for (int s : sizes) elementwise(o, s, s);
  std::printf("(layers: ratio = achieved GFLOP/s / sgemm GFLOP/s of the same GEMM shape)\n");
  if (o.quick) {
    lstm_step(o, 8, 16, 3);
    conv_layer(o, 2, 8, 8, 8);
  } else {
    lstm_step(o, 64, 256, 8);
    lstm_step(o, 128, 512, 4);
    conv_layer(o, 8, 32, 64, 64);
    conv_layer(o, 16, 16, 128, 128);
  }
  if (failures) {
    std::fprintf(stderr, "%d wrong results\n", failures);
    return 1;
  }
  return 0;
}

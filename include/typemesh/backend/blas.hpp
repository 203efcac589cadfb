// Matrix multiplication through BLAS (cblas_sgemm / cblas_dgemm; OpenBLAS in
// the host build), the host's unpacked kernels for float products of at most
// 32 rows (host/small_gemm.hpp) and for those whose op(B) fits the L1 cache
// (host/narrow_gemm.hpp), and a plain loop for element types BLAS lacks.
//
// BLAS runs on the device's own kernel threads, not on its own: OpenBLAS
// is kept at one thread and a large product is cut into one block of C per
// kernel thread (host::pool()). With two pools, OpenBLAS's threads spun
// between its calls on the cores the device's helpers need for the kernels
// in between, and the helpers woke too late to take their part (on 2 cores
// the seed AlexNet's step ran at 1.15x its one-thread speed at two threads).
// The cores are the machine's, or as many as the user gives BLAS with
// OPENBLAS_NUM_THREADS (else GOTO_NUM_THREADS, else OMP_NUM_THREADS, the
// order OpenBLAS reads them in), divided among the simulated devices
// (launch_options::threads_per_device).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>

#include "typemesh/backend/host/narrow_gemm.hpp"
#include "typemesh/backend/host/small_gemm.hpp"
#include "typemesh/backend/parallel.hpp"
#include "typemesh/backend/host/thread_pool.hpp"
#include "typemesh/core/space.hpp"

namespace typemesh::backend {

// The cores BLAS may use in this process: the first of the variables that
// is a positive decimal integer, else `hardware` (at least 1). A variable
// that is set but not such a number is skipped, as OpenBLAS skips it.
inline int blas_cores(const char* openblas_num_threads, const char* goto_num_threads, const char* omp_num_threads,
                      unsigned hardware) {
  for (const char* v : {openblas_num_threads, goto_num_threads, omp_num_threads}) {
    if (v == nullptr) continue;
    const std::string_view text(v);
    int n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec == std::errc() && end == text.data() + text.size() && n > 0) return n;
  }
  return std::max(1u, hardware);
}

// This process's cores for BLAS, read once.
inline int blas_cores() {
  static const int cores = blas_cores(std::getenv("OPENBLAS_NUM_THREADS"), std::getenv("GOTO_NUM_THREADS"),
                                      std::getenv("OMP_NUM_THREADS"), std::thread::hardware_concurrency());
  return cores;
}

// BLAS threads per device when `devices` devices share blas_cores().
inline int blas_threads_per_device(int devices) { return std::max(1, blas_cores() / std::max(1, devices)); }

// Keeps OpenBLAS at one thread: the device's kernel threads run its calls in
// parallel instead (gemm below). Checked at every product, so a program that
// gave OpenBLAS more threads for its own calls gets it back at one.
inline void blas_single_threaded() {
#if defined(OPENBLAS_VERSION)
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
#endif
}

// OpenBLAS picks its kernels for the CPU when it loads. A release older than
// the CPU does not know it and falls back to kernels for CPUs without AVX2
// (Debian 12's 0.3.21 runs its Prescott kernels on Emerald Rapids Xeons,
// where the peer benchmark's steps that are mostly GEMMs took 3.6-7x as long:
// docs/backend.md). OpenBLAS reads OPENBLAS_CORETYPE only when it loads, so
// typemesh can only say so. This is what to say where OpenBLAS runs the
// kernels of `core` on a CPU with those instruction sets and the user has
// not chosen a core (OPENBLAS_CORETYPE unset); empty where there is nothing.
inline std::string blas_kernel_advice(std::string_view core, bool coretype_set, bool avx2, bool avx512) {
  constexpr std::string_view without_avx2[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                               "Atom", "Sandybridge", "Katmai", "Coppermine", "Northwood",
                                               "Banias", "Barcelona", "Bobcat", "Bulldozer", "Piledriver",
                                               "Steamroller"};
  const bool generic = std::find(std::begin(without_avx2), std::end(without_avx2), core) != std::end(without_avx2);
  if (coretype_set || !avx2 || !generic) return {};
  const std::string_view better = avx512 ? "SkylakeX" : "Haswell";
  return "typemesh: OpenBLAS does not know this CPU and runs its " + std::string(core) +
         " kernels, written for CPUs without AVX2; this CPU has " + (avx512 ? "AVX-512" : "AVX2") +
         ", and matrix products run several times slower. Set OPENBLAS_CORETYPE=" + std::string(better) +
         " in the environment, or install an OpenBLAS that knows this CPU.\n";
}

// Prints blas_kernel_advice once per process (once per node under MPI: on
// local rank 0), at the first BLAS product.
inline void advise_on_blas_kernels() {
#if defined(OPENBLAS_VERSION) && defined(__x86_64__)
  static const bool once = [] {
    for (const char* local_rank : {std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"), std::getenv("MPI_LOCALRANKID")})
      if (local_rank != nullptr && std::string_view(local_rank) != "0") return true;
    const char* core = openblas_get_corename();
    const std::string advice = blas_kernel_advice(core ? core : "", std::getenv("OPENBLAS_CORETYPE") != nullptr,
                                                  __builtin_cpu_supports("avx2"), __builtin_cpu_supports("avx512f"));
    if (!advice.empty()) std::fputs(advice.c_str(), stderr);
    return true;
  }();
  (void)once;
#endif
}

// Where block p of `blocks` blocks of `cut` rows (or columns) starts:
// boundaries on multiples of 16, the last block ending at `cut`.
inline std::int64_t blas_block_begin(std::int64_t cut, int blocks, int p) {
  return p == blocks ? cut : cut * p / blocks / 16 * 16;
}

// How many blocks of C a BLAS product is cut into: one per kernel thread,
// fewer where a block would hold under 2^21 multiply-adds (the repeated
// packing of the other operand and the call would then weigh; OpenBLAS also
// computes products below about 10^6 unblocked on some CPUs). One block, one
// call, on one thread. Blocks change where an element's tile falls in
// OpenBLAS's kernels, and with it the order of its sum: as with OpenBLAS's
// own threads, a product's last bits may differ between thread counts.
inline int blas_blocks(std::int64_t m, std::int64_t n, std::int64_t k) {
  constexpr std::int64_t least = std::int64_t(1) << 21;
  const std::int64_t cut = std::max(m, n), across = std::min(m, n) * k;
  for (int blocks = static_cast<int>(std::min<std::int64_t>(host::kernel_threads(), cut / 16)); blocks > 1;
       --blocks) {
    bool large = true;
    for (int p = 0; p < blocks && large; ++p) {
      large = (blas_block_begin(cut, blocks, p + 1) - blas_block_begin(cut, blocks, p)) * across > least;
    }
    if (large) return blocks;
  }
  return 1;
}

template <class T>
void blas_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
               std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

// On the host space, C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C, row-major;
// op is a transpose when the flag says so. lda, ldb, ldc are row strides.
template <class T>
void gemm(host_space, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    // Few rows: read B in place instead of having BLAS pack it (host/small_gemm.hpp).
    if (const auto isa = host::small_gemm_suits(trans_a, trans_b, m, n, k); isa != host::simd_isa::none) {
      host::small_gemm(isa, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
    // op(B) small enough to stay in L1 (attention's per-head products):
    // copy it once and stream A past it (host/narrow_gemm.hpp).
    if (const auto isa = host::narrow_gemm_suits(trans_b, m, n, k); isa != host::simd_isa::none) {
      host::narrow_gemm(isa, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    advise_on_blas_kernels();
    blas_single_threaded();
    const int blocks = host::inside_kernel() ? 1 : blas_blocks(m, n, k);
    if (blocks == 1) {
      blas_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
    // Blocks of rows of C (each with its rows of op(A) and all of op(B)), or
    // of columns where C is wider than tall.
    const bool by_rows = m >= n;
    const std::int64_t cut = by_rows ? m : n;
    parallel_tasks(host_space{}, blocks, [&](int p) {
      const std::int64_t begin = blas_block_begin(cut, blocks, p), end = blas_block_begin(cut, blocks, p + 1);
      if (by_rows) {
        blas_gemm(trans_a, trans_b, end - begin, n, k, alpha, a + (trans_a ? begin : begin * lda), lda, b, ldb, beta,
                  c + begin * ldc, ldc);
      } else {
        blas_gemm(trans_a, trans_b, m, end - begin, k, alpha, a, lda, b + (trans_b ? begin * ldb : begin), ldb, beta,
                  c + begin, ldc);
      }
    });
  } else {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        T acc{};
        for (std::int64_t p = 0; p < k; ++p) {
          acc += (trans_a ? a[p * lda + i] : a[i * lda + p]) * (trans_b ? b[j * ldb + p] : b[p * ldb + j]);
        }
        c[i * ldc + j] = alpha * acc + beta * c[i * ldc + j];
      }
    }
  }
}

}  // namespace typemesh::backend

#if defined(TYPEMESH_CUDA)
#include "typemesh/backend/cuda/blas.hpp"
#endif

namespace typemesh::backend {

// `count` products C_i = alpha * op(A_i) * op(B_i) + beta * C_i as gemm,
// where X_i = x + i * stride_x. On the host, as many products as threads or
// more are spread over the kernel threads, each product whole on one
// (attention's per-head products are each too small to cut); fewer run one
// after another, each cut as gemm cuts it. The CUDA space has its own (one
// strided-batched cuBLAS call).
template <class Space, class T>
void gemm_batched(Space s, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                  const T* a, std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                  std::int64_t stride_b, T beta, T* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t count) {
  const auto product = [&](std::int64_t i) {
    gemm(s, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c,
         ldc);
  };
  if constexpr (std::is_same_v<Space, host_space>) {
    if (count > 1 && count >= host::kernel_threads()) {
      // At least 2^18 multiply-adds (some microseconds) a thread.
      const std::int64_t work = std::max<std::int64_t>(1, m * n * k);
      parallel_for(s, count, product, std::max<std::int64_t>(1, (std::int64_t(1) << 18) / work));
      return;
    }
  }
  for (std::int64_t i = 0; i < count; ++i) product(i);
}

}  // namespace typemesh::backend

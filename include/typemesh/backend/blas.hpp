// Matrix multiplication through BLAS (cblas_sgemm / cblas_dgemm; OpenBLAS in
// the host build), the host's unpacked kernels for float products of at most
// 32 rows (host/small_gemm.hpp), and a plain loop for element types BLAS
// lacks.
//
// Simulated devices are threads sharing the machine's cores, so BLAS gets
// cores / devices threads each (at least one): without that, 8 devices on 2
// cores would each start 2 BLAS threads and spend their time switching. The
// cores are the machine's, or as many as the user gives BLAS with
// OPENBLAS_NUM_THREADS (else GOTO_NUM_THREADS, else OMP_NUM_THREADS, the
// order OpenBLAS reads them in): OPENBLAS_NUM_THREADS=1 means one thread.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <type_traits>

#include "typemesh/backend/host/small_gemm.hpp"
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

// Gives BLAS the calling device's kernel threads (host::kernel_threads(),
// which launch sets). Operations call it before their local products; cheap
// when nothing changes.
inline void share_blas_threads() {
#if defined(OPENBLAS_VERSION)
  static std::atomic<int> current{0};
  const int want = host::kernel_threads();
  if (current.exchange(want) != want) openblas_set_num_threads(want);
#endif
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
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else {
      cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
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
// where X_i = x + i * stride_x: one after another, in order. The CUDA space
// has its own (one strided-batched cuBLAS call).
template <class Space, class T>
void gemm_batched(Space s, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                  const T* a, std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                  std::int64_t stride_b, T beta, T* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) {
    gemm(s, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c,
         ldc);
  }
}

}  // namespace typemesh::backend

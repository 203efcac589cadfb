// Matrix multiplication through BLAS (cblas_sgemm / cblas_dgemm; OpenBLAS in
// the host build), and a plain loop for element types BLAS lacks.
//
// Simulated devices are threads sharing the machine's cores, so BLAS gets
// cores / devices threads each (at least one): without that, 8 devices on 2
// cores would each start 2 BLAS threads and spend their time switching.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>

namespace typemesh::backend {

// Sets the BLAS thread count for `devices` devices sharing this machine's
// cores. Operations call it before their local products; cheap when nothing
// changes.
inline void share_blas_threads(int devices) {
#if defined(OPENBLAS_VERSION)
  static std::atomic<int> current{0};
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int want = std::max(1, cores / std::max(1, devices));
  if (current.exchange(want) != want) openblas_set_num_threads(want);
#else
  (void)devices;
#endif
}

// C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C, row-major;
// op is a transpose when the flag says so. lda, ldb, ldc are row strides.
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
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

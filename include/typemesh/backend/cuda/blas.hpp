// Matrix multiplication on the CUDA space: cuBLAS, one handle per thread and
// GPU, on the thread's stream, which the other kernels use.
//
// FP32 products are exact FP32 by default. set_gpu_math(gpu_math::tf32)
// lets cuBLAS use TF32 tensor cores (about 10 mantissa bits per product,
// FP32 accumulation), and gpu_math::bf16 BF16 ones; both trade accuracy for
// speed, so the gradient checks run at fp32. FP64 is unaffected.
#pragma once

#include <cublas_v2.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "typemesh/backend/cuda/runtime.hpp"
#include "typemesh/core/space.hpp"

namespace typemesh {

// How cuBLAS may compute FP32 products (process-wide).
enum class gpu_math { fp32, tf32, bf16 };

namespace backend::cuda {
inline std::atomic<gpu_math>& math_setting() {
  static std::atomic<gpu_math> m{gpu_math::fp32};
  return m;
}

inline void check_blas(cublasStatus_t status, std::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  int gpu = -1;
  (void)cudaGetDevice(&gpu);
  throw device_error(typemesh::detail::cat(call, " failed on GPU ", gpu, ": ", cublasGetStatusName(status), " (",
                                           cublasGetStatusString(status), ")"));
}

// This thread's handle for its current GPU, made on first use.
inline cublasHandle_t blas_handle() {
  struct handles {
    std::unordered_map<int, cublasHandle_t> by_gpu;
    ~handles() {
      for (auto& [gpu, h] : by_gpu) (void)cublasDestroy(h);
    }
  };
  thread_local handles mine;
  int gpu = 0;
  check(cudaGetDevice(&gpu), "cudaGetDevice", "choosing the cuBLAS handle");
  auto [it, made] = mine.by_gpu.try_emplace(gpu, nullptr);
  if (made) {
    check_blas(cublasCreate(&it->second), "cublasCreate");
    check_blas(cublasSetStream(it->second, stream()), "cublasSetStream");
  }
  return it->second;
}

inline cublasComputeType_t fp32_compute(gpu_math m) {
  switch (m) {
    case gpu_math::tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case gpu_math::bf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case gpu_math::fp32: break;
  }
  return CUBLAS_COMPUTE_32F;
}
}  // namespace backend::cuda

inline void set_gpu_math(gpu_math m) { backend::cuda::math_setting().store(m); }

namespace backend {

namespace cuda {
// What a cuBLAS product call needs besides its pointers, after checking
// that every size and row stride fits cuBLAS's 32-bit ints.
struct gemm_call_setup {
  cublasOperation_t ta, tb;
  cudaDataType_t type;
  cublasComputeType_t compute;
};
template <class T>
gemm_call_setup gemm_call(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                          std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  for (std::int64_t v : {m, n, k, lda, ldb, ldc}) {
    if (v > std::numeric_limits<int>::max()) {
      throw shape_error(typemesh::detail::cat("a GPU matrix product of ", m, " x ", k, " by ", k, " x ", n,
                                              " has a size or row stride over cuBLAS's 32-bit limit"));
    }
  }
  return {trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
          std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F,
          std::is_same_v<T, float> ? fp32_compute(math_setting().load()) : CUBLAS_COMPUTE_64F};
}
}  // namespace cuda

// On the CUDA space, C (m x n) = alpha * op(A) * op(B) + beta * C, row-major,
// as the host's gemm. cuBLAS is column-major: a row-major C is a column-major
// C^T = op(B)^T op(A)^T, so A and B swap places.
template <class T>
void gemm(cuda_space, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "typemesh: matrix products on the CUDA space are float or double");
  if (m == 0 || n == 0) return;
  const auto [ta, tb, type, compute] = cuda::gemm_call<T>(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  cuda::check_blas(cublasGemmEx(cuda::blas_handle(), tb, ta, static_cast<int>(n), static_cast<int>(m),
                                static_cast<int>(k), &alpha, b, type, static_cast<int>(ldb), a, type,
                                static_cast<int>(lda), &beta, c, type, static_cast<int>(ldc), compute,
                                CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
}

// `count` products at a uniform stride per operand (X_i = x + i * stride_x),
// as the host's gemm_batched, in one cublasGemmStridedBatchedEx call: a loop
// of gemm calls pays a launch per product, which for attention's many small
// products costs more than the products.
template <class T>
void gemm_batched(cuda_space s, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                  const T* a, std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                  std::int64_t stride_b, T beta, T* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t count) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "typemesh: matrix products on the CUDA space are float or double");
  if (count <= 0 || m == 0 || n == 0) return;
  if (count == 1 || count > std::numeric_limits<int>::max()) {
    for (std::int64_t i = 0; i < count; ++i) {
      gemm(s, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
           c + i * stride_c, ldc);
    }
    return;
  }
  const auto [ta, tb, type, compute] = cuda::gemm_call<T>(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  // Column-major, as gemm: C_i^T = op(B_i)^T op(A_i)^T.
  cuda::check_blas(
      cublasGemmStridedBatchedEx(cuda::blas_handle(), tb, ta, static_cast<int>(n), static_cast<int>(m),
                                 static_cast<int>(k), &alpha, b, type, static_cast<int>(ldb),
                                 static_cast<long long>(stride_b), a, type, static_cast<int>(lda),
                                 static_cast<long long>(stride_a), &beta, c, type, static_cast<int>(ldc),
                                 static_cast<long long>(stride_c), static_cast<int>(count), compute,
                                 CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

}  // namespace backend
}  // namespace typemesh

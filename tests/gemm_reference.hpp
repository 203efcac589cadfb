// A GEMM's element by a double loop, for the tests of the products that
// backend::gemm and the host kernels compute.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace tt {

struct dot_and_scale {
  double dot;    // element (i, j) of op(A) op(B), summed in double
  double scale;  // the sum of its terms' magnitudes: what bounds its rounding
};

// `g` describes the product as BLAS does, row-major: trans_a, trans_b, k,
// lda, ldb (A is m x k, or k x m stored when transposed; B likewise).
template <class Product, class T>
dot_and_scale reference_dot(const Product& g, const T* a, const T* b, std::int64_t i, std::int64_t j) {
  dot_and_scale r{0, 0};
  for (std::int64_t p = 0; p < g.k; ++p) {
    const double x = g.trans_a ? a[static_cast<std::size_t>(p * g.lda + i)] : a[static_cast<std::size_t>(i * g.lda + p)];
    const double y = g.trans_b ? b[static_cast<std::size_t>(j * g.ldb + p)] : b[static_cast<std::size_t>(p * g.ldb + j)];
    r.dot += x * y;
    r.scale += std::abs(x * y);
  }
  return r;
}

}  // namespace tt

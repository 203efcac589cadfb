// Local kernels over named-dim index spaces, untyped in the dims: an operand
// is a dense row-major array described by the ids of its dims (positions in
// one list shared by the operands of a call) and their local extents. The
// ops layer builds these descriptors from the dim types at compile time, so
// every kernel here is compiled once per element type, not once per shape.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/parallel.hpp"

namespace typemesh::backend {

inline constexpr std::size_t max_rank = 8;

// An operand's dims (ids into the call's dim list) and their extents.
struct dims {
  int rank = 0;
  std::array<int, max_rank> id{};
  std::array<std::int64_t, max_rank> extent{};

  std::int64_t elements() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= extent[i];
    return n;
  }
  int position(int dim_id) const {
    for (int i = 0; i < rank; ++i)
      if (id[i] == dim_id) return i;
    return -1;
  }
  bool has(int dim_id) const { return position(dim_id) >= 0; }
  std::int64_t extent_of(int dim_id) const { return extent[position(dim_id)]; }

  // Row-major strides of this operand along each of `space`'s dims (0 where
  // the operand does not have the dim, so it repeats along it).
  std::array<std::int64_t, max_rank> strides_over(const dims& space) const {
    std::array<std::int64_t, max_rank> own{}, out{};
    std::int64_t s = 1;
    for (int i = rank; i-- > 0;) {
      own[i] = s;
      s *= extent[i];
    }
    for (int i = 0; i < space.rank; ++i) {
      int p = position(space.id[i]);
      out[i] = p < 0 ? 0 : own[p];
    }
    return out;
  }
};

namespace detail {

// Row-major walks over an index space as kernels see them: plain arrays,
// copied into each kernel. `rows` walks every dim but the last (each index
// of a kernel is one row), `fold` the dims an output element sums over.
template <std::size_t K>
struct strided_space {
  int rank = 0;
  std::int64_t extent[max_rank] = {};
  std::int64_t stride[K][max_rank] = {};

  // Offsets of operand j at the index `flat` of the space, row-major.
  TYPEMESH_KERNEL void offsets_at(std::int64_t flat, std::int64_t (&off)[K], int dims) const {
    for (std::size_t j = 0; j < K; ++j) off[j] = 0;
    for (int d = dims; d-- > 0;) {
      const std::int64_t c = flat % extent[d];
      flat /= extent[d];
      for (std::size_t j = 0; j < K; ++j) off[j] += c * stride[j][d];
    }
  }
};

template <std::size_t K>
strided_space<K> strided(const dims& space, const std::array<const dims*, K>& operands) {
  strided_space<K> s;
  s.rank = space.rank;
  for (int i = 0; i < space.rank; ++i) s.extent[i] = space.extent[i];
  for (std::size_t j = 0; j < K; ++j) {
    const auto st = operands[j]->strides_over(space);
    for (int i = 0; i < space.rank; ++i) s.stride[j][i] = st[i];
  }
  return s;
}

// The dims of `from` that `out` lacks, in from's order.
inline dims lacking(const dims& from, const dims& out) {
  dims r;
  for (int i = 0; i < from.rank; ++i) {
    if (!out.has(from.id[i])) {
      r.id[r.rank] = from.id[i];
      r.extent[r.rank++] = from.extent[i];
    }
  }
  return r;
}

// The kernels below are named structs, not lambdas: they call functions the
// caller passes (often lambdas local to the caller), which nvcc's extended
// lambdas may not capture.

// out[o] = fold over the dims od lacks (in the order of `summed`) of
// value(offsets), for every element o of od, each element on one thread in
// row-major order: the same order, and so the same bits, as one sequential
// walk over the whole space.
template <class T, std::size_t K, class Value, class Combine>
struct fold_kernel {
  T* out;
  strided_space<K> kept, summed;
  std::int64_t summed_elements;
  T init;
  Value value;
  Combine combine;

  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t o) const {
    std::int64_t base[K];
    kept.offsets_at(o, base, kept.rank);
    T acc = init;
    // Row by row of the summed dims, the last one walked by stride.
    const int last = summed.rank - 1;
    const std::int64_t inner = last < 0 ? 1 : summed.extent[last];
    const std::int64_t rows = inner == 0 ? 0 : summed_elements / inner;
    for (std::int64_t r = 0; r < rows; ++r) {
      std::int64_t off[K];
      summed.offsets_at(r, off, last < 0 ? 0 : last);
      for (std::size_t j = 0; j < K; ++j) off[j] += base[j];
      for (std::int64_t i = 0; i < inner; ++i) {
        acc = combine(acc, value(off));
        for (std::size_t j = 0; j < K; ++j) off[j] += last < 0 ? 0 : summed.stride[j][last];
      }
    }
    out[o] = acc;
  }
};

template <class Space, class T, std::size_t K, class Value, class Combine>
void fold_into(Space s, T* out, const dims& od, const strided_space<K>& kept, const strided_space<K>& summed,
               std::int64_t summed_elements, T init, Value value, Combine combine) {
  parallel_for(s, od.elements(),
               fold_kernel<T, K, Value, Combine>{out, kept, summed, summed_elements, init, value, combine},
               grain_for(summed_elements));
}

template <class T>
struct element_at {
  const T* x;
  TYPEMESH_KERNEL T operator()(const std::int64_t (&off)[1]) const { return x[off[0]]; }
};
template <class T>
struct product_at {
  const T* a;
  const T* b;
  TYPEMESH_KERNEL T operator()(const std::int64_t (&off)[2]) const { return a[off[0]] * b[off[1]]; }
};

// One row of a broadcast: the last dim of `sp` walked with x's stride; out
// is dense.
template <class T>
struct copy_rows_kernel {
  strided_space<2> sp;
  const T* x;
  T* out;
  TYPEMESH_KERNEL void operator()(std::int64_t row) const {
    std::int64_t o[2];
    sp.offsets_at(row, o, sp.rank - 1);
    const std::int64_t n = sp.rank ? sp.extent[sp.rank - 1] : 1, xs = sp.rank ? sp.stride[0][sp.rank - 1] : 0;
    T* to = out + o[1];
    const T* from = x + o[0];
    if (xs == 1) {
      for (std::int64_t i = 0; i < n; ++i) to[i] = from[i];
    } else if (xs == 0) {
      for (std::int64_t i = 0; i < n; ++i) to[i] = *from;
    } else {
      for (std::int64_t i = 0; i < n; ++i) to[i] = from[i * xs];
    }
  }
};

// One row of out = f(a, b).
template <class TA, class TB, class TO, class F>
struct binary_rows_kernel {
  strided_space<3> sp;
  const TA* a;
  const TB* b;
  TO* out;
  F f;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t row) const {
    std::int64_t o[3];
    sp.offsets_at(row, o, sp.rank - 1);
    const std::int64_t n = sp.rank ? sp.extent[sp.rank - 1] : 1;
    const std::int64_t as = sp.rank ? sp.stride[0][sp.rank - 1] : 0, bs = sp.rank ? sp.stride[1][sp.rank - 1] : 0;
    TO* to = out + o[2];
    const TA* x = a + o[0];
    const TB* y = b + o[1];
    // The common cases as loops the compiler vectorises: both operands
    // dense along the row, or one of them constant along it.
    if (as == 1 && bs == 1) {
      for (std::int64_t i = 0; i < n; ++i) to[i] = f(x[i], y[i]);
    } else if (as == 1 && bs == 0) {
      for (std::int64_t i = 0; i < n; ++i) to[i] = f(x[i], *y);
    } else if (as == 0 && bs == 1) {
      for (std::int64_t i = 0; i < n; ++i) to[i] = f(*x, y[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) to[i] = f(x[i * as], y[i * bs]);
    }
  }
};

// The rows of a space (every dim but the last; one for a scalar) and their
// length.
inline std::int64_t rows_of(const dims& space) {
  const std::int64_t n = space.elements();
  if (n == 0 || space.rank == 0) return n;
  return n / space.extent[space.rank - 1];
}
inline std::int64_t row_length(const dims& space) { return space.rank ? space.extent[space.rank - 1] : 1; }

// Whether out's dims are x's innermost dims, in x's order (and out has
// some): x is then [rows, out] and the reduction sums whole rows.
inline bool kept_innermost(const dims& xd, const dims& od) {
  if (od.rank == 0 || od.rank > xd.rank) return false;
  for (int i = 0; i < od.rank; ++i)
    if (xd.id[xd.rank - od.rank + i] != od.id[i]) return false;
  return true;
}

// A block of `width` outputs of a reduction over x's leading dims: x is
// [rows, cols]; out[c] folds x[r, c] for r = 0, 1, ... in that order (the
// order of the general kernel, so the same bits), a row of the block at a
// time, so the reads are contiguous instead of one column at a time.
template <class T, class Combine>
struct fold_rows_kernel {
  const T* x;
  T* out;
  std::int64_t rows, cols, width;
  T init;
  Combine combine;
  TYPEMESH_CALLS_CALLER
  TYPEMESH_KERNEL void operator()(std::int64_t block) const {
    const std::int64_t c0 = block * width, c1 = c0 + width < cols ? c0 + width : cols;
    for (std::int64_t c = c0; c < c1; ++c) out[c] = init;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * cols;
      for (std::int64_t c = c0; c < c1; ++c) out[c] = combine(out[c], row[c]);
    }
  }
};

}  // namespace detail

}  // namespace typemesh::backend

// The CUDA space's own versions, declared before the functions below that
// call them.
#if defined(TYPEMESH_CUDA)
#include "typemesh/backend/cuda/strided.hpp"
#endif

namespace typemesh::backend {

// out (dims `od`) = x (dims `xd`) with every dim of od; dims of od that x
// lacks repeat x. Transposes, copies and broadcasts.
template <class Space, class T>
void broadcast(Space s, const T* x, const dims& xd, T* out, const dims& od) {
  parallel_for(s, detail::rows_of(od), detail::copy_rows_kernel<T>{detail::strided<2>(od, {&xd, &od}), x, out},
               grain_for(detail::row_length(od)));
}

// out (dims `od`, a subset of x's) = x reduced over the dims od lacks, with
// `combine` (sum, max, ...) starting from `init`.
template <class Space, class T, class Combine>
void reduce(Space s, const T* x, const dims& xd, T* out, const dims& od, T init, Combine combine) {
  const dims summed = detail::lacking(xd, od);
  if constexpr (std::is_same_v<Space, host_space>) {
    // Sums over leading dims (a bias's gradient: over batch and length):
    // whole rows at a time, as a host core reads memory best.
    if (detail::kept_innermost(xd, od) && summed.elements() > 1) {
      constexpr std::int64_t width = 512;
      const std::int64_t cols = od.elements(), rows = summed.elements();
      parallel_for(s, (cols + width - 1) / width,
                   detail::fold_rows_kernel<T, Combine>{x, out, rows, cols, width, init, combine},
                   grain_for(rows * width));
      return;
    }
  }
  detail::fold_into(s, out, od, detail::strided<1>(od, {&xd}), detail::strided<1>(summed, {&xd}),
                    summed.elements(), init, detail::element_at<T>{x}, combine);
}

// out = f(a, b) over out's dims, each of a and b broadcast along the dims it
// lacks.
template <class Space, class TA, class TB, class TO, class F>
void binary(Space s, const TA* a, const dims& ad, const TB* b, const dims& bd, TO* out, const dims& od, F f) {
  parallel_for(s, detail::rows_of(od),
               detail::binary_rows_kernel<TA, TB, TO, F>{detail::strided<3>(od, {&ad, &bd, &od}), a, b, out, f},
               grain_for(detail::row_length(od)));
}

// The union of the operands' dims, out's first: the index space of a
// contraction.
inline dims union_of(const dims& out, const dims& a, const dims& b) {
  dims u = out;
  for (const dims* d : {&a, &b}) {
    for (int i = 0; i < d->rank; ++i) {
      if (!u.has(d->id[i])) {
        u.id[u.rank] = d->id[i];
        u.extent[u.rank++] = d->extent[i];
      }
    }
  }
  return u;
}

}  // namespace typemesh::backend

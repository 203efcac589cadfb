// Local kernels over named-dim index spaces, untyped in the dims: an operand
// is a dense row-major array described by the ids of its dims (positions in
// one list shared by the operands of a call) and their local extents. The
// ops layer builds these descriptors from the dim types at compile time, so
// every kernel here is compiled once per element type, not once per shape.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>

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

// Calls f(offsets) for every index of `space` in row-major order, where
// offsets[j] is the element offset of operand j, from its strides.
template <std::size_t K, class F>
void walk(const dims& space, const std::array<std::array<std::int64_t, max_rank>, K>& stride, F&& f) {
  const int r = space.rank;
  if (space.elements() == 0) return;
  std::array<std::int64_t, K> off{};
  if (r == 0) {
    f(off);
    return;
  }
  std::array<std::int64_t, max_rank> idx{};
  const std::int64_t inner = space.extent[r - 1];
  while (true) {
    std::array<std::int64_t, K> o = off;
    for (std::int64_t i = 0; i < inner; ++i) {
      f(o);
      for (std::size_t j = 0; j < K; ++j) o[j] += stride[j][r - 1];
    }
    int d = r - 2;
    for (; d >= 0; --d) {
      for (std::size_t j = 0; j < K; ++j) off[j] += stride[j][d];
      if (++idx[d] < space.extent[d]) break;
      for (std::size_t j = 0; j < K; ++j) off[j] -= stride[j][d] * space.extent[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// out (dims `od`) = x (dims `xd`) with every dim of od; dims of od that x
// lacks repeat x. Transposes, copies and broadcasts.
template <class T>
void broadcast(const T* x, const dims& xd, T* out, const dims& od) {
  walk<2>(od, {xd.strides_over(od), od.strides_over(od)}, [&](const auto& o) { out[o[1]] = x[o[0]]; });
}

// out (dims `od`, a subset of x's) = x reduced over the dims od lacks, with
// `combine` (sum, max, ...) starting from `init`.
template <class T, class Combine>
void reduce(const T* x, const dims& xd, T* out, const dims& od, T init, Combine combine) {
  const std::int64_t n = od.elements();
  for (std::int64_t i = 0; i < n; ++i) out[i] = init;
  walk<2>(xd, {xd.strides_over(xd), od.strides_over(xd)},
          [&](const auto& o) { out[o[1]] = combine(out[o[1]], x[o[0]]); });
}

// out = f(a, b) over out's dims, each of a and b broadcast along the dims it
// lacks.
template <class TA, class TB, class TO, class F>
void binary(const TA* a, const dims& ad, const TB* b, const dims& bd, TO* out, const dims& od, F f) {
  walk<3>(od, {ad.strides_over(od), bd.strides_over(od), od.strides_over(od)},
          [&](const auto& o) { out[o[2]] = f(a[o[0]], b[o[1]]); });
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

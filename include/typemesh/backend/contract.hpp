// The local kernel of einsum: out = sum over the dims out lacks of a * b.
//
// The dims fall into groups: batch (in a, b and out), m (a and out), n (b and
// out) and k (a and b, summed). When those are all there is, the call is a
// batch of GEMMs, one per batch element. An operand is used in place when,
// for every batch element, its m and k dims form a matrix with a row stride
// (m dims merging into one dim, k dims into another, one of the two
// contiguous): the batch dims may sit anywhere, so q[batch, length, heads,
// d_k] against k[batch, memory, heads, d_k] over d_k needs no copy. Any
// other order is packed first. out is written in place when it is such a
// matrix or its transpose (then the product is computed transposed), else
// staged. Dims found in one input only, or in out only, take the general
// strided loop.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "typemesh/backend/blas.hpp"
#include "typemesh/backend/kernels.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/backend/strided.hpp"

namespace typemesh::backend {

namespace detail {

// The dims of `from` that satisfy `keep`, in from's order.
template <class Keep>
dims select(const dims& from, Keep keep) {
  dims out;
  for (int i = 0; i < from.rank; ++i) {
    if (keep(from.id[i])) {
      out.id[out.rank] = from.id[i];
      out.extent[out.rank++] = from.extent[i];
    }
  }
  return out;
}

inline dims concat(std::initializer_list<dims> parts) {
  dims out;
  for (const dims& p : parts) {
    for (int i = 0; i < p.rank; ++i) {
      out.id[out.rank] = p.id[i];
      out.extent[out.rank++] = p.extent[i];
    }
  }
  return out;
}

inline bool same_order(const dims& a, const dims& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.id[i] != b.id[i]) return false;
  return true;
}

// Row-major strides of x's own dims, by position.
inline std::array<std::int64_t, max_rank> own_strides(const dims& x) {
  std::array<std::int64_t, max_rank> st{};
  std::int64_t n = 1;
  for (int i = x.rank; i-- > 0;) {
    st[i] = n;
    n *= x.extent[i];
  }
  return st;
}

// The stride of `group`'s dims of x taken as one dim (their order kept):
// x's stride of the group's last dim, when each dim's stride is the next
// one's times its extent; 1 for an empty group; -1 when they do not merge.
inline std::int64_t merged_stride(const dims& x, const dims& group) {
  if (group.rank == 0) return 1;
  const auto st = own_strides(x);
  for (int i = 0; i + 1 < group.rank; ++i) {
    const int here = x.position(group.id[i]), next = x.position(group.id[i + 1]);
    if (st[here] != st[next] * group.extent[i + 1]) return -1;
  }
  return st[x.position(group.id[group.rank - 1])];
}

// One operand of the batch of GEMMs: for batch element i, the matrix of
// rows x cols (rows: the `rows` group, cols: the `cols` group) at
// data + offset(i), row stride ld, or its transpose when trans. Used in
// place where x's memory already is such a matrix for every batch element
// (the batch dims may sit anywhere, as attention's heads do), else packed
// into batch|rows|cols order first.
template <class Space, class T>
struct gemm_operand {
  const T* data;
  bool trans = false;
  std::int64_t ld = 1;
  std::array<std::int64_t, max_rank> batch_stride{};  // along the batch dims, in their order
  storage<T, Space> packed;

  gemm_operand(Space s, const T* x, const dims& xd, const dims& batch, const dims& rows, const dims& cols) {
    const std::int64_t r = merged_stride(xd, rows), c = merged_stride(xd, cols);
    const std::int64_t nr = std::max<std::int64_t>(1, rows.elements()), nc = std::max<std::int64_t>(1, cols.elements());
    const auto st = own_strides(xd);
    if (c == 1 && r >= 0) {
      data = x, trans = false, ld = rows.rank ? std::max(r, nc) : nc;
    } else if (r == 1 && c >= 0) {
      data = x, trans = true, ld = cols.rank ? std::max(c, nr) : nr;
    } else {
      const dims plain = concat({batch, rows, cols});
      packed.resize(plain.elements());
      broadcast(s, x, xd, view(packed).data(), plain);
      data = view(packed).data(), trans = false, ld = nc;
      std::int64_t n = nr * nc;
      for (int i = batch.rank; i-- > 0;) {
        batch_stride[i] = n;
        n *= batch.extent[i];
      }
      return;
    }
    for (int i = 0; i < batch.rank; ++i) batch_stride[i] = st[xd.position(batch.id[i])];
  }

  std::int64_t offset(const std::array<std::int64_t, max_rank>& at, int batch_rank) const {
    std::int64_t o = 0;
    for (int i = 0; i < batch_rank; ++i) o += at[i] * batch_stride[i];
    return o;
  }
};

// Whether contract's GEMMs write out in place (out a batch of m x n matrices
// or of their transposes, with a non-empty sum), so that they can also
// scale and add to what out holds.
inline bool gemm_writes_in_place(bool gemm_shaped, const dims& ad, const dims& bd, const dims& od) {
  if (!gemm_shaped) return false;
  const dims m = select(od, [&](int id) { return ad.has(id) && !bd.has(id); });
  const dims n = select(od, [&](int id) { return !ad.has(id) && bd.has(id); });
  const dims k = select(ad, [&](int id) { return bd.has(id) && !od.has(id); });
  if (k.elements() == 0) return false;
  const std::int64_t om = merged_stride(od, m), on = merged_stride(od, n);
  return (on == 1 && om >= 0) || (om == 1 && on >= 0);
}

}  // namespace detail

// out (dims od) = alpha * (sum over the dims od lacks of a (ad) * b (bd)) +
// beta * out; with the default alpha 1 and beta 0, out is overwritten (and
// not read: it may be uninitialised). Every dim's extent must agree between
// the operands. A product that BLAS writes in place takes alpha and beta
// into the GEMM (an optimizer's step folded into a weight gradient's
// product, optim/optimizers.hpp); the other paths compute the sum apart and
// then combine.
template <class Space, class T>
void contract(Space s, const T* a, const dims& ad, const T* b, const dims& bd, T* out, const dims& od,
              T alpha = T{1}, T beta = T{0}) {
  const dims space = union_of(od, ad, bd);
  bool gemm_shaped = true;
  for (int i = 0; i < space.rank; ++i) {
    const int id = space.id[i];
    const int count = ad.has(id) + bd.has(id) + od.has(id);
    if (count < 2) gemm_shaped = false;  // in one operand only
  }
  const bool overwrite = alpha == T{1} && beta == T{0};
  if (!overwrite && !detail::gemm_writes_in_place(gemm_shaped, ad, bd, od)) {
    storage<T, Space> sum(od.elements());
    contract(s, a, ad, b, bd, view(sum).data(), od);
    const T* from = view(sum).data();
    if (beta == T{0}) {
      map(s, from, out, od.elements(), [=] TYPEMESH_KERNEL(T x) { return alpha * x; });
    } else {
      zip(s, from, static_cast<const T*>(out), out, od.elements(),
          [=] TYPEMESH_KERNEL(T x, T o) { return alpha * x + beta * o; });
    }
    return;
  }
  if (!gemm_shaped) {
    const dims summed = detail::lacking(space, od);
    detail::fold_into(
        s, out, od, detail::strided<2>(od, {&ad, &bd}), detail::strided<2>(summed, {&ad, &bd}), summed.elements(),
        T{}, detail::product_at<T>{a, b}, plus<T>{});
    return;
  }
  using detail::select;
  const dims batch = select(od, [&](int id) { return ad.has(id) && bd.has(id); });
  const dims m = select(od, [&](int id) { return ad.has(id) && !bd.has(id); });
  const dims n = select(od, [&](int id) { return !ad.has(id) && bd.has(id); });
  const dims k = select(ad, [&](int id) { return bd.has(id) && !od.has(id); });
  const std::int64_t nb = batch.elements(), mm = m.elements(), nn = n.elements(), kk = k.elements();
  if (nb * mm * nn == 0) return;

  if (kk == 0) {  // empty sums (overwriting: gemm_writes_in_place is false here otherwise)
    fill(s, out, od.elements(), T{});
    return;
  }

  // out as a batch of m x n matrices, or of their transposes (then the
  // product is computed as out^T = b^T a^T), else staged in batch|m|n order.
  const std::int64_t om = detail::merged_stride(od, m), on = detail::merged_stride(od, n);
  const bool out_plain = on == 1 && om >= 0, transposed = !out_plain && om == 1 && on >= 0;
  storage<T, Space> staged;
  const dims out_order = detail::concat({batch, m, n});
  if (!out_plain && !transposed) staged.resize(od.elements());
  T* const c = staged.size() ? view(staged).data() : out;
  const dims& cd = staged.size() ? out_order : od;
  std::int64_t ldc = std::max<std::int64_t>(1, nn);  // staged, or plain with no m dims
  if (transposed) ldc = std::max(std::max<std::int64_t>(1, mm), on);
  else if (out_plain && m.rank) ldc = std::max(ldc, om);
  std::array<std::int64_t, max_rank> out_batch_stride{};
  const auto out_strides = detail::own_strides(cd);
  for (int i = 0; i < batch.rank; ++i) out_batch_stride[i] = out_strides[cd.position(batch.id[i])];

  detail::gemm_operand<Space, T> ga(s, a, ad, batch, m, k), gb(s, b, bd, batch, k, n);
  // The batch dims from `inner` on step every operand by one stride (each
  // dim's stride is the next one's times its extent, in a, b and out; the
  // last dim alone always does): one gemm_batched call covers them, the
  // outer ones are looped over.
  int inner = batch.rank > 0 ? batch.rank - 1 : 0;
  while (inner > 0) {
    const int d = inner;
    const auto merges = [&](const std::array<std::int64_t, max_rank>& st) {
      return st[d - 1] == st[d] * batch.extent[d];
    };
    if (!merges(ga.batch_stride) || !merges(gb.batch_stride) || !merges(out_batch_stride)) break;
    --inner;
  }
  std::int64_t count = 1, sa = 0, sb = 0, sc = 0;
  if (batch.rank > 0) {
    for (int d = inner; d < batch.rank; ++d) count *= batch.extent[d];
    sa = ga.batch_stride[batch.rank - 1], sb = gb.batch_stride[batch.rank - 1];
    sc = out_batch_stride[batch.rank - 1];
  }
  std::array<std::int64_t, max_rank> at{};
  for (std::int64_t i = 0; i < nb; i += count) {
    std::int64_t co = 0;
    for (int d = 0; d < batch.rank; ++d) co += at[d] * out_batch_stride[d];
    const T* pa = ga.data + ga.offset(at, batch.rank);
    const T* pb = gb.data + gb.offset(at, batch.rank);
    if (transposed) {
      gemm_batched(s, !gb.trans, !ga.trans, nn, mm, kk, alpha, pb, gb.ld, sb, pa, ga.ld, sa, beta, c + co, ldc, sc,
                   count);
    } else {
      gemm_batched(s, ga.trans, gb.trans, mm, nn, kk, alpha, pa, ga.ld, sa, pb, gb.ld, sb, beta, c + co, ldc, sc,
                   count);
    }
    for (int d = inner; d-- > 0;) {  // the next outer batch element, row-major
      if (++at[d] < batch.extent[d]) break;
      at[d] = 0;
    }
  }
  if (staged.size()) broadcast(s, view(staged).data(), out_order, out, od);
}

}  // namespace typemesh::backend

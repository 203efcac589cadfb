// The local kernel of einsum: out = sum over the dims out lacks of a * b.
//
// The dims fall into groups: batch (in a, b and out), m (a and out), n (b and
// out) and k (a and b, summed). When those are all there is, the call is a
// batch of GEMMs: an operand already ordered batch|m|k (or batch|k|m, a
// transposed GEMM operand) is used in place, any other order is packed
// first, and so is out. Dims found in one input only, or in out only, take
// the general strided loop.
#pragma once

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

// An operand as a GEMM wants it: in place when its order is `plain` or
// `transposed`, else packed into `plain` order.
template <class Space, class T>
struct gemm_operand {
  const T* data;
  bool trans;
  storage<T, Space> packed;

  gemm_operand(Space s, const T* x, const dims& xd, const dims& plain, const dims& transposed) {
    if (same_order(xd, plain)) {
      data = x, trans = false;
    } else if (same_order(xd, transposed)) {
      data = x, trans = true;
    } else {
      packed.resize(plain.elements());
      broadcast(s, x, xd, view(packed).data(), plain);
      data = view(packed).data(), trans = false;
    }
  }
};

}  // namespace detail

// out (dims od) = sum over the dims od lacks of a (ad) * b (bd); out is
// overwritten. Every dim's extent must agree between the operands.
template <class Space, class T>
void contract(Space s, const T* a, const dims& ad, const T* b, const dims& bd, T* out, const dims& od) {
  const dims space = union_of(od, ad, bd);
  bool gemm_shaped = true;
  for (int i = 0; i < space.rank; ++i) {
    const int id = space.id[i];
    const int count = ad.has(id) + bd.has(id) + od.has(id);
    if (count < 2) gemm_shaped = false;  // in one operand only
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

  detail::gemm_operand<Space, T> ga(s, a, ad, detail::concat({batch, m, k}), detail::concat({batch, k, m}));
  detail::gemm_operand<Space, T> gb(s, b, bd, detail::concat({batch, k, n}), detail::concat({batch, n, k}));
  const dims out_order = detail::concat({batch, m, n});
  const bool out_in_place = detail::same_order(od, out_order);
  storage<T, Space> staged;
  if (!out_in_place) staged.resize(od.elements());
  T* c = out_in_place ? out : view(staged).data();

  const std::int64_t nb = batch.elements(), mm = m.elements(), nn = n.elements(), kk = k.elements();
  if (kk == 0) {
    fill(s, c, nb * mm * nn, T{});
  } else {
    for (std::int64_t i = 0; i < nb; ++i) {
      gemm(s, ga.trans, gb.trans, mm, nn, kk, T{1}, ga.data + i * mm * kk, ga.trans ? mm : kk, gb.data + i * kk * nn,
           gb.trans ? kk : nn, T{0}, c + i * mm * nn, nn);
    }
  }
  if (!out_in_place) broadcast(s, view(staged).data(), out_order, out, od);
}

}  // namespace typemesh::backend

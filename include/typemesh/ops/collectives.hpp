// Collectives on distributed tensors, with gradients: what programs call.
// Each changes one dim's or axis's placement, computes its output layout at
// compile time, and records its dual as its gradient:
//
//   allconcat<k>(x)              k split over some axis  -> k whole        (allgather; gradient: allsplit)
//   allsplit<k, axis1>(x)        k whole, axis1 replicas -> k over axis1   (no traffic; gradient: allconcat)
//   allreduce<axis1>(x)          sums the replicas along axis1             (gradient: identity)
//   reduce_scatter<k, axis1>(x)  sums along axis1 and splits k over it     (gradient: allconcat)
//   alltoall<k, n>(x)            k split over an axis    -> n split over it (gradient: the alltoall back)
//
// The communication itself is tensor/collectives.hpp's typemesh::raw
// versions, which record nothing.
//
// Every device records each collective's gradient, also a device outside the
// mesh (which holds nothing): all devices then hold the same tape and run
// the same collectives backward.
#pragma once

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/tensor/collectives.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

// Declared first: each collective's gradient is another of them.
template <class D, class T, class S, class L, class M>
allconcat_t<D, T, S, L, M> allconcat(const tensor<T, S, L, M>& x);
template <class D, class A, class T, class S, class L, class M>
allsplit_t<D, A, T, S, L, M> allsplit(const tensor<T, S, L, M>& x);
template <class From, class To, class T, class S, class L, class M>
alltoall_t<From, To, T, S, L, M> alltoall(const tensor<T, S, L, M>& x);

template <class D, class T, class S, class L, class M>
allconcat_t<D, T, S, L, M> allconcat(const tensor<T, S, L, M>& x) {
  using out_t = allconcat_t<D, T, S, L, M>;
  auto out = raw::allconcat<D>(x);
  if constexpr (!collectives_detail::allconcat_ok<D, tensor<T, S, L, M>>()) {
    return out;
  } else {
    using A = typename L::template axis_of<D>;
    // Each device keeps its own part of the whole gradient.
    return record(std::move(out), "allconcat",
                  gradient_of(x, [](const out_t& dy) { return typemesh::allsplit<D, A>(dy); }));
  }
}

template <class D, class A, class T, class S, class L, class M>
allsplit_t<D, A, T, S, L, M> allsplit(const tensor<T, S, L, M>& x) {
  using out_t = allsplit_t<D, A, T, S, L, M>;
  auto out = raw::allsplit<D, A>(x);
  if constexpr (!collectives_detail::check_can_split<D, A, tensor<T, S, L, M>>()) {
    return out;
  } else {
    return record(std::move(out), "allsplit", gradient_of(x, [](const out_t& dy) { return typemesh::allconcat<D>(dy); }));
  }
}

template <class... As, class T, class S, class L, class M>
tensor<T, S, L, M> allreduce(const tensor<T, S, L, M>& x, reduce_op op = reduce_op::sum) {
  using in_t = tensor<T, S, L, M>;
  auto out = raw::allreduce<As...>(x, op);
  if (op != reduce_op::sum) return out;  // no gradient through a max
  // Every partial sum gets the whole sum's gradient.
  return record(std::move(out), "allreduce", gradient_of(x, [](const in_t& dy) { return dy.detached(); }));
}

template <class D, class A, class T, class S, class L, class M>
allsplit_t<D, A, T, S, L, M> reduce_scatter(const tensor<T, S, L, M>& x, reduce_op op = reduce_op::sum) {
  using out_t = allsplit_t<D, A, T, S, L, M>;
  auto out = raw::reduce_scatter<D, A>(x, op);
  if constexpr (!collectives_detail::check_can_split<D, A, tensor<T, S, L, M>>()) {
    return out;
  } else {
    if (op != reduce_op::sum) return out;
    return record(std::move(out), "reduce_scatter",
                  gradient_of(x, [](const out_t& dy) { return typemesh::allconcat<D>(dy); }));
  }
}

template <class From, class To, class T, class S, class L, class M>
alltoall_t<From, To, T, S, L, M> alltoall(const tensor<T, S, L, M>& x) {
  using out_t = alltoall_t<From, To, T, S, L, M>;
  auto out = raw::alltoall<From, To>(x);
  if constexpr (!collectives_detail::alltoall_ok<From, To, tensor<T, S, L, M>>()) {
    return out;
  } else {
    return record(std::move(out), "alltoall",
                  gradient_of(x, [](const out_t& dy) { return typemesh::alltoall<To, From>(dy); }));
  }
}

}  // namespace typemesh

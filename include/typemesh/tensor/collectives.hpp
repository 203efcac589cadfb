// Collectives on distributed tensors, named by the dims and axes they change.
// Each computes its output layout at compile time:
//
//   allconcat<k>(x)         k split over some axis  -> k whole       (allgather)
//   allsplit<k, axis1>(x)   k whole, axis1 replicas -> k over axis1  (no traffic)
//   allreduce<axis1>(x)     sums the replicas along axis1, layout unchanged
//   reduce_scatter<k, axis1>(x)  sums along axis1 and splits k over it
//   alltoall<k, n>(x)       k split over an axis    -> n split over that axis
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/kernels.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace detail {

template <class D, class Tensor>
consteval bool check_dim_in_shape() {
  return sizeof(diagnostic::dim_not_in_shape<D, typename Tensor::shape_type, !Tensor::shape_type::template has<D>>);
}
template <class A, class Tensor>
consteval bool check_axis_in_mesh() {
  return sizeof(diagnostic::axis_not_in_mesh<A, typename Tensor::mesh_type, !Tensor::mesh_type::template has<A>>);
}
template <class D, class Tensor>
consteval bool check_split() {
  return sizeof(diagnostic::dim_not_split<D, typename Tensor::layout_type,
                                          Tensor::shape_type::template has<D> &&
                                              !Tensor::layout_type::template splits<D>>);
}
template <class D, class Tensor>
consteval bool check_whole() {
  return sizeof(diagnostic::dim_already_split<D, typename Tensor::layout_type, Tensor::layout_type::template splits<D>>);
}
template <class A, class Tensor>
consteval bool check_replica_axis() {
  return sizeof(diagnostic::axis_already_used<A, typename Tensor::layout_type, Tensor::layout_type::template uses<A>>);
}

struct no_axis : axis<"(none)"> {};

// D can be split over A: D whole, A holding replicas.
template <class D, class A, class Tensor>
consteval bool check_can_split() {
  return check_dim_in_shape<D, Tensor>() && check_axis_in_mesh<A, Tensor>() && check_whole<D, Tensor>() &&
         check_replica_axis<A, Tensor>();
}

// L with D split over A, or L itself when that is not allowed (the check
// has already said why; this keeps a second error about the result away).
template <class D, class A, class S, class L, class M>
using split_layout = std::conditional_t<S::template has<D> && M::template has<A> && !L::template splits<D> &&
                                            !L::template uses<A>,
                                        typename L::template with<D, A>, L>;

// Copies `parts` equal blocks of `src` along dim `d` into consecutive blocks
// of `dst` (block j = range j of dim d), or back when `unpack`.
template <class T, std::size_t Rank>
void blocks_along(const T* packed_or_src, T* dst_or_packed, const std::array<std::int64_t, Rank>& extent, std::size_t d,
                  int parts, bool unpack) {
  std::array<std::int64_t, Rank> part = extent;
  part[d] /= parts;
  std::int64_t block = 1;
  for (auto e : part) block *= e;
  for (int j = 0; j < parts; ++j) {
    backend::region<Rank> whole{extent, {}}, piece{part, {}};
    whole.begin[d] = j * part[d];
    if (unpack) backend::copy_box(packed_or_src + j * block, piece, dst_or_packed, whole, part);
    else backend::copy_box(packed_or_src, whole, dst_or_packed + j * block, piece, part);
  }
}

}  // namespace detail

// The result types, named so that each collective and its gradient (another
// collective) can refer to each other.
template <class D, class T, class S, class L, class M>
using allconcat_t = tensor<T, S, canonical<S, typename L::template without<D>>, M>;
template <class D, class A, class T, class S, class L, class M>
using allsplit_t = tensor<T, S, canonical<S, detail::split_layout<D, A, S, L, M>>, M>;
template <class From, class To, class T, class S, class L, class M>
using alltoall_t =
    tensor<T, S,
           canonical<S, typename L::template without<From>::template with<
                            To, std::conditional_t<L::template splits<From>, typename L::template axis_of<From>,
                                                   detail::no_axis>>>,
           M>;

template <class D, class T, class S, class L, class M>
allconcat_t<D, T, S, L, M> allconcat(const tensor<T, S, L, M>& x);
template <class D, class A, class T, class S, class L, class M>
allsplit_t<D, A, T, S, L, M> allsplit(const tensor<T, S, L, M>& x);
template <class From, class To, class T, class S, class L, class M>
alltoall_t<From, To, T, S, L, M> alltoall(const tensor<T, S, L, M>& x);

// Every device records each collective's gradient, also a device outside the
// mesh (which holds nothing): all devices then hold the same tape and run
// the same collectives backward.

// D split over axis A -> D whole: an allgather along A.
template <class D, class T, class S, class L, class M>
allconcat_t<D, T, S, L, M> allconcat(const tensor<T, S, L, M>& x) {
  using in_t = tensor<T, S, L, M>;
  static_assert(detail::check_dim_in_shape<D, in_t>() && detail::check_split<D, in_t>());
  using out_t = tensor<T, S, canonical<S, typename L::template without<D>>, M>;
  out_t out(x.mesh(), x.shape());
  if constexpr (L::template splits<D>) {
    using A = typename L::template axis_of<D>;
    if (x.holds_data()) {
      group g = x.mesh().template group_along<A>(x.device());
      backend::storage<T> gathered(out.local().size());
      this_device().allgather(g, x.local(), backend::view(gathered));
      detail::blocks_along(backend::view(gathered).data(), out.local().data(), out.local_extent(),
                           S::template index_of<D>, g.size(), /*unpack=*/true);
    }
    // Gradient: each device keeps its own part of the whole gradient.
    return record(std::move(out), "allconcat", gradient_of(x, [](const out_t& dy) { return typemesh::allsplit<D, A>(dy); }));
  } else {
    return out;
  }
}

// D whole, A holding replicas -> D split over A. Each device keeps its part.
template <class D, class A, class T, class S, class L, class M>
allsplit_t<D, A, T, S, L, M> allsplit(const tensor<T, S, L, M>& x) {
  using in_t = tensor<T, S, L, M>;
  static_assert(detail::check_can_split<D, A, in_t>());
  using out_t = tensor<T, S, canonical<S, detail::split_layout<D, A, S, L, M>>, M>;
  out_t out(x.mesh(), x.shape());
  if (x.holds_data()) {
    constexpr std::size_t d = S::template index_of<D>;
    backend::region<S::rank> from{x.local_extent(), {}};
    from.begin[d] = out.slice().begin[d];
    backend::copy_box(x.local().data(), from, out.local().data(), out.local_region(), out.local_extent());
  }
  // Gradient: an allgather of the parts.
  return record(std::move(out), "allsplit", gradient_of(x, [](const out_t& dy) { return typemesh::allconcat<D>(dy); }));
}

// Reduces the replicas along the axes As (which must not split a dim).
template <class... As, class T, class S, class L, class M>
auto allreduce(const tensor<T, S, L, M>& x, reduce_op op = reduce_op::sum) {
  using in_t = tensor<T, S, L, M>;
  static_assert(sizeof...(As) > 0, "typemesh: allreduce<axes...> needs at least one mesh axis");
  static_assert(((detail::check_axis_in_mesh<As, in_t>() && detail::check_replica_axis<As, in_t>()) && ...));
  in_t out(x.mesh(), x.shape());
  if (x.holds_data()) {
    group g = x.mesh().template group_along<As...>(x.device());
    this_device().allreduce(g, x.local(), out.local(), op);
  }
  if (op != reduce_op::sum) return out;  // no gradient through a max
  // Gradient: every partial sum gets the whole sum's gradient.
  return record(std::move(out), "allreduce", gradient_of(x, [](const in_t& dy) { return dy.detached(); }));
}

// Reduces along A (which holds partial values) and splits D over A.
template <class D, class A, class T, class S, class L, class M>
auto reduce_scatter(const tensor<T, S, L, M>& x, reduce_op op = reduce_op::sum) {
  using in_t = tensor<T, S, L, M>;
  static_assert(detail::check_can_split<D, A, in_t>());
  using out_t = tensor<T, S, canonical<S, detail::split_layout<D, A, S, L, M>>, M>;
  out_t out(x.mesh(), x.shape());
  if (x.holds_data()) {
    group g = x.mesh().template group_along<A>(x.device());
    backend::storage<T> packed(x.local().size());
    detail::blocks_along(x.local().data(), backend::view(packed).data(), x.local_extent(), S::template index_of<D>,
                         g.size(), /*unpack=*/false);
    this_device().reduce_scatter(g, std::span<const T>(backend::view(packed)), out.local(), op);
  }
  if (op != reduce_op::sum) return out;
  // Gradient: an allgather of the parts.
  return record(std::move(out), "reduce_scatter", gradient_of(x, [](const out_t& dy) { return typemesh::allconcat<D>(dy); }));
}

// From split over an axis, To whole -> To split over that axis, From whole.
template <class From, class To, class T, class S, class L, class M>
alltoall_t<From, To, T, S, L, M> alltoall(const tensor<T, S, L, M>& x) {
  using in_t = tensor<T, S, L, M>;
  static_assert(detail::check_dim_in_shape<From, in_t>() && detail::check_dim_in_shape<To, in_t>() &&
                detail::check_split<From, in_t>() && detail::check_whole<To, in_t>());
  // A placeholder axis when From is whole keeps the failed check the only error.
  using A = std::conditional_t<L::template splits<From>, typename L::template axis_of<From>, detail::no_axis>;
  using out_t = tensor<T, S, canonical<S, typename L::template without<From>::template with<To, A>>, M>;
  out_t out(x.mesh(), x.shape());
  if constexpr (L::template splits<From>) {
    if (x.holds_data()) {
      group g = x.mesh().template group_along<A>(x.device());
      backend::storage<T> packed(x.local().size()), received(x.local().size());
      detail::blocks_along(x.local().data(), backend::view(packed).data(), x.local_extent(), S::template index_of<To>,
                           g.size(), /*unpack=*/false);
      this_device().alltoall(g, std::span<const T>(backend::view(packed)), backend::view(received));
      detail::blocks_along(backend::view(received).data(), out.local().data(), out.local_extent(),
                           S::template index_of<From>, g.size(), /*unpack=*/true);
    }
    // Gradient: the alltoall back.
    return record(std::move(out), "alltoall", gradient_of(x, [](const out_t& dy) { return typemesh::alltoall<To, From>(dy); }));
  } else {
    return out;
  }
}

}  // namespace typemesh

// Collectives on distributed tensors, named by the dims and axes they change,
// without gradients (typemesh::raw); the differentiable ones that programs
// call, typemesh::allconcat and the rest, are in ops/collectives.hpp, above
// autodiff. Each computes its output layout at compile time:
//
//   raw::allconcat<k>(x)         k split over some axis  -> k whole       (allgather)
//   raw::allsplit<k, axis1>(x)   k whole, axis1 replicas -> k over axis1  (no traffic)
//   raw::allreduce<axis1>(x)     sums the replicas along axis1, layout unchanged
//   raw::reduce_scatter<k, axis1>(x)  sums along axis1 and splits k over it
//   raw::alltoall<k, n>(x)       k split over an axis    -> n split over that axis
#pragma once

#include <array>
#include <utility>
#include <cstddef>
#include <cstdint>

#include "typemesh/backend/kernels.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace collectives_detail {

template <class D, class Tensor>
consteval bool check_dim_in_shape() {
  return diagnostic::dim_not_in_shape<D, typename Tensor::shape_type, !Tensor::shape_type::template has<D>>::passed;
}
template <class A, class Tensor>
consteval bool check_axis_in_mesh() {
  return diagnostic::axis_not_in_mesh<A, typename Tensor::mesh_type, !Tensor::mesh_type::template has<A>>::passed;
}
template <class D, class Tensor>
consteval bool check_split() {
  return diagnostic::dim_not_split<D, typename Tensor::layout_type,
                                   Tensor::shape_type::template has<D> && !Tensor::layout_type::template splits<D>>::passed;
}
template <class D, class Tensor>
consteval bool check_whole() {
  return diagnostic::dim_already_split<D, typename Tensor::layout_type, Tensor::layout_type::template splits<D>>::passed;
}
template <class A, class Tensor>
consteval bool check_replica_axis() {
  return diagnostic::axis_already_used<A, typename Tensor::layout_type, Tensor::layout_type::template uses<A>>::passed;
}

struct no_axis : axis<"(none)"> {};

// D can be split over A: D whole, A holding replicas.
template <class D, class A, class Tensor>
consteval bool check_can_split() {
  return check_dim_in_shape<D, Tensor>() && check_axis_in_mesh<A, Tensor>() && check_whole<D, Tensor>() &&
         check_replica_axis<A, Tensor>();
}

// Each collective's checks, one function per collective so that the
// differentiable wrappers (ops/collectives.hpp) can stop on the same answer.
template <class D, class Tensor>
consteval bool allconcat_ok() {
  return check_dim_in_shape<D, Tensor>() && check_split<D, Tensor>();
}
template <class Tensor, class... As>
consteval bool allreduce_ok() {
  return ((check_axis_in_mesh<As, Tensor>() && check_replica_axis<As, Tensor>()) && ...);
}
template <class From, class To, class Tensor>
consteval bool alltoall_ok() {
  return check_dim_in_shape<From, Tensor>() && check_dim_in_shape<To, Tensor>() && check_split<From, Tensor>() &&
         check_whole<To, Tensor>();
}

// L with D split over A, or L itself when that is not allowed (the check
// has already said why; this keeps a second error about the result away).
template <class D, class A, class S, class L, class M>
using split_layout = std::conditional_t<S::template has<D> && M::template has<A> && !L::template splits<D> &&
                                            !L::template uses<A>,
                                        typename L::template with<D, A>, L>;

// Whether the equal blocks along dim d of a dense array of `extent` are
// consecutive runs of it (every dim before d has extent 1): then the array
// is already its own packed form, and a collective reads or writes it as
// it is.
template <std::size_t Rank>
bool blocks_are_runs(const std::array<std::int64_t, Rank>& extent, std::size_t d) {
  for (std::size_t i = 0; i < d; ++i)
    if (extent[i] != 1) return false;
  return true;
}

// Copies `parts` equal blocks of `src` along dim `d` into consecutive blocks
// of `dst` (block j = range j of dim d), or back when `unpack`.
template <class Space, class T, std::size_t Rank>
void blocks_along(Space s, const T* packed_or_src, T* dst_or_packed, const std::array<std::int64_t, Rank>& extent, std::size_t d,
                  int parts, bool unpack) {
  std::array<std::int64_t, Rank> part = extent;
  part[d] /= parts;
  std::int64_t block = 1;
  for (auto e : part) block *= e;
  for (int j = 0; j < parts; ++j) {
    backend::region<Rank> whole{extent, {}}, piece{part, {}};
    whole.begin[d] = j * part[d];
    if (unpack) backend::copy_box(s, packed_or_src + j * block, piece, dst_or_packed, whole, part);
    else backend::copy_box(s, packed_or_src, whole, dst_or_packed + j * block, piece, part);
  }
}

}  // namespace collectives_detail

// The result types, named so that each collective and its gradient (another
// collective) can refer to each other.
template <class D, class T, class S, class L, class M>
using allconcat_t = tensor<T, S, canonical<S, typename L::template without<D>>, M>;
template <class D, class A, class T, class S, class L, class M>
using allsplit_t = tensor<T, S, canonical<S, collectives_detail::split_layout<D, A, S, L, M>>, M>;
template <class From, class To, class T, class S, class L, class M>
using alltoall_t =
    tensor<T, S,
           canonical<S, typename L::template without<From>::template with<
                            To, std::conditional_t<L::template splits<From>, typename L::template axis_of<From>,
                                                   collectives_detail::no_axis>>>,
           M>;

namespace raw {

// D split over axis A -> D whole: an allgather along A.
template <class D, class T, class S, class L, class M>
allconcat_t<D, T, S, L, M> allconcat(const tensor<T, S, L, M>& x) {
  using out_t = allconcat_t<D, T, S, L, M>;
  if constexpr (!collectives_detail::allconcat_ok<D, tensor<T, S, L, M>>()) {
    return diagnostic::after_failure<out_t>();
  } else {
    out_t out(x.mesh(), x.shape(), uninitialized);  // every element is gathered
    using A = typename L::template axis_of<D>;
    if (x.holds_data()) {
      group g = x.mesh().template group_along<A>(x.device());
      constexpr std::size_t d = S::template index_of<D>;
      if (collectives_detail::blocks_are_runs(out.local_extent(), d)) {
        this_device().allgather(g, x.local(), out.local());
      } else {
        backend::storage<T, space_of<M>> gathered(out.local().size());
        this_device().allgather(g, x.local(), backend::view(gathered));
        collectives_detail::blocks_along(x.space(), backend::view(gathered).data(), out.local().data(),
                                         out.local_extent(), d, g.size(), /*unpack=*/true);
      }
    }
    return out;
  }
}

// D whole, A holding replicas -> D split over A. Each device keeps its part.
template <class D, class A, class T, class S, class L, class M>
allsplit_t<D, A, T, S, L, M> allsplit(const tensor<T, S, L, M>& x) {
  using out_t = allsplit_t<D, A, T, S, L, M>;
  if constexpr (!collectives_detail::check_can_split<D, A, tensor<T, S, L, M>>()) {
    return diagnostic::after_failure<out_t>();
  } else {
    out_t out(x.mesh(), x.shape(), uninitialized);  // every element is copied
    if (x.holds_data()) {
      constexpr std::size_t d = S::template index_of<D>;
      backend::region<S::rank> from{x.local_extent(), {}};
      from.begin[d] = out.slice().begin[d];
      backend::copy_box(x.space(), x.data(), from, out.local().data(), out.local_region(), out.local_extent());
    }
    return out;
  }
}

// Reduces the replicas along the axes As (which must not split a dim).
template <class... As, class T, class S, class L, class M>
tensor<T, S, L, M> allreduce(const tensor<T, S, L, M>& x, reduce_op op = reduce_op::sum) {
  using in_t = tensor<T, S, L, M>;
  static_assert(sizeof...(As) > 0, "typemesh: allreduce<axes...> needs at least one mesh axis");
  if constexpr (sizeof...(As) == 0 || !collectives_detail::allreduce_ok<in_t, As...>()) {
    return diagnostic::after_failure<in_t>();
  } else {
    in_t out(x.mesh(), x.shape(), uninitialized);  // every element is reduced
    if (x.holds_data()) {
      group g = x.mesh().template group_along<As...>(x.device());
      this_device().allreduce(g, x.local(), out.local(), op);
    }
    return out;
  }
}

// Reduces along A (which holds partial values) and splits D over A.
template <class D, class A, class T, class S, class L, class M>
allsplit_t<D, A, T, S, L, M> reduce_scatter(const tensor<T, S, L, M>& x, reduce_op op = reduce_op::sum) {
  using out_t = allsplit_t<D, A, T, S, L, M>;
  if constexpr (!collectives_detail::check_can_split<D, A, tensor<T, S, L, M>>()) {
    return diagnostic::after_failure<out_t>();
  } else {
    out_t out(x.mesh(), x.shape(), uninitialized);  // every element is reduced
    if (x.holds_data()) {
      group g = x.mesh().template group_along<A>(x.device());
      constexpr std::size_t d = S::template index_of<D>;
      if (collectives_detail::blocks_are_runs(x.local_extent(), d)) {
        this_device().reduce_scatter(g, x.local(), out.local(), op);
      } else {
        backend::storage<T, space_of<M>> packed(x.local().size());
        collectives_detail::blocks_along(x.space(), x.local().data(), backend::view(packed).data(), x.local_extent(),
                                         d, g.size(), /*unpack=*/false);
        this_device().reduce_scatter(g, backend::view(std::as_const(packed)), out.local(), op);
      }
    }
    return out;
  }
}

// From split over an axis, To whole -> To split over that axis, From whole.
template <class From, class To, class T, class S, class L, class M>
alltoall_t<From, To, T, S, L, M> alltoall(const tensor<T, S, L, M>& x) {
  using out_t = alltoall_t<From, To, T, S, L, M>;
  if constexpr (!collectives_detail::alltoall_ok<From, To, tensor<T, S, L, M>>()) {
    return diagnostic::after_failure<out_t>();
  } else {
    using A = typename L::template axis_of<From>;
    out_t out(x.mesh(), x.shape(), uninitialized);  // every element is exchanged
    if (x.holds_data()) {
      group g = x.mesh().template group_along<A>(x.device());
      constexpr std::size_t to = S::template index_of<To>, from = S::template index_of<From>;
      // Blocks that are runs of x or of out go without staging.
      const bool pack = !collectives_detail::blocks_are_runs(x.local_extent(), to);
      const bool unpack = !collectives_detail::blocks_are_runs(out.local_extent(), from);
      backend::storage<T, space_of<M>> packed(pack ? x.local().size() : 0), received(unpack ? x.local().size() : 0);
      if (pack) {
        collectives_detail::blocks_along(x.space(), x.local().data(), backend::view(packed).data(), x.local_extent(), to,
                                         g.size(), /*unpack=*/false);
      }
      this_device().alltoall(g, pack ? backend::view(std::as_const(packed)) : x.local(),
                             unpack ? backend::view(received) : out.local());
      if (unpack) {
        collectives_detail::blocks_along(x.space(), backend::view(received).data(), out.local().data(),
                                         out.local_extent(), from, g.size(), /*unpack=*/true);
      }
    }
    return out;
  }
}

}  // namespace raw

}  // namespace typemesh

// Relayout within a mesh: a dim goes from split to whole, whole to split, from
// one axis to another, several at once.
//
//   auto y = typemesh::relayout<layout<batch(axis1), k(axis0)>>(x);
//
// The layouts decide the algorithm at compile time: the same placement is a
// copy; one dim made whole is an allconcat; one dim split over a replica axis
// is a local allsplit; one dim handing its axis to another is an alltoall.
// Anything else goes through the transfer plan, which moves exactly what each
// device lacks, so a dim that moves between axes is right where
// Mesh-TensorFlow's rename went wrong.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "typemesh/convert/memo.hpp"
#include "typemesh/convert/transfer.hpp"
#include "typemesh/ops/collectives.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace detail {

template <class... Ts>
struct first_non_void {
  using type = void;
};
template <class T, class... Ts>
struct first_non_void<T, Ts...> : std::conditional_t<std::is_void_v<T>, first_non_void<Ts...>, std::type_identity<T>> {};

template <class S, class From, class To>
struct relayout_route;

template <class... Dims, class From, class To>
struct relayout_route<shape<Dims...>, From, To> {
  using S = shape<Dims...>;
  template <class L>
  static constexpr bool is_target = std::is_same_v<canonical<S, L>, canonical<S, To>>;

  template <class D>
  static constexpr bool concat_of() {
    if constexpr (From::template splits<D>) return is_target<typename From::template without<D>>;
    else return false;
  }
  template <class D>
  static constexpr bool split_of() {
    if constexpr (!From::template splits<D> && To::template splits<D>) {
      using A = typename To::template axis_of<D>;
      if constexpr (!From::template uses<A>) return is_target<typename From::template with<D, A>>;
      else return false;
    } else {
      return false;
    }
  }
  template <class D, class E>
  static constexpr bool exchange_of() {
    if constexpr (From::template splits<D> && !From::template splits<E>) {
      using A = typename From::template axis_of<D>;
      return is_target<typename From::template without<D>::template with<E, A>>;
    } else {
      return false;
    }
  }
  template <class D>
  using exchange_partner = typename first_non_void<std::conditional_t<exchange_of<D, Dims>(), Dims, void>...>::type;

  // The dim to concatenate, to split, or to hand its axis on (void: none).
  using concat_dim = typename first_non_void<std::conditional_t<concat_of<Dims>(), Dims, void>...>::type;
  using split_dim = typename first_non_void<std::conditional_t<split_of<Dims>(), Dims, void>...>::type;
  using exchange_dim =
      typename first_non_void<std::conditional_t<!std::is_void_v<exchange_partner<Dims>>, Dims, void>...>::type;
};

}  // namespace detail

namespace detail {
template <class NewLayout, class T, class S, class L, class M, class What>
tensor<T, S, NewLayout, M> relayout_as(const tensor<T, S, L, M>& x, const What& what) {
  using route = detail::relayout_route<S, L, NewLayout>;
  if constexpr (route::template is_target<L>) {
    return tensor<T, S, L, M>(x);  // the same placement: nothing moves
  } else if constexpr (!std::is_void_v<typename route::concat_dim>) {
    return allconcat<typename route::concat_dim>(x);
  } else if constexpr (!std::is_void_v<typename route::split_dim>) {
    using D = typename route::split_dim;
    return allsplit<D, typename NewLayout::template axis_of<D>>(x);
  } else if constexpr (!std::is_void_v<typename route::exchange_dim>) {
    using D = typename route::exchange_dim;
    return alltoall<D, typename route::template exchange_partner<D>>(x);
  } else {
    return transfer_as<NewLayout>(what(), x, x.mesh());
  }
}
}  // namespace detail

// Errors raised inside lead with "relayout of dims [..] on mesh '..' from
// layout<..> to layout<..>".
template <class NewLayout, class T, class S, class L, class M>
tensor<T, S, NewLayout, M> relayout(const tensor<T, S, L, M>& x) {
  // Formatted once per thread for each mesh and shape (memo.hpp).
  const auto what = [&] {
    thread_local detail::per_thread_memo<std::pair<M, S>, std::string> descriptions;
    return descriptions.get({x.mesh(), x.shape()}, [&] {
      return detail::cat("relayout of dims ", x.shape().describe(), " on ", x.mesh().describe(), " from ",
                         L::describe(), " to ", NewLayout::describe());
    });
  };
  try {
    return detail::relayout_as<NewLayout>(x, what);
  } catch (...) {
    detail::rethrow_within(what());
  }
}

}  // namespace typemesh

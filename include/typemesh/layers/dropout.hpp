// Dropout: each element is kept with probability 1 - rate and scaled by
// 1 / (1 - rate), or set to zero.
//
//   auto h = typemesh::dropout(x, {.rate = 0.1, .key = typemesh::rng_key{seed, "layer3/dropout", step}});
//
// Whether an element is kept depends only on (seed, name, step) and on the
// element's coordinates, taken dim by dim in the order of the dims' names:
// so the mask is the same under every layout and device count, and a tensor
// whose shape lists the same dims in another order gets the same mask at the
// same coordinates (a layer that takes its dims in any order drops the same
// elements). The gradient applies the same mask.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string_view>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/functors.hpp"
#include "typemesh/backend/random.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/shape_algebra.hpp"
#include "typemesh/ops/random.hpp"
#include "typemesh/ops/unary.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

// Options of dropout; the defaults drop nothing.
struct dropout_options {
  // The probability that an element is dropped, in [0, 1).
  double rate = 0.0;
  // Seed, name and step of the mask: another step (or name) draws another mask.
  rng_key key{};
};

namespace dropout_detail {

// Each dim's stride in the element index with the dims ordered by name,
// which does not depend on the order the shape S lists them in.
template <class S>
std::array<std::int64_t, S::rank> name_ordered_strides(const S& s) {
  constexpr std::size_t r = S::rank;
  std::array<std::int64_t, r> name_stride{};
  if constexpr (r > 0) {
    std::array<std::string_view, r> names{};
    [&]<class... Ds>(type_list<Ds...>) {
      std::size_t i = 0;
      ((names[i++] = Ds::name), ...);
    }(dims_of<S>{});
    std::array<std::size_t, r> by_name{};
    std::iota(by_name.begin(), by_name.end(), std::size_t{0});
    std::stable_sort(by_name.begin(), by_name.end(),
                     [&](std::size_t a, std::size_t b) { return names[a] < names[b]; });
    std::int64_t stride = 1;
    for (std::size_t j = r; j-- > 0;) {
      name_stride[by_name[j]] = stride;
      stride *= s[by_name[j]];
    }
  }
  return name_stride;
}

// The factor each local element is multiplied by: 0 where dropped,
// 1 / (1 - rate) where kept, as a tensor placed like `like`.
template <class Tensor>
Tensor mask_like(const Tensor& like, double rate, const rng_key& key) {
  using T = typename Tensor::value_type;
  Tensor mask(like.mesh(), like.shape(), uninitialized);
  const T keep = static_cast<T>(1.0 / (1.0 - rate));
  backend::dropout_mask_fill(mask.space(), mask.data(),
                             global_index_geometry(mask, name_ordered_strides(like.shape())),
                             random_stream(key).base(), rate, keep);
  return mask;
}

}  // namespace dropout_detail

template <class T, class S, class L, class M>
tensor<T, S, L, M> dropout(const tensor<T, S, L, M>& x, const dropout_options& options = {}) {
  using t = tensor<T, S, L, M>;
  const double rate = options.rate;
  if (!(rate >= 0.0 && rate < 1.0)) {
    throw error(detail::cat("dropout '", options.key.name, "': the rate must be in [0, 1), got ", rate));
  }
  if (rate == 0.0) return x;
  t mask = dropout_detail::mask_like(x, rate, options.key);
  t y = ops_detail::apply2(x, mask, backend::multiplies{});
  return record(std::move(y), "dropout",
                gradient_of(x, [mask](const t& dy) { return ops_detail::apply2(dy, mask, backend::multiplies{}); }));
}

}  // namespace typemesh

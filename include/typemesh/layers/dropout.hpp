// Dropout: each element is kept with probability 1 - rate and scaled by
// 1 / (1 - rate), or set to zero.
//
//   auto h = typemesh::dropout(x, 0.1, typemesh::rng_key{seed, "layer3/dropout", step});
//
// Whether element i is kept depends only on (seed, name, step, i), i being the
// element's row-major index in the whole tensor, so the mask is the same under
// every layout and device count. The gradient applies the same mask.
#pragma once

#include <cstdint>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/ops/random.hpp"
#include "typemesh/ops/unary.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace dropout_detail {
// The factor each local element is multiplied by: 0 where dropped,
// 1 / (1 - rate) where kept, as a tensor placed like `like`.
template <class Tensor>
Tensor mask_like(const Tensor& like, double rate, const rng_key& key) {
  using T = typename Tensor::value_type;
  Tensor mask(like.mesh(), like.shape());
  const random_stream rng(key);
  const T keep = static_cast<T>(1.0 / (1.0 - rate));
  auto m = mask.local();
  for_each_element(mask, [&](std::int64_t off, std::uint64_t i) { m[off] = rng.uniform(i) < rate ? T{0} : keep; });
  return mask;
}
}  // namespace dropout_detail

template <class T, class S, class L, class M>
tensor<T, S, L, M> dropout(const tensor<T, S, L, M>& x, double rate, const rng_key& key) {
  using t = tensor<T, S, L, M>;
  if (!(rate >= 0.0 && rate < 1.0)) {
    throw error(detail::cat("dropout '", key.name, "': the rate must be in [0, 1), got ", rate));
  }
  if (rate == 0.0) return x;
  t mask = dropout_detail::mask_like(x, rate, key);
  auto mul = [](T v, T f) { return v * f; };
  t y = ops_detail::apply2(x, mask, mul);
  return record(std::move(y), "dropout",
                gradient_of(x, [mask, mul](const t& dy) { return ops_detail::apply2(dy, mask, mul); }));
}

}  // namespace typemesh

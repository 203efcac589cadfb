// layer_norm<D> normalises over the dim it names; naming one that x lacks is
// one error naming the dim and x's shape (the body is not compiled after it).
// expect: typemesh: layer_norm<D> normalises over a dim that x does not have
// expect: diagnostic::layer_norm_dim_not_in_input<d_model, typemesh::shape<seq, batch, embed>,
#include <typemesh/layers/layer_norm.hpp>

#include "common.hpp"

using namespace typemesh;

struct seq : dim<"seq"> {};
struct embed : dim<"embed"> {};
struct d_model : dim<"d_model"> {};

using x_t = tensor<float, shape<seq, batch, embed>, layout<batch(axis0)>, grid>;
using p_t = tensor<float, shape<embed>, layout<>, grid>;

auto normalise(const x_t& x, const p_t& scale, const p_t& bias) {
#if FIXED
  auto y = layer_norm<embed>(x, scale, bias, {.epsilon = 1e-5});
#else
  auto y = layer_norm<d_model>(x, scale, bias, {.epsilon = 1e-5});
#endif
  static_assert(std::is_same_v<decltype(y)::shape_type, shape<seq, batch, embed>>);
  return y;
}

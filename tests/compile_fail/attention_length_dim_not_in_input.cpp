// self_attention's length dim is named, not taken from a position: a length
// dim that x lacks is an error naming that dim and x's shape. (Before, x of
// shape [seq, batch, d_model] was read as [batch, length, d_model], and the
// softmax ran over the batch.)
// expect: typemesh: attention's input lacks the length dim named as the first template argument
// expect: diagnostic::attention_length_dim_not_in_input<length, typemesh::shape<seq, batch, d_model>,
#include <typemesh/layers/attention.hpp>

#include "common.hpp"

using namespace typemesh;

struct length : dim<"length"> {};
struct seq : dim<"seq"> {};
struct memory_seq : dim<"memory_seq"> {};
struct d_model : dim<"d_model"> {};
struct heads : dim<"heads"> {};
struct d_k : dim<"d_k"> {};
struct d_v : dim<"d_v"> {};

using x_t = tensor<float, shape<seq, batch, d_model>, layout<batch(axis0)>, grid>;
using wqk_t = tensor<float, shape<d_model, heads, d_k>, layout<heads(axis1)>, grid>;
using wv_t = tensor<float, shape<d_model, heads, d_v>, layout<heads(axis1)>, grid>;
using wo_t = tensor<float, shape<heads, d_v, d_model>, layout<heads(axis1)>, grid>;

#if FIXED
auto attend(const x_t& x, const wqk_t& wq, const wqk_t& wk, const wv_t& wv, const wo_t& wo) {
  auto y = self_attention<seq, memory_seq>(x, wq, wk, wv, wo, {.causal = true});
  static_assert(std::is_same_v<decltype(y)::shape_type, shape<seq, batch, d_model>>);
  return y;
}
#else
auto attend(const x_t& x, const wqk_t& wq, const wqk_t& wk, const wv_t& wv, const wo_t& wo) {
  auto y = self_attention<length, memory_seq>(x, wq, wk, wv, wo, {.causal = true});
  static_assert(std::is_same_v<decltype(y)::shape_type, shape<seq, batch, d_model>>);
  return y;
}
#endif

// multihead_attention with the query and the memory under the same length
// tag (self-attention passing x twice): the logits [batch, heads, length,
// memory_length] would name length twice. (d_k and d_v are one dim, d_kv, as
// in Mesh-TensorFlow, so heads is named too.)
// expect: typemesh: multihead_attention needs the memory's length dim to be another tag than the query's
// expect: diagnostic::attention_same_length_dim<seq,
#include <typemesh/layers/attention.hpp>

#include "common.hpp"

using namespace typemesh;

struct seq : dim<"seq"> {};
struct memory_seq : dim<"memory_seq"> {};
struct d_model : dim<"d_model"> {};
struct heads : dim<"heads"> {};
struct d_kv : dim<"d_kv"> {};

using x_t = tensor<float, shape<batch, seq, d_model>, layout<batch(axis0)>, grid>;
using w_t = tensor<float, shape<d_model, heads, d_kv>, layout<heads(axis1)>, grid>;
using wo_t = tensor<float, shape<heads, d_kv, d_model>, layout<heads(axis1)>, grid>;

#if FIXED
auto attend(const x_t& x, const w_t& wq, const w_t& wk, const w_t& wv, const wo_t& wo) {
  return multihead_attention<seq, memory_seq, heads>(x, rename<seq, memory_seq>(x), wq, wk, wv, wo);
}
#else
auto attend(const x_t& x, const w_t& wq, const w_t& wk, const w_t& wv, const wo_t& wo) {
  return multihead_attention<seq, seq, heads>(x, x, wq, wk, wv, wo);
}
#endif

// With d_k and d_v one dim (d_kv, Mesh-TensorFlow's kv_channels), wq and wo
// share two dims besides d_model, so which one is heads cannot be told from
// the shapes: the error says to name it, and naming it is the fix.
// expect: typemesh: attention finds heads as the one dim besides d_model that wq shares with wo
// expect: diagnostic::attention_heads_not_found<typemesh::shape<d_model, heads, d_kv>, typemesh::shape<heads, d_kv, d_model>, d_model,
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
  return self_attention<seq, memory_seq, heads>(x, wq, wk, wv, wo);
}
#else
auto attend(const x_t& x, const w_t& wq, const w_t& wk, const w_t& wv, const wo_t& wo) {
  return self_attention<seq, memory_seq>(x, wq, wk, wv, wo);
}
#endif

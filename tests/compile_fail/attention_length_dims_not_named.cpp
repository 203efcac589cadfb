// The old spelling self_attention<memory_length>(x, ...), which took the
// query's length dim from its position in x: both length dims are now named,
// and naming one is an error that shows how to call it.
// expect: typemesh: multihead_attention and self_attention take the query's and the memory's length dims as template arguments
// expect: diagnostic::attention_length_dims_not_named<memory_seq, typemesh::diagnostic::unnamed_length_dim,
#include <typemesh/layers/attention.hpp>

#include "common.hpp"

using namespace typemesh;

struct seq : dim<"seq"> {};
struct memory_seq : dim<"memory_seq"> {};
struct d_model : dim<"d_model"> {};
struct heads : dim<"heads"> {};
struct d_k : dim<"d_k"> {};
struct d_v : dim<"d_v"> {};

using x_t = tensor<float, shape<batch, seq, d_model>, layout<batch(axis0)>, grid>;
using wqk_t = tensor<float, shape<d_model, heads, d_k>, layout<heads(axis1)>, grid>;
using wv_t = tensor<float, shape<d_model, heads, d_v>, layout<heads(axis1)>, grid>;
using wo_t = tensor<float, shape<heads, d_v, d_model>, layout<heads(axis1)>, grid>;

#if FIXED
auto attend(const x_t& x, const wqk_t& wq, const wqk_t& wk, const wv_t& wv, const wo_t& wo) {
  return self_attention<seq, memory_seq>(x, wq, wk, wv, wo);
}
#else
auto attend(const x_t& x, const wqk_t& wq, const wqk_t& wk, const wv_t& wv, const wo_t& wo) {
  return self_attention<memory_seq>(x, wq, wk, wv, wo);
}
#endif

// dense_relu_dense finds its hidden dim as the one w1 and w2 share and x
// lacks; a w2 that does not map the hidden dim back to x's summed dim (here
// it outputs another dim) is an error naming w2's shape and the dims it needs.
// expect: typemesh: dense_relu_dense's w2 must have exactly the hidden dims it shares with w1 and the dims x shares with w1
// expect: diagnostic::dense_relu_dense_w2_dims<typemesh::shape<d_ff, d_out>, typemesh::shape<d_ff, d_model>,
#include <typemesh/layers/attention.hpp>

#include "common.hpp"

using namespace typemesh;

struct seq : dim<"seq"> {};
struct d_model : dim<"d_model"> {};
struct d_ff : dim<"d_ff"> {};
struct d_out : dim<"d_out"> {};

using x_t = tensor<float, shape<seq, batch, d_model>, layout<batch(axis0)>, grid>;
using w1_t = tensor<float, shape<d_model, d_ff>, layout<d_ff(axis1)>, grid>;

#if FIXED
using w2_t = tensor<float, shape<d_model, d_ff>, layout<d_ff(axis1)>, grid>;
#else
using w2_t = tensor<float, shape<d_ff, d_out>, layout<d_ff(axis1)>, grid>;
#endif

auto feed_forward(const x_t& x, const w1_t& w1, const w2_t& w2) {
  auto y = dense_relu_dense(x, w1, w2, {.dropout_rate = 0.1, .dropout_key = {1, "ffn/dropout", 0}});
  static_assert(std::is_same_v<decltype(y)::shape_type, shape<seq, batch, d_model>>);
  return y;
}

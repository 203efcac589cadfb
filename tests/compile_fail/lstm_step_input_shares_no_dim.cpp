// The units dim k is the one dim the step's input and the weight share; an
// input whose units are called something else shares none with the weight.
// expect: typemesh: lstm: the input and the weight share no dim
// expect: diagnostic::lstm_input_shares_no_dim_with_weight<typemesh::shape<batch, units>, typemesh::shape<k, n>
#include <typemesh/layers/lstm.hpp>

#include "common.hpp"

using namespace typemesh;

struct units : dim<"units"> {};

#if FIXED
using x_t = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
using c_t = tensor<float, shape<batch, n>, layout<batch(axis0)>, grid>;
#else
using x_t = tensor<float, shape<batch, units>, layout<batch(axis0)>, grid>;
using c_t = tensor<float, shape<batch, n>, layout<batch(axis0)>, grid>;
#endif
using w_t = tensor<float, shape<k, n>, layout<>, grid>;

auto step(const x_t& x, const x_t& h, const c_t& c, const w_t& w) { return lstm_step(x, h, c, w); }

// An LSTM over inputs whose time dim is split over a mesh axis: the layers
// walk along time, step by step, so every device needs every step.
// expect: typemesh: lstm<Time>: the time dim is split over a mesh axis
// expect: diagnostic::lstm_time_split<step, typemesh::layout<batch ?\(axis0\), step ?\(axis1\)>
#include <typemesh/layers/lstm.hpp>

#include <vector>

#include "common.hpp"

using namespace typemesh;

struct step : dim<"step"> {};

#if FIXED
using x_t = tensor<float, shape<batch, step, k>, layout<batch(axis0)>, grid>;
#else
using x_t = tensor<float, shape<batch, step, k>, layout<batch(axis0), step(axis1)>, grid>;
#endif
using w_t = tensor<float, shape<k, n>, layout<>, grid>;

x_t rnn(const x_t& x, const std::vector<w_t>& w) { return lstm<step>(x, w); }

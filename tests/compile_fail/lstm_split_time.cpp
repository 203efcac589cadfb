// An LSTM over inputs whose time dim is split over a mesh axis: the layers
// walk along time, step by step, so every device needs every step.
// expect: typemesh: lstm_two_layer: x's time dim \(its second\) must not be split
// expect: lstm_detail::types<typemesh::tensor<float, typemesh::shape<batch, step, k>, typemesh::layout<batch ?\(axis0\), step ?\(axis1\)>
#include <typemesh/layers/lstm.hpp>

#include "common.hpp"

using namespace typemesh;

struct step : dim<"step"> {};

using layer1_grid = mesh<"layer1", axis0, axis1>;

#if FIXED
using x_t = tensor<float, shape<batch, step, k>, layout<batch(axis0)>, grid>;
#else
using x_t = tensor<float, shape<batch, step, k>, layout<batch(axis0), step(axis1)>, grid>;
#endif
using w0_t = tensor<float, shape<k, n>, layout<>, grid>;
using w1_t = tensor<float, shape<k, n>, layout<>, layer1_grid>;

auto rnn(const x_t& x, const w0_t& w0, const w1_t& w1) { return lstm_two_layer(x, w0, w1); }

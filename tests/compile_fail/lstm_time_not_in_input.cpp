// The time dim is named, not found by position: naming a dim the input
// lacks (here the input's steps are called `step`, but the call says
// `seq`) is an error that names the dim and the input's shape.
// expect: typemesh: lstm<Time>: the input lacks the time dim named
// expect: diagnostic::lstm_time_not_in_input<seq, typemesh::shape<step, batch, k>
#include <typemesh/layers/lstm.hpp>

#include <vector>

#include "common.hpp"

using namespace typemesh;

struct step : dim<"step"> {};
struct seq : dim<"seq"> {};

using x_t = tensor<float, shape<step, batch, k>, layout<batch(axis0)>, grid>;  // time first
using w_t = tensor<float, shape<k, n>, layout<>, grid>;

#if FIXED
x_t rnn(const x_t& x, const std::vector<w_t>& w) { return lstm<step>(x, w); }
#else
x_t rnn(const x_t& x, const std::vector<w_t>& w) { return lstm<seq>(x, w); }
#endif

// Two sequences joined along seq while seq is split over a mesh axis: each
// device holds only part of each, so the joined parts would not line up.
// expect: typemesh: concat, slice and split work along a dim that every device holds whole
// expect: diagnostic::shape_op_needs_a_whole_dim<seq, typemesh::layout<batch ?\(axis0\), seq ?\(axis1\)>
#include <typemesh/ops/shape_ops.hpp>

#include "common.hpp"

using namespace typemesh;

struct seq : dim<"seq"> {};

#if FIXED
using x_t = tensor<float, shape<batch, seq, k>, layout<batch(axis0), k(axis1)>, grid>;
#else
using x_t = tensor<float, shape<batch, seq, k>, layout<batch(axis0), seq(axis1)>, grid>;
#endif

auto join(const x_t& prefix, const x_t& rest) { return concat<seq>(prefix, rest); }

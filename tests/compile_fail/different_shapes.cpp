// Zipping a tensor with its transpose: zip pairs elements in place, so the dims
// must come in the same order (the broadcasting + of ops/binary.hpp matches
// dims by name instead).
// expect: typemesh: elementwise operands must have the same dims in the same order
// expect: diagnostic::different_shapes<typemesh::shape<batch, k>, typemesh::shape<k, batch>
#include <typemesh/tensor/elementwise.hpp>

#include "common.hpp"

using namespace typemesh;

using x_t = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
#if FIXED
using y_t = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
#else
using y_t = tensor<float, shape<k, batch>, layout<batch(axis0)>, grid>;
#endif

auto add(const x_t& x, const y_t& y) { return zip(x, y, plus_op<float>{}); }

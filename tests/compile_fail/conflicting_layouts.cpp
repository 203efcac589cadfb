// Two tensors split batch over different axes of the same mesh.
// expect: typemesh: the tensors disagree on the mesh axis of a dim
// expect: diagnostic::conflicting_layouts<batch, typemesh::layout<batch ?\(axis0\)>, typemesh::layout<batch ?\(axis1\)>
#include <typemesh/ops/binary.hpp>

#include "common.hpp"

using namespace typemesh;

using x_t = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
#if FIXED
using y_t = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
#else
using y_t = tensor<float, shape<batch, k>, layout<batch(axis1)>, grid>;
#endif

auto add(const x_t& x, const y_t& y) { return x + y; }

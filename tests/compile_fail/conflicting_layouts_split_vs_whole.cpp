// Adding a tensor whose k is split to one whose k is whole; the fix gathers k.
// expect: typemesh: the tensors disagree on the mesh axis of a dim
// expect: diagnostic::conflicting_layouts<k, typemesh::layout<batch ?\(axis0\), k ?\(axis1\)>, typemesh::layout<batch ?\(axis0\)>
#include <typemesh/ops/collectives.hpp>
#include <typemesh/ops/binary.hpp>

#include "common.hpp"

using namespace typemesh;

using hidden = tensor<float, shape<batch, k>, layout<batch(axis0), k(axis1)>, grid>;
using skip = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;

#if FIXED
auto add(const hidden& h, const skip& s) { return allconcat<k>(h) + s; }
#else
auto add(const hidden& h, const skip& s) { return h + s; }
#endif

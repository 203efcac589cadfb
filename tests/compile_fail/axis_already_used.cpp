// After a contraction over k split on axis1, the partial sums live along axis1;
// reducing along axis0, which splits batch, is a mistake.
// expect: typemesh: the collective needs a mesh axis that holds replicas
// expect: diagnostic::axis_already_used<axis0, typemesh::layout<batch ?\(axis0\)>
#include <typemesh/ops/collectives.hpp>

#include "common.hpp"

using namespace typemesh;

using partial = tensor<float, shape<batch, n>, layout<batch(axis0)>, grid>;

#if FIXED
auto finish(const partial& p) { return allreduce<axis1>(p); }
#else
auto finish(const partial& p) { return allreduce<axis0>(p); }
#endif

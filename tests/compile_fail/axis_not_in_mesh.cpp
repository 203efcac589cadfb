// Reducing along axis1 on a 1-d mesh that only has axis0.
// expect: typemesh: the operation names an axis that the mesh does not have
// expect: diagnostic::axis_not_in_mesh<axis1, typemesh::mesh<
#include <typemesh/ops/collectives.hpp>

#include "common.hpp"

using namespace typemesh;

using row = mesh<"row", axis0>;
using partial = tensor<float, shape<batch, k>, layout<>, row>;

#if FIXED
auto finish(const partial& p) { return allreduce<axis0>(p); }
#else
auto finish(const partial& p) { return allreduce<axis1>(p); }
#endif

// Asking the 2-d grid for a group along axis2, an axis of another mesh.
// expect: typemesh: the operation names an axis that the mesh does not have
// expect: diagnostic::axis_not_in_mesh<axis2, typemesh::mesh_base<typemesh::host_space,
#include "common.hpp"

using namespace typemesh;

struct axis2 : axis<"axis2"> {};
using cube = mesh<"cube", axis0, axis1, axis2>;

#if FIXED
group pipeline_peers(const cube& c, int device) { return c.group_along<axis2>(device); }
#else
group pipeline_peers(const grid& g, int device) { return g.group_along<axis2>(device); }
#endif

// A layout written for the 2-d grid, used on a 1-d mesh.
// expect: typemesh: the layout uses an axis that the mesh does not have
// expect: diagnostic::layout_axis_not_in_mesh<axis1, typemesh::mesh<
#include <typemesh/tensor/tensor.hpp>

#include "common.hpp"

using namespace typemesh;

using row = mesh<"row", axis0>;

#if FIXED
using activations = tensor<float, shape<batch, k>, layout<batch(axis0)>, row>;
#else
using activations = tensor<float, shape<batch, k>, layout<batch(axis0), k(axis1)>, row>;
#endif

activations zeros(const row& r) { return activations(r, {64, 128}); }

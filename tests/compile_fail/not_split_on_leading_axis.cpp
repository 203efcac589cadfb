// Concat-split and pipeline moves work along the mesh's first axis.
// expect: typemesh: the concat-split and pipeline kinds need exactly one split dim, on the mesh's first
// expect: diagnostic::not_split_on_leading_axis<typemesh::layout<batch\(axis1\)>
#include <typemesh/convert/replace_mesh.hpp>

#include "common.hpp"

using namespace typemesh;
using regrid = mesh<"regrid", axis0, axis1>;

#if FIXED
using activations = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
#else
using activations = tensor<float, shape<batch, k>, layout<batch(axis1)>, grid>;
#endif

auto regroup(const activations& x, const regrid& m) { return replace_mesh<layout<batch(axis0)>, concat_split>(x, m); }

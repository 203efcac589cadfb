// A residual connection across two pipeline stages on different meshes.
// expect: typemesh: tensors on two different meshes cannot be combined
// (clang spells a mesh's name as its character codes: "first_half" = {{102, 105, ...)
// expect: diagnostic::different_meshes<typemesh::mesh<([^,]*"first_half"|\{\{102, 105, 114, 115, 116, 95, 104)
#include <typemesh/ops/binary.hpp>

#include "common.hpp"

using namespace typemesh;

using first_half = mesh<"first_half", axis0>;
using second_half = mesh<"second_half", axis0>;

using stage0_act = tensor<float, shape<batch, k>, layout<batch(axis0)>, first_half>;
#if FIXED
using stage1_act = tensor<float, shape<batch, k>, layout<batch(axis0)>, first_half>;
#else
using stage1_act = tensor<float, shape<batch, k>, layout<batch(axis0)>, second_half>;
#endif

auto residual(const stage0_act& x, const stage1_act& y) { return x + y; }

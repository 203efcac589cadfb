// A dense layer whose weight lives on another mesh (a pipeline stage's
// weight passed to the previous stage): one error, naming both meshes.
// expect: typemesh: tensors on two different meshes cannot be combined
// expect: diagnostic::different_meshes<typemesh::mesh<([^,]*"stage0"|\{\{115, 116, 97, 103, 101, 48)
#include <typemesh/layers/dense.hpp>

#include "common.hpp"

using namespace typemesh;

using stage0 = mesh<"stage0", axis0>;
using stage1 = mesh<"stage1", axis0>;

using activations = tensor<float, shape<batch, k>, layout<batch(axis0)>, stage0>;
#if FIXED
using weight = tensor<float, shape<k, n>, layout<>, stage0>;
#else
using weight = tensor<float, shape<k, n>, layout<>, stage1>;
#endif

auto layer(const activations& x, const weight& w) { return relu(dense(x, w)); }

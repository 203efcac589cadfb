// A rename whose new name is already a dim of the tensor: the shape would
// name n twice.
// expect: typemesh: rename's new name is already a dim of the tensor
// expect: diagnostic::rename_target_already_in_shape<n, typemesh::shape<batch, k, n>
#include <typemesh/ops/shape_ops.hpp>

#include "common.hpp"

using namespace typemesh;

struct k2 : dim<"k2"> {};

using x_t = tensor<float, shape<batch, k, n>, layout<batch(axis0)>, grid>;

#if FIXED
auto renamed(const x_t& x) { return rename<k, k2>(x); }
#else
auto renamed(const x_t& x) { return rename<k, n>(x); }
#endif

// Gathering n on a tensor that has no dim n.
// expect: typemesh: the operation names a dim that the tensor's shape does not have
// expect: diagnostic::dim_not_in_shape<n, typemesh::shape<batch, k>
#include <typemesh/ops/collectives.hpp>

#include "common.hpp"

using namespace typemesh;

using hidden = tensor<float, shape<batch, k>, layout<batch(axis0), k(axis1)>, grid>;

#if FIXED
auto gather(const hidden& h) { return allconcat<k>(h); }
#else
auto gather(const hidden& h) { return allconcat<n>(h); }
#endif

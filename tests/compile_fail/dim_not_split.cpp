// Gathering a dim that every device already holds whole.
// expect: typemesh: the collective needs a dim that is split over a mesh axis
// expect: diagnostic::dim_not_split<k, typemesh::layout<batch ?\(axis0\)>
#include <typemesh/ops/collectives.hpp>

#include "common.hpp"

using namespace typemesh;

#if FIXED
using hidden = tensor<float, shape<batch, k>, layout<batch(axis0), k(axis1)>, grid>;
#else
using hidden = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;
#endif

auto gather_k(const hidden& h) { return allconcat<k>(h); }

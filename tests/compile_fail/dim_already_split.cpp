// Moving k from axis0 to axis1 by splitting it again; the fix gathers k first.
// expect: typemesh: the collective needs a dim that is whole, but this dim is already split
// expect: diagnostic::dim_already_split<k, typemesh::layout<k ?\(axis0\)>
#include <typemesh/ops/collectives.hpp>

#include "common.hpp"

using namespace typemesh;

using hidden = tensor<float, shape<batch, k>, layout<k(axis0)>, grid>;

#if FIXED
auto move_k(const hidden& h) { return allsplit<k, axis1>(allconcat<k>(h)); }
#else
auto move_k(const hidden& h) { return allsplit<k, axis1>(h); }
#endif

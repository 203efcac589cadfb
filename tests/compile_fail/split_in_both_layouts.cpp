// The independent-axes replacement concatenates along the old split dims and
// splits along the new ones; a dim split in both is another kind of move.
// expect: typemesh: the independent-axes kind needs every dim split in at most one
// expect: diagnostic::split_in_both_layouts<batch,
#include <typemesh/convert/replace_mesh.hpp>

#include "common.hpp"

using namespace typemesh;
using half = mesh<"half", axis0, axis1>;
using embedded = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;

#if FIXED
auto to_half(const embedded& x, const half& h) { return replace_mesh<layout<k(axis0)>, independent_axes>(x, h); }
#else
auto to_half(const embedded& x, const half& h) { return replace_mesh<layout<batch(axis1)>, independent_axes>(x, h); }
#endif

// A reshape that merges [heads, d] into one dim while heads is split over a
// mesh axis: no device holds whole rows of the merged dim.
// expect: typemesh: reshape regroups a dim that the layout splits
// expect: diagnostic::reshape_regroups_a_split_dim<heads, typemesh::shape<batch, heads, d>, typemesh::shape<batch, hd>
#include <typemesh/ops/shape_ops.hpp>

#include "common.hpp"

using namespace typemesh;

struct heads : dim<"heads"> {};
struct d : dim<"d"> {};
struct hd : dim<"hd"> {};

#if FIXED
using x_t = tensor<float, shape<batch, heads, d>, layout<batch(axis0)>, grid>;
#else
using x_t = tensor<float, shape<batch, heads, d>, layout<batch(axis0), heads(axis1)>, grid>;
#endif

auto merge_heads(const x_t& x) { return reshape(x, shape<batch, hd>{8, 512}); }

// A reshape used to swap two dims: the dims keep their names but not their
// places, so the reshape would give each name other elements (a transpose is
// einsum's job).
// expect: typemesh: both shapes of the reshape name this dim, but not at the start or end of both
// expect: diagnostic::reshape_reuses_a_regrouped_dim<heads, typemesh::shape<batch, heads, d>, typemesh::shape<batch, d, heads>
#include <typemesh/ops/einsum.hpp>
#include <typemesh/ops/shape_ops.hpp>

#include "common.hpp"

using namespace typemesh;

struct heads : dim<"heads"> {};
struct d : dim<"d"> {};

using x_t = tensor<float, shape<batch, heads, d>, layout<batch(axis0)>, grid>;

using one_t = tensor<float, shape<>, layout<>, grid>;  // a scalar 1

#if FIXED
auto swap(const x_t& x, const one_t& one) { return einsum<batch, d, heads>(x, one); }
#else
auto swap(const x_t& x, const one_t&) { return reshape(x, shape<batch, d, heads>{8, 64, 8}); }
#endif

// stack of two hidden states placed differently (batch split in one, n in
// the other): the stacked tensor would have no single layout.
// expect: typemesh: stack needs tensors of one type \(element, shape, layout, mesh\)
// expect: diagnostic::stack_needs_one_tensor_type<typemesh::tensor<float, typemesh::shape<batch, n>, typemesh::layout<batch ?\(axis0\)>, .*, typemesh::tensor<float, typemesh::shape<batch, n>, typemesh::layout<n ?\(axis1\)>
#include <typemesh/ops/shape_ops.hpp>

#include "common.hpp"

using namespace typemesh;

struct layer : dim<"layer"> {};

using h0_t = tensor<float, shape<batch, n>, layout<batch(axis0)>, grid>;
#if FIXED
using h1_t = tensor<float, shape<batch, n>, layout<batch(axis0)>, grid>;
#else
using h1_t = tensor<float, shape<batch, n>, layout<n(axis1)>, grid>;
#endif

auto both(const h0_t& h0, const h1_t& h1) { return stack<layer>(h0, h1); }

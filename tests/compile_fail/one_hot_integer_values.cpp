// one_hot given integer on and off values (1, 0): the element type is on's,
// and one_hot makes float or double tensors.
// expect: typemesh: one_hot makes float or double tensors
// expect: diagnostic::one_hot_needs_a_floating_type<int
#include <cstdint>

#include <typemesh/ops/shape_ops.hpp>

#include "common.hpp"

using namespace typemesh;

struct vocab : dim<"vocab"> {};

using labels_t = tensor<std::int32_t, shape<batch>, layout<batch(axis0)>, grid>;

#if FIXED
auto encode(const labels_t& labels) { return one_hot<vocab, axis1>(labels, 1000, 1.0f, 0.0f); }
#else
auto encode(const labels_t& labels) { return one_hot<vocab, axis1>(labels, 1000, 1, 0); }
#endif

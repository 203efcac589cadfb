// one_hot asked to split the new vocab dim over the axis that already splits
// the labels' batch dim: a device would need the vocab part of labels it
// does not hold.
// expect: typemesh: one_hot can split the vocab dim only over an axis that holds replicas of the indices
// expect: diagnostic::one_hot_axis_splits_the_indices<axis0, typemesh::layout<batch ?\(axis0\)>
#include <cstdint>

#include <typemesh/ops/shape_ops.hpp>

#include "common.hpp"

using namespace typemesh;

struct vocab : dim<"vocab"> {};

using labels_t = tensor<std::int32_t, shape<batch>, layout<batch(axis0)>, grid>;

#if FIXED
auto encode(const labels_t& labels) { return one_hot<vocab, axis1>(labels, 1000); }
#else
auto encode(const labels_t& labels) { return one_hot<vocab, axis0>(labels, 1000); }
#endif

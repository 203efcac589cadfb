// A dim can be split over one mesh axis only.
// expect: typemesh: a dim is mapped to two mesh axes
// expect: diagnostic::dim_mapped_twice<batch,
#include <typemesh/tensor/tensor.hpp>

#include "common.hpp"

using namespace typemesh;

#if FIXED
using activations = tensor<float, shape<batch, k>, layout<batch(axis0), k(axis1)>, grid>;
#else
using activations = tensor<float, shape<batch, k>, layout<batch(axis0), batch(axis1)>, grid>;
#endif

activations zeros(const grid& g) { return activations(g, {64, 128}); }

// A square weight matrix still needs two dims.
// expect: typemesh: a shape names the same dim twice
// expect: diagnostic::dim_repeated_in_shape<k, typemesh::shape<k, k>
#include "common.hpp"

using namespace typemesh;

#if FIXED
using square_weights = shape<k, n>;
#else
using square_weights = shape<k, k>;
#endif

square_weights weight_shape() { return {128, 128}; }

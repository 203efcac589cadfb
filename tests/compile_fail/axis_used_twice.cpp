// One mesh axis cannot split two dims of the same tensor.
// expect: typemesh: one mesh axis splits two dims
// expect: diagnostic::axis_used_twice<axis0,
#include "common.hpp"

using namespace typemesh;

#if FIXED
using weights_layout = layout<k(axis0), n(axis1)>;
#else
using weights_layout = layout<k(axis0), n(axis0)>;
#endif

box<2> my_slice(const shape<k, n>& s, const grid& g, int device) {
  return *slice_of<weights_layout>(s, g, device);
}

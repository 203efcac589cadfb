// An entry pairs a dim with a mesh axis, not with another dim.
// expect: typemesh: a layout entry must read dim\(axis\)
// expect: diagnostic::not_a_layout_entry<batch ?\(k\),
#include "common.hpp"

using namespace typemesh;

#if FIXED
using split_both = layout<batch(axis0), k(axis1)>;
#else
using split_both = layout<batch(k)>;
#endif

box<2> my_slice(const shape<batch, k>& s, const grid& g, int device) {
  return *slice_of<split_both>(s, g, device);
}

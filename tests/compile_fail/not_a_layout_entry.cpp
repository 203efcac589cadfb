// A layout entry says which axis splits a dim; a bare dim says nothing.
// expect: typemesh: a layout entry must read dim\(axis\)
// expect: diagnostic::not_a_layout_entry<batch, typemesh::layout<batch>
#include "common.hpp"

using namespace typemesh;

#if FIXED
using data_parallel = layout<batch(axis0)>;
#else
using data_parallel = layout<batch>;
#endif

box<2> my_slice(const shape<batch, k>& s, const grid& g, int device) {
  return *slice_of<data_parallel>(s, g, device);
}

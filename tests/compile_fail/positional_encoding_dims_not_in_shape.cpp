// positional_encoding names its position and channel dims; a shape that does
// not have exactly those two (here the position dim is called seq) is an
// error naming both dims and the shape.
// expect: typemesh: positional_encoding<Len, DModel, Layout> makes a table of exactly the dims Len and DModel
// expect: diagnostic::positional_encoding_shape<length, d_model, typemesh::shape<d_model, seq>,
#include <typemesh/layers/attention.hpp>

#include "common.hpp"

using namespace typemesh;

struct length : dim<"length"> {};
struct seq : dim<"seq"> {};
struct d_model : dim<"d_model"> {};

auto table(const grid& g) {
#if FIXED
  return positional_encoding<seq, d_model, layout<seq(axis0)>>(g, shape<d_model, seq>{512, 256});
#else
  return positional_encoding<length, d_model, layout<seq(axis0)>>(g, shape<d_model, seq>{512, 256});
#endif
}

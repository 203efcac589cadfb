// Adding or removing duplicates keeps every dim where it is.
// expect: typemesh: this kind of mesh replacement keeps every dim on the same mesh axis
// expect: diagnostic::dim_changes_axis<batch,
#include <typemesh/convert/replace_mesh.hpp>

#include "common.hpp"

using namespace typemesh;
using more = mesh<"more", axis0, axis1>;
using activations = tensor<float, shape<batch, k>, layout<batch(axis0)>, grid>;

#if FIXED
auto duplicate(const activations& x, const more& m) { return replace_mesh<layout<batch(axis0)>, duplicates>(x, m); }
#else
auto duplicate(const activations& x, const more& m) { return replace_mesh<layout<batch(axis1)>, duplicates>(x, m); }
#endif

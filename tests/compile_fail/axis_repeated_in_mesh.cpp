// Each axis of a mesh is its own tag.
// expect: typemesh: a mesh names the same axis twice
// expect: diagnostic::axis_repeated_in_mesh<axis0,
#include "common.hpp"

using namespace typemesh;

#if FIXED
using torus = mesh<"torus", axis0, axis1>;
#else
using torus = mesh<"torus", axis0, axis0>;
#endif

torus make_torus() { return torus({4, 2}); }

// What every compile-fail case shares: a program's dim and axis tags and a
// 2-d mesh, declared as a user would declare them.
//
// Each case file makes one mistake, and compiles the same code with the
// mistake fixed when FIXED is 1 (check.cmake passes -DFIXED=0 or -DFIXED=1).
// Its `// expect:` lines are regexes that the compiler output of the mistake
// must match: the message of the check and the check's name with the dim,
// axis or mesh it is about.
#pragma once

#include <typemesh/core.hpp>

struct batch : typemesh::dim<"batch"> {};
struct k : typemesh::dim<"k"> {};
struct n : typemesh::dim<"n"> {};

struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};

using grid = typemesh::mesh<"grid", axis0, axis1>;

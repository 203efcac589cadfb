// A mesh of GPUs in a build that nvcc did not compile.
// expect: typemesh: a cuda_mesh needs a CUDA build
#include <typemesh/core/mesh.hpp>

#include "common.hpp"

using namespace typemesh;

#if FIXED
using gpus = mesh<"gpus", axis0>;
#else
using gpus = cuda_mesh<"gpus", axis0>;
#endif

gpus make_gpus() { return gpus({4}); }

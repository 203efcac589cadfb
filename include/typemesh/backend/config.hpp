// Compiler switches. TYPEMESH_CUDA (core/space.hpp) is on where nvcc
// compiles the library. TYPEMESH_KERNEL marks a
// kernel body (a lambda or function) that must compile for the host and, in
// a CUDA build, for the GPU; nvcc needs --extended-lambda for the lambdas.
#pragma once

#include "typemesh/core/space.hpp"  // TYPEMESH_CUDA

#if defined(__CUDACC__)
#define TYPEMESH_HOST_DEVICE __host__ __device__
#else
#define TYPEMESH_HOST_DEVICE
#endif
#define TYPEMESH_KERNEL TYPEMESH_HOST_DEVICE

// Before a kernel struct's operator() that calls a function the caller
// passes: a host-only lambda is fine on the host space, so nvcc should not
// warn that a host-device function calls it.
#if defined(__CUDACC__)
#define TYPEMESH_CALLS_CALLER _Pragma("nv_exec_check_disable")
#else
#define TYPEMESH_CALLS_CALLER
#endif

// Compiler switches. TYPEMESH_CUDA is on where nvcc compiles the library
// (the CUDA space and its kernels exist only then). TYPEMESH_KERNEL marks a
// kernel body (a lambda or function) that must compile for the host and, in
// a CUDA build, for the GPU; nvcc needs --extended-lambda for the lambdas.
#pragma once

#if defined(__CUDACC__) && !defined(TYPEMESH_NO_CUDA)
#define TYPEMESH_CUDA 1
#endif

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

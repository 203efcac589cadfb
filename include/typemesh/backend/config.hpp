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

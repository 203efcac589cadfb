// Which Thrust system runs the kernels. A CPU build (g++) uses Thrust's
// sequential host system for "device" storage; a CUDA build (nvcc) uses the
// GPU. The CMake target sets THRUST_DEVICE_SYSTEM for CPU builds; this header
// sets it for anyone who includes typemesh without the target.
#pragma once

#if !defined(THRUST_DEVICE_SYSTEM) && !defined(__CUDACC__)
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP
#endif

#if defined(__CUDACC__)
#define TYPEMESH_HOST_DEVICE __host__ __device__
#else
#define TYPEMESH_HOST_DEVICE
#endif

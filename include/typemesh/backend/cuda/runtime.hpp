// The CUDA runtime as the CUDA space uses it: errors become typemesh errors
// naming the call and the GPU, each device's thread is bound to its GPU, and
// elements are copied between host and GPU memory.
//
// Device d of a run uses GPU (d's index on its node) % (GPUs visible), so one
// process may run several devices on one GPU (a test on a one-GPU machine),
// and under MPI each rank takes the GPU of its local index.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string_view>

#include "typemesh/core/error.hpp"

namespace typemesh::backend::cuda {

// Throws device_error for a failed CUDA call: "cudaMemcpy (copying 4096
// bytes to the host) failed on GPU 0: an illegal memory access ...".
inline void check(cudaError_t status, std::string_view call, std::string_view doing = {}) {
  if (status == cudaSuccess) return;
  int gpu = -1;
  (void)cudaGetDevice(&gpu);
  throw device_error(typemesh::detail::cat(call, doing.empty() ? "" : " (", doing, doing.empty() ? "" : ")",
                                           " failed on GPU ", gpu, ": ", cudaGetErrorString(status), " (",
                                           cudaGetErrorName(status), ")"));
}

// GPUs this process sees; 0 where there is no driver or no GPU.
inline int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error a missing driver leaves
    return 0;
  }
  return n;
}

// Makes the calling thread use the GPU of the device with node index
// `local_device`; an error naming the device when there is no GPU.
inline int bind_gpu(int local_device) {
  const int n = gpu_count();
  if (n == 0) {
    throw device_error(typemesh::detail::cat("device ", local_device,
                                             " has tensors on a cuda_mesh, but this process sees no CUDA GPU "
                                             "(cudaGetDeviceCount gives none; check CUDA_VISIBLE_DEVICES and the driver)"));
  }
  const int gpu = local_device % n;
  check(cudaSetDevice(gpu), "cudaSetDevice", "binding a device's thread to its GPU");
  return gpu;
}

// The node index of the device this thread runs as (set when its
// typemesh::device is made), or -1 outside a launch.
inline int& this_thread_device() {
  thread_local int local_device = -1;
  return local_device;
}

// Binds the calling thread to its device's GPU before its first GPU
// allocation (and again if it runs another device); nothing outside a launch.
inline void use_this_threads_gpu() {
  thread_local int bound_for = -1;
  const int local_device = this_thread_device();
  if (local_device < 0 || bound_for == local_device) return;
  bind_gpu(local_device);
  bound_for = local_device;
}

// The stream of the calling thread: kernels, cuBLAS and copies of a device
// go there, in order, so devices that share a GPU (threads) overlap instead
// of queueing on the one legacy default stream.
inline cudaStream_t stream() { return cudaStreamPerThread; }

// Copies bytes between any two of host and GPU memory (unified addressing
// tells the runtime which is which), after this thread's kernels; waits
// until they are there.
inline void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const auto doing = [&] { return typemesh::detail::cat("copying ", bytes, " bytes between host and GPU memory"); };
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()), "cudaMemcpyAsync", doing());
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", doing());
}

// Waits for the kernels this thread started on its GPU; reports an error a
// kernel raised (an illegal address, a failed assertion).
inline void synchronize(std::string_view after) {
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", after);
}

}  // namespace typemesh::backend::cuda

// Spaces: where a mesh's tensors live and where the kernels on them run
// (Kokkos's memory and execution space in one tag). A mesh names its space
// (host unless it says otherwise); every local computation goes through the
// kernel set of that space (backend/kernels.hpp and the files beside it),
// so the same op, layer or optimizer runs on the host or on a GPU.
#pragma once

// On where nvcc compiles the library: the CUDA space and its kernels exist
// only then.
#if defined(__CUDACC__) && !defined(TYPEMESH_NO_CUDA)
#define TYPEMESH_CUDA 1
#endif

#include <concepts>
#include <string_view>

namespace typemesh {

// The host: memory of this process, kernels on the cores a device owns.
struct host_space {
  static constexpr std::string_view name = "host";
};

// A CUDA GPU: device memory, kernels on the device's stream. Usable where
// the library is compiled by nvcc (TYPEMESH_CUDA); elsewhere a mesh in this
// space does not compile.
struct cuda_space {
  static constexpr std::string_view name = "cuda";
};

template <class S>
concept space = std::same_as<S, host_space> || std::same_as<S, cuda_space>;

// The space of a mesh type's tensors.
template <class Mesh>
using space_of = typename Mesh::space;

}  // namespace typemesh

// Downstream smoke test: typemesh's usage requirements (C++20, include paths,
// Thrust on the host) must arrive with the target alone.

// Checked before any include, so it proves the definition comes from the
// typemesh::typemesh target and not from a header.
#if !defined(THRUST_DEVICE_SYSTEM)
#error "typemesh::typemesh did not define THRUST_DEVICE_SYSTEM for this non-CUDA build"
#endif

#include <typemesh/typemesh.hpp>

#include <thrust/device_vector.h>
#include <thrust/reduce.h>

#include <cstdio>

#if THRUST_DEVICE_SYSTEM != THRUST_DEVICE_SYSTEM_CPP
#error "expected Thrust's CPP device system in a non-CUDA build"
#endif

int main() {
  // Thrust's "device" must be usable on a machine without a GPU.
  const thrust::device_vector<int> ones(3, 1);
  if (thrust::reduce(ones.begin(), ones.end()) != 3) {
    std::puts("thrust::reduce on the CPP device system gave a wrong sum");
    return 1;
  }
  std::printf("typemesh %s\n", typemesh::version_string());
  return 0;
}

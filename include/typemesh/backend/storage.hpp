// A device's local storage: one Thrust vector in the device system's memory.
#pragma once

#include "typemesh/backend/config.hpp"

#include <thrust/device_vector.h>

#include <cstddef>
#include <span>

namespace typemesh::backend {

template <class T>
using storage = thrust::device_vector<T>;

// The raw elements of a storage. On a CPU build these are host memory.
template <class T>
std::span<T> view(storage<T>& s) {
  return {thrust::raw_pointer_cast(s.data()), s.size()};
}
template <class T>
std::span<const T> view(const storage<T>& s) {
  return {thrust::raw_pointer_cast(s.data()), s.size()};
}

}  // namespace typemesh::backend

// A device's local storage: one Thrust vector in the device system's memory.
#pragma once

#include "typemesh/backend/config.hpp"

#include <thrust/device_free.h>
#include <thrust/device_malloc.h>
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

// Uninitialised memory of the device system, for staging: unlike storage,
// it is not zero-filled first.
template <class T>
class scratch {
 public:
  explicit scratch(std::size_t n) : n_(n), p_(n ? thrust::device_malloc<T>(n) : thrust::device_ptr<T>()) {}
  ~scratch() {
    if (n_) thrust::device_free(p_);
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;

  T* data() const { return thrust::raw_pointer_cast(p_); }
  std::size_t size() const { return n_; }

 private:
  std::size_t n_;
  thrust::device_ptr<T> p_;
};

}  // namespace typemesh::backend

// A device's local storage: one vector in the device system's memory. On a
// CUDA build that is a Thrust device_vector; on a CPU build a std::vector
// whose elements are left uninitialised unless a value is given, so that an
// operation's output is not zero-filled before it is written.
#pragma once

#include "typemesh/backend/config.hpp"

#include <thrust/device_free.h>
#include <thrust/device_malloc.h>
#include <thrust/device_vector.h>

#include <cstddef>
#include <memory>
#include <new>
#include <span>
#include <utility>
#include <vector>

namespace typemesh::backend {

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
template <class T>
using storage = thrust::device_vector<T>;
#else
// Default-initialises (leaves trivial types uninitialised) where std::allocator
// would value-initialise.
template <class T>
struct default_init_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = default_init_allocator<U>;
  };
  default_init_allocator() = default;
  template <class U>
  default_init_allocator(const default_init_allocator<U>&) noexcept {}

  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <class T>
using storage = std::vector<T, default_init_allocator<T>>;
#endif

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

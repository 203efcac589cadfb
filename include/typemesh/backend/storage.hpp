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
#include <unordered_map>
#include <utility>
#include <vector>

namespace typemesh::backend {

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
template <class T>
using storage = thrust::device_vector<T>;
#else
namespace detail {
// Freed large blocks, kept per thread by exact size for the next tensor of
// that size. Eager operations allocate and free outputs of the same sizes
// step after step; without this, each large block went back to the system
// and came back page by page (a 16 MiB elementwise op ran at a sixth of
// memcpy speed). The cache holds at most `limit` bytes per thread.
class block_cache {
 public:
  static constexpr std::size_t smallest = std::size_t(64) << 10;
  static constexpr std::size_t limit = std::size_t(512) << 20;

  void* take(std::size_t bytes) {
    auto it = free_.find(bytes);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    held_ -= bytes;
    return p;
  }
  bool keep(void* p, std::size_t bytes) {
    if (held_ + bytes > limit) return false;
    free_[bytes].push_back(p);
    held_ += bytes;
    return true;
  }
  ~block_cache() {
    alive() = false;
    for (auto& [bytes, blocks] : free_)
      for (void* p : blocks) ::operator delete(p);
  }
  // False once this thread's cache is gone (blocks freed during thread exit).
  static bool& alive() {
    thread_local bool a = true;
    return a;
  }

 private:
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t held_ = 0;
};
inline block_cache* this_thread_cache() {
  thread_local block_cache c;
  return block_cache::alive() ? &c : nullptr;
}
}  // namespace detail

// Default-initialises (leaves trivial types uninitialised) where std::allocator
// would value-initialise, and reuses this thread's freed large blocks.
template <class T>
struct default_init_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = default_init_allocator<U>;
  };
  default_init_allocator() = default;
  template <class U>
  default_init_allocator(const default_init_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes >= detail::block_cache::smallest) {
      if (auto* c = detail::this_thread_cache())
        if (void* p = c->take(bytes)) return static_cast<T*>(p);
    }
    return static_cast<T*>(::operator new(bytes));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes >= detail::block_cache::smallest) {
      auto* c = detail::this_thread_cache();
      if (c && c->keep(p, bytes)) return;
    }
    ::operator delete(p);
  }

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

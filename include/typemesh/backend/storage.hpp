// A device's local storage, per space. The host space's is a std::vector
// whose elements are left uninitialised unless a value is given, so that an
// operation's output is not zero-filled before it is written, and whose
// large blocks are reused; the CUDA space's is a Thrust device_vector.
//
// The elements are seen through view(): a std::span for host memory, a
// device_span for GPU memory. A device_span has no operator[], so host code
// that would index GPU memory does not compile; kernels take its data().
#pragma once

#include "typemesh/backend/config.hpp"
#include "typemesh/core/space.hpp"

#include <cstddef>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(TYPEMESH_CUDA)
#include <thrust/device_free.h>
#include <thrust/device_malloc.h>
#include <thrust/device_vector.h>
#endif

namespace typemesh::backend {

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
namespace detail {
template <class T, class Space>
struct storage_of;
template <class T>
struct storage_of<T, host_space> {
  using type = std::vector<T, default_init_allocator<T>>;
};
#if defined(TYPEMESH_CUDA)
template <class T>
struct storage_of<T, cuda_space> {
  using type = thrust::device_vector<T>;
};
#endif
}  // namespace detail

template <class T, class Space = host_space>
using storage = typename detail::storage_of<T, Space>::type;

// GPU elements as the host sees them: where they are and how many, nothing
// to index.
template <class T>
class device_span {
 public:
  device_span(T* data, std::size_t size) : data_(data), size_(size) {}
  // device_span<T> to device_span<const T>, as std::span converts.
  template <class U>
    requires(std::is_convertible_v<U (*)[], T (*)[]>)
  device_span(const device_span<U>& other) : data_(other.data()), size_(other.size()) {}
  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  T* data_;
  std::size_t size_;
};

template <class T>
std::span<T> view(std::vector<T, default_init_allocator<T>>& s) {
  return {s.data(), s.size()};
}
template <class T>
std::span<const T> view(const std::vector<T, default_init_allocator<T>>& s) {
  return {s.data(), s.size()};
}
#if defined(TYPEMESH_CUDA)
template <class T>
device_span<T> view(thrust::device_vector<T>& s) {
  return {thrust::raw_pointer_cast(s.data()), s.size()};
}
template <class T>
device_span<const T> view(const thrust::device_vector<T>& s) {
  return {thrust::raw_pointer_cast(s.data()), s.size()};
}
#endif

// Uninitialised memory of a space, for staging and work space.
template <class T, class Space = host_space>
class scratch;

template <class T>
class scratch<T, host_space> {
 public:
  explicit scratch(std::size_t n) : n_(n), p_(n ? default_init_allocator<T>().allocate(n) : nullptr) {}
  ~scratch() {
    if (n_) default_init_allocator<T>().deallocate(p_, n_);
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;

  T* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  std::size_t n_;
  T* p_;
};

#if defined(TYPEMESH_CUDA)
template <class T>
class scratch<T, cuda_space> {
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
#endif

}  // namespace typemesh::backend

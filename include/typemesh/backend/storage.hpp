// A device's local storage, per space. The host space's is a std::vector
// whose elements are left uninitialised unless a value is given, so that an
// operation's output is not zero-filled before it is written, and whose
// large blocks are reused; the CUDA space's is a device_buffer, GPU memory
// likewise uninitialised and reused (cudaMalloc and cudaFree synchronise the
// GPU, so an eager step must not call them per op).
//
// The elements are seen through view(): a std::span for host memory, a
// device_span for GPU memory. A device_span has no operator[], so host code
// that would index GPU memory does not compile; kernels take its data().
// copy_elements moves elements between any two spaces.
#pragma once

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/host/copy_bytes.hpp"
#include "typemesh/core/space.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(TYPEMESH_CUDA)
#include <thrust/fill.h>
#include <thrust/system/cuda/execution_policy.h>

#include "typemesh/backend/cuda/runtime.hpp"
#endif

namespace typemesh::backend {

namespace detail {
// Freed large blocks, kept per thread by exact size for the next tensor of
// that size. Eager operations allocate and free outputs of the same sizes
// step after step; without this, each large block went back to the system
// and came back page by page (a 16 MiB elementwise op ran at a sixth of
// memcpy speed). The cache holds at most `limit` bytes per thread. Memory
// says where blocks come from: host_memory here, GPU memory in the CUDA
// space (a thread runs one device, bound to one GPU).
template <class Memory>
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
      for (void* p : blocks) Memory::release(p, bytes);
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
template <class Memory>
block_cache<Memory>* this_thread_cache() {
  thread_local block_cache<Memory> c;
  return block_cache<Memory>::alive() ? &c : nullptr;
}

// Takes a block of `bytes` from this thread's cache, or from Memory.
template <class Memory>
void* cached_allocate(std::size_t bytes) {
  if (bytes >= block_cache<Memory>::smallest) {
    if (auto* c = this_thread_cache<Memory>())
      if (void* p = c->take(bytes)) return p;
  }
  return Memory::allocate(bytes);
}
template <class Memory>
void cached_release(void* p, std::size_t bytes) noexcept {
  if (bytes >= block_cache<Memory>::smallest) {
    auto* c = this_thread_cache<Memory>();
    if (c && c->keep(p, bytes)) return;
  }
  Memory::release(p, bytes);
}

// Blocks of 2 MiB and more start on a 2 MiB boundary and ask Linux for
// 2 MiB pages (where transparent huge pages are on "madvise" or "always"):
// a 4 KiB page per few rows of a large tensor made strided copies (a
// transfer's pieces) and GEMMs miss the TLB, and non-temporal stores to
// rows a page apart ran at a third of memcpy's speed. Measured: conversions
// up to 11% faster at 32 MiB and 2-3x at 8 MiB, the peer steps 1-5%
// (docs/performance.md).
struct host_memory {
  static constexpr std::size_t page = std::size_t(2) << 20;
  static constexpr std::size_t large = page;
  static void* allocate(std::size_t bytes) {
    if (bytes < large) return ::operator new(bytes);
    void* p = ::operator new(bytes, std::align_val_t{page});
#if defined(MADV_HUGEPAGE)
    (void)::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without it, 4 KiB pages
#endif
    return p;
  }
  static void release(void* p, std::size_t bytes) noexcept {
    if (bytes < large) ::operator delete(p);
    else ::operator delete(p, std::align_val_t{page});
  }
};
}  // namespace detail

// Host blocks of this many bytes and more are on 2 MiB pages (where Linux
// gives them); smaller ones on 4 KiB pages.
inline constexpr std::size_t host_large_block_bytes = detail::host_memory::large;

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

  T* allocate(std::size_t n) { return static_cast<T*>(detail::cached_allocate<detail::host_memory>(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { detail::cached_release<detail::host_memory>(p, n * sizeof(T)); }

  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
#if defined(TYPEMESH_CUDA)
namespace detail {
struct gpu_memory {
  static void* allocate(std::size_t bytes) {
    cuda::use_this_threads_gpu();
    void* p = nullptr;
    cuda::check(cudaMalloc(&p, bytes), "cudaMalloc", typemesh::detail::cat("allocating ", bytes, " bytes"));
    return p;
  }
  // At thread exit the runtime may already be shut down: nothing to report.
  static void release(void* p, std::size_t) noexcept { (void)cudaFree(p); }
};
}  // namespace detail

// Elements in GPU memory, uninitialised unless a value is given; the
// storage of the CUDA space. Holds its size; never indexed from the host.
template <class T>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "typemesh: GPU storage holds trivially copyable elements");

 public:
  using value_type = T;
  device_buffer() = default;
  explicit device_buffer(std::size_t n) { allocate(n); }
  device_buffer(std::size_t n, const T& value) : device_buffer(n) { fill_with(value); }
  // From host elements.
  template <class It>
    requires std::contiguous_iterator<It>
  device_buffer(It first, It last) : device_buffer(static_cast<std::size_t>(last - first)) {
    cuda::copy_bytes(p_, std::to_address(first), n_ * sizeof(T));
  }
  device_buffer(const device_buffer& other) : device_buffer(other.n_) {
    cuda::copy_bytes(p_, other.p_, n_ * sizeof(T));
  }
  device_buffer(device_buffer&& other) noexcept
      : p_(std::exchange(other.p_, nullptr)), n_(std::exchange(other.n_, 0)) {}
  device_buffer& operator=(device_buffer other) noexcept {
    std::swap(p_, other.p_);
    std::swap(n_, other.n_);
    return *this;
  }
  ~device_buffer() { release(); }

  // Keeps the first min(old, n) elements, as a vector does.
  void resize(std::size_t n) {
    if (n == n_) return;
    device_buffer bigger(n);
    cuda::copy_bytes(bigger.p_, p_, std::min(n, n_) * sizeof(T));
    *this = std::move(bigger);
  }
  void resize(std::size_t n, const T& value) {
    const std::size_t old = n_;
    resize(n);
    if (n > old) thrust::fill_n(thrust::cuda::par.on(cuda::stream()), p_ + old, n - old, value);
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  void allocate(std::size_t n) {
    if (n == 0) return;
    p_ = static_cast<T*>(detail::cached_allocate<detail::gpu_memory>(n * sizeof(T)));
    n_ = n;
  }
  void release() noexcept {
    if (p_) detail::cached_release<detail::gpu_memory>(p_, n_ * sizeof(T));
    p_ = nullptr, n_ = 0;
  }
  void fill_with(const T& value) {
    if (n_) thrust::fill_n(thrust::cuda::par.on(cuda::stream()), p_, n_, value);
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};
#endif

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
  using type = device_buffer<T>;
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
device_span<T> view(device_buffer<T>& s) {
  return {s.data(), s.size()};
}
template <class T>
device_span<const T> view(const device_buffer<T>& s) {
  return {s.data(), s.size()};
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
  explicit scratch(std::size_t n) : buffer_(n) {}
  T* data() const { return const_cast<T*>(buffer_.data()); }
  std::size_t size() const { return buffer_.size(); }

 private:
  device_buffer<T> buffer_;
};
#endif

// A span of elements of a space: std::span on the host, device_span on a GPU.
template <class T>
std::span<T> span_of(host_space, T* data, std::size_t n) {
  return {data, n};
}
#if defined(TYPEMESH_CUDA)
template <class T>
device_span<T> span_of(cuda_space, T* data, std::size_t n) {
  return {data, n};
}
#endif

// Copies n elements from `src` in one space to `dst` in another (or the same).
template <class T>
void copy_elements(host_space, T* dst, host_space, const T* src, std::size_t n) {
  host::copy_bytes(dst, src, n * sizeof(T));
}
#if defined(TYPEMESH_CUDA)
template <class To, class From, class T>
  requires(std::is_same_v<To, cuda_space> || std::is_same_v<From, cuda_space>)
void copy_elements(To, T* dst, From, const T* src, std::size_t n) {
  cuda::copy_bytes(dst, src, n * sizeof(T));
}
#endif

// n elements of a space as a host vector.
template <class Space, class T>
std::vector<std::remove_const_t<T>> to_host(Space s, T* data, std::size_t n) {
  std::vector<std::remove_const_t<T>> out(n);
  copy_elements(host_space{}, out.data(), s, data, n);
  return out;
}

}  // namespace typemesh::backend

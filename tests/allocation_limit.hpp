// A limit on the size of any single allocation, for tests that check that a
// large number given at run time (a device id, a size) is rejected before
// anything is allocated for it: with the limit set, an allocation above it
// throws std::bad_alloc at once instead of taking the memory.
//
// This header replaces the global operator new and delete, so exactly one
// translation unit of a test executable includes it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace tt {

inline std::atomic<std::size_t>& allocation_limit_bytes() {
  static std::atomic<std::size_t> limit{0};  // 0: no limit
  return limit;
}

// Sets the limit for its scope.
class allocation_limit {
 public:
  explicit allocation_limit(std::size_t bytes) : previous_(allocation_limit_bytes().exchange(bytes)) {}
  ~allocation_limit() { allocation_limit_bytes() = previous_; }
  allocation_limit(const allocation_limit&) = delete;
  allocation_limit& operator=(const allocation_limit&) = delete;

 private:
  std::size_t previous_;
};

}  // namespace tt

namespace tt::detail {
inline void* limited_allocate(std::size_t n, std::size_t alignment) {
  const std::size_t limit = allocation_limit_bytes().load(std::memory_order_relaxed);
  if (limit != 0 && n > limit) throw std::bad_alloc();
  if (n == 0) n = 1;
  void* p = alignment > alignof(std::max_align_t)
                ? std::aligned_alloc(alignment, (n + alignment - 1) / alignment * alignment)
                : std::malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace tt::detail

// None inlined: GCC would otherwise see malloc and free behind new and delete
// and warn of a mismatch that the replacements do not have.
[[gnu::noinline]] void* operator new(std::size_t n) { return tt::detail::limited_allocate(n, 0); }
[[gnu::noinline]] void* operator new[](std::size_t n) { return tt::detail::limited_allocate(n, 0); }
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a) {
  return tt::detail::limited_allocate(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a) {
  return tt::detail::limited_allocate(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

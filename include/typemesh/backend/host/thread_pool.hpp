// The helper threads of one host device. A device is a thread (or an MPI
// rank) that owns some of the machine's cores; its kernels split their index
// range into as many contiguous parts as it has cores and run the parts on
// the device's own thread plus these helpers. The helpers start with the
// first kernel that wants them and stop with the device's thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace typemesh::backend::host {

class thread_pool {
 public:
  explicit thread_pool(int helpers) {
    workers_.reserve(static_cast<std::size_t>(helpers));
    for (int i = 0; i < helpers; ++i) workers_.emplace_back([this] { serve(); });
  }
  ~thread_pool() {
    {
      std::lock_guard lk(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int helpers() const { return static_cast<int>(workers_.size()); }

  // Calls part(p) for every p in [0, parts), on this thread and the helpers,
  // and returns when all have returned. An exception from a part is rethrown
  // here (the first one; the other parts still run to their end).
  template <class Part>
  void run(int parts, const Part& part) {
    job_ = [](const void* p, int i) { (*static_cast<const Part*>(p))(i); };
    context_ = &part;
    parts_ = parts;
    next_.store(0, std::memory_order_relaxed);
    {
      std::lock_guard lk(mutex_);
      done_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock lk(mutex_);
    finished_.wait(lk, [&] { return done_ == helpers(); });
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  }

 private:
  void work() {
    for (int i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < parts_;) {
      try {
        job_(context_, i);
      } catch (...) {
        std::lock_guard lk(mutex_);
        if (!failure_) failure_ = std::current_exception();
      }
    }
  }
  void serve() {
    std::uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock lk(mutex_);
        wake_.wait(lk, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      work();
      {
        std::lock_guard lk(mutex_);
        ++done_;
      }
      finished_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  std::uint64_t generation_ = 0;
  int done_ = 0;
  bool stopping_ = false;
  std::exception_ptr failure_;
  // The job in flight: written before the generation changes under the
  // mutex, read by helpers after they see the new generation.
  void (*job_)(const void*, int) = nullptr;
  const void* context_ = nullptr;
  int parts_ = 0;
  std::atomic<int> next_{0};
};

// The threads this device's kernels use, itself included: set by launch for
// each device (the cores divided among the devices of the process), 1 on a
// thread that is no device.
inline int& kernel_threads() {
  thread_local int threads = 1;
  return threads;
}

// This device thread's pool, made at first use, with kernel_threads() - 1
// helpers; remade if the count changed.
inline thread_pool& pool() {
  thread_local std::unique_ptr<thread_pool> p;
  const int helpers = std::max(1, kernel_threads()) - 1;
  if (!p || p->helpers() != helpers) {
    p.reset();
    p = std::make_unique<thread_pool>(helpers);
  }
  return *p;
}

}  // namespace typemesh::backend::host

// The helper threads of one host device. A device is a thread (or an MPI
// rank) that owns some of the machine's cores; its kernels split their index
// range into as many contiguous parts as it has cores and run the parts on
// the device's own thread plus these helpers. The helpers start with the
// first kernel that wants them and stop with the device's thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
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
  // here (the first one; the other parts still run to their end). Helpers
  // that are slow to wake (a busy machine) do not hold the caller up: it
  // takes the parts they have not started and waits only for the parts
  // already running.
  template <class Part>
  void run(int parts, const Part& part) {
    job j;
    j.call = [](const void* p, int i) { (*static_cast<const Part*>(p))(i); };
    j.context = &part;
    j.parts = parts;
    {
      std::lock_guard lk(mutex_);
      current_ = &j;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(j);
    {
      std::lock_guard lk(mutex_);
      current_ = nullptr;  // helpers that wake from now on find nothing to do
    }
    // The helpers' parts usually end within microseconds of this thread's:
    // watching for that briefly saves sleeping and being woken.
    const auto until = std::chrono::steady_clock::now() + finish_watch_;
    while (j.users.load(std::memory_order_acquire) != 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    std::unique_lock lk(mutex_);
    finished_.wait(lk, [&] { return j.users.load(std::memory_order_relaxed) == 0; });
    if (j.failure) std::rethrow_exception(j.failure);
  }

 private:
  struct job {
    void (*call)(const void*, int) = nullptr;
    const void* context = nullptr;
    int parts = 0;
    std::atomic<int> next{0};
    std::atomic<int> users{0};  // helpers working on it; changed under the mutex
    std::exception_ptr failure;
  };

  void work(job& j) {
    for (int i; (i = j.next.fetch_add(1, std::memory_order_relaxed)) < j.parts;) {
      try {
        j.call(j.context, i);
      } catch (...) {
        std::lock_guard lk(mutex_);
        if (!j.failure) j.failure = std::current_exception();
      }
    }
  }
  void serve() {
    std::uint64_t seen = 0;
    while (true) {
      // Kernels of a step come back to back: watching for the next one a
      // while before sleeping saves the wake-up (tens of microseconds on a
      // busy machine, long enough for the caller to have done the helpers'
      // parts too), at the price of yielding the core in a loop meanwhile.
      const auto until = std::chrono::steady_clock::now() + watch_;
      while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
      job* j = nullptr;
      {
        std::unique_lock lk(mutex_);
        wake_.wait(lk, [&] { return stopping_ || generation_.load(std::memory_order_relaxed) != seen; });
        if (stopping_) return;
        seen = generation_.load(std::memory_order_relaxed);
        j = current_;
        if (j) ++j->users;
      }
      if (!j) continue;
      work(*j);
      {
        std::lock_guard lk(mutex_);
        --j->users;
      }
      finished_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  std::atomic<std::uint64_t> generation_{0};  // changed under the mutex, watched without it
  static constexpr std::chrono::microseconds watch_{2000}, finish_watch_{200};
  job* current_ = nullptr;
  bool stopping_ = false;
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

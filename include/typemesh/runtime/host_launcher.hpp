// The host launcher: each device is a thread of this process. If any device
// throws, the others stop at their next wait and the launcher rethrows the
// first device's exception. Under mpirun it runs inside each rank (a
// reference run), when asked for by name.
#pragma once

#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "typemesh/core/error.hpp"
#include "typemesh/runtime/device.hpp"
#include "typemesh/runtime/host_world.hpp"
#include "typemesh/runtime/launcher.hpp"

namespace typemesh {

namespace detail {

// Runs f on a thread per device of `world` and returns what launch returns.
// with_device(id, run) makes device id's typemesh::device (its communicator,
// this_device(), the kernel threads), calls run(dev) and undoes what it set.
// If any device throws, the others stop at their next wait and the first
// device's exception is rethrown; every thread started is joined on every
// path. Shared by the launchers whose devices are threads (host, NCCL).
template <class F, class WithDevice>
launch_result_t<F> run_device_threads(host_world& world, F& f, WithDevice with_device) {
  using result = launch_call_result_t<F>;
  constexpr bool returns = !std::is_void_v<result>;
  using slot = std::conditional_t<returns, std::optional<std::decay_t<result>>, char>;
  const int devices = world.size();
  std::vector<slot> results(devices);
  std::mutex failure_mutex;
  std::exception_ptr first_failure;

  auto body = [&](int id) {
    try {
      with_device(id, [&](device& dev) {
        if constexpr (returns) results[id].emplace(call_on(f, dev));
        else call_on(f, dev);
      });
      world.mark_finished(id);
    } catch (const aborted_error&) {
      // Stopped because another device failed; that device's error is rethrown.
    } catch (...) {
      std::exception_ptr e = std::current_exception();
      {
        std::lock_guard lk(failure_mutex);
        if (!first_failure) first_failure = e;
      }
      world.abort(id, describe_exception(e));
    }
  };

  // A thread that cannot be started stops the ones already running, as a
  // failing device would.
  std::vector<std::thread> threads;
  try {
    threads.reserve(devices);
    for (int id = 0; id < devices; ++id) threads.emplace_back(body, id);
  } catch (const std::exception& e) {
    const std::string reason =
        cat("could not start the thread of device ", threads.size(), " of ", devices, ": ", e.what());
    world.abort(static_cast<int>(threads.size()), reason);
    for (auto& t : threads) t.join();
    throw device_error(reason);
  }
  for (auto& t : threads) t.join();
  if (first_failure) std::rethrow_exception(first_failure);
  if (auto lines = world.leftovers(); !lines.empty()) {
    std::string text;
    for (const auto& line : lines) text += cat("\n  ", line);
    throw collective_error(
        cat("the program ended with messages nobody received (a device skipped a recv or a transfer):", text));
  }

  if constexpr (returns) {
    std::vector<std::decay_t<result>> out;
    out.reserve(devices);
    for (auto& r : results) out.push_back(std::move(*r));
    return out;
  }
}

// Makes `dev` this thread's device and sets its kernel threads, until the
// scope ends.
class device_scope {
 public:
  device_scope(device& dev, int kernel_threads)
      : previous_device_(std::exchange(current_device(), &dev)),
        previous_threads_(std::exchange(backend::host::kernel_threads(), kernel_threads)) {}
  ~device_scope() {
    current_device() = previous_device_;
    backend::host::kernel_threads() = previous_threads_;
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  device* previous_device_;
  int previous_threads_;
};

}  // namespace detail

struct host_launcher {
  static constexpr std::string_view name = "host";

  // Never: host is what the automatic choice falls back to when no other
  // launcher is detected.
  static bool detected() { return false; }

  template <class F>
  static launch_result_t<F> run(const launch_options& options, F& f) {
    const int kernel_threads = detail::kernel_threads_for(options, options.devices);
    host_world world(options.devices, options.timeout);
    return detail::run_device_threads(world, f, [&](int id, auto&& run_on) {
      device dev{host_communicator(world, id)};
      detail::device_scope scope(dev, kernel_threads);
      run_on(dev);
    });
  }
};

template <>
struct launcher_slot<0> {
  using type = host_launcher;
};

}  // namespace typemesh

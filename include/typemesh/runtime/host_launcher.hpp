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

struct host_launcher {
  static constexpr std::string_view name = "host";

  // Never: host is what the automatic choice falls back to when no other
  // launcher is detected.
  static bool detected() { return false; }

  template <class F>
  static launch_result_t<F> run(const launch_options& options, F& f) {
    using result = detail::launch_call_result_t<F>;
    constexpr bool returns = !std::is_void_v<result>;
    using slot = std::conditional_t<returns, std::optional<std::decay_t<result>>, char>;

    const int kernel_threads = detail::kernel_threads_for(options, options.devices);
    host_world world(options.devices, options.timeout);
    std::vector<slot> results(options.devices);
    std::mutex failure_mutex;
    std::exception_ptr first_failure;

    auto body = [&](int id) {
      device dev{host_communicator(world, id)};
      detail::current_device() = &dev;
      backend::host::kernel_threads() = kernel_threads;
      try {
        if constexpr (returns) results[id].emplace(detail::call_on(f, dev));
        else detail::call_on(f, dev);
        world.mark_finished(id);
      } catch (const aborted_error&) {
        // Stopped because another device failed; that device's error is rethrown.
      } catch (...) {
        std::exception_ptr e = std::current_exception();
        {
          std::lock_guard lk(failure_mutex);
          if (!first_failure) first_failure = e;
        }
        world.abort(id, detail::describe_exception(e));
      }
      detail::current_device() = nullptr;
    };

    // Every thread started is joined on every path: a thread that cannot be
    // started stops the ones already running, as a failing device would.
    std::vector<std::thread> threads;
    try {
      threads.reserve(options.devices);
      for (int id = 0; id < options.devices; ++id) threads.emplace_back(body, id);
    } catch (const std::exception& e) {
      const std::string reason = detail::cat("could not start the thread of device ", threads.size(), " of ",
                                             options.devices, ": ", e.what());
      world.abort(static_cast<int>(threads.size()), reason);
      for (auto& t : threads) t.join();
      throw device_error(reason);
    }
    for (auto& t : threads) t.join();
    if (first_failure) std::rethrow_exception(first_failure);
    if (auto lines = world.leftovers(); !lines.empty()) {
      std::string text;
      for (const auto& line : lines) text += detail::cat("\n  ", line);
      throw collective_error(detail::cat("the program ended with messages nobody received (a device skipped a recv "
                                         "or a transfer):", text));
    }

    if constexpr (returns) {
      std::vector<std::decay_t<result>> out;
      out.reserve(options.devices);
      for (auto& r : results) out.push_back(std::move(*r));
      return out;
    }
  }
};

template <>
struct launcher_slot<0> {
  using type = host_launcher;
};

}  // namespace typemesh

// The SPMD launcher: runs one function on every device and returns when all
// are done.
//
//   typemesh::launch(8, [](typemesh::device& dev) { ... });
//   auto losses = typemesh::launch(8, [](typemesh::device& dev) { return loss; });
//
// With the host backend each device is a thread of this process. If any
// device throws, the others stop at their next wait and the launcher rethrows
// the first device's exception.
//
// In a program that links typemesh::mpi (TYPEMESH_WITH_MPI) and runs under an
// MPI launcher, each rank is one device instead: see runtime/mpi_launch.hpp.
#pragma once

#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "typemesh/backend/blas.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/runtime/device.hpp"
#include "typemesh/runtime/host_world.hpp"

namespace typemesh {

// Which backend runs the devices. automatic: TYPEMESH_BACKEND (host or mpi)
// if set, else MPI when the program links typemesh::mpi and runs under an
// MPI launcher, else host threads. host: threads of this process, also under mpirun (a
// reference run inside each rank). mpi: one device per rank, or an error in a
// program built without MPI.
enum class backend_kind { automatic, host, mpi };

struct launch_options {
  int devices = 1;
  // How long any one wait (a collective, a recv) may take before it fails.
  std::chrono::milliseconds timeout{60'000};
  backend_kind backend = backend_kind::automatic;
  // Threads each device's host kernels (and BLAS) run on, itself included.
  // 0: the process's cores (OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or
  // OMP_NUM_THREADS when set) divided among the devices, at least 1.
  int threads_per_device = 0;
};

namespace detail {

// The threads of each device's kernels under these options.
inline int kernel_threads_for(const launch_options& options, int devices) {
  if (options.threads_per_device < 0) {
    throw device_error(cat("launch: threads_per_device must be 0 (the cores divided among the devices) or more, got ",
                           options.threads_per_device));
  }
  return options.threads_per_device > 0 ? options.threads_per_device : backend::blas_threads_per_device(devices);
}

inline std::string describe_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

template <class F>
decltype(auto) call_on(F& f, device& d) {
  if constexpr (std::is_invocable_v<F&, device&>) return f(d);
  else return f();
}

// TYPEMESH_BACKEND=host or =mpi overrides the automatic choice; unset or
// empty leaves it.
inline backend_kind backend_from_environment() {
  const char* value = std::getenv("TYPEMESH_BACKEND");
  const std::string_view b = value ? value : "";
  if (b.empty()) return backend_kind::automatic;
  if (b == "host") return backend_kind::host;
  if (b == "mpi") return backend_kind::mpi;
  throw device_error(detail::cat("TYPEMESH_BACKEND is '", b, "': use host, mpi, or leave it unset"));
}

#ifdef TYPEMESH_WITH_MPI
inline bool mpi_detected();  // runtime/mpi_launch.hpp
#endif

inline bool runs_on_mpi(backend_kind b) {
  if (b == backend_kind::automatic) b = backend_from_environment();
#ifdef TYPEMESH_WITH_MPI
  return b == backend_kind::mpi || (b == backend_kind::automatic && mpi_detected());
#else
  if (b == backend_kind::mpi) {
    throw device_error(
        "launch asks for the MPI backend, but this program was built without it: link the typemesh::mpi CMake target "
        "(docs/mpi.md)");
  }
  return false;
#endif
}

}  // namespace detail

// Runs f on every device; f takes a typemesh::device& or nothing. Returns the
// per-device results, indexed by device id, when f returns a value.
template <class F>
auto launch(const launch_options& options, F&& f) {
#ifdef TYPEMESH_WITH_MPI
  if (detail::runs_on_mpi(options.backend)) return mpi_launch(options, f);
#else
  detail::runs_on_mpi(options.backend);
#endif
  using result = decltype(detail::call_on(f, std::declval<device&>()));
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
    throw collective_error(detail::cat("the program ended with messages nobody received (a device skipped a recv or a "
                                       "transfer):", text));
  }

  if constexpr (returns) {
    std::vector<std::decay_t<result>> out;
    out.reserve(options.devices);
    for (auto& r : results) out.push_back(std::move(*r));
    return out;
  }
}

template <class F>
auto launch(int devices, F&& f) {
  return launch(launch_options{.devices = devices}, std::forward<F>(f));
}

}  // namespace typemesh

#ifdef TYPEMESH_WITH_MPI
#include "typemesh/runtime/mpi_launch.hpp"
#endif

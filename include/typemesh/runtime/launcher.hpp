// Launchers: what runs typemesh::launch's devices (host threads, MPI ranks,
// GPUs). A launcher is a type of this shape:
//
//   struct my_launcher {
//     static constexpr std::string_view name = "mine";   // what TYPEMESH_BACKEND and --backend say
//     static bool detected();                            // whether the automatic choice takes it
//     template <class F> static auto run(const launch_options&, F& f);
//                                        // runs f on every device; returns launch_result_t<F>
//     static int local_devices(const launch_options&);   // optional: devices this process drives
//                                                        // (default: all of them; MPI: one)
//   };
//
// run sets this_device() and each device's kernel thread count, stops every
// device when one fails and rethrows, and returns f's results indexed by
// device id (void when f returns nothing), as the host launcher does.
//
// How a backend registers (a fourth backend is one new header):
//
//   template <> struct typemesh::launcher_slot<3> { using type = my_launcher; };
//
// Slot numbers are taken once each: 0 host, 1 mpi, 2 nccl; 3 to 15 are free
// (two backends in one slot do not compile: a redefinition; nor do two
// launchers with one name, or a slot whose type is not a launcher). The automatic
// choice asks detected() in slot order. The registration must come before
// the first launch of every translation unit of the program (C++ leaves a
// specialisation after the point of use undiagnosed, and files that saw
// different launchers would disagree), so a backend's CMake target
// force-includes its header: typemesh::mpi adds
// -include typemesh/runtime/mpi_launcher.hpp. A launcher of the program's
// own, like the test launcher in tests/runtime_test.cpp, is registered right
// after the includes.
//
// launch picks the launcher named by launch_options::backend; if that is
// empty, by the TYPEMESH_BACKEND environment variable; if that is unset or
// empty, the first detected one; else host. A name that no launcher of this
// program has is a device_error listing the names it has and, for a known
// backend, how to get it.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "typemesh/backend/blas.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/runtime/device.hpp"

namespace typemesh {

struct launch_options {
  int devices = 1;
  // How long any one wait (a collective, a recv) may take before it fails.
  std::chrono::milliseconds timeout{60'000};
  // The launcher's name: "host", "mpi", "nccl" or a program's own; empty:
  // TYPEMESH_BACKEND if set, else the first detected launcher, else host.
  std::string backend{};
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

template <class F>
using launch_call_result_t = decltype(call_on(std::declval<std::remove_reference_t<F>&>(), std::declval<device&>()));

// Stands in for a user's function when the launcher concept checks run.
struct launcher_probe {
  void operator()(device&) const {}
};

}  // namespace detail

// What launch(options, f) returns: f's results indexed by device id, or
// nothing when f returns nothing.
template <class F>
using launch_result_t = std::conditional_t<std::is_void_v<detail::launch_call_result_t<F>>, void,
                                           std::vector<std::decay_t<detail::launch_call_result_t<F>>>>;

template <class L>
concept launcher = requires(const launch_options& options, detail::launcher_probe& f) {
  requires std::same_as<std::remove_cv_t<decltype(L::name)>, std::string_view>;
  requires(!L::name.empty());  // also makes sure the name is a constant
  { L::detected() } -> std::same_as<bool>;
  { L::run(options, f) } -> std::same_as<void>;
};

// Registration: a backend specialises one slot with `using type = its_launcher;`.
template <int Slot>
struct launcher_slot {};

inline constexpr int launcher_slot_count = 16;

namespace detail {

template <int Slot>
concept filled_launcher_slot = requires { typename launcher_slot<Slot>::type; };

template <int Slot>
constexpr bool check_launcher_slot() {
  using L = typename launcher_slot<Slot>::type;
  static_assert(launcher<L>,
                "typemesh: a launcher_slot's type must be a launcher (runtime/launcher.hpp): a static constexpr "
                "std::string_view name, static bool detected() and template <class F> static auto "
                "run(const launch_options&, F&)");
  return launcher<L>;  // the callers skip a slot that fails, so that its error is the only one
}

// Calls visit(std::type_identity<L>{}) for each registered launcher in slot
// order until it returns true; says whether one did. A template, so the slots
// are looked at where a program launches, after every backend registered.
template <int Slot = 0, class Visit>
bool visit_launchers(Visit&& visit) {
  if constexpr (Slot == launcher_slot_count) {
    return false;
  } else {
    if constexpr (filled_launcher_slot<Slot>) {
      if constexpr (check_launcher_slot<Slot>()) {
        if (visit(std::type_identity<typename launcher_slot<Slot>::type>{})) return true;
      }
    }
    return visit_launchers<Slot + 1>(visit);
  }
}

// The backends typemesh ships, and how a program gets each.
struct known_backend {
  std::string_view name;
  std::string_view how;
};
inline constexpr known_backend known_backends[] = {
    {"host", "include typemesh/runtime/launch.hpp"},
    {"mpi", "link the typemesh::mpi CMake target (docs/mpi.md)"},
    {"nccl", "link the typemesh::nccl CMake target (docs/backend.md)"},
};

template <int Slot>
constexpr std::string_view launcher_slot_name() {
  if constexpr (filled_launcher_slot<Slot>) {
    if constexpr (launcher<typename launcher_slot<Slot>::type>) return launcher_slot<Slot>::type::name;
  }
  return {};
}

// Whether no two registered launchers share a name (a name must say which).
template <int First, int... Slots>
constexpr bool launcher_names_unique(std::integer_sequence<int, Slots...>) {
  const std::string_view names[] = {launcher_slot_name<First + Slots>()...};
  for (std::size_t i = 0; i < sizeof...(Slots); ++i) {
    for (std::size_t j = i + 1; j < sizeof...(Slots); ++j) {
      if (!names[i].empty() && names[i] == names[j]) return false;
    }
  }
  return true;
}

}  // namespace detail

// The functions below are templates whose parameter is always 0: a template
// looks at the slots where the program calls it, after every backend
// registered, where a plain function would look where this header is.

// The names of this program's launchers, in slot order.
template <int First = 0>
std::vector<std::string_view> launcher_names() {
  std::vector<std::string_view> names;
  detail::visit_launchers<First>([&]<class L>(std::type_identity<L>) {
    names.push_back(L::name);
    return false;
  });
  return names;
}

// Whether this program has a launcher of that name.
template <int First = 0>
bool has_launcher(std::string_view name) {
  return detail::visit_launchers<First>([&]<class L>(std::type_identity<L>) { return L::name == name; });
}

// Why a name is not a launcher of this program: its launchers, and how to
// get the one asked for when typemesh knows it. `source` says where the name
// came from ("launch_options::backend", "TYPEMESH_BACKEND", "--backend").
template <int First = 0>
std::string missing_launcher_message(std::string_view source, std::string_view name) {
  std::string have;
  for (std::string_view n : launcher_names<First>()) have += detail::cat(have.empty() ? "" : ", ", n);
  std::string how = "a launcher is there when its header is included before the first launch; its CMake target "
                    "does that (docs/backend.md, Launchers)";
  for (const auto& b : detail::known_backends) {
    if (b.name == name) how = detail::cat("to get it, ", b.how);
  }
  return detail::cat(source, " asks for the launcher '", name, "', which this program does not have (it has: ", have,
                     "); ", how);
}

// The name of the launcher launch(options, f) runs on. Throws device_error
// for a name this program has no launcher of.
template <int First = 0>
std::string_view chosen_launcher(const launch_options& options) {
  std::string_view name = options.backend;
  std::string_view source = "launch_options::backend";
  if (name.empty()) {
    const char* value = std::getenv("TYPEMESH_BACKEND");
    name = value ? value : "";
    source = "TYPEMESH_BACKEND";
  }
  std::string_view chosen;
  if (name.empty()) {
    detail::visit_launchers<First>([&]<class L>(std::type_identity<L>) {
      if (L::detected()) chosen = L::name;
      return !chosen.empty();
    });
    return chosen.empty() ? std::string_view("host") : chosen;
  }
  detail::visit_launchers<First>([&]<class L>(std::type_identity<L>) {
    if (L::name == name) chosen = L::name;
    return !chosen.empty();
  });
  if (chosen.empty()) throw device_error(missing_launcher_message<First>(source, name));
  return chosen;
}

// How many of the devices this process drives under these options: all of
// them with host threads, one per rank with MPI.
template <int First = 0>
int devices_in_this_process(const launch_options& options) {
  const std::string_view name = chosen_launcher<First>(options);
  int local = options.devices;
  detail::visit_launchers<First>([&]<class L>(std::type_identity<L>) {
    if (L::name != name) return false;
    if constexpr (requires { { L::local_devices(options) } -> std::convertible_to<int>; }) {
      local = L::local_devices(options);
    }
    return true;
  });
  return local;
}

namespace detail {

template <int Slot, class F>
launch_result_t<F> run_launcher_named(std::string_view name, const launch_options& options, F& f) {
  if constexpr (Slot == launcher_slot_count) {
    throw device_error(cat("launch: no launcher is called '", name, "'"));
  } else {
    if constexpr (filled_launcher_slot<Slot>) {
      using L = typename launcher_slot<Slot>::type;
      if constexpr (check_launcher_slot<Slot>()) {
        if (L::name == name) {
          static_assert(std::is_same_v<decltype(L::run(options, f)), launch_result_t<F>>,
                        "typemesh: a launcher's run(options, f) must return launch_result_t<F>: f's results "
                        "indexed by device id, or void");
          return L::run(options, f);
        }
      }
    }
    return run_launcher_named<Slot + 1>(name, options, f);
  }
}

}  // namespace detail

}  // namespace typemesh

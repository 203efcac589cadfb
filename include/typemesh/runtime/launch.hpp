// The SPMD launch: runs one function on every device and returns when all
// are done.
//
//   typemesh::launch(8, [](typemesh::device& dev) { ... });
//   auto losses = typemesh::launch(8, [](typemesh::device& dev) { return loss; });
//   typemesh::launch({.devices = 8, .backend = "host"}, f);
//
// A launcher runs the devices (runtime/launcher.hpp): host threads
// (runtime/host_launcher.hpp) unless the program has another backend and
// chooses it by name or it is detected, as MPI is under mpirun
// (runtime/mpi_launcher.hpp, in programs that link typemesh::mpi).
#pragma once

#include <string_view>
#include <utility>

#include "typemesh/runtime/host_launcher.hpp"
#include "typemesh/runtime/launcher.hpp"

namespace typemesh {

namespace detail {
// Slot 0, spelled so that it depends on F: the launcher slots are then looked
// at where the program launches, after every backend header registered.
template <class F>
inline constexpr int first_launcher_slot = 0;
}  // namespace detail

// Runs f on every device; f takes a typemesh::device& or nothing. Returns the
// per-device results, indexed by device id, when f returns a value.
template <class F>
launch_result_t<F> launch(const launch_options& options, F&& f) {
  static_assert(detail::launcher_names_unique<detail::first_launcher_slot<F>>(
                    std::make_integer_sequence<int, launcher_slot_count>()),
                "typemesh: two launchers of this program have the same name; launch_options::backend and "
                "TYPEMESH_BACKEND could not say which one runs");
  const std::string_view name = chosen_launcher<detail::first_launcher_slot<F>>(options);
  return detail::run_launcher_named<detail::first_launcher_slot<F>>(name, options, f);
}

template <class F>
launch_result_t<F> launch(int devices, F&& f) {
  return launch(launch_options{.devices = devices}, std::forward<F>(f));
}

}  // namespace typemesh

// What a backend registers in a launcher slot must be a launcher.
// expect: typemesh: a launcher_slot's type must be a launcher
#include "common.hpp"

#include <typemesh/runtime/launch.hpp>

struct unnamed_launcher {
#if FIXED
  static constexpr std::string_view name = "unnamed";
#endif
  static bool detected() { return false; }
  template <class F>
  static typemesh::launch_result_t<F> run(const typemesh::launch_options& options, F& f) {
    return typemesh::host_launcher::run(options, f);
  }
};

template <>
struct typemesh::launcher_slot<4> {
  using type = unnamed_launcher;
};

void run_once() {
  typemesh::launch(2, [] {});
}

// Two launchers of one program cannot share a name: the name chooses one.
// expect: typemesh: two launchers of this program have the same name
#include "common.hpp"

#include <typemesh/runtime/launch.hpp>

struct other_host_launcher {
#if FIXED
  static constexpr std::string_view name = "other-host";
#else
  static constexpr std::string_view name = "host";
#endif
  static bool detected() { return false; }
  template <class F>
  static typemesh::launch_result_t<F> run(const typemesh::launch_options& options, F& f) {
    return typemesh::host_launcher::run(options, f);
  }
};

template <>
struct typemesh::launcher_slot<4> {
  using type = other_host_launcher;
};

void run_twice() {
  typemesh::launch(2, [] {});
}

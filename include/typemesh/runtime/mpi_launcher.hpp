// The MPI launcher ("mpi"): one device per rank. Programs that link
// typemesh::mpi have it (the target force-includes this header); launch takes
// it when asked for by name or, left to the automatic choice, when the
// process runs under an MPI launcher. See docs/mpi.md.
//
//   mpirun -np 8 ./train        # launch(8, f) runs f once per rank
//
// - Each rank runs f once, as device `rank`; launch(n, f) needs n == the
//   number of ranks, else every rank throws device_error before any work.
// - MPI is initialised on the first such launch (Boost.MPI environment,
//   MPI_THREAD_FUNNELED) and finalised at exit, unless the program did it.
// - When f returns a value, every rank gets every device's result, indexed by
//   device id, exactly as with host threads: numbers, plain structs, strings,
//   standard containers and aggregates of such travel as they are (see
//   runtime/mpi_gather.hpp); anything else fails to compile in MPI builds
//   with a message saying so.
// - An exception leaving f on any rank prints
//     typemesh: rank R (device R of N) failed: <what()>
//   to stderr and calls MPI_Abort, which ends every rank of the job: no rank
//   is left waiting. There is no aborted_error under MPI; the job's exit
//   status is non-zero.
#pragma once

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <boost/mpi/environment.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iterator>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "typemesh/runtime/launch.hpp"
#include "typemesh/runtime/launcher.hpp"
#include "typemesh/runtime/mpi_communicator.hpp"
#include "typemesh/runtime/mpi_gather.hpp"

namespace typemesh {

namespace detail {

// Whether a launch left to the automatic choice (and to TYPEMESH_BACKEND)
// runs on MPI: it does under an MPI launcher (Open MPI's mpirun; PMI or PMIx
// as set by MPICH's mpiexec and Slurm's srun --mpi=pmi2/pmix) or when the
// program initialised MPI itself.
inline bool mpi_detected() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK")) return true;
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

inline void mpi_initialize() {
  // Finalises at exit only if it initialised MPI.
  static boost::mpi::environment environment(boost::mpi::threading::funneled, /*abort_on_exception=*/false);
}

[[noreturn]] inline void mpi_fail(int rank, int size, const std::string& what) {
  std::string line = detail::cat("typemesh: rank ", rank, " (device ", rank, " of ", size, ") failed: ", what,
                                 "\ntypemesh: aborting all ranks (MPI_Abort)\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) inside a launch prints
//   typemesh: rank R (device R of N) crashed: SIGSEGV (invalid memory access)
// and then goes on as it would have (the handler that was there before, such
// as MPI's own backtrace, or the default death), so the MPI launcher sees the
// rank die and ends the job. The line is made beforehand: a handler may only
// write().
struct crash_reporter {
  static constexpr int signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  static inline char lines[std::size(signals)][160];
  static inline std::size_t lengths[std::size(signals)];
  static inline struct sigaction previous[std::size(signals)];

  static void install(int rank, int size) {
    static const bool installed = [&] {
      for (std::size_t i = 0; i < std::size(signals); ++i) {
        const std::string line = detail::cat("typemesh: rank ", rank, " (device ", rank, " of ", size,
                                             ") crashed: ", signal_name(signals[i]), "\n");
        lengths[i] = std::min(line.size(), sizeof lines[i]);
        std::memcpy(lines[i], line.data(), lengths[i]);
        struct sigaction report {};
        report.sa_handler = &on_signal;
        sigemptyset(&report.sa_mask);
        sigaction(signals[i], &report, &previous[i]);
      }
      return true;
    }();
    (void)installed;
  }

  static const char* signal_name(int s) {
    switch (s) {
      case SIGSEGV: return "SIGSEGV (invalid memory access)";
      case SIGBUS: return "SIGBUS (bus error)";
      case SIGFPE: return "SIGFPE (arithmetic error)";
      case SIGILL: return "SIGILL (illegal instruction)";
      case SIGABRT: return "SIGABRT (abort)";
    }
    return "a signal";
  }

  // Reports, puts the previous action back and raises the signal again; it
  // is delivered to that action as soon as this handler returns.
  static void on_signal(int s) {
    for (std::size_t i = 0; i < std::size(signals); ++i) {
      if (signals[i] != s) continue;
      (void)!::write(2, lines[i], lengths[i]);
      sigaction(s, &previous[i], nullptr);
    }
    std::raise(s);
  }
};

}  // namespace detail

struct mpi_launcher {
  static constexpr std::string_view name = "mpi";

  static bool detected() { return detail::mpi_detected(); }

  // One device per rank.
  static int local_devices(const launch_options&) { return 1; }

  template <class F>
  static launch_result_t<F> run(const launch_options& options, F& f) {
    using result = detail::launch_call_result_t<F>;
    detail::mpi_initialize();
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (options.devices != size) {
      throw device_error(detail::cat("launch asks for ", options.devices, " devices, but the MPI job has ", size,
                                     " ranks and runs one device per rank: start it with ", options.devices,
                                     " ranks (mpirun -np ", options.devices, ")"));
    }
    detail::crash_reporter::install(rank, size);
    auto state = std::make_shared<mpi_state>(MPI_COMM_WORLD, options.timeout);
    device dev{mpi_communicator(state)};
    device* previous = std::exchange(detail::current_device(), &dev);
    const int threads_before =
        std::exchange(backend::host::kernel_threads(), detail::kernel_threads_for(options, size));
    try {
      if constexpr (std::is_void_v<result>) {
        detail::call_on(f, dev);
        state->announce_finished();
        state->check_no_leftovers();
        state->finish();
        detail::current_device() = previous;
        backend::host::kernel_threads() = threads_before;
      } else {
        auto mine = detail::call_on(f, dev);
        state->announce_finished();
        state->check_no_leftovers();
        state->finish();
        detail::current_device() = previous;
        backend::host::kernel_threads() = threads_before;
        return detail::mpi_gather_all<std::decay_t<result>>(state->world(), rank, size, std::move(mine));
      }
    } catch (...) {
      detail::mpi_fail(rank, size, detail::describe_exception(std::current_exception()));
    }
  }
};

template <>
struct launcher_slot<1> {
  using type = mpi_launcher;
};

}  // namespace typemesh

// The NCCL launcher: runs one function on every device, each device on a GPU
// of its own with an nccl_communicator (runtime/nccl_communicator.hpp).
//
//   TYPEMESH_BACKEND=nccl ./train               # threads: one per GPU of this process
//   TYPEMESH_BACKEND=nccl mpirun -np 8 ./train  # TYPEMESH_WITH_MPI: one GPU per rank
//
// - Threads (the default): device d is a thread of this process on CUDA
//   device d % cudaGetDeviceCount(). NCCL does not let two ranks of one
//   communicator share a GPU, so a run needs a GPU per device; with fewer,
//   run throws device_error before any work. A device that throws stops the
//   others at their next wait (their NCCL communicators are aborted) and run
//   rethrows the first device's exception, as launch does.
// - MPI (a program linking typemesh::mpi, under an MPI launcher): device =
//   rank, on CUDA device (rank on its node) % the node's GPUs. A failure
//   prints the rank's error and calls MPI_Abort, as the MPI launch does.
//
// Both return what launch returns: f's results indexed by device id, or
// nothing; both set this_device(), this_nccl_communicator() and the
// device's kernel thread count. The automatic choice never picks NCCL on
// its own: detected() is true only when TYPEMESH_BACKEND=nccl.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <exception>
#include <memory>
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
#include "typemesh/runtime/host_launcher.hpp"
#include "typemesh/runtime/launch.hpp"
#include "typemesh/runtime/launcher.hpp"
#include "typemesh/runtime/nccl_communicator.hpp"
#ifdef TYPEMESH_WITH_MPI
#include "typemesh/runtime/mpi_launcher.hpp"
#endif

namespace typemesh {

namespace detail {

inline nccl_communicator*& current_nccl_communicator() {
  thread_local nccl_communicator* c = nullptr;
  return c;
}

// The CUDA devices this process sees; an error says why there are none.
inline int cuda_devices_for_launch(int devices) {
  int gpus = 0;
  const cudaError_t rc = cudaGetDeviceCount(&gpus);
  if (rc != cudaSuccess) {
    throw device_error(cat("the NCCL launcher needs a CUDA device for each of its ", devices,
                           " devices, but cudaGetDeviceCount failed: ", cudaGetErrorName(rc), " (",
                           cudaGetErrorString(rc), ")"));
  }
  if (gpus < 1) {
    throw device_error(cat("the NCCL launcher needs a CUDA device for each of its ", devices,
                           " devices, but cudaGetDeviceCount returned 0"));
  }
  return gpus;
}

// Sets the calling thread's device, communicator and kernel threads for one
// device's run, and puts the previous ones back when it ends.
class nccl_device_scope {
 public:
  nccl_device_scope(device& dev, nccl_communicator& comm, int kernel_threads)
      : device_(dev, kernel_threads), previous_comm_(std::exchange(current_nccl_communicator(), &comm)) {}
  ~nccl_device_scope() { current_nccl_communicator() = previous_comm_; }
  nccl_device_scope(const nccl_device_scope&) = delete;
  nccl_device_scope& operator=(const nccl_device_scope&) = delete;

 private:
  device_scope device_;
  nccl_communicator* previous_comm_;
};

}  // namespace detail

// The NCCL communicator of the device this thread runs as, for code that
// works on GPU buffers directly; set by nccl_launcher.
inline nccl_communicator& this_nccl_communicator() {
  nccl_communicator* c = detail::current_nccl_communicator();
  if (!c) throw device_error("no NCCL device runs on this thread: call this inside a launch of the NCCL launcher");
  return *c;
}

struct nccl_launcher {
  static constexpr std::string_view name = "nccl";

  static bool detected() {
    const char* value = std::getenv("TYPEMESH_BACKEND");
    return value && std::string_view(value) == name;
  }

  template <class F>
  static auto run(const launch_options& options, F& f) {
#ifdef TYPEMESH_WITH_MPI
    if (detail::mpi_detected()) return run_on_ranks(options, f);
#endif
    return run_on_threads(options, f);
  }

  // Under MPI a process drives one device (the trainer prints once per job).
  static int local_devices(const launch_options& options) {
#ifdef TYPEMESH_WITH_MPI
    if (detail::mpi_detected()) return 1;
#endif
    return options.devices;
  }

 private:
  template <class F>
  static auto run_on_threads(const launch_options& options, F& f) {
    const int devices = options.devices;
    if (devices < 1) throw device_error(detail::cat("a run needs at least one device, not ", devices));
    const int kernel_threads = detail::kernel_threads_for(options, devices);
    const int gpus = detail::cuda_devices_for_launch(devices);
    if (gpus < devices) {
      throw device_error(detail::cat("the NCCL launcher runs ", devices, " devices on the GPUs of this process, one GPU "
                                     "each (NCCL does not let two devices of a group share one), but cudaGetDeviceCount "
                                     "returned ", gpus, ": run at most ", gpus, " devices, or one per MPI rank"));
    }
    host_world world(devices, options.timeout);
    return detail::run_device_threads(world, f, [&](int id, auto&& run_on) {
      const int gpu = id % gpus;
      detail::check_cuda(cudaSetDevice(gpu), "cudaSetDevice", id, "starting the device's thread");
      auto state =
          std::make_shared<nccl_device_state>(std::make_unique<host_bootstrap>(world, id), gpu, options.timeout);
      nccl_communicator comm(state);
      device dev{comm};
      detail::nccl_device_scope scope(dev, comm, kernel_threads);
      run_on(dev);
    });
  }

#ifdef TYPEMESH_WITH_MPI
  template <class F>
  static auto run_on_ranks(const launch_options& options, F& f) {
    using result = decltype(detail::call_on(f, std::declval<device&>()));
    detail::mpi_initialize();
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (options.devices != size) {
      throw device_error(detail::cat("launch asks for ", options.devices, " devices, but the MPI job has ", size,
                                     " ranks and the NCCL launcher runs one device per rank: start it with ",
                                     options.devices, " ranks (mpirun -np ", options.devices, ")"));
    }
    detail::crash_reporter::install(rank, size);
    try {
      auto mpi = std::make_shared<mpi_state>(MPI_COMM_WORLD, options.timeout);
      const int gpus = detail::cuda_devices_for_launch(size);
      const int gpu = mpi->rank_on_node() % gpus;
      detail::check_cuda(cudaSetDevice(gpu), "cudaSetDevice", rank, "starting the device's rank");
      nccl_communicator comm(
          std::make_shared<nccl_device_state>(std::make_unique<mpi_bootstrap>(mpi), gpu, options.timeout));
      device dev{comm};
      detail::nccl_device_scope scope(dev, comm, detail::kernel_threads_for(options, size));
      if constexpr (std::is_void_v<result>) {
        detail::call_on(f, dev);
        mpi->announce_finished();
        mpi->check_no_leftovers();
        mpi->finish();
      } else {
        auto mine = detail::call_on(f, dev);
        mpi->announce_finished();
        mpi->check_no_leftovers();
        mpi->finish();
        return detail::mpi_gather_all<std::decay_t<result>>(mpi->world(), rank, size, std::move(mine));
      }
    } catch (...) {
      detail::mpi_fail(rank, size, detail::describe_exception(std::current_exception()));
    }
  }
#endif
};

// Slot 2 of the launchers (runtime/launcher.hpp).
template <>
struct launcher_slot<2> {
  using type = nccl_launcher;
};

}  // namespace typemesh

// The NCCL backend: one GPU per device; a model of typemesh::communicator
// whose buffers are device pointers (memory_space = cuda_space). It runs
// either as threads of one process, one thread and one GPU per device, or
// as one MPI rank per device (TYPEMESH_WITH_MPI); runtime/nccl_launcher.hpp
// starts both. Needs the CUDA runtime and NCCL (the typemesh::nccl target).
//
// Bootstrap. Everything that must travel between devices on the host (a
// group's NCCL unique id, point-to-point messages, "this device has failed
// or returned") goes through an nccl_bootstrap: the host backend's world for
// threads, the MPI backend's state for ranks. The rest of the file is shared.
//
// Groups. A group's NCCL communicator is created on the group's first
// collective by its members only, as every typemesh group is entered only by
// its members: member 0 makes a unique id, hands it to the members with a
// host broadcast over the group, and each member joins as rank = its member
// index. It is cached by the group's device list, as the MPI backend caches
// its groups. Communicators are nonblocking (ncclConfig_t::blocking = 0) so
// that creating one is polled, and bounded, like every other wait.
//
// Collectives are NCCL's own (alltoall as grouped ncclSend/ncclRecv) on one
// stream per device that never synchronises implicitly with other streams.
// Before a call that stream waits for the thread's stream (where the kernels
// run: an event recorded there); before returning, the host polls it until
// the call is complete, so the results are visible to the kernels after it.
// NCCL chooses its own reduction order: float sums agree with the host
// backend's up to rounding, not bit for bit. A call that moves nothing
// (every member passes the same count, here 0) makes no NCCL call at all.
//
// Point-to-point messages go through host memory: send copies the device
// buffer into pinned host memory and posts it over the bootstrap's message
// channel; recv takes it there and copies it to the device. A message is
// therefore fully buffered when send returns, with no GPU work left pending.
// That is the reason for the design: a pending ncclSend would hold a kernel
// on its stream until the receiver comes, and cudaFree's (and thus Thrust's)
// implicit device synchronisation would then wait for the receiver, so two
// devices that send ahead and free a temporary before receiving could
// deadlock. The channel already provides what messages need: tags that never
// mix, FIFO per (peer, tag), a label channel, timeouts, "the sender has
// returned", and the report of messages nobody received. The price: a
// message crosses the host bus twice instead of going GPU to GPU.
//
// Nothing waits forever: creation, every collective and every copy poll
// (cudaStreamQuery, ncclCommGetAsyncError) until the launch timeout. On a
// timeout, an asynchronous NCCL error or another device's failure, the
// group's communicator is aborted (ncclCommAbort) and dropped from the cache,
// and the call throws timeout_error, collective_error or aborted_error naming
// the call, the group and the device. At the end of a run a device's
// communicators are finalised (flushed) and destroyed, or aborted after a
// failure. Not detected (NCCL does not tell): members that call different
// collectives or counts, and a member that has already returned from the
// program (the host backend fails at once); these show up as a timeout or
// wrong data.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "typemesh/core/error.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/core/space.hpp"
#include "typemesh/runtime/communicator.hpp"
#include "typemesh/runtime/dtype.hpp"
#include "typemesh/runtime/host_world.hpp"
#include "typemesh/runtime/message_label.hpp"
#ifdef TYPEMESH_WITH_MPI
#include "typemesh/runtime/mpi_communicator.hpp"
#endif

namespace typemesh {

namespace detail {

// The NCCL element type of t; `where` names the call for the error.
inline ncclDataType_t nccl_datatype(dtype t, std::string_view where) {
  switch (t) {
    case dtype::f32: return ncclFloat32;
    case dtype::f64: return ncclFloat64;
    case dtype::i32: return ncclInt32;
    case dtype::i64: return ncclInt64;
    case dtype::u8: return ncclUint8;
  }
  throw device_error(cat(where, ": element type ", static_cast<int>(t),
                         " is not a typemesh dtype (f32, f64, i32, i64 or u8)"));
}

// NCCL has every reduction for every element type typemesh moves, u8 sums
// (wrapping) included, as the host and MPI backends do; only values outside
// the enumeration are refused.
inline ncclRedOp_t nccl_reduction(reduce_op op, std::string_view where) {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::max: return ncclMax;
    case reduce_op::min: return ncclMin;
    case reduce_op::prod: return ncclProd;
  }
  throw device_error(cat(where, ": reduction ", static_cast<int>(op), " is not one of sum, max, min, prod"));
}

inline void check_cuda(cudaError_t rc, std::string_view call, int device, std::string_view where) {
  if (rc != cudaSuccess) {
    throw device_error(cat(call, " failed on device ", device, " in ", where, ": ", cudaGetErrorName(rc), " (",
                           cudaGetErrorString(rc), ")"));
  }
}

inline std::string nccl_error_text(ncclResult_t rc, ncclComm_t comm) {
  std::string text = cat(ncclGetErrorString(rc), " (", static_cast<int>(rc), ")");
  const char* last = comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  if (last && *last) text += cat(": ", last);
  return text;
}

inline std::string describe_group(const group& g) { return cat("group ", list(g.devices), " (", g.label, ")"); }

// An error's message without the "typemesh: " its constructor adds.
inline std::string_view bare_message(const std::exception& e) {
  std::string_view m = e.what();
  constexpr std::string_view prefix = "typemesh: ";
  if (m.starts_with(prefix)) m.remove_prefix(prefix.size());
  return m;
}

}  // namespace detail

// How devices reach each other on the host: handing a group's unique id to
// its members, point-to-point messages, and the state of the run.
class nccl_bootstrap {
 public:
  virtual ~nccl_bootstrap() = default;
  virtual int device() const = 0;
  virtual int device_count() const = 0;
  virtual int local_device() const = 0;
  virtual int devices_on_node() const = 0;
  // `bytes` from g's member 0 to every member of g; only the members call it.
  virtual void share(const group& g, void* bytes, std::size_t size) = 0;
  // Host buffers; the semantics of communicator's send and recv.
  virtual void send(int to, const void* in, std::size_t n, dtype t, int tag) = 0;
  virtual void recv(int from, void* out, std::size_t n, dtype t, int tag) = 0;
  // Throws aborted_error when another device has failed (where a failure does
  // not end every process at once).
  virtual void check_running(std::string_view where) const = 0;
  // Whether the run is stopping because a device failed.
  virtual bool failing() const = 0;
};

// What a bootstrap forwards to the host-memory communicator it rides on.
template <class Comm>
class bootstrap_over : public nccl_bootstrap {
 public:
  explicit bootstrap_over(Comm comm) : comm_(std::move(comm)) {}
  int device() const override { return comm_.device(); }
  int device_count() const override { return comm_.device_count(); }
  int local_device() const override { return comm_.local_device(); }
  int devices_on_node() const override { return comm_.devices_on_node(); }
  void share(const group& g, void* bytes, std::size_t size) override { comm_.broadcast(g, bytes, size, dtype::u8, 0); }
  void send(int to, const void* in, std::size_t n, dtype t, int tag) override { comm_.send(to, in, n, t, tag); }
  void recv(int from, void* out, std::size_t n, dtype t, int tag) override { comm_.recv(from, out, n, t, tag); }

 protected:
  Comm comm_;
};

// Threads of this process: the host backend's world carries the ids and messages.
class host_bootstrap final : public bootstrap_over<host_communicator> {
 public:
  host_bootstrap(host_world& world, int device)
      : bootstrap_over<host_communicator>(host_communicator(world, device)), world_(&world) {}
  void check_running(std::string_view where) const override {
    if (world_->aborted()) world_->throw_aborted(comm_.device(), std::string(where));
  }
  bool failing() const override { return world_->aborted(); }

 private:
  host_world* world_;
};

#ifdef TYPEMESH_WITH_MPI
// One rank per device: the MPI backend's state carries the ids and messages.
// A failing rank ends the job with MPI_Abort, so there is nothing to watch.
class mpi_bootstrap final : public bootstrap_over<mpi_communicator> {
 public:
  explicit mpi_bootstrap(std::shared_ptr<mpi_state> state)
      : bootstrap_over<mpi_communicator>(mpi_communicator(std::move(state))) {}
  void check_running(std::string_view) const override {}
  bool failing() const override { return false; }
};
#endif

// One device's GPU side: its stream, its cached group communicators and its
// staging memory. nccl_communicator is a handle to it.
class nccl_device_state {
 public:
  nccl_device_state(std::unique_ptr<nccl_bootstrap> bootstrap, int gpu, std::chrono::milliseconds timeout)
      : boot_(std::move(bootstrap)), gpu_(gpu), timeout_(timeout) {
    try {
      check(cudaSetDevice(gpu_), "cudaSetDevice", "setting up the NCCL backend");
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
            "setting up the NCCL backend");
      check(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags",
            "setting up the NCCL backend");
      check(cudaMalloc(reinterpret_cast<void**>(&barrier_word_), sizeof(std::int32_t)), "cudaMalloc",
            "setting up the NCCL backend");
      check(cudaMemset(barrier_word_, 0, sizeof(std::int32_t)), "cudaMemset", "setting up the NCCL backend");
    } catch (...) {
      release();
      throw;
    }
  }

  nccl_device_state(const nccl_device_state&) = delete;
  nccl_device_state& operator=(const nccl_device_state&) = delete;

  // A call's completion on this GPU does not mean NCCL's helper threads have
  // delivered everything to the peers (over a network), so the communicators
  // are finalised, which flushes them, before they are destroyed: all at
  // once, so that no order among devices matters, and for at most the
  // launch timeout. After a failure, or past the timeout, they are aborted.
  ~nccl_device_state() {
    if (std::uncaught_exceptions() == 0 && !boot_->failing()) finalize_groups();
    release();
  }

  int device() const { return boot_->device(); }
  int device_count() const { return boot_->device_count(); }
  int local_device() const { return boot_->local_device(); }
  int devices_on_node() const { return boot_->devices_on_node(); }
  int gpu() const { return gpu_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  std::size_t cached_groups() const { return groups_.size(); }

  void allreduce(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) {
    const std::string where = describe("allreduce", g);
    const ncclDataType_t type = detail::nccl_datatype(t, where);
    const ncclRedOp_t reduction = detail::nccl_reduction(op, where);
    collective("allreduce", g, [&](ncclComm_t c) { return ncclAllReduce(in, out, n, type, reduction, c, stream_); },
               n == 0);
  }

  void allgather(const group& g, const void* in, void* out, std::size_t n, dtype t) {
    const ncclDataType_t type = detail::nccl_datatype(t, describe("allgather", g));
    collective("allgather", g, [&](ncclComm_t c) { return ncclAllGather(in, out, n, type, c, stream_); }, n == 0);
  }

  void reduce_scatter(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) {
    const std::string where = describe("reduce_scatter", g);
    const ncclDataType_t type = detail::nccl_datatype(t, where);
    const ncclRedOp_t reduction = detail::nccl_reduction(op, where);
    collective("reduce_scatter", g,
               [&](ncclComm_t c) { return ncclReduceScatter(in, out, n, type, reduction, c, stream_); }, n == 0);
  }

  void alltoall(const group& g, const void* in, void* out, std::size_t n, dtype t) {
    const ncclDataType_t type = detail::nccl_datatype(t, describe("alltoall", g));
    const std::size_t bytes = n * size_of(t);
    collective("alltoall", g, [&](ncclComm_t c) {
      ncclResult_t first = ncclGroupStart();
      if (first != ncclSuccess) return first;
      for (int j = 0; j < g.size(); ++j) {  // every call inside the group, then its end, whatever fails
        const ncclResult_t s = ncclSend(static_cast<const std::byte*>(in) + j * bytes, n, type, j, c, stream_);
        const ncclResult_t r = ncclRecv(static_cast<std::byte*>(out) + j * bytes, n, type, j, c, stream_);
        if (first == ncclSuccess) first = s != ncclSuccess ? s : r;
      }
      const ncclResult_t end = ncclGroupEnd();
      return first != ncclSuccess ? first : end;
    }, n == 0);
  }

  void broadcast(const group& g, void* buffer, std::size_t n, dtype t, int root) {
    const ncclDataType_t type = detail::nccl_datatype(t, describe("broadcast", g));
    collective("broadcast", g, [&](ncclComm_t c) { return ncclBroadcast(buffer, buffer, n, type, root, c, stream_); },
               n == 0);
  }

  void barrier(const group& g) {
    collective("barrier", g, [&](ncclComm_t c) {
      return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, c, stream_);
    });
  }

  void send(int to, const void* in, std::size_t n, dtype t, int tag) {
    const std::string where = detail::cat("send to device ", to, " (", detail::describe_tag(tag), ")");
    detail::nccl_datatype(t, detail::cat(where, " on device ", device()));
    const std::size_t bytes = n * size_of(t);
    std::byte* host = staging(bytes, where);
    if (bytes) copy(host, in, bytes, cudaMemcpyDeviceToHost, where);
    boot_->send(to, host, n, t, tag);
  }

  void recv(int from, void* out, std::size_t n, dtype t, int tag) {
    const std::string where = detail::cat("recv from device ", from, " (", detail::describe_tag(tag), ")");
    detail::nccl_datatype(t, detail::cat(where, " on device ", device()));
    const std::size_t bytes = n * size_of(t);
    std::byte* host = staging(bytes, where);
    boot_->recv(from, host, n, t, tag);
    if (bytes) copy(out, host, bytes, cudaMemcpyHostToDevice, where);
  }

 private:
  std::string describe(std::string_view what, const group& g) const {
    return detail::cat(what, " over ", detail::describe_group(g), " on device ", device());
  }

  void check(cudaError_t rc, std::string_view call, std::string_view where) const {
    detail::check_cuda(rc, call, boot_->device(), where);
  }

  // Runs one NCCL call on g's communicator after the kernels' stream's work
  // and waits until it has completed.
  // Nothing to move (every member has the same count) makes no NCCL call.
  template <class Issue>
  void collective(std::string_view what, const group& g, Issue issue, bool empty = false) {
    if (empty) return;
    const std::string where = describe(what, g);
    check(cudaSetDevice(gpu_), "cudaSetDevice", where);
    ncclComm_t comm = communicator_of(g, what);
    after_default_stream(where);
    const ncclResult_t rc = issue(comm);
    if (rc != ncclSuccess && rc != ncclInProgress) fail(g, comm, detail::cat(where, ": NCCL failed: ", detail::nccl_error_text(rc, comm)));
    // Nonblocking communicators may still be enqueueing (ncclInProgress);
    // then the stream is polled once NCCL has finished doing so.
    wait(g, comm, where, [&] {
      if (comm_state(g, comm, where) == ncclInProgress) return false;
      const cudaError_t done = cudaStreamQuery(stream_);
      if (done == cudaErrorNotReady) return false;
      if (done != cudaSuccess) {
        fail(g, comm, detail::cat(where, ": cudaStreamQuery reported ", cudaGetErrorName(done), " (",
                                  cudaGetErrorString(done), ")"));
      }
      return true;
    });
  }

  // The cached communicator of g, or a new one made with g's members.
  ncclComm_t communicator_of(const group& g, std::string_view what) {
    if (auto it = groups_.find(g.devices); it != groups_.end()) return it->second;
    const std::string where = detail::cat("creating the NCCL communicator of ", detail::describe_group(g), " for ", what,
                                          " on device ", device());
    const int member = g.index_of(device());
    ncclUniqueId id{};
    if (member == 0) {
      const ncclResult_t rc = ncclGetUniqueId(&id);
      if (rc != ncclSuccess) {
        throw collective_error(detail::cat(where, ": ncclGetUniqueId failed: ", detail::nccl_error_text(rc, nullptr)));
      }
    }
    try {
      boot_->share(g, &id, sizeof id);
    } catch (const aborted_error&) {
      throw;
    } catch (const timeout_error& e) {
      throw timeout_error(detail::cat(where, ": handing out its unique id: ", detail::bare_message(e)));
    } catch (const collective_error& e) {
      throw collective_error(detail::cat(where, ": handing out its unique id: ", detail::bare_message(e)));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t rc = ncclCommInitRankConfig(&comm, g.size(), id, member, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      const std::string text = detail::nccl_error_text(rc, comm);
      if (comm) ncclCommAbort(comm);
      throw collective_error(detail::cat(where, ": ncclCommInitRankConfig failed: ", text));
    }
    groups_.emplace(g.devices, comm);  // from here on, a failure aborts and drops it
    wait(g, comm, where, [&] { return comm_state(g, comm, where) == ncclSuccess; });
    return comm;
  }

  // ncclSuccess or ncclInProgress; any other state fails the call.
  ncclResult_t comm_state(const group& g, ncclComm_t comm, std::string_view where) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) fail(g, comm, detail::cat(where, ": ncclCommGetAsyncError failed: ", detail::nccl_error_text(rc, comm)));
    if (state != ncclSuccess && state != ncclInProgress) {
      fail(g, comm, detail::cat(where, ": NCCL reported an asynchronous error: ", detail::nccl_error_text(state, comm)));
    }
    return state;
  }

  // Polls ready() until it returns true; gives up at the launch timeout or
  // when another device has failed, aborting g's communicator.
  template <class Ready>
  void wait(const group& g, ncclComm_t comm, std::string_view where, Ready ready) {
    using namespace std::chrono_literals;
    const auto start = std::chrono::steady_clock::now(), deadline = start + timeout_;
    for (long polls = 0;; ++polls) {
      if (ready()) return;
      if (polls % 64 != 63) continue;
      try {
        boot_->check_running(where);
      } catch (...) {
        drop(g, comm);
        throw;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        drop(g, comm);
        throw timeout_error(detail::cat(where, " timed out after ", timeout_.count(),
                                        " ms: not every member joined (NCCL does not tell which are missing); the "
                                        "group's NCCL communicator was aborted"));
      }
      // Spinning keeps short calls fast; after a while the thread leaves its
      // core to the devices it waits for.
      if (now - start < 2ms) continue;
      if (now - start < 50ms) std::this_thread::yield();
      else std::this_thread::sleep_for(20us);
    }
  }

  // Waits for the kernels' stream (the thread's, backend/cuda/runtime.hpp)
  // before anything this device issues.
  void after_default_stream(std::string_view where) {
    check(cudaEventRecord(inputs_ready_, cudaStreamPerThread), "cudaEventRecord", where);
    check(cudaStreamWaitEvent(stream_, inputs_ready_, 0), "cudaStreamWaitEvent", where);
  }

  // A copy between this device's memory and the pinned staging memory,
  // after the kernels' stream's work, waited for with the timeout.
  void copy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind, std::string_view what) {
    const std::string where = detail::cat(what, " on device ", device());
    check(cudaSetDevice(gpu_), "cudaSetDevice", where);
    after_default_stream(where);
    check(cudaMemcpyAsync(to, from, bytes, kind, stream_), "cudaMemcpyAsync", where);
    const auto start = std::chrono::steady_clock::now(), deadline = start + timeout_;
    for (long polls = 0;; ++polls) {
      const cudaError_t done = cudaStreamQuery(stream_);
      if (done == cudaSuccess) return;
      if (done != cudaErrorNotReady) check(done, "cudaStreamQuery", where);
      if (polls % 64 != 63) continue;
      boot_->check_running(where);
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        throw timeout_error(detail::cat(where, ": copying ", bytes, " bytes ",
                                        kind == cudaMemcpyDeviceToHost ? "to" : "from", " host memory took over ",
                                        timeout_.count(), " ms (the kernels before it did not finish)"));
      }
      if (now - start > std::chrono::milliseconds(2)) std::this_thread::yield();
    }
  }

  // Pinned host memory of at least `bytes`, reused between messages.
  std::byte* staging(std::size_t bytes, std::string_view where) {
    if (bytes > staging_size_) {
      if (staging_) cudaFreeHost(staging_);
      staging_ = nullptr;
      staging_size_ = 0;
      check(cudaMallocHost(reinterpret_cast<void**>(&staging_), bytes), "cudaMallocHost",
            detail::cat(where, " (", bytes, " bytes of staging memory)"));
      staging_size_ = bytes;
    }
    return staging_;
  }

  // Aborts g's communicator and forgets it: a later call makes a new one.
  void drop(const group& g, ncclComm_t comm) {
    ncclCommAbort(comm);
    if (auto it = groups_.find(g.devices); it != groups_.end() && it->second == comm) groups_.erase(it);
  }

  [[noreturn]] void fail(const group& g, ncclComm_t comm, const std::string& message) {
    drop(g, comm);
    throw collective_error(detail::cat(message, "; the group's NCCL communicator was aborted"));
  }

  void finalize_groups() noexcept {
    cudaSetDevice(gpu_);
    std::vector<ncclComm_t> flushing;
    for (auto it = groups_.begin(); it != groups_.end();) {
      const ncclResult_t rc = ncclCommFinalize(it->second);
      if (rc == ncclSuccess || rc == ncclInProgress) {
        flushing.push_back(it->second);
        it = groups_.erase(it);
      } else {
        ++it;  // aborted by release()
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (!flushing.empty()) {
      std::erase_if(flushing, [&](ncclComm_t comm) {
        ncclResult_t state = ncclInProgress;
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
        if (state == ncclInProgress) return false;
        if (state == ncclSuccess) ncclCommDestroy(comm);
        else ncclCommAbort(comm);
        return true;
      });
      if (flushing.empty()) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        for (ncclComm_t comm : flushing) ncclCommAbort(comm);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void release() noexcept {
    cudaSetDevice(gpu_);
    for (auto& [devices, comm] : groups_) ncclCommAbort(comm);
    groups_.clear();
    if (staging_) cudaFreeHost(staging_);
    staging_ = nullptr;
    if (barrier_word_) cudaFree(barrier_word_);
    barrier_word_ = nullptr;
    if (inputs_ready_) cudaEventDestroy(inputs_ready_);
    inputs_ready_ = nullptr;
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  std::unique_ptr<nccl_bootstrap> boot_;
  int gpu_;
  std::chrono::milliseconds timeout_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;
  std::int32_t* barrier_word_ = nullptr;
  std::byte* staging_ = nullptr;
  std::size_t staging_size_ = 0;
  std::map<std::vector<int>, ncclComm_t> groups_;
};

// This device's NCCL communicator: a handle to its nccl_device_state.
class nccl_communicator {
 public:
  // Buffers are GPU memory: typemesh::device stages host buffers through it.
  using memory_space = cuda_space;

  explicit nccl_communicator(std::shared_ptr<nccl_device_state> state) : s_(std::move(state)) {}

  int device() const { return s_->device(); }
  int device_count() const { return s_->device_count(); }
  int local_device() const { return s_->local_device(); }
  int devices_on_node() const { return s_->devices_on_node(); }
  // The CUDA device this device runs on.
  int gpu() const { return s_->gpu(); }
  // How many group communicators this device has made and keeps.
  std::size_t cached_groups() const { return s_->cached_groups(); }

  void allreduce(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) {
    s_->allreduce(g, in, out, n, t, op);
  }
  void allgather(const group& g, const void* in, void* out, std::size_t n, dtype t) { s_->allgather(g, in, out, n, t); }
  void reduce_scatter(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) {
    s_->reduce_scatter(g, in, out, n, t, op);
  }
  void alltoall(const group& g, const void* in, void* out, std::size_t n, dtype t) { s_->alltoall(g, in, out, n, t); }
  void broadcast(const group& g, void* buffer, std::size_t n, dtype t, int root) { s_->broadcast(g, buffer, n, t, root); }
  void send(int to, const void* in, std::size_t n, dtype t, int tag) { s_->send(to, in, n, t, tag); }
  void recv(int from, void* out, std::size_t n, dtype t, int tag) { s_->recv(from, out, n, t, tag); }
  void barrier(const group& g) { s_->barrier(g); }

 private:
  std::shared_ptr<nccl_device_state> s_;
};

static_assert(communicator<nccl_communicator>);

}  // namespace typemesh

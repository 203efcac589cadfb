// A CPU stand-in for the CUDA runtime and NCCL calls that the NCCL backend
// and its tests make, so that the communicator's own logic (group
// communicators and their cache, waits, timeouts, aborts, messages, the
// launcher) runs where no GPU is: nccl_test.cpp compiled by the host
// compiler and linked against this file instead of libcudart and libnccl.
//
// It pretends to have STAND_IN_GPUS GPUs (2 unless set). "GPU memory" is
// host memory that it tracks, and it refuses a buffer of the wrong kind: a
// collective or a copy's device side given host memory fails, as it would on
// a GPU. Communicators finish joining when all ranks have called
// ncclCommInitRankConfig (which reports ncclInProgress, as a nonblocking one
// may); a collective completes, on every rank's stream, once every rank has
// posted it, and ranks that post different collectives, counts or types put
// the communicator in error. ncclGroupEnd reports ncclInProgress. Aborted
// (and destroyed) communicators' pending work is dropped.
//
// What it cannot show: anything about real GPUs, real NCCL or its timing.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace {

std::mutex state_mutex;
thread_local int current_gpu = 0;
std::int64_t next_unique_id = 1;

// The "device" and the pinned allocations: start -> size.
std::map<const char*, std::size_t> device_memory, host_memory;

bool inside(const std::map<const char*, std::size_t>& blocks, const void* p, std::size_t bytes) {
  if (bytes == 0) return true;
  const char* c = static_cast<const char*>(p);
  auto it = blocks.upper_bound(c);
  if (it == blocks.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

enum class kind { allreduce, allgather, reduce_scatter, broadcast, exchange };

struct piece {
  int peer;
  char* buffer;
  std::size_t bytes;
};

struct posted {
  kind what{};
  const char* in = nullptr;
  char* out = nullptr;
  std::size_t count = 0;
  ncclDataType_t type{};
  ncclRedOp_t op{};
  int root = 0;
  std::vector<piece> sends, receives;
};

struct meeting {
  std::vector<posted> calls;
  int arrived = 0;
  bool done = false;
};

struct clique {
  int ranks = 0;
  int joined = 0;
  bool broken = false;
  std::map<std::int64_t, meeting> meetings;
};

std::map<std::int64_t, std::shared_ptr<clique>> cliques;

struct stand_in_comm {
  std::shared_ptr<clique> members;
  int rank = 0;
  std::int64_t next = 0;
  bool aborted = false;
};

struct pending {
  stand_in_comm* comm;
  std::int64_t meeting;
};

struct stand_in_stream {
  std::vector<pending> work;
};

std::size_t element_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

template <class T>
void fold(T* out, const T* in, std::size_t n, ncclRedOp_t op) {
  for (std::size_t i = 0; i < n; ++i) {
    switch (op) {
      case ncclSum: out[i] = static_cast<T>(out[i] + in[i]); break;
      case ncclProd: out[i] = static_cast<T>(out[i] * in[i]); break;
      case ncclMax: out[i] = std::max(out[i], in[i]); break;
      case ncclMin: out[i] = std::min(out[i], in[i]); break;
      default: std::abort();
    }
  }
}

void fold(void* out, const void* in, std::size_t n, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclFloat32: return fold(static_cast<float*>(out), static_cast<const float*>(in), n, op);
    case ncclFloat64: return fold(static_cast<double*>(out), static_cast<const double*>(in), n, op);
    case ncclInt32: return fold(static_cast<std::int32_t*>(out), static_cast<const std::int32_t*>(in), n, op);
    case ncclInt64: return fold(static_cast<std::int64_t*>(out), static_cast<const std::int64_t*>(in), n, op);
    case ncclUint8: return fold(static_cast<std::uint8_t*>(out), static_cast<const std::uint8_t*>(in), n, op);
    default: std::abort();
  }
}

bool agree(const posted& a, const posted& b) {
  return a.what == b.what && a.count == b.count && a.type == b.type && a.op == b.op && a.root == b.root;
}

// Runs a meeting every rank has posted: the results of all ranks at once.
void complete(clique& c, meeting& m) {
  m.done = true;
  for (const posted& p : m.calls) {
    if (!agree(p, m.calls[0])) {
      c.broken = true;
      return;
    }
  }
  const posted& first = m.calls[0];
  const std::size_t bytes = first.count * element_size(first.type);
  switch (first.what) {
    case kind::allreduce: {
      std::vector<char> sum(first.in, first.in + bytes);
      for (int r = 1; r < c.ranks; ++r) fold(sum.data(), m.calls[r].in, first.count, first.type, first.op);
      for (const posted& p : m.calls) std::memcpy(p.out, sum.data(), bytes);
      break;
    }
    case kind::allgather: {
      std::vector<char> all;
      for (const posted& p : m.calls) all.insert(all.end(), p.in, p.in + bytes);
      for (const posted& p : m.calls) std::memcpy(p.out, all.data(), all.size());
      break;
    }
    case kind::reduce_scatter: {
      for (int block = 0; block < c.ranks; ++block) {
        std::vector<char> sum(first.in + block * bytes, first.in + (block + 1) * bytes);
        for (int r = 1; r < c.ranks; ++r) fold(sum.data(), m.calls[r].in + block * bytes, first.count, first.type, first.op);
        std::memcpy(m.calls[block].out, sum.data(), bytes);
      }
      break;
    }
    case kind::broadcast: {
      std::vector<char> data(m.calls[first.root].in, m.calls[first.root].in + bytes);
      for (const posted& p : m.calls) std::memcpy(p.out, data.data(), bytes);
      break;
    }
    case kind::exchange: {
      // The k-th send from r to q meets the k-th receive on q from r.
      for (int r = 0; r < c.ranks; ++r) {
        std::vector<std::size_t> sent(c.ranks, 0);
        for (const piece& s : m.calls[r].sends) {
          std::size_t seen = 0;
          const piece* match = nullptr;
          for (const piece& q : m.calls[s.peer].receives) {
            if (q.peer == r && seen++ == sent[s.peer]) {
              match = &q;
              break;
            }
          }
          ++sent[s.peer];
          if (!match || match->bytes != s.bytes) {
            c.broken = true;
            return;
          }
          std::memcpy(match->buffer, s.buffer, s.bytes);
        }
      }
      break;
    }
  }
}

ncclResult_t post(ncclComm_t handle, posted call, cudaStream_t stream) {
  std::lock_guard lk(state_mutex);
  auto* comm = reinterpret_cast<stand_in_comm*>(handle);
  if (!comm || comm->aborted || comm->members->joined < comm->members->ranks) return ncclInvalidUsage;
  const std::size_t bytes = call.count * element_size(call.type);
  const std::size_t in_bytes = call.what == kind::reduce_scatter ? bytes * comm->members->ranks : bytes;
  const std::size_t out_bytes = call.what == kind::allgather ? bytes * comm->members->ranks : bytes;
  if (call.what != kind::exchange && (!inside(device_memory, call.in, in_bytes) || !inside(device_memory, call.out, out_bytes))) {
    return ncclInvalidArgument;
  }
  for (const auto& list : {call.sends, call.receives}) {
    for (const piece& p : list) {
      if (p.peer < 0 || p.peer >= comm->members->ranks || !inside(device_memory, p.buffer, p.bytes)) return ncclInvalidArgument;
    }
  }
  meeting& m = comm->members->meetings[comm->next];
  if (m.calls.empty()) m.calls.resize(comm->members->ranks);
  m.calls[comm->rank] = std::move(call);
  reinterpret_cast<stand_in_stream*>(stream)->work.push_back({comm, comm->next});
  ++comm->next;
  if (++m.arrived == comm->members->ranks) complete(*comm->members, m);
  return ncclSuccess;
}

posted call_of(kind what, const void* in, void* out, std::size_t count, ncclDataType_t type, ncclRedOp_t op = ncclSum,
               int root = 0) {
  posted call;
  call.what = what;
  call.in = static_cast<const char*>(in);
  call.out = static_cast<char*>(out);
  call.count = count;
  call.type = type;
  call.op = op;
  call.root = root;
  return call;
}

thread_local bool grouping = false;
thread_local std::vector<std::pair<ncclComm_t, std::pair<cudaStream_t, posted>>> grouped;

ncclResult_t group_piece(ncclComm_t comm, cudaStream_t stream, bool send, piece p, ncclDataType_t t) {
  if (!grouping) return ncclInvalidUsage;  // the backend only groups its send/recv
  auto it = std::find_if(grouped.begin(), grouped.end(), [&](const auto& e) { return e.first == comm; });
  if (it == grouped.end()) {
    grouped.push_back({comm, {stream, posted{}}});
    it = grouped.end() - 1;
    it->second.second.what = kind::exchange;
    it->second.second.type = t;
  }
  (send ? it->second.second.sends : it->second.second.receives).push_back(p);
  return ncclSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  const char* value = std::getenv("STAND_IN_GPUS");
  *count = value ? std::atoi(value) : 2;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int gpu) {
  int count = 0;
  cudaGetDeviceCount(&count);
  if (gpu < 0 || gpu >= count) return cudaErrorInvalidDevice;
  current_gpu = gpu;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* gpu) {
  *gpu = current_gpu;
  return cudaSuccess;
}
const char* cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorStandIn"; }
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "stand-in error"; }

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  std::lock_guard lk(state_mutex);
  *p = std::malloc(bytes ? bytes : 1);
  device_memory[static_cast<const char*>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard lk(state_mutex);
  if (!device_memory.erase(static_cast<const char*>(p))) return cudaErrorInvalidValue;
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, std::size_t bytes) {
  std::lock_guard lk(state_mutex);
  *p = std::malloc(bytes ? bytes : 1);
  host_memory[static_cast<const char*>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  std::lock_guard lk(state_mutex);
  if (!host_memory.erase(static_cast<const char*>(p))) return cudaErrorInvalidValue;
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, std::size_t bytes) {
  std::lock_guard lk(state_mutex);
  if (!inside(device_memory, p, bytes)) return cudaErrorInvalidValue;
  std::memset(p, value, bytes);
  return cudaSuccess;
}

// A copy's device side must be device memory; its host side must not be.
static cudaError_t checked_copy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard lk(state_mutex);
  const bool to_device = inside(device_memory, to, bytes), from_device = inside(device_memory, from, bytes);
  const bool right = kind == cudaMemcpyHostToDevice ? to_device && !from_device
                   : kind == cudaMemcpyDeviceToHost ? from_device && !to_device
                   : kind == cudaMemcpyDeviceToDevice ? to_device && from_device
                                                      : true;
  if (!right) return cudaErrorInvalidValue;
  if (bytes) std::memcpy(to, from, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
  return checked_copy(to, from, bytes, kind);
}
cudaError_t cudaMemcpyAsync(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return checked_copy(to, from, bytes, kind);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = reinterpret_cast<cudaStream_t>(new stand_in_stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::lock_guard lk(state_mutex);
  delete reinterpret_cast<stand_in_stream*>(s);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = reinterpret_cast<cudaEvent_t>(new int);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<int*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t s) {
  std::lock_guard lk(state_mutex);
  auto& work = reinterpret_cast<stand_in_stream*>(s)->work;
  std::erase_if(work, [](const pending& p) { return p.comm->aborted || p.comm->members->meetings[p.meeting].done; });
  return work.empty() ? cudaSuccess : cudaErrorNotReady;
}

const char* ncclGetErrorString(ncclResult_t rc) { return rc == ncclSuccess ? "no error" : "stand-in NCCL error"; }
const char* ncclGetLastError(ncclComm_t) { return ""; }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::lock_guard lk(state_mutex);
  std::memset(id, 0, sizeof *id);
  const std::int64_t value = next_unique_id++;
  std::memcpy(id->internal, &value, sizeof value);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int ranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (!config || config->blocking != 0 || ranks < 1 || rank < 0 || rank >= ranks) return ncclInvalidArgument;
  std::int64_t value = 0;
  std::memcpy(&value, id.internal, sizeof value);
  if (value == 0) return ncclInvalidArgument;  // an id nobody made
  std::lock_guard lk(state_mutex);
  auto& members = cliques[value];
  if (!members) {
    members = std::make_shared<clique>();
    members->ranks = ranks;
  }
  if (members->ranks != ranks || members->joined >= ranks) return ncclInvalidUsage;
  ++members->joined;
  *comm = reinterpret_cast<ncclComm_t>(new stand_in_comm{members, rank});
  return ncclInProgress;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t handle, ncclResult_t* state) {
  std::lock_guard lk(state_mutex);
  auto* comm = reinterpret_cast<stand_in_comm*>(handle);
  *state = comm->members->broken ? ncclInvalidUsage
         : comm->members->joined < comm->members->ranks ? ncclInProgress
                                                          : ncclSuccess;
  return ncclSuccess;
}
// The handle stays allocated: a stream's pending work may still name it.
ncclResult_t ncclCommAbort(ncclComm_t handle) {
  std::lock_guard lk(state_mutex);
  reinterpret_cast<stand_in_comm*>(handle)->aborted = true;
  return ncclSuccess;
}

// Everything has been delivered at once here, so finalising only reports
// ncclInProgress, as a nonblocking communicator may, until it is polled.
ncclResult_t ncclCommFinalize(ncclComm_t handle) { return handle ? ncclInProgress : ncclInvalidArgument; }
ncclResult_t ncclCommDestroy(ncclComm_t handle) { return ncclCommAbort(handle); }

ncclResult_t ncclAllReduce(const void* in, void* out, std::size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
  return post(c, call_of(kind::allreduce, in, out, n, t, op), s);
}
ncclResult_t ncclAllGather(const void* in, void* out, std::size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
  return post(c, call_of(kind::allgather, in, out, n, t), s);
}
ncclResult_t ncclReduceScatter(const void* in, void* out, std::size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s) {
  return post(c, call_of(kind::reduce_scatter, in, out, n, t, op), s);
}
ncclResult_t ncclBroadcast(const void* in, void* out, std::size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
  return post(c, call_of(kind::broadcast, in, out, n, t, ncclSum, root), s);
}
ncclResult_t ncclGroupStart() {
  grouping = true;
  return ncclSuccess;
}
ncclResult_t ncclSend(const void* in, std::size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return group_piece(c, s, true, {peer, static_cast<char*>(const_cast<void*>(in)), n * element_size(t)}, t);
}
ncclResult_t ncclRecv(void* out, std::size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return group_piece(c, s, false, {peer, static_cast<char*>(out), n * element_size(t)}, t);
}
ncclResult_t ncclGroupEnd() {
  grouping = false;
  ncclResult_t rc = ncclSuccess;
  for (auto& [comm, call] : grouped) {
    const ncclResult_t r = post(comm, std::move(call.second), call.first);
    if (r != ncclSuccess && rc == ncclSuccess) rc = r;
  }
  grouped.clear();
  return rc == ncclSuccess ? ncclInProgress : rc;
}

}  // extern "C"

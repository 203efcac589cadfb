// The NCCL communicator on two GPUs: every collective against a plain serial
// computation, group caching, tags, send-ahead on both sides, timeouts when a
// peer never comes, a failure on one device, and bad element types and
// reductions. Compiled by nvcc and linked against the CUDA runtime and NCCL
// (tests/gpu/register.cmake); tests that need GPUs skip, saying why, where
// there are too few. Also compiled by the host compiler and linked against
// cuda_stand_in.cpp, where the same tests check the backend's own logic.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <typemesh/runtime/nccl_launcher.hpp>

namespace {
using typemesh::device;
using typemesh::dtype;
using typemesh::group;
using typemesh::nccl_communicator;
using typemesh::reduce_op;
using namespace std::chrono_literals;

static_assert(typemesh::communicator<nccl_communicator>);
static_assert(std::is_same_v<nccl_communicator::memory_space, typemesh::cuda_space>);

// Skips the test unless this process sees at least n GPUs.
#define REQUIRE_GPUS(n)                                                                                          \
  do {                                                                                                           \
    int gpus_seen = 0;                                                                                           \
    const cudaError_t count_rc = cudaGetDeviceCount(&gpus_seen);                                                 \
    if (count_rc != cudaSuccess) {                                                                               \
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount returned " << cudaGetErrorName(count_rc);              \
    }                                                                                                            \
    if (gpus_seen == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount returned 0";                         \
    if (gpus_seen < (n)) {                                                                                       \
      GTEST_SKIP() << "needs " << (n) << " GPUs (NCCL does not let two devices of a group share one), found "  \
                   << gpus_seen;                                                                                 \
    }                                                                                                            \
  } while (0)

void cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorString(rc));
}

// A GPU buffer filled from, and read back into, host vectors.
template <class T>
class gpu_vector {
 public:
  explicit gpu_vector(std::size_t n) : n_(n) {
    if (n_) {
      cuda(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)), "cudaMalloc");
      cuda(cudaMemset(p_, 0, n_ * sizeof(T)), "cudaMemset");
    }
  }
  explicit gpu_vector(const std::vector<T>& values) : gpu_vector(values.size()) {
    if (n_) cuda(cudaMemcpy(p_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  gpu_vector(const gpu_vector&) = delete;
  gpu_vector& operator=(const gpu_vector&) = delete;
  ~gpu_vector() {
    if (p_) cudaFree(p_);
  }
  T* data() { return p_; }
  std::size_t size() const { return n_; }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    if (n_) cuda(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return out;
  }

 private:
  std::size_t n_;
  T* p_ = nullptr;
};

template <class F>
auto run(int devices, F f, std::chrono::milliseconds timeout = 30s) {
  return typemesh::nccl_launcher::run(typemesh::launch_options{.devices = devices, .timeout = timeout}, f);
}

nccl_communicator& comm() { return typemesh::this_nccl_communicator(); }

// The value device d contributes at index i: small integers, so every
// reduction is exact in every type whatever order NCCL chooses.
template <class T>
T input(int d, std::size_t i, int salt) {
  const int v = ((d * 131 + static_cast<int>(i) * 7 + salt * 17) % 23) - 11;
  if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<T>(v + 11);
  else return static_cast<T>(v);
}

template <class T>
T reduce(reduce_op op, T a, T b) {
  switch (op) {
    case reduce_op::sum: return static_cast<T>(a + b);
    case reduce_op::max: return std::max(a, b);
    case reduce_op::min: return std::min(a, b);
    case reduce_op::prod: return static_cast<T>(a * b);
  }
  return a;
}

template <class T>
std::vector<T> inputs(int d, std::size_t n, int salt) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = input<T>(d, i, salt);
  return v;
}

// Each device's group: both devices in either member order, or each alone.
const std::vector<std::vector<group>> group_sets = {
    {{{0, 1}, "pair"}, {{0, 1}, "pair"}},
    {{{1, 0}, "reversed"}, {{1, 0}, "reversed"}},
    {{{0}, "alone"}, {{1}, "alone"}},
};

template <class T>
void check_allreduce(reduce_op op, std::size_t n) {
  for (const auto& groups : group_sets) {
    auto results = run(2, [&](device& dev) {
      gpu_vector<T> in(inputs<T>(dev.id(), n, 1)), out(n);
      comm().allreduce(groups[dev.id()], in.data(), out.data(), n, typemesh::dtype_of<T>, op);
      return out.host();
    });
    for (int d = 0; d < 2; ++d) {
      const group& g = groups[d];
      for (std::size_t i = 0; i < n; ++i) {
        T expected = input<T>(g.devices[0], i, 1);
        for (int m = 1; m < g.size(); ++m) expected = reduce(op, expected, input<T>(g.devices[m], i, 1));
        ASSERT_EQ(results[d][i], expected) << typemesh::name_of(typemesh::dtype_of<T>) << " "
                                           << typemesh::name_of(op) << " over " << g.label << ", device " << d
                                           << ", element " << i;
      }
    }
  }
}

TEST(NcclCollectives, AllreduceMatchesSerialForEveryTypeAndReduction) {
  REQUIRE_GPUS(2);
  for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min, reduce_op::prod}) {
    check_allreduce<float>(op, 1000);
    check_allreduce<double>(op, 37);
    check_allreduce<std::int32_t>(op, 1000);
    check_allreduce<std::int64_t>(op, 5);
    check_allreduce<std::uint8_t>(op, 300);
  }
}

TEST(NcclCollectives, AllreduceInPlaceAndOfNothing) {
  REQUIRE_GPUS(2);
  const group pair{{1, 0}, "pair"};
  auto results = run(2, [&](device& dev) {
    gpu_vector<float> v(inputs<float>(dev.id(), 4096, 2));
    comm().allreduce(pair, v.data(), v.data(), v.size(), dtype::f32, reduce_op::sum);
    comm().allreduce(pair, nullptr, nullptr, 0, dtype::f32, reduce_op::sum);
    return v.host();
  });
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(results[0][i], input<float>(0, i, 2) + input<float>(1, i, 2)) << i;
  EXPECT_EQ(results[0], results[1]);
}

TEST(NcclCollectives, AllgatherReduceScatterAlltoallBroadcastMatchSerial) {
  REQUIRE_GPUS(2);
  for (const auto& groups : group_sets) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
      for (int root : {0, 1}) {
        if (root >= groups[0].size()) continue;
        struct out {
          std::vector<float> gathered, scattered, exchanged, broadcast;
        };
        auto results = run(2, [&](device& dev) {
          const group& g = groups[dev.id()];
          const std::size_t gs = g.size();
          gpu_vector<float> mine(inputs<float>(dev.id(), n, 2)), blocks(inputs<float>(dev.id(), gs * n, 3));
          gpu_vector<float> gathered(gs * n), scattered(n), exchanged(gs * n), buffer(inputs<float>(dev.id(), n, 4));
          comm().allgather(g, mine.data(), gathered.data(), n, dtype::f32);
          comm().reduce_scatter(g, blocks.data(), scattered.data(), n, dtype::f32, reduce_op::sum);
          comm().alltoall(g, blocks.data(), exchanged.data(), n, dtype::f32);
          comm().broadcast(g, buffer.data(), n, dtype::f32, root);
          comm().barrier(g);
          return out{gathered.host(), scattered.host(), exchanged.host(), buffer.host()};
        });
        for (int d = 0; d < 2; ++d) {
          const group& g = groups[d];
          const std::size_t gs = g.size(), me = g.index_of(d);
          const std::string where = g.label + ", n " + std::to_string(n) + ", device " + std::to_string(d);
          for (std::size_t j = 0; j < gs; ++j) {
            const int peer = g.devices[j];
            for (std::size_t i = 0; i < n; ++i) {
              ASSERT_EQ(results[d].gathered[j * n + i], input<float>(peer, i, 2)) << "allgather " << where;
              ASSERT_EQ(results[d].exchanged[j * n + i], input<float>(peer, me * n + i, 3)) << "alltoall " << where;
            }
          }
          for (std::size_t i = 0; i < n; ++i) {
            float sum = 0;
            for (int peer : g.devices) sum += input<float>(peer, me * n + i, 3);
            ASSERT_EQ(results[d].scattered[i], sum) << "reduce_scatter " << where;
            ASSERT_EQ(results[d].broadcast[i], input<float>(g.devices[root], i, 4)) << "broadcast " << where;
          }
        }
      }
    }
  }
}

TEST(NcclGroups, CommunicatorsAreMadeByTheMembersOnlyAndCachedPerGroup) {
  REQUIRE_GPUS(2);
  auto counts = run(2, [](device& dev) {
    const group pair{{0, 1}, "pair"}, alone{{dev.id()}, "alone"};
    gpu_vector<std::int32_t> v(inputs<std::int32_t>(dev.id(), 8, 5));
    std::vector<std::size_t> seen;
    comm().allreduce(pair, v.data(), v.data(), 8, dtype::i32, reduce_op::sum);
    seen.push_back(comm().cached_groups());
    comm().allreduce(pair, v.data(), v.data(), 8, dtype::i32, reduce_op::sum);
    seen.push_back(comm().cached_groups());
    // Only this device enters its own group: no other device takes part.
    comm().allreduce(alone, v.data(), v.data(), 8, dtype::i32, reduce_op::max);
    seen.push_back(comm().cached_groups());
    comm().barrier(group{{1, 0}, "reversed"});
    seen.push_back(comm().cached_groups());
    return seen;
  });
  for (int d = 0; d < 2; ++d) EXPECT_EQ(counts[d], (std::vector<std::size_t>{1, 1, 2, 3})) << "device " << d;
}

TEST(NcclMessages, TagsNeverMixAndEachTagIsFifo) {
  REQUIRE_GPUS(2);
  auto results = run(2, [](device& dev) {
    std::vector<std::vector<std::int64_t>> got;
    if (dev.id() == 0) {
      for (auto [tag, value] : std::initializer_list<std::pair<int, int>>{{1, 10}, {2, 20}, {1, 11}, {3, 30}}) {
        gpu_vector<std::int64_t> m(std::vector<std::int64_t>(3, value));
        comm().send(1, m.data(), 3, dtype::i64, tag);
      }
    } else {
      for (int tag : {2, 3, 1, 1}) {
        gpu_vector<std::int64_t> m(3);
        comm().recv(0, m.data(), 3, dtype::i64, tag);
        got.push_back(m.host());
      }
    }
    return got;
  });
  using v = std::vector<std::int64_t>;
  EXPECT_EQ(results[1], (std::vector<v>{v(3, 20), v(3, 30), v(3, 10), v(3, 11)}));
}

TEST(NcclMessages, SendAheadOnBothSidesDoesNotDeadlock) {
  REQUIRE_GPUS(2);
  constexpr std::size_t n = 1 << 18;
  auto results = run(2, [](device& dev) {
    const int other = 1 - dev.id();
    std::vector<float> last;
    for (int round = 0; round < 10; ++round) {
      gpu_vector<float> out(inputs<float>(dev.id(), n, round)), in(n);
      comm().send(other, out.data(), n, dtype::f32, 0);
      { gpu_vector<float> temporary(1000); }  // its cudaFree synchronises the whole GPU
      comm().recv(other, in.data(), n, dtype::f32, 0);
      last = in.host();
      if (last != inputs<float>(other, n, round)) throw std::runtime_error("round " + std::to_string(round) + " differs");
    }
    return last;
  });
  EXPECT_EQ(results[0], inputs<float>(1, n, 9));
  EXPECT_EQ(results[1], inputs<float>(0, n, 9));
}

// The message of the exception run throws, or "" when it throws none.
template <class Error, class F>
std::string failure_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(NcclFailures, ACollectiveAPeerNeverJoinsTimesOutNamingCallGroupAndDevice) {
  REQUIRE_GPUS(2);
  const group pair{{0, 1}, "pair"};
  const std::string message = failure_of<typemesh::timeout_error>([&] {
    run(
        2,
        [&](device& dev) {
          gpu_vector<float> v(16);
          comm().allreduce(pair, v.data(), v.data(), 16, dtype::f32, reduce_op::sum);
          if (dev.id() == 0) comm().allreduce(pair, v.data(), v.data(), 16, dtype::f32, reduce_op::sum);
          else std::this_thread::sleep_for(3s);  // longer than the timeout, then returns
        },
        1000ms);
  });
  ASSERT_FALSE(message.empty());
  EXPECT_NE(message.find("allreduce over group [0 1] (pair) on device 0 timed out after 1000 ms"), std::string::npos)
      << message;
}

TEST(NcclFailures, AGroupAMemberNeverEntersTimesOutWhileMakingItsCommunicator) {
  REQUIRE_GPUS(2);
  const std::string message = failure_of<typemesh::timeout_error>([] {
    run(
        2,
        [](device& dev) {
          gpu_vector<float> v(16);
          if (dev.id() == 1) comm().allreduce(group{{1, 0}, "pair"}, v.data(), v.data(), 16, dtype::f32, reduce_op::max);
          else std::this_thread::sleep_for(3s);
        },
        1000ms);
  });
  ASSERT_FALSE(message.empty());
  EXPECT_NE(message.find("creating the NCCL communicator of group [1 0] (pair) for allreduce on device 1"),
            std::string::npos)
      << message;
}

TEST(NcclFailures, ARecvThatNeverArrivesTimesOut) {
  REQUIRE_GPUS(2);
  const std::string message = failure_of<typemesh::timeout_error>([] {
    run(
        2,
        [](device& dev) {
          gpu_vector<float> v(4);
          if (dev.id() == 1) comm().recv(0, v.data(), 4, dtype::f32, 3);
          else std::this_thread::sleep_for(3s);
        },
        1000ms);
  });
  EXPECT_NE(message.find("recv on device 1 from device 0 (tag 3) timed out"), std::string::npos) << message;
}

TEST(NcclFailures, AnErrorOnOneDeviceStopsTheOtherAndIsRethrown) {
  REQUIRE_GPUS(2);
  const group pair{{0, 1}, "pair"};
  const std::string message = failure_of<typemesh::shape_error>([&] {
    run(2, [&](device& dev) {
      gpu_vector<float> v(16);
      comm().allreduce(pair, v.data(), v.data(), 16, dtype::f32, reduce_op::sum);
      if (dev.id() == 1) throw typemesh::shape_error("bad input on device 1");
      comm().allreduce(pair, v.data(), v.data(), 16, dtype::f32, reduce_op::sum);  // stopped, not timed out
    });
  });
  EXPECT_EQ(message, "typemesh: bad input on device 1");
}

TEST(NcclFailures, AMessageNobodyReceivesIsReportedAtTheEnd) {
  REQUIRE_GPUS(2);
  const std::string message = failure_of<typemesh::collective_error>([] {
    run(2, [](device& dev) {
      gpu_vector<std::int32_t> v(5);
      if (dev.id() == 0) comm().send(1, v.data(), 5, dtype::i32, 4);
    });
  });
  EXPECT_NE(message.find("device 0 sent device 1 5 i32 (tag 4), which device 1 never received"), std::string::npos)
      << message;
}

TEST(NcclFailures, BadElementTypesAndReductionsAreRefusedByName) {
  REQUIRE_GPUS(1);
  const group alone{{0}, "alone"};
  const std::string bad_type = failure_of<typemesh::device_error>([&] {
    run(1, [&] {
      gpu_vector<float> v(4);
      comm().allreduce(alone, v.data(), v.data(), 4, static_cast<dtype>(9), reduce_op::sum);
    });
  });
  EXPECT_NE(bad_type.find("allreduce over group [0] (alone) on device 0: element type 9 is not a typemesh dtype"),
            std::string::npos)
      << bad_type;
  const std::string bad_reduction = failure_of<typemesh::device_error>([&] {
    run(1, [&] {
      gpu_vector<float> v(4);
      comm().reduce_scatter(alone, v.data(), v.data(), 4, dtype::f32, static_cast<reduce_op>(7));
    });
  });
  EXPECT_NE(bad_reduction.find("reduce_scatter over group [0] (alone) on device 0: reduction 7 is not one of"),
            std::string::npos)
      << bad_reduction;
}

TEST(NcclLauncher, ResultsAreIndexedByDeviceAndEachDeviceHasItsGpu) {
  REQUIRE_GPUS(2);
  struct who {
    int id, this_device, gpu, count;
  };
  auto results = run(2, [](device& dev) {
    int current = -1;
    cuda(cudaGetDevice(&current), "cudaGetDevice");
    if (current != comm().gpu()) throw std::runtime_error("the thread runs on another GPU than its device");
    return who{dev.id(), typemesh::this_device().id(), comm().gpu(), dev.count()};
  });
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(results[d].id, d);
    EXPECT_EQ(results[d].this_device, d);
    EXPECT_EQ(results[d].gpu, d);
    EXPECT_EQ(results[d].count, 2);
  }
}

// These run anywhere: what the launcher and the mappings do without a GPU.

TEST(NcclLauncher, IsDetectedOnlyWhenAskedForByName) {
  const char* before = std::getenv("TYPEMESH_BACKEND");
  const std::string saved = before ? before : "";
  ::setenv("TYPEMESH_BACKEND", "nccl", 1);
  EXPECT_TRUE(typemesh::nccl_launcher::detected());
  ::setenv("TYPEMESH_BACKEND", "host", 1);
  EXPECT_FALSE(typemesh::nccl_launcher::detected());
  ::unsetenv("TYPEMESH_BACKEND");
  EXPECT_FALSE(typemesh::nccl_launcher::detected());
  if (before) ::setenv("TYPEMESH_BACKEND", saved.c_str(), 1);
  EXPECT_EQ(typemesh::nccl_launcher::name, "nccl");
}

TEST(NcclLauncher, MoreDevicesThanGpusIsAnErrorBeforeAnyWork) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  bool ran = false;
  const std::string message = failure_of<typemesh::device_error>([&] { run(gpus + 1, [&] { ran = true; }); });
  EXPECT_FALSE(ran);
  EXPECT_NE(message.find("cudaGetDeviceCount"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(gpus + 1) + " devices"), std::string::npos) << message;
}

TEST(NcclMapping, ElementTypesAndReductionsMapOneToOneAndBadValuesAreNamed) {
  using typemesh::detail::nccl_datatype;
  using typemesh::detail::nccl_reduction;
  EXPECT_EQ(nccl_datatype(dtype::f32, "x"), ncclFloat32);
  EXPECT_EQ(nccl_datatype(dtype::f64, "x"), ncclFloat64);
  EXPECT_EQ(nccl_datatype(dtype::i32, "x"), ncclInt32);
  EXPECT_EQ(nccl_datatype(dtype::i64, "x"), ncclInt64);
  EXPECT_EQ(nccl_datatype(dtype::u8, "x"), ncclUint8);
  EXPECT_EQ(nccl_reduction(reduce_op::sum, "x"), ncclSum);
  EXPECT_EQ(nccl_reduction(reduce_op::max, "x"), ncclMax);
  EXPECT_EQ(nccl_reduction(reduce_op::min, "x"), ncclMin);
  EXPECT_EQ(nccl_reduction(reduce_op::prod, "x"), ncclProd);
  const std::string bad_type = failure_of<typemesh::device_error>([] { nccl_datatype(static_cast<dtype>(9), "allgather on device 3"); });
  EXPECT_EQ(bad_type, "typemesh: allgather on device 3: element type 9 is not a typemesh dtype (f32, f64, i32, i64 or u8)");
  const std::string bad_op = failure_of<typemesh::device_error>([] { nccl_reduction(static_cast<reduce_op>(7), "allreduce on device 1"); });
  EXPECT_EQ(bad_op, "typemesh: allreduce on device 1: reduction 7 is not one of sum, max, min, prod");
}

TEST(NcclLauncher, NoNcclCommunicatorOutsideALaunch) {
  EXPECT_THROW(typemesh::this_nccl_communicator(), typemesh::device_error);
}

}  // namespace

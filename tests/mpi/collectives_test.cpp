// The MPI backend, run under mpiexec with 4 or 8 ranks (tests/mpi/register.cmake).
// Every rank runs every test; launch(n, f) runs f once per rank. Each check
// runs the same function on both backends (the "host" launcher runs the host
// threads inside each rank) and compares values and counted bytes.
//
//   --fail=throw    rank 2 throws while the others wait: the job must end
//   --fail=timeout  rank 1 never joins an allreduce: rank 0 times out, job ends
//   --fail=timeout_small  the same with a one-float allgather
//   --fail=crash    rank 2 dies of SIGSEGV: its crash line, and the job ends
//   --fail=kill     rank 2 is killed (SIGKILL): the launcher ends the job
//   --fail=finished rank 0 returns while rank 1 waits for its message: at once
//   --fail=leftover rank 0 sends a message nobody receives: named at the end
//   --fail=leftover_labelled  the same with a labelled message whose label
//                   went without its text, and one whose label went apart:
//                   named in full
//   --fail=skip_transfer  rank 3 skips a replace_mesh: the next one names both
#include <mpi.h>

#include <algorithm>
#include <tuple>
#include <optional>
#include <array>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest_on_ranks.hpp"
#include "support.hpp"

namespace {
using namespace tt;
using namespace std::chrono_literals;
using typemesh::device;
using typemesh::group;
using typemesh::launch;
using typemesh::op_kind;
using typemesh::reduce_op;

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

const char* running_backend = "MPI";  // for failure messages

// Runs launch(n, f) on the host backend (threads in this process), then on MPI.
template <class F>
auto on_both(int n, F f) {
  running_backend = "host";
  auto host = launch({.devices = n, .backend = "host"}, f);
  running_backend = "MPI";
  auto mpi = launch(n, f);
  return std::make_pair(std::move(host), std::move(mpi));
}

template <class T>
T input(int d, std::size_t i, int salt) {
  return static_cast<T>(((d * 131 + static_cast<int>(i) * 7 + salt * 17) % 23) - 11);
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

// A partition of the devices into groups: the group of each device.
using partition = std::function<group(int)>;

template <class T>
void check_allreduce(device& dev, const group& g, std::size_t n, reduce_op op, int salt, bool in_place) {
  std::vector<T> in(n), out(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = input<T>(dev.id(), i, salt);
  if (in_place) {
    dev.allreduce<T>(g, std::span<T>(in), op);
    out = in;
  } else {
    dev.allreduce<T>(g, in, out, op);
  }
  for (std::size_t i = 0; i < n; ++i) {
    T expected = input<T>(g.devices[0], i, salt);
    for (int m = 1; m < g.size(); ++m) expected = reduce(op, expected, input<T>(g.devices[m], i, salt));
    ASSERT_EQ(out[i], expected) << g.label << " device " << dev.id() << " element " << i;
  }
}

// Every collective over the group of this device, against a serial reference.
typemesh::traffic every_collective(device& dev, const partition& part, std::size_t n) {
  const group g = part(dev.id());
  const std::size_t gs = g.size();
  const int me = g.index_of(dev.id());
  SCOPED_TRACE(g.label + " on the " + running_backend + " backend");
  check_allreduce<float>(dev, g, n, reduce_op::sum, 1, false);
  check_allreduce<float>(dev, g, n, reduce_op::max, 2, true);
  check_allreduce<double>(dev, g, n, reduce_op::prod, 3, false);
  check_allreduce<std::int32_t>(dev, g, n, reduce_op::min, 4, true);
  check_allreduce<std::int64_t>(dev, g, n, reduce_op::prod, 5, false);
  check_allreduce<std::uint8_t>(dev, g, n, reduce_op::sum, 6, false);

  std::vector<std::int32_t> mine(n), gathered(gs * n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = input<std::int32_t>(dev.id(), i, 7);
  dev.allgather<std::int32_t>(g, mine, gathered);
  for (std::size_t j = 0; j < gs; ++j)
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(gathered[j * n + i], input<std::int32_t>(g.devices[j], i, 7));

  std::vector<float> blocks(gs * n), scattered(n);
  for (std::size_t i = 0; i < gs * n; ++i) blocks[i] = input<float>(dev.id(), i, 8);
  dev.reduce_scatter<float>(g, blocks, scattered);
  for (std::size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (std::size_t j = 0; j < gs; ++j) sum += input<float>(g.devices[j], me * n + i, 8);
    EXPECT_EQ(scattered[i], sum);
  }

  std::vector<std::int64_t> send(gs * n), exchanged(gs * n);
  for (std::size_t i = 0; i < gs * n; ++i) send[i] = input<std::int64_t>(dev.id(), i, 9);
  dev.alltoall<std::int64_t>(g, send, exchanged);
  for (std::size_t j = 0; j < gs; ++j)
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_EQ(exchanged[j * n + i], input<std::int64_t>(g.devices[j], me * n + i, 9));

  for (int root = 0; root < g.size(); ++root) {
    std::vector<double> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = input<double>(dev.id(), i, 10 + root);
    dev.broadcast<double>(g, b, root);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(b[i], input<double>(g.devices[root], i, 10 + root));
  }
  dev.barrier(g);
  return dev.traffic();
}

void expect_same_traffic(const std::vector<typemesh::traffic>& host, const std::vector<typemesh::traffic>& mpi) {
  ASSERT_EQ(host.size(), mpi.size());
  for (std::size_t d = 0; d < host.size(); ++d)
    for (std::size_t k = 0; k < typemesh::op_kind_count; ++k) {
      auto kind = static_cast<op_kind>(k);
      EXPECT_EQ(host[d][kind].calls, mpi[d][kind].calls) << "device " << d << " " << name_of(kind);
      EXPECT_EQ(host[d][kind].bytes_sent, mpi[d][kind].bytes_sent) << "device " << d << " " << name_of(kind);
      EXPECT_EQ(host[d][kind].bytes_received, mpi[d][kind].bytes_received) << "device " << d << " " << name_of(kind);
    }
}

void check_partition(const partition& part) {
  const int n = world_size();
  // Small calls (one point-to-point round, up to 2 KiB of allreduce and 64
  // KiB of allgather/alltoall result) and larger ones (two phases, MPI's
  // nonblocking collectives).
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{1000}, std::size_t{20000}}) {
    auto [host, mpi] = on_both(n, [&](device& dev) { return every_collective(dev, part, count); });
    expect_same_traffic(host, mpi);
  }
}

std::vector<int> scrambled(int n) {
  std::vector<int> d(n);
  std::iota(d.begin(), d.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(d.begin(), d.end(), rng);
  return d;
}

group reversed(group g) {
  std::reverse(g.devices.begin(), g.devices.end());
  g.label += " reversed";
  return g;
}

TEST(MpiCollectives, WholeWorldInOrderAndReversed) {
  const int n = world_size();
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  check_partition([&](int) { return group{all, "world"}; });
  check_partition([&](int) { return reversed(group{all, "world"}); });
  check_partition([&](int) { return group{scrambled(n), "world scrambled"}; });
  check_partition([&](int d) { return group{{d}, "alone"}; });
}

TEST(MpiCollectives, AxesOfA2dMesh) {
  const int n = world_size();
  typemesh::mesh<"m2", a0, a1> m({2, n / 2}, scrambled(n));
  check_partition([&](int d) { return m.group_along<a0>(d); });
  check_partition([&](int d) { return m.group_along<a1>(d); });
  check_partition([&](int d) { return m.group_along<a0, a1>(d); });
  check_partition([&](int d) { return reversed(m.group_along<a1>(d)); });
}

TEST(MpiCollectives, AxesOfA3dMesh) {
  const int n = world_size();
  if (n % 4 != 0) GTEST_SKIP() << "a 3-d mesh [n/4, 2, 2] needs a multiple of 4 ranks; this run has " << n;
  typemesh::mesh<"m3", a0, a1, a2> m({n / 4, 2, 2});
  check_partition([&](int d) { return m.group_along<a0>(d); });
  check_partition([&](int d) { return m.group_along<a1>(d); });
  check_partition([&](int d) { return m.group_along<a2>(d); });
  check_partition([&](int d) { return m.group_along<a0, a2>(d); });
  check_partition([&](int d) { return reversed(m.group_along<a1, a2>(d)); });
}

TEST(MpiCollectives, LargeAllreduceIsBitIdenticalOnAllMembers) {
  const int n = world_size();
  auto results = launch(n, [&](device& dev) {
    std::vector<float> v(1 << 18);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1.0f / (1 + dev.id() + i % 13) + 1e-7f * i;
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    dev.allreduce<float>(group{all, "all"}, v);
    return v;  // gathered on every rank through Boost.Serialization
  });
  ASSERT_EQ(results.size(), static_cast<std::size_t>(n));
  for (int d = 1; d < n; ++d) EXPECT_EQ(results[d], results[0]);
}

// Values whose float sum depends on the order of its terms: only a reduction
// in member order on both backends gives equal bits.
template <class T>
std::vector<T> order_sensitive(int device, std::size_t n, int salt) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int k = static_cast<int>((device * 7 + i * 3 + salt) % 11);
    v[i] = static_cast<T>((k % 2 ? -1 : 1) * std::pow(T(10), T(k - 5))) + static_cast<T>(0.1) * static_cast<T>(i % 5);
  }
  return v;
}

template <class T>
std::vector<std::vector<T>> reductions(device& dev, const partition& part, std::size_t n) {
  const group g = part(dev.id());
  std::vector<std::vector<T>> out;
  for (reduce_op op : {reduce_op::sum, reduce_op::prod, reduce_op::max}) {
    std::vector<T> in = order_sensitive<T>(dev.id(), n, static_cast<int>(op)), r(n);
    dev.allreduce<T>(g, in, r, op);
    out.push_back(r);
    dev.allreduce<T>(g, std::span<T>(in), op);  // in place
    out.push_back(in);
    std::vector<T> blocks = order_sensitive<T>(dev.id(), g.size() * n, 3), mine(n);
    dev.reduce_scatter<T>(g, blocks, mine, op);
    out.push_back(mine);
  }
  return out;
}

TEST(MpiCollectives, FloatReductionsEqualTheHostBackendBitForBit) {
  const int n = world_size();
  const std::vector<std::pair<std::string, partition>> partitions = {
      {"all", [&](int) { return group{scrambled(n), "all, scrambled"}; }},
      {"pairs", [&](int d) { return reversed(group{{d & ~1, d | 1}, "pair"}); }},
  };
  for (const auto& [name, part] : partitions)
    for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{1001}}) {
      SCOPED_TRACE(name + ", " + std::to_string(count) + " elements");
      auto [host_f, mpi_f] = on_both(n, [&](device& dev) { return reductions<float>(dev, part, count); });
      EXPECT_EQ(host_f, mpi_f);
      auto [host_d, mpi_d] = on_both(n, [&](device& dev) { return reductions<double>(dev, part, count); });
      EXPECT_EQ(host_d, mpi_d);
    }
}

TEST(MpiSendRecv, BetweenTwoMeshesWithTagsAndLargeMessages) {
  const int n = world_size(), half = n / 2;
  std::vector<int> first(half), second(half);
  std::iota(first.begin(), first.end(), 0);
  for (int i = 0; i < half; ++i) second[i] = n - 1 - i;  // reversed
  typemesh::mesh<"a", a0> ma({half}, first);
  typemesh::mesh<"b", a0> mb({half}, second);
  auto body = [&](device& dev) {
    std::vector<double> got;
    if (ma.contains(dev.id())) {
      const int i = (*ma.coordinate_of(dev.id()))[0], peer = mb.device_at({i});
      std::vector<std::int32_t> small{dev.id(), 7, -3};
      std::vector<double> large(300'000, dev.id() + 0.5);  // beyond any eager limit
      dev.send<std::int32_t>(peer, small, 5);
      dev.send<double>(peer, large, 6);
      std::vector<double> back(2);
      dev.recv<double>(peer, back, 7);
      got = back;
    } else {
      const int i = (*mb.coordinate_of(dev.id()))[0], peer = ma.device_at({i});
      std::vector<std::int32_t> small(3);
      std::vector<double> large(300'000);
      dev.recv<double>(peer, large, 6);  // the other tag first
      dev.recv<std::int32_t>(peer, small, 5);
      EXPECT_EQ(small, (std::vector<std::int32_t>{peer, 7, -3}));
      EXPECT_TRUE(std::all_of(large.begin(), large.end(), [&](double x) { return x == peer + 0.5; }));
      std::vector<double> reply{double(dev.id()), large.back()};
      dev.send<double>(peer, reply, 7);
      got = reply;
    }
    return std::make_pair(got, dev.traffic()[op_kind::recv].bytes_received + dev.traffic()[op_kind::send].bytes_sent);
  };
  auto [host, mpi] = on_both(n, body);
  ASSERT_EQ(mpi.size(), static_cast<std::size_t>(n));
  EXPECT_EQ(host, mpi);
  for (int d = 0; d < half; ++d) EXPECT_EQ(mpi[d].first, (std::vector<double>{double(n - 1 - d), d + 0.5}));
}

// Messages of more than 4000 B go in pieces, and from 11992 B whole: without
// a copy when the receiver already waits for them (a ready notice), else
// from a copy. Every way, in every order, on tags and labelled, the same
// values and bytes as on host threads.
TEST(MpiSendRecv, LargeMessagesArriveWhetherOrNotTheReceiverWaits) {
  const int n = world_size();
  auto values = [](int from, int k, std::size_t size) {
    std::vector<float> v(size);
    for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<float>(from * 1000003 + k * 7919 + static_cast<int>(i));
    return v;
  };
  // Sizes on both sides of each line (floats: 1000 is 4000 B, whole; 1001
  // and 2997 go in two and three pieces; 2998 is 11992 B, whole again).
  // Labelled, with the 256 B label in the same message below 11992 B in
  // all: 936 goes whole, 937 in pieces, 2933 in three, 2934 apart (the
  // label just ahead of the data).
  const std::vector<std::size_t> sizes{1024, 1025, 3, 5000, 70'000, 1023, 1000, 1001, 2997, 2998, 936, 937, 2933, 2934};
  auto body = [&](device& dev) {
    const int me = dev.id(), peer = me ^ 1;  // pairs (0 1) (2 3) ...
    const bool first = me % 2 == 0;
    const group pair{{std::min(me, peer), std::max(me, peer)}, "pair"};
    std::vector<float> got;
    auto take = [&](int k, std::size_t size, int tag) {
      std::vector<float> v(size);
      if (tag < 0) dev.recv_labelled<float>("message", peer, v);
      else dev.recv<float>(peer, v, tag);
      EXPECT_EQ(v, values(peer, k, size)) << "message " << k << " on device " << me;
      got.insert(got.end(), v.begin(), v.end());
    };
    auto give = [&](int k, std::size_t size, int tag) {
      const auto v = values(me, k, size);
      if (tag < 0) dev.send_labelled<const float>("message", peer, v);
      else dev.send<const float>(peer, v, tag);
    };
    // 1. All sent before any receive is posted: every one from a copy.
    if (first) {
      for (std::size_t k = 0; k < sizes.size(); ++k) give(int(k), sizes[k], 3);
    }
    dev.barrier(pair);
    if (!first) {
      for (std::size_t k = 0; k < sizes.size(); ++k) take(int(k), sizes[k], 3);
    }
    // 2. Ping-pong, on a tag and labelled: mostly to a waiting receiver.
    for (int tag : {4, -1}) {
      for (int k = 0; k < static_cast<int>(sizes.size()); ++k) {
        const std::size_t size = sizes[k];
        if (first) {
          give(k, size, tag);
          take(k, size, tag);
        } else {
          take(k, size, tag);
          give(k, size, tag);
        }
      }
    }
    // 3. The receiver waits on tag 6 while tag 5's message comes first.
    if (first) {
      dev.barrier(pair);
      give(0, 70'000, 5);
      give(1, 70'000, 6);
    } else {
      dev.barrier(pair);
      take(1, 70'000, 6);
      take(0, 70'000, 5);
    }
    return std::make_pair(got, dev.traffic()[op_kind::recv].bytes_received + dev.traffic()[op_kind::send].bytes_sent);
  };
  auto [host, mpi] = on_both(n, body);
  ASSERT_EQ(mpi.size(), static_cast<std::size_t>(n));
  EXPECT_EQ(host, mpi);
}

// Devices 0 and 1 as a pair (every other device on its own) for the
// failure tests: they meet at a barrier, or after device 1 has waited out a
// receive's timeout, with device 0 late enough not to time out itself.
struct pair_0_1 {
  device& dev;
  group mine;
  explicit pair_0_1(device& d)
      : dev(d), mine(d.id() <= 1 ? group{{0, 1}, "pair"} : group{{d.id()}, "alone"}) {}
  void meet() { dev.barrier(mine); }
  void meet_after_timeout() {
    if (dev.id() == 0) std::this_thread::sleep_for(200ms);
    dev.barrier(mine);
  }
};

// A large receive that timed out had told its sender it was ready: the next
// message goes to the next receive all the same. A message of the wrong
// size is named with its size, also across size classes (after the
// timeout), and one larger than the receive is never written past its end.
TEST(MpiFailures, LargeMessagesAfterAWithdrawnReceiveAndOfTheWrongSize) {
  const int n = world_size();
  launch({.devices = n, .timeout = 300ms}, [&](device& dev) {
    pair_0_1 pair(dev);
    std::vector<float> first(4000, -1.0f), second(4000, -1.0f), sent(4000);  // 16000 B: whole, with a handshake
    std::iota(sent.begin(), sent.end(), 0.0f);
    if (dev.id() == 1) expect_error<typemesh::timeout_error>([&] { dev.recv<float>(0, first, 7); }, {"(tag 7) timed out"});
    pair.meet_after_timeout();
    if (dev.id() == 0) dev.send<float>(1, sent, 7);
    if (dev.id() == 1) {
      dev.recv<float>(0, second, 7);
      EXPECT_EQ(second, sent);
      EXPECT_EQ(first, std::vector<float>(4000, -1.0f));
    }
    pair.meet();
    std::vector<float> fewer(3000), more(6000);
    if (dev.id() == 0) dev.send<float>(1, fewer, 8);
    if (dev.id() == 1) {
      expect_error<typemesh::collective_error>([&] { dev.recv<float>(0, second, 8); },
                                               {"device 1 expects 4000 f32 from device 0 (tag 8)", "holds 12000 bytes"});
    }
    pair.meet();
    if (dev.id() == 0) dev.send<float>(1, more, 8);
    if (dev.id() == 1) {
      expect_error<typemesh::collective_error>([&] { dev.recv<float>(0, second, 8); },
                                               {"device 1 expects 4000 f32 from device 0 (tag 8)", "holds 24000 bytes (6000 f32)"});
    }
    pair.meet();
    // Across size classes: found once no message of the expected size came.
    std::vector<float> small(3);
    if (dev.id() == 0) dev.send<float>(1, sent, 9);
    if (dev.id() == 1) {
      expect_error<typemesh::collective_error>([&] { dev.recv<float>(0, small, 9); },
                                               {"device 1 expects 3 f32 from device 0 (tag 9)", "holds 16000 bytes (4000 f32)"});
    }
    pair.meet_after_timeout();
    if (dev.id() == 0) dev.send<float>(1, small, 9);
    if (dev.id() == 1) {
      expect_error<typemesh::collective_error>([&] { dev.recv<float>(0, second, 9); },
                                               {"device 1 expects 4000 f32 from device 0 (tag 9)", "holds 12 bytes (3 f32)"});
    }
    pair.meet_after_timeout();
  });
}

// A message sent in pieces (more than 4000 B, less than 11992 B) whose
// receiver expects another size is taken whole, every piece of it, and
// named with its size; the next message then arrives intact. Between size
// classes too: a message in pieces where a small one is expected, and the
// other way round, and a large one where pieces are expected.
TEST(MpiFailures, MessagesInPiecesOfTheWrongSizeAreTakenWholeAndNamed) {
  const int n = world_size();
  launch({.devices = n, .timeout = 300ms}, [&](device& dev) {
    pair_0_1 pair(dev);
    auto numbered = [](std::size_t size, float from) {
      std::vector<float> v(size);
      std::iota(v.begin(), v.end(), from);
      return v;
    };
    // Sent, expected, and what the error names: within the class of pieces,
    // two pieces where three are expected and three where two are.
    const std::array<std::array<std::size_t, 2>, 2> wrong{{{1500, 2000}, {2900, 1200}}};
    for (const auto& [size, expected] : wrong) {
      SCOPED_TRACE(size);
      if (dev.id() == 0) {
        auto wrong_one = numbered(size, 0.0f), right_one = numbered(expected, 1.0f);
        dev.send<float>(1, wrong_one, 8);
        dev.send<float>(1, right_one, 8);
      }
      if (dev.id() == 1) {
        std::vector<float> got(expected, -1.0f);
        expect_error<typemesh::collective_error>(
            [&] { dev.recv<float>(0, got, 8); },
            {typemesh::detail::cat("device 1 expects ", expected, " f32 from device 0 (tag 8)"),
             typemesh::detail::cat("holds ", size * 4, " bytes (", size, " f32)")});
        dev.recv<float>(0, got, 8);
        EXPECT_EQ(got, numbered(expected, 1.0f));
      }
      pair.meet();
    }
    // Between classes: the receive waits out the timeout, then takes what came.
    const std::array<std::array<std::size_t, 2>, 3> across{{{2000, 3}, {3, 2000}, {4000, 2000}}};
    for (const auto& [size, expected] : across) {
      SCOPED_TRACE(size);
      auto wrong_one = numbered(size, 0.0f), right_one = numbered(expected, 2.0f);
      if (dev.id() == 0) dev.send<float>(1, wrong_one, 9);
      if (dev.id() == 1) {
        std::vector<float> got(expected, -1.0f);
        expect_error<typemesh::collective_error>(
            [&] { dev.recv<float>(0, got, 9); },
            {typemesh::detail::cat("device 1 expects ", expected, " f32 from device 0 (tag 9)"),
             typemesh::detail::cat("holds ", size * 4, " bytes (", size, " f32)")});
      }
      pair.meet_after_timeout();
      if (dev.id() == 0) dev.send<float>(1, right_one, 9);
      if (dev.id() == 1) {
        std::vector<float> got(expected, -1.0f);
        dev.recv<float>(0, got, 9);
        EXPECT_EQ(got, right_one);
      }
      pair.meet();
    }
  });
}

// A labelled message of another size than its receiver expects is named by
// its label, whether the label leads the data's message (up to 11992 B in
// all) or goes apart, and the next labelled message arrives intact: where a
// label that went apart is taken in the place of another message, its data
// is taken too.
TEST(MpiFailures, LabelledMessagesOfTheWrongSizeAreNamedByTheirLabel) {
  const int n = world_size();
  launch({.devices = n, .timeout = 300ms}, [&](device& dev) {
    pair_0_1 pair(dev);
    struct mismatch {
      std::size_t sent, expected;
      bool after_timeout;  // of different size classes: found once the receive times out
      std::string names;
    };
    const std::vector<mismatch> cases{
        {1500, 2000, false, "expects 2000 f32 from device 0, but device 0 sent 1500 f32"},  // both in pieces
        {5000, 4000, false, "expects 4000 f32 from device 0, but device 0 sent 5000 f32"},  // both apart
        {4000, 70'000, false, "expects 70000 f32 from device 0, but device 0 sent 4000 f32"},
        {900, 4000, false, "expects 4000 f32 from device 0, but device 0 sent 900 f32"},   // whole, and apart
        {4000, 900, false, "expects 900 f32 from device 0, but device 0 sent 4000 f32"},   // apart, and whole
        {2934, 900, false, "expects 900 f32 from device 0, but device 0 sent 2934 f32"},   // apart in pieces, and whole
        {4000, 2000, true, "expects 2000 f32 from device 0, but device 0 sent 4000 f32"},  // apart, and in pieces
        {3, 2000, true, "expects 2000 f32 from device 0, but device 0 sent 3 f32"},        // whole, and in pieces
        {2000, 4000, true, "expects 4000 f32 from device 0, but device 0 sent 2000 f32"},  // in pieces, and apart
    };
    for (const mismatch& c : cases) {
      SCOPED_TRACE(c.names);
      std::vector<float> wrong_one(c.sent, 1.0f), right_one(c.expected);
      std::iota(right_one.begin(), right_one.end(), 2.0f);
      if (dev.id() == 0) dev.send_labelled<float>("ping", 1, wrong_one);
      if (dev.id() == 1) {
        std::vector<float> got(c.expected, -1.0f);
        expect_error<typemesh::collective_error>([&] { dev.recv_labelled<float>("ping", 0, got); }, {c.names});
      }
      if (c.after_timeout) pair.meet_after_timeout();
      else pair.meet();
      if (dev.id() == 0) dev.send_labelled<float>("ping", 1, right_one);
      if (dev.id() == 1) {
        std::vector<float> got(c.expected, -1.0f);
        dev.recv_labelled<float>("ping", 0, got);
        EXPECT_EQ(got, right_one);
      }
      pair.meet();
    }
  });
}

// A label that leads its data in one message of at most eager_bytes goes
// whole the first time its operation goes to a device, and as its header
// alone after that; the receiver restores the text from the first.
TEST(MpiLabels, ALabelGoesWithoutItsTextOnceItsReceiverHasIt) {
  using L = typemesh::detail::message_label;
  using typemesh::dtype;
  typemesh::mpi_state state(MPI_COMM_WORLD, std::chrono::milliseconds(1000));
  const std::string op = "replace_mesh from mesh 'one' [2] on devices [0 1] to mesh 'two' [2] on devices [2 3], dims "
                         "[d0=4 d1=2 d2=2], layout<d0(a0)> to layout<d1(a0)>";
  const auto first = L::encode(L::identity_of(op), 0, 256, dtype::f32, op);
  const auto second = L::encode(L::identity_of(op), 1, 256, dtype::f32, op);
  const auto other = L::encode(L::identity_of("another op"), 2, 256, dtype::f32, "another op");
  const auto id = L::identity_at(first.data());
  EXPECT_FALSE(state.sends_header_only(1, id, 1024));  // the first time: whole
  EXPECT_TRUE(state.sends_header_only(1, id, 1024));
  EXPECT_FALSE(state.sends_header_only(2, id, 1024));                            // another device
  EXPECT_FALSE(state.sends_header_only(1, L::identity_at(other.data()), 1024));  // another operation
  EXPECT_FALSE(state.sends_header_only(1, id, 3800));                            // beyond one eager message
  const auto header = L::header(id, 1, 256, dtype::f32);
  // The whole label's identity, sequence, count and type.
  EXPECT_TRUE(std::equal(header.begin(), header.begin() + L::length_offset, second.begin()));
  EXPECT_FALSE(L::described(header.data()));
  EXPECT_EQ(L::size_at(header.data()), L::header_bytes);
  EXPECT_EQ(L::sequence_at(header.data()), 1u);

  // The receiving side, as device 0's messages: the header alone before its
  // text came, the whole label, then the header again.
  std::array<std::uint8_t, L::bytes> label{};
  EXPECT_EQ(state.restore_label(0, header.data(), header.size(), label.data()), L::header_bytes);
  EXPECT_EQ(L::decode(label.data()).what, "an operation whose first message this device never took");
  EXPECT_EQ(state.restore_label(0, first.data(), first.size(), label.data()), L::bytes);
  EXPECT_EQ(L::decode(label.data()).what, op);
  label.fill(0);
  EXPECT_EQ(state.restore_label(0, header.data(), header.size(), label.data()), L::header_bytes);
  const auto restored = L::decode(label.data());
  EXPECT_EQ(restored.what, op);
  EXPECT_EQ(restored.sequence, 1u);
  EXPECT_EQ(restored.count, 256u);
  EXPECT_EQ(restored.type, dtype::f32);
  EXPECT_EQ(state.restore_label(1, header.data(), header.size(), label.data()), L::header_bytes);  // another sender
  EXPECT_EQ(L::decode(label.data()).what, "an operation whose first message this device never took");
  // What a receive takes: the label as it came, its text only when asked for.
  label.fill(0);
  EXPECT_EQ(state.take_label(0, header.data(), header.size(), label.data()), L::header_bytes);
  EXPECT_FALSE(L::described(label.data()));
  EXPECT_EQ(L::sequence_at(label.data()), 1u);
  EXPECT_EQ(state.label_text(0, label.data()), op);
  EXPECT_EQ(state.label_text(1, label.data()), "an operation whose first message this device never took");
  EXPECT_EQ(state.take_label(0, second.data(), second.size(), label.data()), L::bytes);
  EXPECT_EQ(L::decode(label.data()).what, op);
  EXPECT_EQ(state.restore_label(0, header.data(), L::header_bytes - 1, label.data()), 0u);  // too short for a label
  EXPECT_EQ(state.restore_label(0, first.data(), 100, label.data()), 0u);
}

// A labelled message whose label went without its text still names its
// operation in full when it meets the wrong receive, and the messages before
// it arrive intact.
TEST(MpiLabels, AShortLabelMeetingTheWrongReceiveNamesItsOperation) {
  const int n = world_size();
  launch({.devices = n, .timeout = 300ms}, [&](device& dev) {
    pair_0_1 pair(dev);
    std::vector<float> sent(256);  // 1 KiB: one message with its label
    std::iota(sent.begin(), sent.end(), 1.0f);
    if (dev.id() == 0) {
      for (int i = 0; i < 3; ++i) dev.send_labelled<const float>("the first op", 1, sent);
    }
    if (dev.id() == 1) {
      for (int i = 0; i < 2; ++i) {
        std::vector<float> got(256, -1.0f);
        dev.recv_labelled<float>("the first op", 0, got);
        EXPECT_EQ(got, sent);
      }
      std::vector<float> got(256, -1.0f);
      expect_error<typemesh::collective_error>(
          [&] { dev.recv_labelled<float>("the second op", 0, got); },
          {"expects its labelled message 2 from device 0 to belong to the second op",
           "device 0's message 2 belongs to the first op"});
    }
    pair.meet();
  });
}

TEST(MpiLaunch, ResultsAreIndexedByDeviceOnEveryRank) {
  const int n = world_size();
  auto ids = launch(n, [](device& dev) { return dev.id() * dev.count(); });
  auto same = launch(n, [] { return typemesh::this_device().id(); });
  auto names = launch(n, [](device& dev) { return std::string(dev.id() + 1, 'x'); });
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(n));
  for (int d = 0; d < n; ++d) {
    EXPECT_EQ(ids[d], d * n);
    EXPECT_EQ(same[d], d);
    EXPECT_EQ(names[d], std::string(d + 1, 'x'));
  }
  expect_error<typemesh::device_error>([] { typemesh::this_device(); }, {"inside typemesh::launch"});
}

TEST(MpiLaunch, DevicesOnANodeAreItsRanksInRankOrder) {
  const int n = world_size();
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const auto places = launch(n, [](device& dev) { return std::pair{dev.local_id(), dev.devices_on_node()}; });
  const auto host = launch({.devices = n, .backend = "host"},
                           [](device& dev) { return std::pair{dev.local_id(), dev.devices_on_node()}; });
  for (int d = 0; d < n; ++d) {
    EXPECT_EQ(host[d], std::pair(d, n)) << "host threads are one node";
    // One machine here: every rank is on it, in rank order.
    EXPECT_EQ(places[d], std::pair(d, n)) << "device " << d;
  }
  if (local && local_size) {  // Open MPI's own view of this rank
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    EXPECT_EQ(places[rank], std::pair(std::atoi(local), std::atoi(local_size)));
  }
}

// A program's own result struct, with nothing added for MPI: it travels
// field by field.
struct inner {
  std::string name;
  std::array<std::int16_t, 3> code;
  bool operator==(const inner&) const = default;
};
struct report {
  int device = 0;
  std::string text;
  std::vector<float> values;
  std::vector<bool> flags;
  std::optional<std::pair<int, std::string>> maybe;
  std::tuple<double, std::string> both;
  std::vector<inner> parts;
  inner one;
  bool operator==(const report&) const = default;
};

TEST(MpiLaunch, AggregateResultsTravelFieldByField) {
  const int n = world_size();
  auto [host, mpi] = on_both(n, [](device& dev) {
    const int d = dev.id();
    report r{d, std::string(static_cast<std::size_t>(d), 'x'), std::vector<float>(d, 0.5f * d),
             std::vector<bool>(d + 1, d % 2 == 1), std::nullopt, {d * 1.25, std::to_string(d) + "t"},
             {}, {"one", {1, 2, static_cast<std::int16_t>(d)}}};
    if (d % 2 == 0) r.maybe = std::pair{d, std::string("even")};
    for (int i = 0; i < d; ++i) r.parts.push_back({std::to_string(i), {static_cast<std::int16_t>(i), 0, -1}});
    return r;
  });
  ASSERT_EQ(mpi.size(), static_cast<std::size_t>(n));
  EXPECT_EQ(mpi, host);
  EXPECT_EQ(mpi[n - 1].parts.size(), static_cast<std::size_t>(n - 1));
}

TEST(MpiLaunch, DeviceCountOtherThanRanksIsAnErrorOnEveryRank) {
  const int n = world_size();
  bool ran = false;
  expect_error<typemesh::device_error>([&] { launch(n + 1, [&] { ran = true; }); },
                                       {"launch asks for " + std::to_string(n + 1) + " devices",
                                        "the MPI job has " + std::to_string(n) + " ranks", "mpirun -np"});
  EXPECT_FALSE(ran);
}

// Linking typemesh::mpi registers the MPI launcher; under mpiexec the
// automatic choice takes it, and a name still picks any launcher.
TEST(MpiLaunch, TheLauncherIsChosenByDetectionOrByName) {
  const int n = world_size();
  EXPECT_EQ(typemesh::launcher_names(), (std::vector<std::string_view>{"host", "mpi"}));
  if (std::getenv("TYPEMESH_BACKEND") == nullptr) {
    EXPECT_EQ(typemesh::chosen_launcher({.devices = n}), "mpi");
    EXPECT_EQ(typemesh::devices_in_this_process({.devices = n}), 1);
  }
  EXPECT_EQ(typemesh::chosen_launcher({.devices = n, .backend = "host"}), "host");
  EXPECT_EQ(typemesh::devices_in_this_process({.devices = n, .backend = "host"}), n);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // By name: one device per rank, each rank's own id is its rank.
  const auto ids = launch({.devices = n, .backend = "mpi"}, [](device& dev) { return dev.id(); });
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(n));
  for (int d = 0; d < n; ++d) EXPECT_EQ(ids[d], d);
  const auto local = launch({.devices = n, .backend = "mpi"},
                            [&](device& dev) { return dev.id() == rank ? 1 : 0; });
  for (int d = 0; d < n; ++d) EXPECT_EQ(local[d], 1) << "device " << d << " ran on rank " << d;
  bool ran = false;
  expect_error<typemesh::device_error>([&] { launch({.devices = n, .backend = "nccl"}, [&] { ran = true; }); },
                                       {"'nccl'", "host, mpi", "typemesh::nccl"});
  EXPECT_FALSE(ran);
}

TEST(MpiFailures, RecvTimesOutAndWrongSizesAreNamed) {
  const int n = world_size();
  launch({.devices = n, .timeout = 200ms}, [&](device& dev) {
    std::vector<float> v(3), w(5);
    if (dev.id() == 1) {
      expect_error<typemesh::timeout_error>([&] { dev.recv<float>(0, v, 9); },
                                            {"recv on device 1 from device 0 (tag 9) timed out after 200 ms"});
    }
    if (dev.id() == 0) dev.send<float>(1, v, 4);
    if (dev.id() == 1) {
      expect_error<typemesh::collective_error>([&] { dev.recv<float>(0, w, 4); },
                                               {"device 1 expects 5 f32 from device 0 (tag 4)", "holds 12 bytes"});
    }
    if (dev.id() == 0) dev.send<float>(1, w, 4);
    if (dev.id() == 1) {
      expect_error<typemesh::collective_error>([&] { dev.recv<float>(0, v, 4); },
                                               {"device 1 expects 3 f32 from device 0 (tag 4)", "more than 12 bytes"});
    }
    expect_error<typemesh::device_error>([&] { dev.send<float>((dev.id() + 1) % n, v, -1); }, {"tag -1"});
    pair_0_1 pair(dev);
    // A receive that timed out is withdrawn: the message sent after it goes
    // to the next receive, and the first one's buffer stays as it was.
    std::vector<float> first(2, -1.0f), second(2, -1.0f);
    if (dev.id() == 1) expect_error<typemesh::timeout_error>([&] { dev.recv<float>(0, first, 7); }, {"(tag 7) timed out"});
    // Device 1 has waited out two timeouts (tags 9 and 7) by now: device 0
    // comes late enough not to time out itself at the barrier.
    if (dev.id() == 0) std::this_thread::sleep_for(400ms);
    pair.meet();
    std::vector<float> sent{5.0f, 6.0f};
    if (dev.id() == 0) dev.send<float>(1, sent, 7);
    if (dev.id() == 1) {
      dev.recv<float>(0, second, 7);
      EXPECT_EQ(second, sent);
      EXPECT_EQ(first, (std::vector<float>{-1.0f, -1.0f}));
    }
    pair.meet();
  });
}

// Tensor-level checks of tests/tensor_test.cpp, on both backends.
using S = typemesh::shape<d0, d1, d2>;
using whole = typemesh::host_tensor<float, S>;

whole numbered(const S& s) {
  whole h(s);
  for (std::size_t i = 0; i < h.size(); ++i) h.values()[i] = static_cast<float>(i);
  return h;
}

struct relation {
  const char* name;
  std::array<int, 2> sizes;
  std::vector<int> devices;
};

std::vector<relation> relations(int n) {
  std::vector<int> all(n), halves_swapped(n);
  std::iota(all.begin(), all.end(), 0);
  for (int i = 0; i < n; ++i) halves_swapped[i] = (i + n / 2) % n;
  std::vector<relation> r{{"all", {2, n / 2}, all},
                          {"halves swapped", {2, n / 2}, halves_swapped},
                          {"scrambled", {n, 1}, scrambled(n)}};
  // A [2, n/4] mesh on the first half: on 4 ranks or more.
  if (n % 4 == 0) r.push_back({"first half", {2, n / 4}, {all.begin(), all.begin() + n / 2}});
  return r;
}

template <class Layout>
void round_trip() {
  const int n = world_size();
  const S s{8, 8, 8};
  const whole h = numbered(s);
  using M = typemesh::mesh<"t", a0, a1>;
  for (const auto& r : relations(n)) {
    SCOPED_TRACE(r.name);
    auto [host, mpi] = on_both(n, [&](device& dev) {
      M m(r.sizes, r.devices);
      auto x = typemesh::import_tensor<Layout>(m, h);
      EXPECT_EQ(dev.traffic().calls(), 0u);
      expect_local(x, [&](auto g) { return h[g]; });
      auto back = typemesh::export_tensor(x);
      if (!m.contains(dev.id())) {
        EXPECT_TRUE(back.empty());
      } else {
        EXPECT_EQ(back, h);
        EXPECT_EQ(dev.traffic().bytes_received(), (h.size() - x.local().size()) * sizeof(float));
      }
      return dev.traffic();
    });
    expect_same_traffic(host, mpi);
  }
}

TEST(MpiTensor, ImportExportRoundTrip) {
  using typemesh::layout;
  round_trip<typemesh::replicated>();
  round_trip<layout<d0(a0)>>();
  round_trip<layout<d0(a0), d2(a1)>>();
  round_trip<layout<d1(a0), d2(a1)>>();
}

TEST(MpiTensor, AllconcatAllsplitAlltoallKeepTheValues) {
  using typemesh::layout;
  const int n = world_size();
  const S s{4, 8, 4};
  const whole h = numbered(s);
  std::vector<int> devices(n);
  for (int i = 0; i < n; ++i) devices[i] = (i + n / 2) % n;
  auto [host, mpi] = on_both(n, [&](device& dev) {
    typemesh::mesh<"t", a0, a1> m({2, n / 2}, devices);
    auto x = typemesh::import_tensor<layout<d0(a0), d2(a1)>>(m, h);
    auto at = [&](auto g) { return h[g]; };
    auto y = typemesh::allconcat<d0>(x);
    expect_local(y, at);
    EXPECT_EQ(dev.traffic()[op_kind::allgather].bytes_received, x.local().size() * sizeof(float));
    auto z = typemesh::allsplit<d1, a0>(y);
    expect_local(z, at);
    auto w = typemesh::alltoall<d2, d0>(z);
    expect_local(w, at);
    EXPECT_EQ(typemesh::export_tensor(w), h);
    return dev.traffic();
  });
  expect_same_traffic(host, mpi);
}

// --- The failure modes that end the job (registered with expected output) ---

int fail(const std::string& how) {
  const int n = world_size();
  if (how == "throw") {
    launch(n, [&](device& dev) {
      if (dev.id() == 2) throw std::runtime_error("loss is NaN on device 2");
      std::vector<float> v(4, 1.0f);
      std::vector<int> all(n);
      std::iota(all.begin(), all.end(), 0);
      dev.allreduce<float>(group{all, "all"}, v);  // waits for device 2: default timeout is a minute
    });
  } else if (how == "timeout") {
    launch({.devices = n, .timeout = 300ms}, [&](device& dev) {
      std::vector<float> v(4, 1.0f);
      if (dev.id() == 1) std::this_thread::sleep_for(20s);  // never joins
      else dev.allreduce<float>(group{{0, 1}, "pair"}, v);
    });
  } else if (how == "timeout_small") {
    // A small allgather is point to point (no MPI collective): its wait
    // keeps the deadline too.
    launch({.devices = n, .timeout = 300ms}, [&](device& dev) {
      std::vector<float> one(1, 1.0f), two(2);
      if (dev.id() == 1) std::this_thread::sleep_for(20s);  // never joins
      else if (dev.id() == 0) dev.allgather<float>(group{{0, 1}, "pair"}, one, two);
    });
  } else if (how == "crash" || how == "kill") {
    launch(n, [&](device& dev) {
      if (dev.id() == 2) std::raise(how == "crash" ? SIGSEGV : SIGKILL);  // dies without a word of its own
      std::vector<float> v(4, 1.0f);
      std::vector<int> all(n);
      std::iota(all.begin(), all.end(), 0);
      dev.allreduce<float>(group{all, "all"}, v);  // waits for device 2: default timeout is a minute
    });
  }
  if (how == "finished") {
    launch(n, [&](device& dev) {  // the default timeout: a minute
      std::vector<float> v(4);
      if (dev.id() == 0) dev.send<float>(1, v, 5);  // tag 5, not the 6 device 1 waits for
      if (dev.id() == 1) {
        dev.recv<float>(0, v, 5);
        dev.recv<float>(0, v, 6);
      }
    });
  } else if (how == "leftover") {
    launch(n, [&](device& dev) {
      std::vector<float> v(4);
      if (dev.id() == 0) dev.send<float>(1, v, 4);
    });
  } else if (how == "leftover_labelled") {
    launch(n, [&](device& dev) {
      std::vector<float> v(256), large(5000);  // the second label goes without its text
      if (dev.id() == 0) {
        dev.send_labelled<float>("the only op", 1, v);
        dev.send_labelled<float>("the only op", 1, v);
        dev.send_labelled<float>("the only op", 1, large);  // its label apart, just ahead
      }
      if (dev.id() == 1) dev.recv_labelled<float>("the only op", 0, v);
    });
  } else if (how == "skip_transfer") {
    using S3 = typemesh::shape<d0, d1, d2>;
    typemesh::host_tensor<float, S3> h(S3{4, 2, 2});
    launch(n, [&](device& dev) {
      typemesh::mesh<"one", a0> from({2}, {0, 1});
      typemesh::mesh<"two", a0> to({2}, {2, 3});
      auto x = typemesh::import_tensor<typemesh::layout<d0(a0)>>(from, h);
      if (dev.id() != 3) (void)typemesh::replace_mesh<typemesh::layout<d0(a0)>>(x, to);  // device 3 skips it
      (void)typemesh::replace_mesh<typemesh::layout<d1(a0)>>(x, to);
    });
  }
  return 0;  // not reached: the job is aborted
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode.rfind("--fail=", 0) == 0) {
    code = fail(mode.substr(7));
  } else {
    code = tt::run_tests_on_every_rank(argc, argv);
  }
  MPI_Finalize();
  return code;
}

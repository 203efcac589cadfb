// The host-thread communicator: every collective against a serial reference
// on random groups, the bytes it counts, and every way a run can go wrong.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string_view>
#include <type_traits>
#include <fstream>
#include <set>
#include <string>
#include <sys/resource.h>
#include <vector>

#include "support.hpp"

// A fourth backend, registered as docs/backend.md says a backend registers:
// it runs the devices one after another on host threads, highest id first,
// so a test can see that it ran. Only for functions that do not communicate.
namespace launcher_test {
inline std::vector<int> reverse_runs;  // the device ids in the order they ran

struct reverse_launcher {
  static constexpr std::string_view name = "reverse";
  static bool detected() { return std::getenv("TYPEMESH_TEST_DETECT_REVERSE") != nullptr; }

  template <class F>
  static typemesh::launch_result_t<F> run(const typemesh::launch_options& options, F& f) {
    using result = typemesh::detail::launch_call_result_t<F>;
    typemesh::host_world world(options.devices, options.timeout);
    std::vector<std::conditional_t<std::is_void_v<result>, char, std::optional<result>>> results(options.devices);
    reverse_runs.clear();
    for (int id = options.devices - 1; id >= 0; --id) {
      std::exception_ptr failure;
      std::thread([&] {
        typemesh::device dev{typemesh::host_communicator(world, id)};
        typemesh::detail::current_device() = &dev;
        try {
          reverse_runs.push_back(id);
          if constexpr (std::is_void_v<result>) typemesh::detail::call_on(f, dev);
          else results[id].emplace(typemesh::detail::call_on(f, dev));
          world.mark_finished(id);
        } catch (...) {
          failure = std::current_exception();
        }
        typemesh::detail::current_device() = nullptr;
      }).join();
      if (failure) std::rethrow_exception(failure);
    }
    if constexpr (!std::is_void_v<result>) {
      std::vector<result> out;
      for (auto& r : results) out.push_back(std::move(*r));
      return out;
    }
  }
};

// Not a launcher: no name.
struct nameless_launcher {
  static bool detected() { return false; }
  template <class F>
  static void run(const typemesh::launch_options&, F&) {}
};
}  // namespace launcher_test

template <>
struct typemesh::launcher_slot<15> {
  using type = launcher_test::reverse_launcher;
};

namespace {
using namespace tt;
using typemesh::device;
using typemesh::group;
using typemesh::launch;
using typemesh::reduce_op;

// The value device d contributes at index i.
template <class T>
T input(int d, std::size_t i, int salt) {
  return static_cast<T>(((d * 131 + static_cast<int>(i) * 7 + salt * 17) % 23) - 11);
}

// Splits the devices into groups of random sizes and random member order.
std::vector<group> random_groups(int devices, std::mt19937& rng) {
  std::vector<int> order(devices);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<group> groups;
  for (std::size_t at = 0; at < order.size();) {
    std::size_t n = 1 + rng() % (order.size() - at);
    groups.push_back({{order.begin() + at, order.begin() + at + n}, "random"});
    at += n;
  }
  return groups;
}

const group& group_of(const std::vector<group>& groups, int d) {
  for (const auto& g : groups)
    if (g.index_of(d) >= 0) return g;
  throw std::logic_error("no group");
}

template <class T>
T reduce(reduce_op op, T a, T b) {
  switch (op) {
    case reduce_op::sum: return a + b;
    case reduce_op::max: return std::max(a, b);
    case reduce_op::min: return std::min(a, b);
    case reduce_op::prod: return a * b;
  }
  return a;
}

template <class T>
void check_allreduce(reduce_op op, std::mt19937& rng) {
  const int devices = 1 + rng() % 8;
  const std::size_t n = rng() % 40;
  auto groups = random_groups(devices, rng);
  auto results = launch(devices, [&](device& dev) {
    std::vector<T> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = input<T>(dev.id(), i, 1);
    dev.allreduce<T>(group_of(groups, dev.id()), in, out, op);
    return out;
  });
  for (int d = 0; d < devices; ++d) {
    const group& g = group_of(groups, d);
    for (std::size_t i = 0; i < n; ++i) {
      T expected = input<T>(g.devices[0], i, 1);
      for (int m = 1; m < g.size(); ++m) expected = reduce(op, expected, input<T>(g.devices[m], i, 1));
      ASSERT_EQ(results[d][i], expected) << "device " << d << " element " << i;
    }
  }
}

TEST(Collectives, AllreduceMatchesSerialOnRandomGroups) {
  std::mt19937 rng(1);
  for (int rep = 0; rep < 20; ++rep) {
    check_allreduce<float>(reduce_op::sum, rng);
    check_allreduce<double>(reduce_op::max, rng);
    check_allreduce<std::int32_t>(reduce_op::min, rng);
    check_allreduce<std::int64_t>(reduce_op::prod, rng);
  }
}

TEST(Collectives, AllreduceInPlaceGivesBitIdenticalResultsOnAllMembers) {
  auto results = launch(8, [](device& dev) {
    std::vector<float> v(1000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1.0f / (1 + dev.id() + i % 13) + 1e-7f * i;
    dev.allreduce<float>(group{{3, 1, 4, 0, 5, 2, 7, 6}, "all"}, v);
    return v;
  });
  for (int d = 1; d < 8; ++d) EXPECT_EQ(results[d], results[0]);
}

TEST(Collectives, AllgatherReduceScatterAlltoallBroadcastMatchSerial) {
  std::mt19937 rng(2);
  for (int rep = 0; rep < 30; ++rep) {
    const int devices = 1 + rng() % 8;
    const std::size_t n = rng() % 9;
    auto groups = random_groups(devices, rng);
    std::vector<int> roots;
    for (const auto& g : groups) roots.push_back(rng() % g.size());
    struct out {
      std::vector<float> gathered, scattered, exchanged, broadcast;
      typemesh::traffic traffic;
    };
    auto results = launch(devices, [&](device& dev) {
      const group& g = group_of(groups, dev.id());
      const int root = roots[&g - groups.data()];
      const std::size_t gs = g.size();
      out o;
      std::vector<float> mine(n), blocks(gs * n);
      for (std::size_t i = 0; i < n; ++i) mine[i] = input<float>(dev.id(), i, 2);
      for (std::size_t i = 0; i < gs * n; ++i) blocks[i] = input<float>(dev.id(), i, 3);
      o.gathered.resize(gs * n);
      dev.allgather<float>(g, mine, o.gathered);
      o.scattered.resize(n);
      dev.reduce_scatter<float>(g, blocks, o.scattered);
      o.exchanged.resize(gs * n);
      dev.alltoall<float>(g, blocks, o.exchanged);
      o.broadcast = mine;
      dev.broadcast<float>(g, o.broadcast, root);
      o.traffic = dev.traffic();
      return o;
    });
    for (int d = 0; d < devices; ++d) {
      const group& g = group_of(groups, d);
      const std::size_t gs = g.size();
      const int me = g.index_of(d), root = roots[&g - groups.data()];
      for (std::size_t j = 0; j < gs; ++j)
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(results[d].gathered[j * n + i], input<float>(g.devices[j], i, 2));
          ASSERT_EQ(results[d].exchanged[j * n + i], input<float>(g.devices[j], me * n + i, 3));
        }
      for (std::size_t i = 0; i < n; ++i) {
        float sum = 0;
        for (std::size_t j = 0; j < gs; ++j) sum += input<float>(g.devices[j], me * n + i, 3);
        ASSERT_EQ(results[d].scattered[i], sum);
        ASSERT_EQ(results[d].broadcast[i], input<float>(g.devices[root], i, 2));
      }
      // Bytes counted are those that cross: what each member lacks.
      const auto& t = results[d].traffic;
      const std::uint64_t peers = gs - 1, bytes = n * sizeof(float);
      EXPECT_EQ(t[typemesh::op_kind::allgather].bytes_received, peers * bytes);
      EXPECT_EQ(t[typemesh::op_kind::allgather].bytes_sent, peers * bytes);
      EXPECT_EQ(t[typemesh::op_kind::alltoall].bytes_received, peers * bytes);
      EXPECT_EQ(t[typemesh::op_kind::reduce_scatter].bytes_received, peers * bytes);
      EXPECT_EQ(t[typemesh::op_kind::broadcast].bytes_received, me == root ? 0 : bytes);
      EXPECT_EQ(t[typemesh::op_kind::broadcast].bytes_sent, me == root ? peers * bytes : 0);
      EXPECT_EQ(t.calls(), 4u);
    }
  }
}

// A host collective whose input is at most host_world::small_bytes copies it
// into the group's meeting place and meets once; a larger one is read where
// it is. Around that size, both give the serial member-order result, bit for
// bit (the sums are inexact in float, so the order shows).
TEST(Collectives, SmallAndLargeInputsGiveTheSerialMemberOrderResult) {
  const group g{{3, 1, 4, 0, 5, 2, 7, 6}, "all"};
  constexpr std::size_t small = typemesh::host_world::small_bytes / sizeof(float);
  auto value = [](int d, std::size_t i) { return 1.0f / static_cast<float>(1 + d + i % 13) + 1e-7f * static_cast<float>(i); };
  for (std::size_t n : {std::size_t{1}, small / 8, small / 8 + 1, small - 1, small, small + 1, 3 * small}) {
    SCOPED_TRACE(testing::Message() << n << " elements");
    struct out {
      std::vector<float> reduced, gathered, exchanged, scattered, broadcast;
    };
    auto results = launch(8, [&](device& dev) {
      out o;
      std::vector<float> mine(n), blocks(8 * n);
      for (std::size_t i = 0; i < n; ++i) mine[i] = value(dev.id(), i);
      for (std::size_t i = 0; i < 8 * n; ++i) blocks[i] = value(dev.id(), i);
      o.reduced.resize(n);
      dev.allreduce<float>(g, mine, o.reduced);
      o.gathered.resize(8 * n);
      dev.allgather<float>(g, mine, o.gathered);
      o.exchanged.resize(8 * n);
      dev.alltoall<float>(g, blocks, o.exchanged);
      o.scattered.resize(n);
      dev.reduce_scatter<float>(g, blocks, o.scattered);
      o.broadcast = mine;
      dev.broadcast<float>(g, o.broadcast, 5);
      return o;
    });
    for (int d = 0; d < 8; ++d) {
      const int me = g.index_of(d);
      for (std::size_t i = 0; i < n; ++i) {
        float sum = value(g.devices[0], i), block_sum = value(g.devices[0], me * n + i);
        for (int m = 1; m < 8; ++m) sum += value(g.devices[m], i), block_sum += value(g.devices[m], me * n + i);
        ASSERT_EQ(results[d].reduced[i], sum) << "device " << d << " element " << i;
        ASSERT_EQ(results[d].scattered[i], block_sum) << "device " << d << " element " << i;
        ASSERT_EQ(results[d].broadcast[i], value(g.devices[5], i));
        for (int j = 0; j < 8; ++j) {
          ASSERT_EQ(results[d].gathered[j * n + i], value(g.devices[j], i));
          ASSERT_EQ(results[d].exchanged[j * n + i], value(g.devices[j], me * n + i));
        }
      }
    }
  }
}

// Small collectives back to back on overlapping groups, with new values each
// time: a member that runs ahead into the next one never overwrites a copy
// its peers are still reading.
TEST(Collectives, SmallCollectivesBackToBackKeepTheirInputsApart) {
  launch(8, [](device& dev) {
    const group all{typemesh::devices::all(8), "all"};
    const group pair{{dev.id() / 2 * 2, dev.id() / 2 * 2 + 1}, "pair"};
    for (int rep = 0; rep < 300; ++rep) {
      const group& g = rep % 3 == 2 ? pair : all;
      std::vector<std::int64_t> mine(16), sum(16), gathered(16 * g.size());
      for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = rep * 1000 + dev.id() * 16 + static_cast<int>(i);
      dev.allreduce<std::int64_t>(g, mine, sum);
      dev.allgather<std::int64_t>(g, mine, gathered);
      for (std::size_t i = 0; i < mine.size(); ++i) {
        std::int64_t expected = 0;
        for (int m = 0; m < g.size(); ++m) {
          const std::int64_t theirs = rep * 1000 + g.devices[m] * 16 + static_cast<int>(i);
          expected += theirs;
          ASSERT_EQ(gathered[m * mine.size() + i], theirs) << "rep " << rep;
        }
        ASSERT_EQ(sum[i], expected) << "rep " << rep;
      }
      if (rep % 7 == 0) dev.barrier(all);
    }
  });
}

TEST(Collectives, AllreduceCountsAReduceScatterAndAnAllgather) {
  auto t = launch(4, [](device& dev) {
    std::vector<float> v(1000, 1.0f);
    dev.allreduce<float>(group{{0, 1, 2, 3}, "all"}, v);
    return dev.traffic()[typemesh::op_kind::allreduce];
  });
  for (const auto& k : t) {
    EXPECT_EQ(k.bytes_received, 2u * 3 * 250 * sizeof(float));  // 2 (g-1)/g of the buffer
    EXPECT_EQ(k.bytes_sent, 2u * 3 * 250 * sizeof(float));
  }
}

TEST(Collectives, SendRecvAroundARingAndBarrier) {
  auto got = launch(5, [](device& dev) {
    const int next = (dev.id() + 1) % 5, prev = (dev.id() + 4) % 5;
    std::vector<std::int64_t> out{dev.id(), dev.id() * 10}, in(2);
    dev.send<std::int64_t>(next, out, /*tag=*/3);
    dev.recv<std::int64_t>(prev, in, /*tag=*/3);
    dev.barrier(group{{0, 1, 2, 3, 4}, "all"});
    return std::make_pair(in, dev.traffic()[typemesh::op_kind::recv].bytes_received);
  });
  for (int d = 0; d < 5; ++d) {
    int prev = (d + 4) % 5;
    EXPECT_EQ(got[d].first, (std::vector<std::int64_t>{prev, prev * 10}));
    EXPECT_EQ(got[d].second, 16u);
  }
}

TEST(Collectives, MessagesWithDifferentTagsDoNotMix) {
  auto got = launch(2, [](device& dev) {
    std::vector<float> a{1}, b{2}, x(1), y(1);
    if (dev.id() == 0) {
      dev.send<float>(1, a, 1);
      dev.send<float>(1, b, 2);
      return 0.0f;
    }
    dev.recv<float>(0, y, 2);
    dev.recv<float>(0, x, 1);
    return x[0] * 10 + y[0];
  });
  EXPECT_EQ(got[1], 12.0f);
}

// --- Failures: clear errors, never a hang ----------------------------------

using namespace std::chrono_literals;

TEST(Failures, AMissingMemberTimesOutNamingCollectiveGroupAndDevice) {
  expect_error<typemesh::timeout_error>(
      [] {
        launch({.devices = 4, .timeout = 200ms}, [](device& dev) {
          if (dev.id() == 3) {  // never joins, and is still running when the others give up
            std::this_thread::sleep_for(400ms);
            return;
          }
          std::vector<float> v(4, 1.0f);
          dev.allreduce<float>(group{{0, 1, 2, 3}, "mesh 'm' along {a0}"}, v);
        });
      },
      {"allreduce over group [0 1 2 3]", "mesh 'm' along {a0}", "timed out after 200 ms", "devices [3] never arrived"});
}

TEST(Failures, AnExceptionOnOneDeviceStopsAllAndIsRethrown) {
  auto start = std::chrono::steady_clock::now();
  try {
    launch(8, [](device& dev) {
      if (dev.id() == 5) throw std::runtime_error("loss is NaN on device 5");
      std::vector<float> v(4, 1.0f);
      dev.allreduce<float>(group{{0, 1, 2, 3, 4, 5, 6, 7}, "all"}, v);
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "loss is NaN on device 5");
  }
  // Default timeout is a minute: stopping must not wait for it.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(Failures, StoppedDevicesSayWhoFailed) {
  // Device 1 fails while device 0 waits in a recv; device 0's own error
  // would name device 1.
  std::string seen;
  try {
    launch(2, [&](device& dev) {
      if (dev.id() == 1) throw typemesh::shape_error("bad input on device 1");
      std::vector<float> v(1);
      try {
        dev.recv<float>(1, v);
      } catch (const typemesh::aborted_error& e) {
        seen = e.what();
        throw;
      }
    });
  } catch (const typemesh::shape_error&) {
  }
  EXPECT_NE(seen.find("device 0 stopped in recv from device 1"), std::string::npos) << seen;
  EXPECT_NE(seen.find("device 1 failed: typemesh: bad input on device 1"), std::string::npos) << seen;
}

TEST(Failures, MembersCallingDifferentCollectivesIsAnError) {
  expect_error<typemesh::collective_error>(
      [] {
        launch(2, [](device& dev) {
          std::vector<float> v(4, 1.0f), out(8);
          group g{{0, 1}, "pair"};
          if (dev.id() == 0) dev.allreduce<float>(g, v);
          else dev.allgather<float>(g, v, out);
        });
      },
      {"disagree", "device 0 calls allreduce of 4 f32 (sum)", "device 1 calls allgather of 4 f32"});
}

TEST(Failures, BadGroupsAndBuffers) {
  launch(4, [](device& dev) {
    std::vector<float> v(4), w(3), big(16);
    expect_error<typemesh::device_error>([&] { dev.allreduce<float>(group{{0, 1, 9}, "g"}, v); },
                                         {"device 9 does not exist", "0 to 3"});
    expect_error<typemesh::device_error>([&] { dev.allreduce<float>(group{{0, 1, 1, 2, 3}, "g"}, v); },
                                         {"device 1 appears twice"});
    if (dev.id() == 3) {
      expect_error<typemesh::device_error>([&] { dev.allreduce<float>(group{{0, 1}, "pair"}, v); },
                                           {"device 3 is not a member"});
    }
    group all{{0, 1, 2, 3}, "all"};
    expect_error<typemesh::shape_error>([&] { dev.allreduce<float>(all, v, w); }, {"input of 4", "output of 3"});
    expect_error<typemesh::shape_error>([&] { dev.allgather<float>(all, v, w); }, {"4 members of 4 need 16"});
    expect_error<typemesh::shape_error>([&] { dev.reduce_scatter<float>(all, v, w); }, {"4 blocks of 3 need 12"});
    expect_error<typemesh::shape_error>([&] { dev.alltoall<float>(all, w, w); }, {"do not split into 4"});
    expect_error<typemesh::shape_error>([&] { dev.allgather<float>(all, std::span<const float>(big).first(4), big); },
                                        {"overlap"});
    expect_error<typemesh::device_error>([&] { dev.broadcast<float>(all, v, 4); }, {"root 4"});
    expect_error<typemesh::device_error>([&] { dev.send<float>(dev.id(), v); }, {"does not message itself"});
    expect_error<typemesh::device_error>([&] { dev.recv<float>(7, v); }, {"device 7"});
  });
}

TEST(Failures, RecvOfTheWrongSize) {
  expect_error<typemesh::collective_error>(
      [] {
        launch(2, [](device& dev) {
          std::vector<float> v(3), w(5);
          if (dev.id() == 0) dev.send<float>(1, v, 4);
          else dev.recv<float>(0, w, 4);
        });
      },
      {"device 1 expects 5 f32 from device 0 (tag 4)", "holds 3 f32"});
}

TEST(Failures, RecvThatNeverArrivesTimesOut) {
  expect_error<typemesh::timeout_error>(
      [] {
        launch({.devices = 2, .timeout = 100ms}, [](device& dev) {
          std::vector<float> v(1);
          dev.recv<float>(1 - dev.id(), v, 9);  // each waits for the other
        });
      },
      {"from device", "(tag 9) timed out after 100 ms"});
}

TEST(Failures, NoDeviceOutsideLaunchAndNoEmptyRun) {
  expect_error<typemesh::device_error>([] { typemesh::this_device(); }, {"inside typemesh::launch"});
  expect_error<typemesh::device_error>([] { launch(0, [] {}); }, {"at least one device"});
}

TEST(Launch, ResultsAreIndexedByDevice) {
  auto ids = launch(6, [](device& dev) { return dev.id() * dev.count(); });
  EXPECT_EQ(ids, (std::vector<int>{0, 6, 12, 18, 24, 30}));
  auto same = launch(3, [] { return typemesh::this_device().id(); });
  EXPECT_EQ(same, (std::vector<int>{0, 1, 2}));
}

// --- Giving up safely: no member reads a buffer that is gone -----------------

// Device 3 arrives after the others have timed out and freed their buffers.
// It must fail (stopped or timed out), never complete the meeting and read
// them (a use-after-free found with ASan, a crash in release builds).
TEST(Abort, ALateArrivalFailsInsteadOfReadingFreedBuffers) {
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::string> seen(4);
    expect_error<typemesh::timeout_error>(
        [&] {
          launch({.devices = 4, .timeout = 200ms}, [&](device& dev) {
            if (dev.id() == 3) std::this_thread::sleep_for(230ms);
            std::vector<float> v(64 * 1024, 1.0f);  // 256 KiB
            try {
              dev.allreduce<float>(group{{0, 1, 2, 3}, "all"}, v);
              seen[dev.id()] = "completed";
            } catch (const typemesh::aborted_error& e) {
              seen[dev.id()] = "aborted";
              throw;
            } catch (const typemesh::timeout_error& e) {
              seen[dev.id()] = "timeout";
              throw;
            }
          });
        },
        {"allreduce over group [0 1 2 3]", "timed out after 200 ms", "devices [3] never arrived"});
    // Whoever gives up first times out; the rest stop or time out; nobody completes.
    EXPECT_EQ(std::count(seen.begin(), seen.begin() + 3, "timeout") >= 1, true);
    for (int d = 0; d < 4; ++d) EXPECT_TRUE(seen[d] == "aborted" || seen[d] == "timeout") << d << ": " << seen[d];
  }
}

// A device fails while the members of another group are inside their
// allreduce: each member stops, but only once no peer reads its buffers.
TEST(Abort, AFailureElsewhereStopsAGroupMidCollectiveSafely) {
  for (int rep = 0; rep < 6; ++rep) {
    std::vector<int> completed(3, 0);
    try {
      launch(3, [&](device& dev) {
        if (dev.id() == 2) {
          std::this_thread::sleep_for(std::chrono::microseconds(200 * rep));
          throw std::runtime_error("device 2 gives up");
        }
        for (int i = 0; i < 50; ++i) {
          std::vector<double> v(1 << 15, dev.id() + 1.0);
          dev.allreduce<double>(group{{0, 1}, "pair"}, v);
          ASSERT_EQ(v[12345], 3.0);
          ++completed[dev.id()];
        }
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "device 2 gives up");
    }
  }
}

TEST(Abort, ALaterCollectiveOnAGroupThatGaveUpFailsAtOnce) {
  launch({.devices = 2, .timeout = 100ms}, [](device& dev) {
    std::vector<float> v(8, 1.0f);
    group pair{{0, 1}, "pair"};
    if (dev.id() == 1) {
      std::this_thread::sleep_for(250ms);
    } else {
      expect_error<typemesh::timeout_error>([&] { dev.allreduce<float>(pair, v); }, {"devices [1] never arrived"});
    }
    // Device 1 arrives late; device 0 tries again: both are refused, neither reads the other.
    expect_error<typemesh::timeout_error>([&] { dev.allreduce<float>(pair, v); },
                                          {"cannot complete: the group gave up", "timed out after 100 ms"});
  });
}

// --- A device that has returned is reported at once --------------------------

TEST(Finished, ACollectiveWithADeviceThatHasReturnedFailsAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  expect_error<typemesh::collective_error>(
      [] {
        launch(4, [](device& dev) {  // the default timeout: a minute
          if (dev.id() == 3) return;
          std::vector<float> v(16, 1.0f);
          dev.allreduce<float>(group{{0, 1, 2, 3}, "all"}, v);
        });
      },
      {"allreduce over group [0 1 2 3] (all)", "device 3 has already finished"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Finished, ARecvFromADeviceThatHasReturnedFailsAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  expect_error<typemesh::collective_error>(
      [] {
        launch(2, [](device& dev) {
          std::vector<float> v(4);
          if (dev.id() == 0) dev.send<float>(1, v, 5);  // tag 5, not the 6 device 1 waits for
          else dev.recv<float>(0, v, 6);
        });
      },
      {"recv on device 1 from device 0 (tag 6)", "device 0 has already finished the program without sending it"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Finished, AMessageSentJustBeforeReturningIsStillReceived) {
  for (int rep = 0; rep < 20; ++rep) {
    auto got = launch(2, [](device& dev) {
      std::vector<int> v{7};
      if (dev.id() == 0) dev.send<int>(1, v, 1);
      else dev.recv<int>(0, v, 1);
      return v[0];
    });
    EXPECT_EQ(got[1], 7);
  }
}

// --- Messages nobody receives ---------------------------------------------------

TEST(Messages, AMessageNobodyReceivesIsReportedAtTheEnd) {
  expect_error<typemesh::collective_error>(
      [] {
        launch(3, [](device& dev) {
          std::vector<float> v(3);
          if (dev.id() == 0) dev.send<float>(2, v, 4);
        });
      },
      {"ended with messages nobody received", "device 0 sent device 2 3 f32 (tag 4), which device 2 never received"});
}

TEST(Messages, NegativeTagsAreRefused) {
  launch(2, [](device& dev) {
    std::vector<float> v(1);
    expect_error<typemesh::device_error>([&] { dev.send<float>(1 - dev.id(), v, -1); }, {"tag -1 is negative"});
    expect_error<typemesh::device_error>([&] { dev.recv<float>(1 - dev.id(), v, -3); }, {"tag -3 is negative"});
  });
}

// A labelled message is taken only by the operation it belongs to.
TEST(Messages, ALabelledMessageIsNeverTakenByAnotherOperation) {
  auto got = launch(2, [](device& dev) {
    std::vector<float> a{1, 2}, b{3, 4}, in(2);
    if (dev.id() == 0) {
      dev.send_labelled<float>("first op", 1, a);
      dev.send_labelled<float>("second op", 1, b);
      return in;
    }
    dev.recv_labelled<float>("first op", 0, in);
    std::vector<float> second(2);
    dev.recv_labelled<float>("second op", 0, second);
    in.insert(in.end(), second.begin(), second.end());
    return in;
  });
  EXPECT_EQ(got[1], (std::vector<float>{1, 2, 3, 4}));

  // Device 1 skips "first op": its "second op" finds first op's message and says so.
  expect_error<typemesh::collective_error>(
      [] {
        launch(2, [](device& dev) {
          std::vector<float> a{1, 2}, in(2);
          if (dev.id() == 0) {
            dev.send_labelled<float>("first op", 1, a);
            dev.send_labelled<float>("second op", 1, a);
          } else {
            dev.recv_labelled<float>("second op", 0, in);
          }
        });
      },
      {"device 1 expects its labelled message 0 from device 0 to belong to second op",
       "device 0's message 0 belongs to first op", "skipped a transfer"});

  // A labelled message left over names its operation.
  expect_error<typemesh::collective_error>(
      [] {
        launch(2, [](device& dev) {
          std::vector<double> a(5);
          if (dev.id() == 0) dev.send_labelled<double>("the only op", 1, a);
        });
      },
      {"device 0 sent device 1 5 f64 of the only op (its labelled message 0 to device 1)", "never received"});
}

// A label keeps its fields and its text (cut to text_bytes) through encode
// and decode, and descriptions a byte apart, or one a prefix of another,
// get different identities.
TEST(Messages, ALabelKeepsItsFieldsAndIdentitiesTellDescriptionsApart) {
  using L = typemesh::detail::message_label;
  const std::string text(300, 'x');
  const auto bytes = L::encode(7, 3, 1024, typemesh::dtype::f64, text);
  const auto label = L::decode(bytes.data());
  EXPECT_EQ(label.identity, 7u);
  EXPECT_EQ(label.sequence, 3u);
  EXPECT_EQ(label.count, 1024u);
  EXPECT_EQ(label.type, typemesh::dtype::f64);
  EXPECT_EQ(label.what, text.substr(0, L::text_bytes));
  EXPECT_TRUE(L::described(bytes.data()));
  EXPECT_EQ(L::size_at(bytes.data()), L::bytes);

  std::string description = "replace_mesh from mesh 'a' [4] on devices [0 1 2 3] to mesh 'b' [2 2] on devices ";
  while (description.size() < 200) description += std::to_string(description.size()) + " ";
  std::set<std::uint64_t> identities;
  std::size_t made = 0;
  for (std::size_t i = 0; i < description.size(); ++i) {
    std::string changed = description;
    changed[i] ^= 1;
    identities.insert(L::identity_of(changed));
    identities.insert(L::identity_of(std::string_view(description).substr(0, i)));
    made += 2;
  }
  identities.insert(L::identity_of(description));
  EXPECT_EQ(identities.size(), made + 1);
}

// A device remembers the identities of its last descriptions
// (identity_memo): every answer is the description's own hash, whether it
// was remembered, forgotten, or never seen, and a description that differs
// from a remembered one only in its last character or its length is not
// taken for it.
TEST(Messages, RememberedIdentitiesAreTheDescriptionsOwn) {
  using L = typemesh::detail::message_label;
  std::vector<std::string> descriptions{"", "a", "ab", "ba"};
  for (int i = 0; i < 40; ++i) descriptions.push_back("relayout of mesh 'm' [8], dims [batch=" + std::to_string(i) + "]");
  descriptions.push_back(descriptions.back() + " ");
  std::string last = descriptions.back();
  last.back() = '!';
  descriptions.push_back(last);
  typemesh::detail::identity_memo memo;
  // In order (each new), then again: more than the memo keeps, so early
  // ones come back after being forgotten; then a few repeated closely.
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::string& d : descriptions) {
      EXPECT_EQ(memo(d), L::identity_of(d)) << "'" << d << "'";
    }
  }
  for (int i = 0; i < 200; ++i) {
    const std::string& d = descriptions[static_cast<std::size_t>(i * 7) % 5 + descriptions.size() - 5];
    EXPECT_EQ(memo(d), L::identity_of(d)) << "'" << d << "'";
  }
}

// On host threads a transfer's pairs move through one exchange: each sender
// shows its source once, each receiver reads the senders' sources in place,
// in the order they are shown, and a sender returns only once nobody reads
// its source, so it may change it right after.
TEST(Exchanges, ASourceIsReadInPlaceUntilItsReadersAreDone) {
  using namespace std::chrono_literals;
  const std::vector<int> members{0, 1, 2};
  for (auto late : {0ms, 150ms}) {  // 150 ms: the senders copy their sources out first
    SCOPED_TRACE(testing::Message() << "the receiver starts " << late.count() << " ms late");
    auto got = launch(3, [&](device& dev) {
      EXPECT_TRUE(dev.exchanges());
      std::vector<float> mine{float(dev.id()), float(dev.id()) + 10, 99};
      std::vector<float> from(4);
      if (dev.id() == 2) {  // reads two of each sender's three
        std::this_thread::sleep_for(late);
        const std::pair<int, std::size_t> senders[]{{0, 2}, {1, 2}};
        dev.exchange_shared<float>("the op", members, {}, {}, {}, senders, [&](int sender, const float* theirs) {
          std::this_thread::sleep_for(20ms);  // the senders wait meanwhile
          from[2 * sender] = theirs[0];
          from[2 * sender + 1] = theirs[1];
        });
        EXPECT_EQ(dev.traffic().bytes_received(), 2 * 2 * sizeof(float));
        return from;
      }
      const int readers[]{2};
      const std::size_t counts[]{2};
      dev.exchange_shared<float>("the op", members, std::span<const float>(mine), readers, counts, {},
                                 [](int, const float*) { ADD_FAILURE() << "a sender reads nothing"; });
      std::fill(mine.begin(), mine.end(), -1.0f);
      EXPECT_EQ(dev.traffic().bytes_sent(), 2 * sizeof(float));
      return std::vector<float>{};
    });
    EXPECT_EQ(got[2], (std::vector<float>{0, 10, 1, 11}));
  }
}

// A device that skipped a transfer meets the next one's exchange: an error
// naming both, whichever device comes first.
TEST(Exchanges, ASkippedExchangeIsNamedNotTakenByTheNext) {
  const std::vector<int> members{0, 1};
  expect_error<typemesh::collective_error>(
      [&] {
        launch(2, [&](device& dev) {
          std::vector<float> a{1, 2}, in(2);
          const int readers[]{1};
          const std::size_t counts[]{2};
          const std::pair<int, std::size_t> senders[]{{0, 2}};
          auto read = [&](int, const float* theirs) { std::copy(theirs, theirs + 2, in.begin()); };
          if (dev.id() == 0) {
            dev.exchange_shared<float>("first op", members, std::span<const float>(a), readers, counts, {}, read);
            dev.exchange_shared<float>("second op", members, std::span<const float>(a), readers, counts, {}, read);
          } else {
            dev.exchange_shared<float>("second op", members, {}, {}, {}, senders, read);
          }
        });
      },
      {"exchange 0 with devices [0 1] to belong to", "first op", "second op", "skipped a transfer"});
}

// A device that fails stops an exchange its peers are in: a sender whose
// source is being read waits for that reading, then gives up with the rest.
TEST(Exchanges, AFailingDeviceStopsTheExchange) {
  using namespace std::chrono_literals;
  const std::vector<int> members{0, 1, 2};
  const auto start = std::chrono::steady_clock::now();
  expect_error<typemesh::device_error>(
      [&] {
        launch(3, [&](device& dev) {
          const std::vector<float> mine(4, float(dev.id()));
          if (dev.id() == 2) {
            std::this_thread::sleep_for(20ms);
            throw typemesh::device_error("device 2 gave up");
          }
          const int readers[]{1 - dev.id()};
          const std::size_t counts[]{4};
          const std::pair<int, std::size_t> senders[]{{1 - dev.id(), 4}, {2, 4}};  // device 2 never shows its source
          dev.exchange_shared<float>("the op", members, std::span<const float>(mine), readers, counts, senders,
                                     [&](int, const float*) { std::this_thread::sleep_for(dev.id() == 0 ? 60ms : 0ms); });
        });
      },
      {"device 2 gave up"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Members out of order, a device outside them, or counts that do not match
// the readers are refused before anything is shown.
TEST(Exchanges, BadMembersAndCountsAreRefused) {
  const int one_reader[]{1};
  const std::size_t one_count[]{2}, two_counts[]{2, 2};
  const std::vector<float> a{1, 2};
  auto exchange = [&](std::vector<int> members, std::span<const std::size_t> counts) {
    launch(2, [&](device& dev) {
      if (dev.id() == 0) {
        dev.exchange_shared<float>("the op", members, std::span<const float>(a), one_reader, counts, {},
                                   [](int, const float*) {});
      }
    });
  };
  expect_error<typemesh::device_error>([&] { exchange({1, 0}, one_count); },
                                       {"device 0", "the members of the exchange of the op, [1 0]", "ascending"});
  expect_error<typemesh::device_error>([&] { exchange({0}, one_count); },
                                       {"device 1 takes part in the exchange of the op", "not among its members [0]"});
  expect_error<typemesh::device_error>([&] { exchange({0, 1}, two_counts); }, {"names 1 readers but 2 counts"});
}

// A source nobody reads is copied out and reported at the end like a message;
// a sender that never comes fails its receiver at once, or after the timeout.
TEST(Exchanges, MissingReadersAndSendersAreNamed) {
  using namespace std::chrono_literals;
  const std::vector<int> members{0, 1};
  const int readers[]{1};
  const std::size_t counts[]{5};
  const std::pair<int, std::size_t> senders[]{{0, 5}};
  expect_error<typemesh::collective_error>(
      [&] {
        launch(2, [&](device& dev) {
          std::vector<double> a(5);
          if (dev.id() == 0) {
            dev.exchange_shared<double>("the only op", members, std::span<const double>(a), readers, counts, {},
                                        [](int, const double*) {});
          }
        });
      },
      {"device 0 sent device 1 5 f64 of the only op (its exchange 0 with devices [0 1])", "never received"});
  const auto start = std::chrono::steady_clock::now();
  expect_error<typemesh::collective_error>(
      [&] {
        launch(2, [&](device& dev) {
          if (dev.id() == 1) dev.exchange_shared<double>("the op", members, {}, {}, {}, senders, [](int, const double*) {});
        });
      },
      {"device 1 waits for devices [0] to show their sources", "device 0 has already finished"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  expect_error<typemesh::timeout_error>(
      [&] {
        launch({.devices = 2, .timeout = 150ms}, [&](device& dev) {
          if (dev.id() == 1) dev.exchange_shared<double>("the op", members, {}, {}, {}, senders, [](int, const double*) {});
          else std::this_thread::sleep_for(400ms);  // still running, never shows its source
        });
      },
      {"device 1 waits for devices [0] to show their sources", "timed out after 150 ms"});
}

// --- Launch cleans up when a thread cannot start ----------------------------------

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TYPEMESH_TEST_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TYPEMESH_TEST_UNDER_SANITIZER 1
#endif
#endif

TEST(Launch, AThreadThatCannotStartIsAnErrorNotATermination) {
#ifdef TYPEMESH_TEST_UNDER_SANITIZER
  GTEST_SKIP() << "sanitizers reserve address space, so the limit below cannot be set";
#else
  // Room for a few thread stacks (8 MiB each by default) but not for 64.
  std::ifstream status("/proc/self/status");
  std::string line;
  long vm_kib = -1;
  while (std::getline(status, line))
    if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stol(line.substr(7));
  ASSERT_GT(vm_kib, 0);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old), 0);
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(vm_kib + 64 * 1024) * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  std::string what;
  std::atomic<int> started{0};
  try {
    launch(64, [&](device& dev) {
      ++started;
      std::vector<int> all(64);
      std::iota(all.begin(), all.end(), 0);
      dev.barrier(group{all, "all"});  // waits for devices that never start: the failure stops it
    });
  } catch (const typemesh::device_error& e) {
    what = e.what();
  } catch (const std::exception& e) {
    what = std::string("wrong exception: ") + e.what();
  }
  setrlimit(RLIMIT_AS, &old);
  EXPECT_NE(what.find("could not start the thread of device"), std::string::npos) << what;
  EXPECT_NE(what.find("of 64"), std::string::npos) << what;
  EXPECT_LT(started.load(), 64);
#endif
}

// --- Launchers: which one runs a launch ---------------------------------------

static_assert(typemesh::launcher<typemesh::host_launcher>);
static_assert(typemesh::launcher<launcher_test::reverse_launcher>);
static_assert(!typemesh::launcher<launcher_test::nameless_launcher>);
static_assert(!typemesh::launcher<int>);

// Sets an environment variable for one test and puts the old value back.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~scoped_env() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

auto ids_times_ten(device& dev) { return dev.id() * 10; }

TEST(Launchers, TheProgramHasHostAndItsOwnLauncher) {
  EXPECT_EQ(typemesh::launcher_names(), (std::vector<std::string_view>{"host", "reverse"}));
  EXPECT_TRUE(typemesh::has_launcher("reverse"));
  EXPECT_FALSE(typemesh::has_launcher("mpi"));
}

TEST(Launchers, ChosenByOption) {
  scoped_env clear("TYPEMESH_BACKEND", nullptr);
  scoped_env undetected("TYPEMESH_TEST_DETECT_REVERSE", nullptr);
  EXPECT_EQ(typemesh::chosen_launcher({.devices = 4, .backend = "reverse"}), "reverse");
  const auto ids = launch({.devices = 4, .backend = "reverse"}, ids_times_ten);
  EXPECT_EQ(ids, (std::vector<int>{0, 10, 20, 30}));
  EXPECT_EQ(launcher_test::reverse_runs, (std::vector<int>{3, 2, 1, 0}));

  // Host runs them at once: a barrier of all four completes.
  launcher_test::reverse_runs.clear();
  EXPECT_EQ(typemesh::chosen_launcher({.devices = 4, .backend = "host"}), "host");
  const auto host_ids = launch({.devices = 4, .backend = "host"}, [](device& dev) {
    dev.barrier(group{{0, 1, 2, 3}, "all"});
    return dev.id() * 10;
  });
  EXPECT_EQ(host_ids, (std::vector<int>{0, 10, 20, 30}));
  EXPECT_TRUE(launcher_test::reverse_runs.empty());
}

TEST(Launchers, ChosenByEnvironmentUnlessTheOptionSaysOtherwise) {
  scoped_env undetected("TYPEMESH_TEST_DETECT_REVERSE", nullptr);
  scoped_env reverse("TYPEMESH_BACKEND", "reverse");
  EXPECT_EQ(typemesh::chosen_launcher({.devices = 3}), "reverse");
  launch(3, [] {});
  EXPECT_EQ(launcher_test::reverse_runs, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(typemesh::chosen_launcher({.devices = 3, .backend = "host"}), "host");
  {
    scoped_env empty("TYPEMESH_BACKEND", "");
    EXPECT_EQ(typemesh::chosen_launcher({.devices = 3}), "host");
  }
}

TEST(Launchers, AutomaticTakesTheFirstDetectedElseHost) {
  scoped_env clear("TYPEMESH_BACKEND", nullptr);
  {
    scoped_env undetected("TYPEMESH_TEST_DETECT_REVERSE", nullptr);
    EXPECT_EQ(typemesh::chosen_launcher({.devices = 2}), "host");
    EXPECT_EQ(typemesh::devices_in_this_process({.devices = 2}), 2);
  }
  scoped_env detected("TYPEMESH_TEST_DETECT_REVERSE", "1");
  EXPECT_EQ(typemesh::chosen_launcher({.devices = 2}), "reverse");
  launcher_test::reverse_runs.clear();
  const auto ids = launch(2, ids_times_ten);
  EXPECT_EQ(ids, (std::vector<int>{0, 10}));
  EXPECT_EQ(launcher_test::reverse_runs, (std::vector<int>{1, 0}));
  // A name still wins over detection.
  EXPECT_EQ(typemesh::chosen_launcher({.devices = 2, .backend = "host"}), "host");
}

TEST(Launchers, UnknownNamesListTheLaunchersThereAre) {
  scoped_env clear("TYPEMESH_BACKEND", nullptr);
  bool ran = false;
  expect_error<typemesh::device_error>([&] { launch({.devices = 2, .backend = "gpu"}, [&] { ran = true; }); },
                                       {"launch_options::backend", "'gpu'", "host, reverse", "docs/backend.md"});
  {
    scoped_env bad("TYPEMESH_BACKEND", "gpu");
    expect_error<typemesh::device_error>([&] { launch(2, [&] { ran = true; }); },
                                         {"TYPEMESH_BACKEND", "'gpu'", "host, reverse"});
  }
  EXPECT_FALSE(ran);
}

TEST(Launchers, KnownButAbsentNamesSayHowToGetThem) {
  scoped_env clear("TYPEMESH_BACKEND", nullptr);
  bool ran = false;
  expect_error<typemesh::device_error>([&] { launch({.devices = 2, .backend = "mpi"}, [&] { ran = true; }); },
                                       {"'mpi'", "host, reverse", "link the typemesh::mpi CMake target"});
  {
    scoped_env nccl("TYPEMESH_BACKEND", "nccl");
    expect_error<typemesh::device_error>([&] { launch(2, [&] { ran = true; }); },
                                         {"TYPEMESH_BACKEND", "'nccl'", "host, reverse", "typemesh::nccl"});
  }
  EXPECT_FALSE(ran);
}

}  // namespace

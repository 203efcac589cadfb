// Distributed tensors on simulated devices: import/export round trips under
// every device relation of the seed, the tensor collectives against serial
// references, elementwise kernels and reductions, and the runtime checks.
#include <cstdint>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "allocation_limit.hpp"
#include "support.hpp"

namespace {
using namespace tt;
using typemesh::device;
using typemesh::host_tensor;
using typemesh::launch;
using typemesh::layout;
using typemesh::shape;

using S = shape<d0, d1, d2>;
using M = typemesh::mesh<"t", a0, a1>;
using whole = host_tensor<float, S>;

whole numbered(const S& s, float scale = 1.0f) {
  whole h(s);
  for (std::size_t i = 0; i < h.size(); ++i) h.values()[i] = scale * static_cast<float>(i);
  return h;
}

// The seed's device relations for 8 devices, on a 2-d mesh.
struct relation {
  const char* name;
  std::array<int, 2> sizes;
  std::vector<int> devices;
};
const std::vector<relation> relations{
    {"all", {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}},
    {"first half", {2, 2}, {0, 1, 2, 3}},
    {"second half", {2, 2}, {4, 5, 6, 7}},
    {"halves swapped", {2, 4}, {4, 5, 6, 7, 0, 1, 2, 3}},
    {"halves interleaved", {4, 2}, {0, 4, 1, 5, 2, 6, 3, 7}},
    {"scrambled", {8, 1}, {6, 2, 7, 0, 3, 5, 1, 4}},
};

template <class Layout>
void round_trip() {
  const S s{8, 8, 8};  // every dim divides by every axis size below
  const whole h = numbered(s);
  for (const auto& r : relations) {
    SCOPED_TRACE(r.name);
    launch(8, [&](device& dev) {
      M m(r.sizes, r.devices);
      auto x = typemesh::import_tensor<Layout>(m, h);
      EXPECT_EQ(dev.traffic().calls(), 0u);  // import communicates nothing
      EXPECT_EQ(x.holds_data(), m.contains(dev.id()));
      expect_local(x, [&](auto g) { return h[g]; });
      auto back = typemesh::export_tensor(x);
      if (!m.contains(dev.id())) {
        EXPECT_TRUE(back.empty());
        EXPECT_EQ(dev.traffic().bytes_received(), 0u);
        return;
      }
      EXPECT_EQ(back, h);
      // Each device receives exactly the elements it lacked.
      EXPECT_EQ(dev.traffic().bytes_received(), (h.size() - x.local().size()) * sizeof(float));
    });
  }
}

TEST(Tensor, ImportExportRoundTripEveryLayoutAndRelation) {
  round_trip<typemesh::replicated>();
  round_trip<layout<d0(a0)>>();
  round_trip<layout<d1(a1)>>();
  round_trip<layout<d0(a0), d2(a1)>>();
  round_trip<layout<d2(a0), d0(a1)>>();
  round_trip<layout<d1(a0), d2(a1)>>();
}

TEST(Tensor, DeviceOutsideTheMeshHoldsNothingAndOpsDoNothing) {
  launch(8, [](device& dev) {
    M m({2, 2}, {4, 5, 6, 7});
    auto x = typemesh::import_tensor<layout<d0(a0)>>(m, numbered(S{4, 2, 2}));
    auto y = typemesh::allconcat<d0>(x);
    auto z = x + x;
    float total = typemesh::sum(x);
    if (dev.id() < 4) {
      EXPECT_FALSE(x.holds_data());
      EXPECT_TRUE(x.local().empty() && y.local().empty() && z.local().empty());
      EXPECT_EQ(total, 0.0f);
      EXPECT_EQ(dev.traffic().calls(), 0u);
    } else {
      EXPECT_EQ(total, 120.0f);  // 0 + 1 + ... + 15
    }
  });
}

TEST(TensorCollectives, AllconcatAllsplitAlltoallKeepTheValues) {
  const S s{4, 8, 4};
  const whole h = numbered(s);
  launch(8, [&](device& dev) {
    M m({2, 4}, {4, 5, 6, 7, 0, 1, 2, 3});
    auto x = typemesh::import_tensor<layout<d0(a0), d2(a1)>>(m, h);
    auto at = [&](auto g) { return h[g]; };

    auto y = typemesh::allconcat<d0>(x);
    static_assert(std::is_same_v<decltype(y)::layout_type, layout<d2(a1)>>);
    expect_local(y, at);
    // An allgather along a0 (2 members): one peer's block arrives.
    EXPECT_EQ(dev.traffic()[typemesh::op_kind::allgather].bytes_received, x.local().size() * sizeof(float));

    dev.traffic().reset();
    auto z = typemesh::allsplit<d1, a0>(y);
    static_assert(std::is_same_v<decltype(z)::layout_type, layout<d1(a0), d2(a1)>>);  // in shape order
    expect_local(z, at);
    EXPECT_EQ(dev.traffic().calls(), 0u);  // allsplit moves nothing

    auto w = typemesh::alltoall<d2, d0>(z);
    static_assert(std::is_same_v<decltype(w)::layout_type, layout<d0(a1), d1(a0)>>);
    expect_local(w, at);
    // Of its block, each device keeps 1/4 and receives the other 3/4.
    EXPECT_EQ(dev.traffic()[typemesh::op_kind::alltoall].bytes_received, z.local().size() * 3 / 4 * sizeof(float));
    EXPECT_EQ(typemesh::export_tensor(w), h);
  });
}

// The collectives pass a tensor to the device as it is where the blocks they
// exchange are runs of it (every dim before the split one has one element
// locally) and stage it otherwise; their outputs start uninitialised. Each
// way keeps the values.
TEST(TensorCollectives, WithAndWithoutStagingTheValuesStay) {
  const S s{4, 8, 4};
  const whole h = numbered(s);
  launch(8, [&](device&) {
    M m({2, 4});
    auto at = [&](auto g) { return h[g]; };
    auto by_d0 = typemesh::import_tensor<layout<d0(a0)>>(m, h);
    auto by_d1 = typemesh::import_tensor<layout<d1(a0)>>(m, h);
    expect_local(typemesh::allconcat<d0>(by_d0), at);      // runs: gathered in place
    expect_local(typemesh::allconcat<d1>(by_d1), at);      // d0 before d1: staged
    expect_local(typemesh::alltoall<d0, d1>(by_d0), at);  // packed (d0 before d1), received in place
    expect_local(typemesh::alltoall<d1, d0>(by_d1), at);  // sent in place, unpacked
    auto replicas = typemesh::import_tensor<typemesh::replicated>(m, h);
    auto times4 = [&](auto g) { return 4 * h[g]; };  // the four identical replicas along a1
    expect_local(typemesh::reduce_scatter<d0, a1>(replicas), times4);  // in place
    expect_local(typemesh::reduce_scatter<d2, a1>(replicas), times4);  // staged
  });
}

TEST(TensorCollectives, AllreduceAndReduceScatterSumTheReplicas) {
  const S s{4, 8, 2};
  const whole h = numbered(s);
  launch(8, [&](device& dev) {
    M m({2, 4});
    auto x = typemesh::import_tensor<layout<d0(a0)>>(m, h);
    // Make the replicas along a1 differ: device at a1-coordinate c adds c.
    const int c = m.coordinate_of(dev.id())->at(1);
    for (auto& v : x.local()) v += static_cast<float>(c);
    auto expected = [&](auto g) { return 4 * h[g] + (0 + 1 + 2 + 3); };

    auto r = typemesh::allreduce<a1>(x);
    expect_local(r, expected);

    auto rs = typemesh::reduce_scatter<d1, a1>(x);
    static_assert(std::is_same_v<decltype(rs)::layout_type, layout<d0(a0), d1(a1)>>);
    expect_local(rs, expected);
    EXPECT_EQ(dev.traffic()[typemesh::op_kind::reduce_scatter].bytes_received, rs.local().size() * 3 * sizeof(float));

    auto mx = typemesh::allreduce<a1>(x, typemesh::reduce_op::max);
    expect_local(mx, [&](auto g) { return h[g] + 3; });
  });
}

TEST(Elementwise, MapZipSumMaxMatchSerial) {
  const S s{4, 4, 4};
  const whole h = numbered(s), h2 = numbered(s, -0.5f);
  const float serial_sum = std::accumulate(h.values().begin(), h.values().end(), 0.0f);
  launch(8, [&](device&) {
    M m({4, 2}, {0, 4, 1, 5, 2, 6, 3, 7});
    auto x = typemesh::import_tensor<layout<d1(a0), d2(a1)>>(m, h);
    auto y = typemesh::import_tensor<layout<d1(a0), d2(a1)>>(m, h2);
    expect_local(x + y, [&](auto g) { return h[g] + h2[g]; });
    expect_local(x - y, [&](auto g) { return h[g] - h2[g]; });
    expect_local(x * y, [&](auto g) { return h[g] * h2[g]; });
    expect_local(typemesh::map(x, [](float v) { return 2 * v + 1; }), [&](auto g) { return 2 * h[g] + 1; });
    EXPECT_EQ(typemesh::sum(x), serial_sum);
    EXPECT_EQ(typemesh::max(y), 0.0f);
    EXPECT_EQ(typemesh::max(x), 63.0f);
    // Replicas are not counted twice.
    auto r = typemesh::import_tensor<layout<d1(a0)>>(m, h);
    EXPECT_EQ(typemesh::sum(r), serial_sum);
  });
}

TEST(Tensor, LayoutsThatSayTheSameConvertAndDescribeThemselves) {
  launch(2, [](device& dev) {
    M m({2, 1});
    auto x = typemesh::import_tensor<layout<d2(a0), auto(d0)->a1>>(m, numbered(S{2, 2, 2}));
    typemesh::tensor<float, S, layout<d0(a1), d2(a0)>, M> y = std::move(x);  // same mapping, other spelling
    EXPECT_EQ(y.slice_begin<d2>(), dev.id());
    EXPECT_EQ(y.local_extent<d2>(), 1);
    EXPECT_EQ(m.coordinate<a0>(dev.id()), dev.id());
    EXPECT_EQ(y.describe(), "tensor<f32, [d0=2 d1=2 d2=2], layout<d0(a1), d2(a0)>, mesh 't' [a0=2 a1=1] on devices [0 1]>");
    expect_error<typemesh::device_error>([&] { m.coordinate<a1>(5); }, {"device 5 is not in mesh 't'"});
  });
  static_assert(!std::is_convertible_v<typemesh::tensor<float, S, layout<d0(a0)>, M>,
                                       typemesh::tensor<float, S, layout<d0(a1)>, M>>);
}

TEST(TensorErrors, RuntimeChecksNameWhatIsWrong) {
  launch(8, [](device&) {
    expect_error<typemesh::device_error>(
        [] { typemesh::tensor<float, S, layout<d0(a0)>, M> t(M({2, 4}, {0, 1, 2, 3, 4, 5, 6, 9}), S{2, 2, 2}); },
        {"names device 9", "the run has 8 devices"});
    expect_error<typemesh::shape_error>(
        [] { typemesh::import_tensor<layout<d2(a1)>>(M({2, 4}), numbered(S{2, 2, 6})); },
        {"dim d2 of size 6", "axis a1 of size 4", "not divisible"});
    auto a = typemesh::import_tensor<layout<d0(a0)>>(M({2, 4}), numbered(S{2, 2, 2}));
    auto b = typemesh::import_tensor<layout<d0(a0)>>(M({2, 4}, {7, 6, 5, 4, 3, 2, 1, 0}), numbered(S{2, 2, 2}));
    auto c = typemesh::import_tensor<layout<d0(a0)>>(M({2, 4}), numbered(S{2, 4, 2}));
    expect_error<typemesh::device_error>([&] { a + b; }, {"same mesh type, different devices"});
    expect_error<typemesh::shape_error>([&] { a + c; }, {"[d0=2 d1=2 d2=2]", "[d0=2 d1=4 d2=2]"});
  });
  expect_error<typemesh::shape_error>([] { whole(S{2, 2, 2}, std::vector<float>(7)); }, {"needs 8", "7 were given"});
}

// --- Sizes from outside ----------------------------------------------------------

// values() is a mutable vector; a host tensor whose vector no longer matches
// its shape is refused by import_tensor, on every device, before any copy.
TEST(TensorSizes, ImportChecksTheHostTensorsElementCount) {
  launch(4, [](device&) {
    for (std::size_t n : {3u, 0u, 9u}) {
      whole h = numbered(S{2, 2, 2});
      h.values().resize(n);
      h.values().shrink_to_fit();  // so that reading past the end is outside the allocation
      for (const M& m : {M({2, 2}), M({2, 1}, {2, 3})}) {  // all devices, and a mesh without devices 0 and 1
        expect_error<typemesh::shape_error>([&] { typemesh::import_tensor<layout<d0(a0)>>(m, h); },
                                            {"import_tensor", "[d0=2 d1=2 d2=2]",
                                             "holds " + std::to_string(n) + " values", "needs 8"});
      }
    }
  });
}

// A mesh naming devices the run does not have is an error naming them, and
// nothing is allocated for the ids on the way.
TEST(TensorSizes, MeshNamingDevicesBeyondTheRunAllocatesNothingForThem) {
  const whole h = numbered(S{2, 2, 2});
  tt::allocation_limit limit(64 << 20);
  launch(2, [&](device&) {
    for (int far : {200'000'000, 2'000'000'000}) {
      expect_error<typemesh::device_error>(
          [&] { typemesh::import_tensor<layout<d0(a0)>>(M({2, 1}, {1, far}), h); },
          {"names device " + std::to_string(far), "the run has 2 devices"});
    }
  });
}

TEST(TensorSizes, HostTensorSizesAreCheckedBeforeAllocating) {
  using S2 = shape<d0, d1>;
  const std::int64_t big = std::int64_t{1} << 32;
  // The element count overflows: today's product would wrap to 0 elements.
  expect_error<typemesh::shape_error>([&] { host_tensor<float, S2> h(S2{big, big}); },
                                      {"d0=4294967296 d1=4294967296", "overflows"});
  // The element count fits, the byte count does not.
  expect_error<typemesh::shape_error>(
      [] { host_tensor<float, shape<d0>> h(shape<d0>{std::int64_t{1} << 62}); },
      {"[d0=4611686018427387904]", "4 bytes each", "more bytes than this machine can address"});
  // It fits, but there is no memory for it (here: a limit of 1 GiB).
  tt::allocation_limit limit(std::size_t{1} << 30);
  expect_error<typemesh::error>([] { host_tensor<float, S2> h(S2{1 << 16, 1 << 16}); },
                                {"[d0=65536 d1=65536]", "could not be allocated"});
}

// Copies share their elements until one is written (copy on write): a copy
// costs nothing, and writing either leaves the other as it was.
TEST(Tensor, CopiesShareTheirElementsUntilOneIsWritten) {
  const S s{4, 2, 2};
  const whole h = numbered(s);
  launch(4, [&] {
    M m({2, 2}, {0, 1, 2, 3});
    auto x = typemesh::import_tensor<layout<d0(a0)>>(m, h);
    auto y = x;
    EXPECT_EQ(std::as_const(y).data(), std::as_const(x).data());  // no copy yet
    y.local()[0] = -1.0f;                                          // y takes its own elements
    EXPECT_NE(std::as_const(y).data(), std::as_const(x).data());
    expect_local(x, [&](auto g) { return h[g]; });
    expect_local(y, [&](auto g) { return g == y.slice().begin ? -1.0f : h[g]; });
    // The same the other way: the original written while a copy is alive.
    auto z = x;
    x.data()[1] = -2.0f;
    expect_local(z, [&](auto g) { return h[g]; });
    EXPECT_EQ(x.local()[1], -2.0f);
    // A copy of a copy, both later written: each sees only its own writes.
    auto a = z, b = z;
    a.local()[2] = 5.0f, b.local()[3] = 6.0f;
    EXPECT_EQ(a.local()[3], z.local()[3]);
    EXPECT_EQ(b.local()[2], z.local()[2]);
    expect_local(z, [&](auto g) { return h[g]; });
  });
}

}  // namespace

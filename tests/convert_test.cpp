// Relayout and mesh replacement: a property test over random pairs of
// (mesh, layout) with random device relations, where every conversion must
// keep the values and move exactly the elements each device lacks; then
// every kind of the reference by name, with the seed's device relations, and
// every error path.
#include <algorithm>
#include <numeric>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace tt;
using typemesh::device;
using typemesh::launch;
using typemesh::layout;
using typemesh::shape;
namespace devices = typemesh::devices;

using S = shape<d0, d1, d2>;
using whole = typemesh::host_tensor<float, S>;
using MA = typemesh::mesh<"A", a0, a1>;
using MB = typemesh::mesh<"B", a0, a1>;

whole numbered(const S& s) {
  whole h(s);
  std::iota(h.values().begin(), h.values().end(), 0.0f);
  return h;
}

// Every injective map of {d0, d1, d2} into {a0, a1}: code c0 + 3 c1 + 9 c2,
// digit 0 = whole, k = axis k-1.
template <int Code>
using layout_of = typename typemesh::detail::concat_layouts<typename tt::entry<d0, Code % 3>::type,
                                                            typename tt::entry<d1, Code / 3 % 3>::type,
                                                            typename tt::entry<d2, Code / 9>::type>::type;
constexpr bool valid(int code) {
  int c[3] = {code % 3, code / 3 % 3, code / 9};
  return !(c[0] && c[0] == c[1]) && !(c[0] && c[0] == c[2]) && !(c[1] && c[1] == c[2]);
}
constexpr std::array<int, 13> codes = [] {
  std::array<int, 13> v{};
  for (int c = 0, n = 0; c < 27; ++c)
    if (valid(c)) v[n++] = c;
  return v;
}();

struct meshes {
  std::array<int, 2> a_sizes, b_sizes;
  std::vector<int> a_devices, b_devices;
};

// The placement a layout code gives on a 2-axis mesh, built from the code
// alone (not from the library's types).
typemesh::runtime_placement<3> placement_of(int code, const std::array<int, 2>& sizes, const std::vector<int>& devices) {
  typemesh::runtime_placement<3> p;
  int digits[3] = {code % 3, code / 3 % 3, code / 9};
  for (int i = 0; i < 3; ++i) p.axis_index[i] = digits[i] - 1;
  p.sizes.assign(sizes.begin(), sizes.end());
  p.devices = devices;
  return p;
}

// Elements of device d's target slice that its source slice lacks, by
// testing every element.
std::int64_t lacking(const S& s, const typemesh::runtime_placement<3>& a, const typemesh::runtime_placement<3>& b,
                     int d) {
  auto where = b.coordinate_of(d);
  if (!where) return 0;
  auto want = b.slice_at(s.sizes(), *where);
  auto mine = a.coordinate_of(d);
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < want.extent[0]; ++i)
    for (std::int64_t j = 0; j < want.extent[1]; ++j)
      for (std::int64_t k = 0; k < want.extent[2]; ++k) {
        std::array<std::int64_t, 3> e{want.begin[0] + i, want.begin[1] + j, want.begin[2] + k};
        bool held = mine.has_value();
        for (int x = 0; held && x < 3; ++x) {
          int ax = a.axis_index[x];
          held = ax < 0 || e[x] / a.block(s.sizes(), x) == (*mine)[ax];
        }
        n += !held;
      }
  return n;
}

struct outcome {
  typemesh::traffic moved;
  bool round_trip;
  bool holds;
};

// One device's part: import under code From, replace under code To, export.
template <int From, int To>
outcome run_pair(device& dev, const meshes& m, const whole& h) {
  MA a(m.a_sizes, m.a_devices);
  MB b(m.b_sizes, m.b_devices);
  auto x = typemesh::import_tensor<layout_of<From>>(a, h);
  dev.traffic().reset();
  auto y = typemesh::replace_mesh<layout_of<To>>(x, b);
  outcome o{dev.traffic(), false, y.holds_data()};
  auto back = typemesh::export_tensor(y);
  o.round_trip = b.contains(dev.id()) ? back == h : back.empty();
  return o;
}

struct pair_case {
  int from, to;
  outcome (*run)(device&, const meshes&, const whole&);
};

void check_pair(const pair_case& c, const meshes& m) {
  const S s{8, 8, 8};
  const whole h = numbered(s);
  auto result = launch(8, [&](device& dev) { return c.run(dev, m, h); });
  auto a = placement_of(c.from, m.a_sizes, m.a_devices), b = placement_of(c.to, m.b_sizes, m.b_devices);
  std::uint64_t sent = 0, received = 0;
  for (int d = 0; d < 8; ++d) {
    const outcome& o = result[d];
    SCOPED_TRACE(testing::Message() << "codes " << c.from << " -> " << c.to << ", device " << d);
    ASSERT_TRUE(o.round_trip);
    EXPECT_EQ(o.holds, b.coordinate_of(d).has_value());
    EXPECT_EQ(o.moved.bytes_received(), lacking(s, a, b, d) * sizeof(float));
    sent += o.moved.bytes_sent();
    received += o.moved.bytes_received();
  }
  EXPECT_EQ(sent, received);  // nothing is sent that is not received
}

template <std::size_t... I>
constexpr auto pair_table(std::index_sequence<I...>) {
  return std::array<pair_case, sizeof...(I)>{
      pair_case{codes[I / 13], codes[I % 13], &run_pair<codes[I / 13], codes[I % 13]>}...};
}

std::array<int, 2> random_grid(int n, std::mt19937& rng) {
  int p = 1 << (rng() % (std::countr_zero(static_cast<unsigned>(n)) + 1));
  return {p, n / p};
}

TEST(Convert, RandomPairsKeepValuesAtMinimumTraffic) {
  static constexpr auto table = pair_table(std::make_index_sequence<13 * 13>{});
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    meshes m;
    const int na = 1 << (rng() % 4), nb = 1 << (rng() % 4);
    m.a_sizes = random_grid(na, rng);
    m.b_sizes = random_grid(nb, rng);
    std::vector<int> all = devices::all(8);
    std::shuffle(all.begin(), all.end(), rng);
    m.a_devices.assign(all.begin(), all.begin() + na);
    // B: the same devices reordered, an overlapping set, or a disjoint one.
    switch (rng() % 3) {
      case 0: m.b_devices.assign(all.begin(), all.begin() + nb); break;
      case 1: std::shuffle(all.begin(), all.end(), rng), m.b_devices.assign(all.begin(), all.begin() + nb); break;
      default: std::reverse(all.begin(), all.end()), m.b_devices.assign(all.begin(), all.begin() + nb); break;
    }
    check_pair(table[rng() % table.size()], m);
    if (HasFailure()) return;
  }
}

// Transfers leave their targets uninitialised and write every element once:
// that holds only if, for every destination, the plan's pieces tile its
// target slice, each element once, and each piece lies in its sender's
// slice, which the receiver reads in place on host threads.
TEST(Plan, PiecesTileEveryTargetSliceOnceFromTheirSendersSlices) {
  const S s{8, 8, 8};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const int na = 1 << (rng() % 4), nb = 1 << (rng() % 4);
    std::vector<int> all = devices::all(8);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int> da(all.begin(), all.begin() + na);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int> db(all.begin(), all.begin() + nb);
    const auto a = placement_of(codes[rng() % codes.size()], random_grid(na, rng), da);
    const auto b = placement_of(codes[rng() % codes.size()], random_grid(nb, rng), db);
    const auto plan = typemesh::make_transfer_plan<3>(s.sizes(), a, b);
    for (int dst : db) {
      const auto want = b.slice_at(s.sizes(), *b.coordinate_of(dst));
      std::vector<int> written(static_cast<std::size_t>(want.elements()), 0);
      for (const auto& p : plan.pieces) {
        if (p.to != dst) continue;
        ASSERT_TRUE(a.coordinate_of(p.from).has_value());
        const auto held = a.slice_at(s.sizes(), *a.coordinate_of(p.from));
        ASSERT_TRUE(p.source == held) << "trial " << trial << ": the piece names another slice than its sender's";
        for (std::size_t i = 0; i < 3; ++i) {
          ASSERT_GE(p.region.begin[i], held.begin[i]);
          ASSERT_LE(p.region.begin[i] + p.region.extent[i], held.begin[i] + held.extent[i]);
          ASSERT_GE(p.region.begin[i], want.begin[i]);
          ASSERT_LE(p.region.begin[i] + p.region.extent[i], want.begin[i] + want.extent[i]);
        }
        for (std::int64_t i = 0; i < p.region.extent[0]; ++i)
          for (std::int64_t j = 0; j < p.region.extent[1]; ++j)
            for (std::int64_t k = 0; k < p.region.extent[2]; ++k) {
              const std::int64_t x = p.region.begin[0] + i - want.begin[0], y = p.region.begin[1] + j - want.begin[1],
                                 z = p.region.begin[2] + k - want.begin[2];
              ++written[static_cast<std::size_t>((x * want.extent[1] + y) * want.extent[2] + z)];
            }
      }
      for (std::size_t e = 0; e < written.size(); ++e)
        ASSERT_EQ(written[e], 1) << "trial " << trial << ", device " << dst << ", element " << e;
    }
    // Replicas share the sending: the pieces that cross devices from one
    // source block (its replicas hold the same slice), in plan order, come
    // from each replica in one consecutive run, and every replica sends
    // floor(n/r) or ceil(n/r) of the n.
    std::map<std::vector<std::int64_t>, std::vector<int>> senders;  // by the block's slice
    for (const auto& p : plan.pieces) {
      if (p.from == p.to) continue;
      std::vector<std::int64_t> key(p.source.begin.begin(), p.source.begin.end());
      key.insert(key.end(), p.source.extent.begin(), p.source.extent.end());
      senders[key].push_back(p.from);
    }
    for (const auto& [key, from] : senders) {
      std::vector<int> replicas;
      for (int d : da) {
        const auto held = a.slice_at(s.sizes(), *a.coordinate_of(d));
        std::vector<std::int64_t> k(held.begin.begin(), held.begin.end());
        k.insert(k.end(), held.extent.begin(), held.extent.end());
        if (k == key) replicas.push_back(d);
      }
      const std::size_t n = from.size(), r = replicas.size();
      for (int d : replicas) {
        const auto c = static_cast<std::size_t>(std::count(from.begin(), from.end(), d));
        EXPECT_TRUE(c == n / r || c == (n + r - 1) / r) << "trial " << trial << ": replica " << d << " sends " << c << " of " << n;
        if (c == 0) continue;
        const auto first = std::find(from.begin(), from.end(), d);
        const auto last = std::find(from.rbegin(), from.rend(), d).base();
        EXPECT_EQ(std::count(first, last, d), last - first) << "trial " << trial << ": replica " << d << " sends in two runs";
      }
      if (HasFailure()) return;
    }
  }
}

// --- Relayout within a mesh --------------------------------------------------

TEST(Relayout, MovesDimsBetweenAxesWhereMeshTensorFlowsRenameWentWrong) {
  const S s{8, 8, 8};
  const whole h = numbered(s);
  launch(8, [&](device& dev) {
    MA a({2, 4});
    auto x = typemesh::import_tensor<layout<d0(a0), d1(a1)>>(a, h);
    auto swapped = typemesh::relayout<layout<d0(a1), d1(a0)>>(x);  // both dims change axis
    EXPECT_EQ(typemesh::export_tensor(swapped), h);
    dev.traffic().reset();
    auto moved = typemesh::relayout<layout<d2(a1), d1(a0)>>(swapped);  // d0 -> whole, d2 -> a1
    EXPECT_EQ(typemesh::export_tensor(moved), h);
    dev.traffic().reset();
    auto whole_again = typemesh::relayout<typemesh::replicated>(moved);
    EXPECT_EQ(dev.traffic().bytes_received(), (512 - moved.local().size()) * sizeof(float));
    dev.traffic().reset();
    auto split = typemesh::relayout<layout<d2(a0)>>(whole_again);  // whole -> split: local
    EXPECT_EQ(dev.traffic().calls(), 0u);
    EXPECT_EQ(typemesh::export_tensor(split), h);
    auto same = typemesh::relayout<layout<d1(a0), d0(a1)>>(swapped);  // same mapping: a copy
    EXPECT_EQ(typemesh::export_tensor(same), h);
  });
}

// --- Every kind of the reference, with the seed's device relations ---------

using E = typemesh::mesh<"embed", a0, a1, a2>;
using L0 = typemesh::mesh<"lstm0", a0, a1, a2>;
using P1 = typemesh::mesh<"pipe", a0>;
using P2 = typemesh::mesh<"pipe_half", a0>;

TEST(Kinds, SameSlicesMovesNothing) {
  const whole h = numbered(S{8, 4, 4});
  launch(8, [&](device& dev) {
    MA a({2, 4});
    MB b({2, 4});
    auto x = typemesh::import_tensor<layout<d0(a0), d2(a1)>>(a, h);
    dev.traffic().reset();
    auto y = typemesh::replace_mesh<layout<d0(a0), d2(a1)>, typemesh::same_slices>(x, b);
    EXPECT_EQ(dev.traffic().calls(), 0u);
    EXPECT_EQ(typemesh::export_tensor(y), h);
    expect_error<typemesh::device_error>(
        [&] { typemesh::replace_mesh<layout<d0(a0)>, typemesh::same_slices>(x, MB({2, 4}, {7, 6, 5, 4, 3, 2, 1, 0})); },
        {"same devices in the same order"});
    expect_error<typemesh::shape_error>(
        [&] { typemesh::replace_mesh<layout<d0(a1), d2(a0)>, typemesh::same_slices>(x, b); },
        {"different slices", "layout<d0(a0), d2(a1)>", "layout<d0(a1), d2(a0)>"});
  });
}

TEST(Kinds, ReplicationOntoALargerAndASmallerMesh) {
  const whole h = numbered(S{4, 4, 4});
  launch(8, [&](device& dev) {
    P2 half({4}, devices::first_half(8));
    P1 all({8}, devices::all(8));
    auto x = typemesh::import_tensor<typemesh::replicated>(half, h);
    dev.traffic().reset();
    auto y = typemesh::replace_mesh<typemesh::replicated, typemesh::replication>(x, all);
    // Devices that had it receive nothing; the others the whole tensor, once.
    EXPECT_EQ(dev.traffic().bytes_received(), dev.id() < 4 ? 0u : h.size() * sizeof(float));
    EXPECT_EQ(typemesh::export_tensor(y), h);
    dev.traffic().reset();
    auto back = typemesh::replace_mesh<typemesh::replicated, typemesh::replication>(y, half);  // the reverse
    EXPECT_EQ(dev.traffic().bytes_received(), 0u);
    if (dev.id() < 4) {
      EXPECT_EQ(typemesh::export_tensor(back), h);
    }
    expect_error<typemesh::device_error>(
        [&] { typemesh::replace_mesh<typemesh::replicated, typemesh::replication>(x, P2({4}, devices::second_half(8))); },
        {"device 4", "is not in mesh 'pipe_half'"});
    expect_error<typemesh::device_error>(  // growing must keep the devices that hold it
        [&] { typemesh::replace_mesh<typemesh::replicated, typemesh::replication>(x, P1({8}, devices::range(2, 8))); },
        {"device 0 of mesh 'pipe_half'", "is not in mesh 'pipe' [a0=8] on devices [2 3 4 5 6 7 8 9]"});
    expect_error<typemesh::shape_error>(
        [&] {
          typemesh::replace_mesh<typemesh::replicated, typemesh::replication>(x, P1({6}, devices::range(0, 6)));
        },
        {"from 4 onto 6 devices needs a multiple of 4"});
  });
}

TEST(Kinds, DuplicatesAddedAndRemovedAlongAnAxisThatSplitsNothing) {
  const whole h = numbered(S{4, 4, 4});
  launch(8, [&](device& dev) {
    MA small({2, 2}, devices::first_half(8));
    MB big({2, 4}, devices::all(8));
    auto x = typemesh::import_tensor<layout<d0(a0)>>(small, h);
    dev.traffic().reset();
    auto y = typemesh::replace_mesh<layout<d0(a0)>, typemesh::duplicates>(x, big);
    const std::uint64_t half = h.size() / 2 * sizeof(float);
    // Device 1 keeps its rows (block 0 in both); device 2 moves from block 1
    // to block 0, and device 4 is new: each receives half the tensor.
    if (dev.id() == 1) {
      EXPECT_EQ(dev.traffic().bytes_received(), 0u);
    }
    if (dev.id() == 2 || dev.id() == 4) {
      EXPECT_EQ(dev.traffic().bytes_received(), half);
    }
    EXPECT_EQ(typemesh::export_tensor(y), h);
    auto back = typemesh::replace_mesh<layout<d0(a0)>, typemesh::duplicates>(y, small);
    if (dev.id() < 4) {
      EXPECT_EQ(typemesh::export_tensor(back), h);
    }
    expect_error<typemesh::shape_error>(
        [&] { typemesh::replace_mesh<layout<d0(a0)>, typemesh::duplicates>(x, MB({4, 2})); },
        {"axis a0 changes size from 2 to 4 but splits a dim"});
  });
}

// The RNNLM's embedding -> LSTM move: k split 8 ways on the embed mesh, batch
// split 4 ways on the first half.
TEST(Kinds, IndependentAxesTheRnnlmEmbeddingMove) {
  const whole h = numbered(S{8, 2, 16});
  launch(8, [&](device& dev) {
    E embed({1, 1, 8});
    L0 lstm0({4, 1, 1}, devices::first_half(8));
    auto x = typemesh::import_tensor<layout<d2(a2)>>(embed, h);
    dev.traffic().reset();
    auto y = typemesh::replace_mesh<layout<d0(a0)>, typemesh::independent_axes>(x, lstm0);
    if (dev.id() < 4) {
      // Its batch rows: 2 x 2 x 16 elements, of which it held 1/8.
      EXPECT_EQ(dev.traffic().bytes_received(), 64u * 7 / 8 * sizeof(float));
      EXPECT_EQ(typemesh::export_tensor(y), h);
    }
    auto back = typemesh::replace_mesh<layout<d2(a2)>, typemesh::independent_axes>(y, embed);  // the gradient's way
    EXPECT_EQ(typemesh::export_tensor(back), h);
    expect_error<typemesh::shape_error>(
        [&] { typemesh::replace_mesh<layout<d0(a0)>, typemesh::independent_axes>(x, L0({3, 1, 1}, {0, 1, 2})); },
        {"mesh sizes 8 and 3 must differ by an integer factor"});
  });
}

TEST(Kinds, ConcatSplitAlongTheLeadingAxis) {
  const whole h = numbered(S{8, 2, 2});
  launch(8, [&](device&) {
    MA a({4, 2});
    MB b({2, 4});
    MB c({8, 1});
    auto x = typemesh::import_tensor<layout<d0(a0)>>(a, h);
    auto y = typemesh::replace_mesh<layout<d0(a0)>, typemesh::concat_split>(x, b);  // concat
    auto z = typemesh::replace_mesh<layout<d0(a0)>, typemesh::concat_split>(x, c);  // split
    EXPECT_EQ(typemesh::export_tensor(y), h);
    EXPECT_EQ(typemesh::export_tensor(z), h);
    expect_error<typemesh::device_error>(
        [&] { typemesh::replace_mesh<layout<d0(a0)>, typemesh::concat_split>(x, MB({2, 4}, {1, 0, 2, 3, 4, 5, 6, 7})); },
        {"same devices in the same order"});
  });
}

// The GNMT pipeline move: interleaved halves to every other device and back.
TEST(Kinds, PipelineBetweenAMeshAndEveryOtherDevice) {
  const whole h = numbered(S{8, 2, 2});
  launch(8, [&](device& dev) {
    const auto first = devices::first_half(8), second = devices::second_half(8);
    P1 interleaved({8}, devices::interleave(first, second));
    P2 evens({4}, first);  // interleaved[0::2]
    auto x = typemesh::import_tensor<layout<d0(a0)>>(interleaved, h);
    dev.traffic().reset();
    auto y = typemesh::replace_mesh<layout<d0(a0)>, typemesh::pipeline>(x, evens);
    // Each of the first half concatenates its slice with its neighbour's.
    EXPECT_EQ(dev.traffic().bytes_received(), dev.id() < 4 ? 4u * sizeof(float) : 0u);
    if (dev.id() < 4) {
      EXPECT_EQ(typemesh::export_tensor(y), h);
    }
    auto back = typemesh::replace_mesh<layout<d0(a0)>, typemesh::pipeline>(y, interleaved);
    EXPECT_EQ(typemesh::export_tensor(back), h);
    expect_error<typemesh::device_error>(
        [&] { typemesh::replace_mesh<layout<d0(a0)>, typemesh::pipeline>(x, P2({4}, {0, 1, 4, 5})); },
        {"not a mesh and every other device of it"});
  });
}

// On one device every mesh is that device and nothing moves: every kind
// describes that, so a strategy's moves keep their kinds when it runs on one
// device. Two different single devices are still checked.
TEST(Kinds, OneDeviceMeshesFitEveryKind) {
  const whole h = numbered(S{8, 2, 2});
  launch(8, [&](device& dev) {  // 8: the suite also runs on 8 MPI ranks
    P1 one({1}, {0});
    P2 same({1}, {0}), other({1}, {1});
    auto x = typemesh::import_tensor<layout<d0(a0)>>(one, h);
    dev.traffic().reset();
    auto y = typemesh::replace_mesh<layout<d0(a0)>, typemesh::pipeline>(x, same);
    auto z = typemesh::replace_mesh<layout<d0(a0)>, typemesh::concat_split>(y, one);
    EXPECT_EQ(dev.traffic().bytes_sent(), 0u);
    if (dev.id() == 0) {
      EXPECT_EQ(typemesh::export_tensor(z), h);
    }
    expect_error<typemesh::device_error>(
        [&] { typemesh::replace_mesh<layout<d0(a0)>, typemesh::pipeline>(x, other); },
        {"not a mesh and every other device of it"});
  });
}

}  // namespace

namespace {
using namespace tt;
using typemesh::layout;

// The layouts choose the algorithm at compile time.
template <class From, class To>
using route = typemesh::detail::relayout_route<shape<d0, d1, d2>, From, To>;
static_assert(std::is_same_v<route<layout<d0(a0), d1(a1)>, layout<d1(a1)>>::concat_dim, d0>);
static_assert(std::is_same_v<route<layout<d1(a1)>, layout<d0(a0), d1(a1)>>::split_dim, d0>);
static_assert(std::is_same_v<route<layout<d0(a0)>, layout<d2(a0)>>::exchange_dim, d0>);
static_assert(std::is_same_v<route<layout<d0(a0)>, layout<d2(a0)>>::exchange_partner<d0>, d2>);
static_assert(std::is_void_v<route<layout<d0(a0), d1(a1)>, layout<d0(a1), d1(a0)>>::concat_dim>);
static_assert(std::is_void_v<route<layout<d0(a0), d1(a1)>, layout<d0(a1), d1(a0)>>::exchange_dim>);

TEST(Relayout, EachRouteKeepsValuesAtMinimumTraffic) {
  const S s{8, 8, 8};
  const whole h = numbered(s);
  typemesh::launch(8, [&](typemesh::device& dev) {
    MA a({2, 4});
    auto x = typemesh::import_tensor<layout<d0(a0), d1(a1)>>(a, h);
    auto check = [&](const auto& y, std::uint64_t lacking_elements) {
      EXPECT_EQ(dev.traffic().bytes_received(), lacking_elements * sizeof(float));
      dev.traffic().reset();
      EXPECT_EQ(typemesh::export_tensor(y), h);
      dev.traffic().reset();
    };
    dev.traffic().reset();
    auto c = typemesh::relayout<layout<d1(a1)>>(x);  // allconcat of d0: lacks the other half
    EXPECT_EQ(dev.traffic()[typemesh::op_kind::allgather].calls, 1u);
    check(c, 512 / 4 - 512 / 8);
    auto sp = typemesh::relayout<layout<d1(a1), d2(a0)>>(c);  // allsplit: nothing
    check(sp, 0);
    auto ex = typemesh::relayout<layout<d0(a0), d2(a1)>>(x);  // alltoall d1 -> d2 on a1
    EXPECT_EQ(dev.traffic()[typemesh::op_kind::alltoall].calls, 1u);
    check(ex, 512 / 8 * 3 / 4);
  });
}
}  // namespace

// --- Transfers cannot be confused -----------------------------------------------
namespace {
using namespace tt;
using typemesh::device;
using typemesh::launch;
using typemesh::layout;
using S3 = typemesh::shape<d0, d1, d2>;
using M1 = typemesh::mesh<"one", a0>;
using M2 = typemesh::mesh<"two", a0>;
// These runs fail on purpose: host threads even where the file runs under MPI.
constexpr const char* host = "host";

typemesh::host_tensor<float, S3> counting(const S3& s, float from) {
  typemesh::host_tensor<float, S3> h(s);
  std::iota(h.values().begin(), h.values().end(), from);
  return h;
}

// A target device skips a replace_mesh: its next replace_mesh must not take
// the skipped one's message (it used to, silently, with the wrong values).
// As messages (small) and as one exchange (16 KiB or more a pair, host threads).
const S3 small_and_lent[] = {S3{4, 2, 2}, S3{64, 32, 32}};

TEST(Identity, ASkippedReplaceMeshIsNamedNotTakenByTheNext) {
  for (const S3& s : small_and_lent) {
    const auto h = counting(s, 0), g = counting(s, 1000);
    expect_error<typemesh::collective_error>(
        [&] {
          launch({.devices = 4, .backend = host}, [&](device& dev) {
            M1 from({2}, {0, 1});
            M2 to({2}, {2, 3});
            auto x = typemesh::import_tensor<layout<d0(a0)>>(from, h);
            auto y = typemesh::import_tensor<layout<d1(a0)>>(from, g);
            if (dev.id() != 3) (void)typemesh::replace_mesh<layout<d0(a0)>>(x, to);  // device 3 skips this one
            auto z = typemesh::replace_mesh<layout<d1(a0)>>(y, to);
            if (to.contains(dev.id())) expect_local(z, [&](auto i) { return g[i]; });
          });
        },
        {"replace_mesh from mesh 'one'", "to mesh 'two'", "layout<", "to layout<",
         "belongs to replace_mesh from mesh 'one'", "skipped a transfer"});
  }
}

// A skipped replace_mesh that nothing follows is reported when the program ends.
TEST(Identity, ALeftoverTransferMessageIsReportedAtTheEnd) {
  for (const S3& s : small_and_lent) {
    const auto h = counting(s, 0);
    expect_error<typemesh::collective_error>(
        [&] {
          launch({.devices = 4, .backend = host}, [&](device& dev) {
            M1 from({2}, {0, 1});
            M2 to({2}, {2, 3});
            auto x = typemesh::import_tensor<layout<d0(a0)>>(from, h);
            if (dev.id() != 2) (void)typemesh::replace_mesh<layout<d0(a0)>>(x, to);
          });
        },
        {"ended with messages nobody received", "of replace_mesh from mesh 'one'", "which device 2 never received"});
  }
}

// A source device skips it: the receivers' wait names the replace_mesh, and
// since the source has returned, they say so at once.
TEST(Identity, AMissingTransferMessageNamesTheReplaceMesh) {
  const auto h = counting(S3{4, 2, 2}, 0);
  const auto start = std::chrono::steady_clock::now();
  expect_error<typemesh::collective_error>(
      [&] {
        launch({.devices = 4, .backend = host}, [&](device& dev) {
          M1 from({2}, {0, 1});
          M2 to({2}, {2, 3});
          auto x = typemesh::import_tensor<layout<d0(a0)>>(from, h);
          if (dev.id() != 0) (void)typemesh::replace_mesh<layout<d0(a0)>>(x, to);
        });
      },
      {"replace_mesh from mesh 'one'", "to mesh 'two'", "device 0 has already finished"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  using namespace std::chrono_literals;
  expect_error<typemesh::timeout_error>(
      [&] {
        launch({.devices = 4, .timeout = 150ms, .backend = host}, [&](device& dev) {
          M1 from({2}, {0, 1});
          M2 to({2}, {2, 3});
          auto x = typemesh::import_tensor<layout<d0(a0)>>(from, h);
          if (dev.id() != 0) (void)typemesh::replace_mesh<layout<d0(a0)>>(x, to);
          else std::this_thread::sleep_for(400ms);  // still running, never sends
        });
      },
      {"replace_mesh from mesh 'one'", "dims [d0=4 d1=2 d2=2]", "timed out after 150 ms"});
}

// Errors inside a relayout lead with the relayout; the original message stays.
TEST(Identity, ErrorsInsideARelayoutNameIt) {
  const auto h = counting(S3{4, 2, 2}, 0);
  using namespace std::chrono_literals;
  expect_error<typemesh::timeout_error>(
      [&] {
        launch({.devices = 2, .timeout = 150ms, .backend = host}, [&](device& dev) {
          typemesh::mesh<"m", a0, a1> m({2, 1});
          auto x = typemesh::import_tensor<layout<d0(a0), d1(a1)>>(m, h);
          if (dev.id() == 1) std::this_thread::sleep_for(400ms);  // never joins
          else (void)typemesh::relayout<layout<d0(a1), d1(a0)>>(x);
        });
      },
      {"relayout of dims [d0=4 d1=2 d2=2] on mesh 'm'", "from layout<", "timed out after 150 ms"});
}

// The same replace_mesh and its way back, again and again: every message
// is taken by its own call.
TEST(Identity, RepeatedTransfersKeepTheirOrder) {
  const auto h = counting(S3{4, 2, 2}, 0), g = counting(S3{4, 2, 2}, 100);
  launch({.devices = 4, .backend = host}, [&](device&) {
    M1 from({2}, {0, 1});
    M2 to({2}, {2, 3});
    for (int rep = 0; rep < 3; ++rep) {
      auto x = typemesh::import_tensor<layout<d0(a0)>>(from, rep % 2 ? g : h);
      auto y = typemesh::replace_mesh<layout<d1(a0)>>(x, to);
      auto back = typemesh::replace_mesh<layout<d0(a0)>>(y, from);
      auto there = typemesh::export_tensor(y), here = typemesh::export_tensor(back);
      if (to.contains(typemesh::this_device().id())) {
        EXPECT_EQ(there, rep % 2 ? g : h);
      }
      if (from.contains(typemesh::this_device().id())) {
        EXPECT_EQ(here, rep % 2 ? g : h);
      }
    }
  });
}

// --- Host threads: receivers read the senders' slices in place -------------------

// A sender that changes its source as soon as the call returns never changes
// what its receivers get: it returns only once they have read it, or once it
// has copied out what a late receiver has not taken yet.
TEST(InPlace, ASourceChangedRightAfterTheCallLeavesTheResult) {
  using namespace std::chrono_literals;
  const auto h = counting(S3{64, 64, 32}, 0);  // 128 KiB between each pair: exchanged
  for (auto late : {0ms, 150ms}) {
    SCOPED_TRACE(testing::Message() << "receivers start " << late.count() << " ms late");
    launch({.devices = 4, .backend = host}, [&](device& dev) {
      EXPECT_TRUE(dev.exchanges());
      M1 from({2}, {0, 1});
      M2 to({2}, {2, 3});
      auto x = typemesh::import_tensor<layout<d0(a0)>>(from, h);
      if (to.contains(dev.id())) std::this_thread::sleep_for(late);
      auto y = typemesh::replace_mesh<layout<d1(a0)>>(x, to);
      for (float& v : x.local()) v = -1;  // the source changes at once
      if (to.contains(dev.id())) {
        std::this_thread::sleep_for(10ms);  // long after the senders' change
        expect_local(y, [&](auto i) { return h[i]; });
      }
    });
  }
}

// Host targets of 2 MiB or more are written with non-temporal stores, and
// from 1 MiB their contiguous pieces (the others with ordinary stores); the
// values are the same, in every direction of a replace_mesh and a relayout.
TEST(InPlace, LargeTargetsKeepTheirValues) {
  for (std::int64_t d2_size : {128, 256}) {  // targets of 1 MiB, then 2 MiB
    SCOPED_TRACE(testing::Message() << "d2 = " << d2_size);
    const S3 s{64, 64, d2_size};
    const auto h = counting(s, 0);
    launch({.devices = 4, .backend = host}, [&](device& dev) {
      M1 from({2}, {0, 1});
      M2 to({2}, {2, 3});
      typemesh::mesh<"grid", a0, a1> grid({2, 2});
      auto x = typemesh::import_tensor<layout<d2(a0)>>(from, h);
      auto y = typemesh::replace_mesh<layout<d0(a0)>>(x, to);  // strided rows into the targets
      auto back = typemesh::replace_mesh<layout<d1(a0)>>(y, from);  // contiguous pieces
      auto g = typemesh::import_tensor<layout<d0(a0), d1(a1)>>(grid, h);
      auto swapped = typemesh::relayout<layout<d0(a1)>>(g);  // replicated along a0
      if (to.contains(dev.id())) expect_local(y, [&](auto i) { return h[i]; });
      if (from.contains(dev.id())) expect_local(back, [&](auto i) { return h[i]; });
      expect_local(swapped, [&](auto i) { return h[i]; });
    });
  }
}

// Many transfers back to back between the same devices, both ways and within
// a mesh, each with new values: every one takes its own call's data.
TEST(InPlace, ManyTransfersBackToBackBetweenTheSameDevices) {
  const S3 s{64, 32, 16};  // 32 KiB between each pair of the replace_meshes (exchanged), 8 KiB in the relayout (sent)
  launch({.devices = 4, .backend = host}, [&](device& dev) {
    M1 from({2}, {0, 1});
    M2 to({2}, {2, 3});
    typemesh::mesh<"grid", a0, a1> grid({2, 2});
    std::uint64_t received = 0;
    for (int rep = 0; rep < 100; ++rep) {
      const auto h = counting(s, 1000.0f * rep);
      auto x = typemesh::import_tensor<layout<d0(a0)>>(from, h);
      auto y = typemesh::replace_mesh<layout<d1(a0)>>(x, to);
      auto back = typemesh::replace_mesh<layout<d2(a0)>>(y, from);
      auto g = typemesh::import_tensor<layout<d0(a0), d1(a1)>>(grid, h);
      auto swapped = typemesh::relayout<layout<d0(a1), d1(a0)>>(g);
      if (to.contains(dev.id())) expect_local(y, [&](auto i) { return h[i]; });
      if (from.contains(dev.id())) expect_local(back, [&](auto i) { return h[i]; });
      expect_local(swapped, [&](auto i) { return h[i]; });
      if (testing::Test::HasFailure()) return;
      if (rep == 0) received = dev.traffic().bytes_received();
    }
    // Every repetition moved the same bytes again.
    EXPECT_EQ(dev.traffic().bytes_received(), 100 * received);
  });
}

// A receiver that first waits for something the sender does only after the
// transfer: the sender must not wait for it (a buffered send would not).
TEST(InPlace, AReceiverBusyElsewhereDoesNotHoldTheSender) {
  const auto h = counting(S3{64, 32, 16}, 0);  // 128 KiB: exchanged
  const auto start = std::chrono::steady_clock::now();
  launch({.devices = 2, .timeout = std::chrono::seconds(20), .backend = host}, [&](device& dev) {
    M1 from({1}, {0});
    M2 to({1}, {1});
    auto x = typemesh::import_tensor<layout<d0(a0)>>(from, h);
    std::vector<float> token{1};
    if (dev.id() == 0) {
      auto y = typemesh::replace_mesh<layout<d0(a0)>>(x, to);
      for (float& v : x.local()) v = -1;
      dev.send<float>(1, token, 7);
    } else {
      dev.recv<float>(0, token, 7);
      auto y = typemesh::replace_mesh<layout<d0(a0)>>(x, to);
      expect_local(y, [&](auto i) { return h[i]; });
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// --- Targets that share their source's elements -------------------------------

// Whether t's local elements lie inside x's.
template <class A, class B>
bool within(const A& t, const B& x) {
  const float *p = std::as_const(t).data(), *q = std::as_const(x).data();
  return t.local_size() > 0 && p >= q && p + t.local_size() <= q + x.local_size();
}

// The pipeline's backward move: each device of the first stage keeps half of
// what it held, as one run of its slice. That target shares the source's
// elements (nothing is copied or received), and writing either one afterwards
// leaves the other as it was. Both interleavings: the kept run is the first
// half of the source slice, or the second.
TEST(Shared, AKeptRunOfHalfTheSourceIsSharedNotCopied) {
  const S3 s{8, 4, 4};
  const auto h = counting(s, 0);
  for (bool evens_first : {true, false}) {
    SCOPED_TRACE(evens_first ? "evens first" : "odds first");
    launch(8, [&](device& dev) {
      const auto first = typemesh::devices::first_half(8), second = typemesh::devices::second_half(8);
      M1 stages({8}, evens_first ? typemesh::devices::interleave(first, second)
                                 : typemesh::devices::interleave(second, first));
      M2 evens({4}, first);
      const auto x = typemesh::import_tensor<layout<d0(a0)>>(evens, h);
      dev.traffic().reset();
      auto y = typemesh::replace_mesh<layout<d0(a0)>, typemesh::pipeline>(x, stages);
      expect_local(y, [&](auto i) { return h[i]; });
      const bool keeps = dev.id() < 4;
      const std::int64_t row = 4 * 4;  // each stage's slice: one row of d0
      EXPECT_EQ(dev.traffic().bytes_received(), keeps ? 0u : row * sizeof(float));
      if (!keeps) return;
      ASSERT_TRUE(within(y, x));
      EXPECT_EQ(std::as_const(y).data() - std::as_const(x).data(), evens_first ? 0 : row);
      auto x2 = x;
      for (float& v : x2.local()) v = -1;  // x2 takes its own copy first
      expect_local(y, [&](auto i) { return h[i]; });
      expect_local(x, [&](auto i) { return h[i]; });
      for (float& v : y.local()) v = -2;  // y is written, x stays
      expect_local(x, [&](auto i) { return h[i]; });
      expect_local(y, [](auto) { return -2.0f; });
    });
    // A target whose source is gone holds the elements alone: written in
    // place, at its part of them.
    launch(8, [&](device&) {
      const auto first = typemesh::devices::first_half(8), second = typemesh::devices::second_half(8);
      M1 stages({8}, evens_first ? typemesh::devices::interleave(first, second)
                                 : typemesh::devices::interleave(second, first));
      M2 evens({4}, first);
      auto y = typemesh::replace_mesh<layout<d0(a0)>, typemesh::pipeline>(
          typemesh::import_tensor<layout<d0(a0)>>(evens, h), stages);
      const float* before = std::as_const(y).data();
      for (float& v : y.local()) v = v + 1;
      EXPECT_EQ(std::as_const(y).data(), before);
      expect_local(y, [&](auto i) { return h[i] + 1; });
    });
  }
}

// A target that would keep less than half its source (a replicated tensor
// split four ways), or whose kept part is not one run of the source (split
// along a middle dim), gets elements of its own. A run of half is shared, and
// a move that changes nothing on a device shares everything, also from a
// tensor that is itself a shared part.
TEST(Shared, OnlyRunsOfHalfTheSourceOrMoreAreShared) {
  const S3 s{8, 4, 4};
  const auto h = counting(s, 0);
  launch(8, [&](device& dev) {  // 8: the suite also runs on 8 MPI ranks
    M1 all({4}, {0, 1, 2, 3}), pair({2}, {0, 1});
    M2 same({4}, {0, 1, 2, 3}), pair_again({2}, {0, 1});
    const auto everything = typemesh::import_tensor<typemesh::replicated>(all, h);
    const auto quarter = typemesh::replace_mesh<layout<d0(a0)>>(everything, same);
    if (all.contains(dev.id())) {
      expect_local(quarter, [&](auto i) { return h[i]; });
      EXPECT_FALSE(within(quarter, everything));
    }

    const auto both = typemesh::import_tensor<typemesh::replicated>(pair, h);
    const auto columns = typemesh::replace_mesh<layout<d1(a0)>>(both, pair_again);
    const auto rows = typemesh::replace_mesh<layout<d0(a0)>>(both, pair_again);
    const auto rows_again = typemesh::replace_mesh<layout<d0(a0)>>(rows, pair);
    if (!pair.contains(dev.id())) return;
    expect_local(columns, [&](auto i) { return h[i]; });
    expect_local(rows, [&](auto i) { return h[i]; });
    expect_local(rows_again, [&](auto i) { return h[i]; });
    EXPECT_FALSE(within(columns, both));
    EXPECT_TRUE(within(rows, both));
    EXPECT_EQ(std::as_const(rows).data() - std::as_const(both).data(), dev.id() * 4 * 4 * 4);
    EXPECT_EQ(std::as_const(rows_again).data(), std::as_const(rows).data());
  });
}

}  // namespace

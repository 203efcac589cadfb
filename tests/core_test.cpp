// The compile-time vocabulary and its runtime geometry: slices and groups
// against brute force on random meshes and layouts, and every runtime check.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "allocation_limit.hpp"
#include "support.hpp"

namespace {
using namespace tt;
using typemesh::layout;
using typemesh::mesh;
using typemesh::shape;

// --- Layout algebra, checked at compile time ---------------------------------

using L = layout<d0(a0), d2(a2)>;
static_assert(L::splits<d0> && !L::splits<d1> && L::splits<d2>);
static_assert(L::uses<a0> && !L::uses<a1>);
static_assert(std::is_same_v<L::axis_of<d2>, a2> && std::is_same_v<L::axis_of<d1>, void>);
static_assert(std::is_same_v<L::dim_on<a0>, d0> && std::is_same_v<L::dim_on<a1>, void>);
static_assert(std::is_same_v<L::without<d0>, layout<d2(a2)>>);
static_assert(std::is_same_v<L::with<d1, a1>, layout<d0(a0), d2(a2), d1(a1)>>);
// The arrow spelling names the same mapping.
static_assert(std::is_same_v<layout<auto(d0)->a0>::axis_of<d0>, a0>);
static_assert(shape<d0, d1, d2>::index_of<d2> == 2 && !shape<d0>::has<d1>);

// --- The shape algebra (core/shape_algebra.hpp), against hand-written results ---

struct d3 : typemesh::dim<"d3"> {};

using S3 = shape<d0, d1, d2>;
static_assert(std::is_same_v<typemesh::dims_of<S3>, typemesh::type_list<d0, d1, d2>>);
static_assert(std::is_same_v<typemesh::shape_without<S3, d1>, shape<d0, d2>>);
static_assert(std::is_same_v<typemesh::shape_without<S3, d2, d0, d3>, shape<d1>>);  // d3 absent: ignored
static_assert(std::is_same_v<typemesh::shape_without<S3, d0, d1, d2>, shape<>>);
static_assert(std::is_same_v<typemesh::shape_union<shape<d2, d0>, shape<d1, d0, d3>>, shape<d2, d0, d1, d3>>);
static_assert(std::is_same_v<typemesh::shape_union<shape<>, S3>, S3>);
static_assert(std::is_same_v<typemesh::shape_minus<S3, shape<d2, d3, d0>>, shape<d1>>);
static_assert(std::is_same_v<typemesh::shape_common<S3, shape<d2, d3, d0>>, shape<d0, d2>>);
static_assert(std::is_same_v<typemesh::shape_replace<S3, d1, d3>, shape<d0, d3, d2>>);
static_assert(std::is_same_v<typemesh::shape_prepend<S3, d3>, shape<d3, d0, d1, d2>>);
static_assert(std::is_same_v<typemesh::shape_append<shape<d1>, d3, d0>, shape<d1, d3, d0>>);
static_assert(typemesh::shape_contains<S3, d2, d0> && !typemesh::shape_contains<S3, d0, d3>);
static_assert(typemesh::shape_index_of<S3, d1> == 1 && typemesh::shape_index_of<S3, d3> == 3);
static_assert(typemesh::same_dims<S3, shape<d2, d0, d1>> && !typemesh::same_dims<S3, shape<d2, d0>> &&
              !typemesh::same_dims<shape<d0, d1>, shape<d0, d3>>);
static_assert(typemesh::detail::count<d1, d0, d1, d1> == 2 && typemesh::detail::index_of<d2, d0, d1> == 2);

TEST(ShapeAlgebra, ShapeFromTakesEachSizeFromTheFirstShapeWithTheDim) {
  const shape<d0, d1, d2> x{2, 3, 4};
  const shape<d2, d3> w{7, 5};  // d2 disagrees: x comes first, so x's size wins
  const auto out = typemesh::shape_from<shape<d3, d0, d2>>(x, w);
  EXPECT_EQ(out, (shape<d3, d0, d2>{5, 2, 4}));
  EXPECT_EQ(typemesh::shape_from<shape<>>(x).rank, 0u);
}

// --- Random layouts: every injective map of {d0,d1,d2} into a mesh's axes ----

// Code c0 + 4 c1 + 16 c2; digit 0 leaves the dim whole, k puts it on axis k-1.
template <int Code>
using layout_of =
    typename typemesh::detail::concat_layouts<typename tt::entry<d0, Code % 4>::type, typename tt::entry<d1, Code / 4 % 4>::type,
                                              typename tt::entry<d2, Code / 16>::type>::type;

constexpr bool valid_code(int code, int mesh_rank) {
  int c[3] = {code % 4, code / 4 % 4, code / 16};
  for (int i = 0; i < 3; ++i) {
    if (c[i] > mesh_rank) return false;
    for (int j = 0; j < i; ++j)
      if (c[i] && c[i] == c[j]) return false;
  }
  return true;
}

template <int R>
struct mesh_of;
template <>
struct mesh_of<1> {
  using type = mesh<"m1", a0>;
};
template <>
struct mesh_of<2> {
  using type = mesh<"m2", a0, a1>;
};
template <>
struct mesh_of<3> {
  using type = mesh<"m3", a0, a1, a2>;
};

struct trial {
  std::vector<int> axis_sizes;
  std::vector<int> devices;
  std::array<std::int64_t, 3> dims;
};

// Coordinates of every mesh position, written out by counting, independently
// of the mesh's own arithmetic.
std::vector<std::vector<int>> coordinates_by_counting(const std::vector<int>& sizes) {
  std::vector<std::vector<int>> all;
  std::vector<int> c(sizes.size(), 0);
  for (;;) {
    all.push_back(c);
    int a = static_cast<int>(sizes.size()) - 1;
    while (a >= 0 && ++c[a] == sizes[a]) c[a--] = 0;
    if (a < 0) return all;
  }
}

template <int R, int Code>
void check_geometry(const trial& t) {
  if constexpr (valid_code(Code, R)) {
    using M = typename mesh_of<R>::type;
    using Lay = layout_of<Code>;
    using P = typemesh::placement<shape<d0, d1, d2>, Lay, M>;
    std::array<int, R> sizes{};
    std::copy(t.axis_sizes.begin(), t.axis_sizes.end(), sizes.begin());
    M m(sizes, t.devices);
    shape<d0, d1, d2> s{t.dims[0], t.dims[1], t.dims[2]};
    const int digits[3] = {Code % 4, Code / 4 % 4, Code / 16};

    auto coords = coordinates_by_counting(t.axis_sizes);
    std::vector<int> owners(s.elements(), 0);
    for (std::size_t p = 0; p < t.devices.size(); ++p) {
      const int dev = t.devices[p];
      ASSERT_EQ(m.coordinate_of(dev)->at(0), coords[p][0]);
      std::array<std::int64_t, 3> lo{s[0], s[1], s[2]}, hi{-1, -1, -1};
      std::int64_t held = 0;
      for (std::int64_t i = 0; i < s[0]; ++i)
        for (std::int64_t j = 0; j < s[1]; ++j)
          for (std::int64_t k = 0; k < s[2]; ++k) {
            std::array<std::int64_t, 3> e{i, j, k};
            bool mine = true;
            for (int d = 0; d < 3; ++d) {
              if (!digits[d]) continue;
              int a = digits[d] - 1;
              std::int64_t block = s[d] / t.axis_sizes[a];
              mine = mine && e[d] / block == coords[p][a];
            }
            if (!mine) continue;
            ++held;
            ++owners[(i * s[1] + j) * s[2] + k];
            for (int d = 0; d < 3; ++d) lo[d] = std::min(lo[d], e[d]), hi[d] = std::max(hi[d], e[d]);
          }
      auto b = P::slice_of(s, m, dev);
      ASSERT_TRUE(b.has_value());
      for (int d = 0; d < 3; ++d) {
        EXPECT_EQ(b->begin[d], lo[d]) << "dim " << d << " device " << dev << " code " << Code;
        EXPECT_EQ(b->extent[d], hi[d] - lo[d] + 1) << "dim " << d << " device " << dev << " code " << Code;
      }
      EXPECT_EQ(b->elements(), held);  // the owned elements form exactly that box
    }
    // Each element is held once per replica: the product of the unused axes.
    int replicas = 1;
    for (int a = 0; a < R; ++a)
      if (std::find(std::begin(digits), std::end(digits), a + 1) == std::end(digits)) replicas *= t.axis_sizes[a];
    for (int o : owners) ASSERT_EQ(o, replicas);
    // A device outside the mesh holds nothing.
    EXPECT_FALSE(P::slice_of(s, m, 1000).has_value());
  }
}

template <int R, int... Codes>
constexpr auto table(std::integer_sequence<int, Codes...>) {
  return std::array<void (*)(const trial&), sizeof...(Codes)>{&check_geometry<R, Codes>...};
}

TEST(Geometry, SlicesMatchBruteForceOnRandomMeshesAndLayouts) {
  std::mt19937 rng(7);
  const auto tables = std::make_tuple(table<1>(std::make_integer_sequence<int, 64>{}),
                                      table<2>(std::make_integer_sequence<int, 64>{}),
                                      table<3>(std::make_integer_sequence<int, 64>{}));
  int checked = 0;
  for (int n = 0; n < 400; ++n) {
    int rank = 1 + rng() % 3;
    trial t;
    do {
      t.axis_sizes.assign(rank, 0);
      for (auto& a : t.axis_sizes) a = 1 + rng() % 8;
    } while (std::accumulate(t.axis_sizes.begin(), t.axis_sizes.end(), 1, std::multiplies<>()) > 32);
    int count = std::accumulate(t.axis_sizes.begin(), t.axis_sizes.end(), 1, std::multiplies<>());
    std::vector<int> ids(100);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    t.devices.assign(ids.begin(), ids.begin() + count);
    int code;
    do code = rng() % 64;
    while (!valid_code(code, rank));
    int digits[3] = {code % 4, code / 4 % 4, code / 16};
    for (int d = 0; d < 3; ++d) t.dims[d] = (digits[d] ? t.axis_sizes[digits[d] - 1] : 1) * (1 + rng() % 3);
    switch (rank) {
      case 1: std::get<0>(tables)[code](t); break;
      case 2: std::get<1>(tables)[code](t); break;
      default: std::get<2>(tables)[code](t); break;
    }
    ++checked;
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(checked, 400);
}

// Groups along any subset of axes, against the definition: same coordinates
// on the other axes, ordered row-major over the chosen ones.
TEST(Geometry, GroupsAlongAxesMatchBruteForce) {
  using M = mesh<"g", a0, a1, a2>;
  std::mt19937 rng(11);
  for (int n = 0; n < 50; ++n) {
    std::array<int, 3> sizes{1 + int(rng() % 4), 1 + int(rng() % 4), 1 + int(rng() % 4)};
    int count = sizes[0] * sizes[1] * sizes[2];
    std::vector<int> devices(count);
    std::iota(devices.begin(), devices.end(), 0);
    std::shuffle(devices.begin(), devices.end(), rng);
    M m(sizes, devices);
    auto coords = coordinates_by_counting({sizes[0], sizes[1], sizes[2]});
    for (int mask = 0; mask < 8; ++mask) {
      std::array<bool, 3> along{bool(mask & 1), bool(mask & 2), bool(mask & 4)};
      for (int p = 0; p < count; ++p) {
        std::vector<int> expected;  // positions in row-major order are already sorted by the chosen axes
        for (int q = 0; q < count; ++q) {
          bool same = true;
          for (int a = 0; a < 3; ++a) same = same && (along[a] || coords[q][a] == coords[p][a]);
          if (same) expected.push_back(devices[q]);
        }
        EXPECT_EQ(m.group_along(devices[p], along).devices, expected);
      }
    }
    EXPECT_EQ(m.group_along<a1>(devices[0]).label, "mesh 'g' along {a1}");
  }
}

// The seed's device relations: all, halves, swapped, interleaved.
TEST(Geometry, SeedMeshRelations) {
  using M = mesh<"m", a0>;
  namespace devices = typemesh::devices;
  std::vector<int> all = devices::all(8), first = devices::first_half(8), second = devices::second_half(8);
  std::vector<int> swapped = devices::concat(second, first), interleaved = devices::interleave(first, second);
  EXPECT_EQ(swapped, (std::vector<int>{4, 5, 6, 7, 0, 1, 2, 3}));
  EXPECT_EQ(interleaved, (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  expect_error<typemesh::device_error>([] { devices::first_half(7); }, {"7 devices do not halve"});
  expect_error<typemesh::device_error>([&] { devices::interleave(first, all); }, {"lists of 4 and 8"});
  EXPECT_EQ(M({8}, all).coordinate_of(5)->at(0), 5);
  EXPECT_FALSE(M({4}, first).contains(5));
  EXPECT_EQ(M({4}, second).coordinate_of(5)->at(0), 1);
  EXPECT_EQ(M({8}, swapped).coordinate_of(0)->at(0), 4);
  EXPECT_EQ(M({8}, interleaved).coordinate_of(4)->at(0), 1);
  using M2 = mesh<"m2", a0, a1>;
  M2 grid({2, 4}, swapped);  // row 0 is the second half
  EXPECT_EQ(grid.device_at({0, 3}), 7);
  EXPECT_EQ(grid.device_at({1, 0}), 0);
}

// A mesh may have any number of axes, none included: one device.
TEST(Geometry, MeshesOfZeroToFourAxes) {
  mesh<"one"> none({});
  EXPECT_EQ(none.device_count(), 1);
  EXPECT_TRUE(none.coordinate_of(0).has_value());
  EXPECT_EQ((typemesh::slice_of<layout<>>(shape<d0>{5}, none, 0)->extent[0]), 5);
  struct a3 : typemesh::axis<"a3"> {};
  mesh<"four", a0, a1, a2, a3> m({2, 1, 3, 2});
  EXPECT_EQ(m.device_at({1, 0, 2, 1}), 1 * 6 + 2 * 2 + 1);
  auto b = typemesh::slice_of<layout<d0(a3), d1(a2)>>(shape<d0, d1>{4, 6}, m, 11);  // coordinate (1, 0, 2, 1)
  EXPECT_EQ(b->begin, (std::array<std::int64_t, 2>{2, 4}));
}

// --- Runtime checks -------------------------------------------------------

TEST(Errors, IndivisibleDimNamesDimAxisAndSizes) {
  using M = mesh<"lstm", a0, a1>;
  M m({2, 4});
  shape<d0, d1> s{6, 10};
  expect_error<typemesh::shape_error>(
      [&] { typemesh::slice_of<layout<d0(a0), d1(a1)>>(s, m, 0); },
      {"dim d1", "size 10", "axis a1", "size 4", "not divisible", "mesh 'lstm'"});
}

TEST(Errors, DeviceListOfWrongLength) {
  using M = mesh<"embed", a0, a1>;
  expect_error<typemesh::shape_error>([] { M({2, 4}, {0, 1, 2}); },
                                      {"mesh 'embed'", "a0=2 a1=4", "needs 8 devices", "[0 1 2]", "has 3"});
}

TEST(Errors, BadAxisSizesAndDeviceIds) {
  using M = mesh<"m", a0, a1>;
  expect_error<typemesh::shape_error>([] { M({0, 4}); }, {"axis a0", "size 0"});
  expect_error<typemesh::device_error>([] { M({2, 2}, {0, 1, 1, 2}); }, {"device 1 appears twice"});
  expect_error<typemesh::device_error>([] { M({2, 1}, {0, -3}); }, {"negative device id -3"});
  M m({2, 2});
  expect_error<typemesh::device_error>([&] { m.device_at({2, 0}); }, {"coordinate 2", "axis a0", "size 2"});
  expect_error<typemesh::device_error>([&] { m.group_along<a0>(9); }, {"device 9 is not in mesh 'm'"});
  expect_error<typemesh::shape_error>([] { shape<d0, d1>(3, -1); }, {"dim d1", "negative size -1"});
}

TEST(Errors, ShapeDescribesItself) {
  EXPECT_EQ((shape<d0, d2>{3, 5}.describe()), "[d0=3 d2=5]");
  EXPECT_EQ((shape<d0, d2>{3, 5}.size<d2>()), 5);
}

// --- Sizes from outside: overflow and allocation -----------------------------

TEST(Sizes, ShapeWhoseElementCountOverflowsNamesItsSizes) {
  const std::int64_t big = std::int64_t{1} << 32;
  expect_error<typemesh::shape_error>([&] { shape<d0, d1>(big, big); },
                                      {"d0=4294967296 d1=4294967296", "number of elements", "overflows"});
  // Each pair fits; only the product of all three does not.
  expect_error<typemesh::shape_error>([] { shape<d0, d1, d2>(1 << 30, 1 << 30, 1 << 30); },
                                      {"d2=1073741824", "overflows"});
  expect_error<typemesh::shape_error>(
      [] { shape<d0, d1>(std::array<std::int64_t, 2>{std::int64_t{3} << 61, 4}); }, {"d0=", "d1=4", "overflows"});
  // An unsigned size above 2^63 - 1 would turn negative or wrap.
  expect_error<typemesh::shape_error>([] { shape<d0>(~std::uint64_t{0}); },
                                      {"18446744073709551615", "does not fit"});
  // The largest products that fit are fine, and exact.
  shape<d0, d1> edge(std::int64_t{1} << 31, std::int64_t{1} << 31);
  EXPECT_EQ(edge.elements(), std::int64_t{1} << 62);
  shape<d0, d1> zero(big, 0);  // zero elements, whatever the other sizes
  EXPECT_EQ(zero.elements(), 0);
}

TEST(Sizes, MeshNamingFarDeviceIdsAllocatesForItsDevicesOnly) {
  using M = mesh<"far", a0, a1>;
  tt::allocation_limit limit(1 << 20);  // a table indexed by device id would need gigabytes
  for (int far : {200'000'000, 2'000'000'000, std::numeric_limits<int>::max()}) {
    M m({2, 1}, {far, 3});
    EXPECT_EQ(m.device_count(), 2);
    EXPECT_TRUE(m.contains(far) && m.contains(3) && !m.contains(0) && !m.contains(far - 1));
    EXPECT_EQ(m.coordinate_of(far), (std::array<int, 2>{0, 0}));
    EXPECT_EQ(m.device_at({1, 0}), 3);
    EXPECT_EQ(m.group_along<a0>(3).devices, (std::vector<int>{far, 3}));
  }
  expect_error<typemesh::device_error>([] { M({2, 1}, {2'000'000'000, 2'000'000'000}); },
                                       {"device 2000000000 appears twice"});
}

// Against brute force: which ids a mesh contains and where, for device lists
// in random order with gaps.
TEST(Sizes, MeshPositionsMatchBruteForce) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int> ids(40);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int> devices(ids.begin(), ids.begin() + 12);
    mesh<"r", a0, a1> m({3, 4}, devices);
    for (int id = -2; id < 42; ++id) {
      auto at = std::find(devices.begin(), devices.end(), id);
      auto c = m.coordinate_of(id);
      ASSERT_EQ(c.has_value(), at != devices.end()) << "device " << id;
      if (c) {
        const int p = static_cast<int>(at - devices.begin());
        EXPECT_EQ(*c, (std::array<int, 2>{p / 4, p % 4})) << "device " << id;
      }
    }
  }
}

TEST(Sizes, MeshWhoseDeviceCountOverflowsNamesItsAxes) {
  using M = mesh<"huge", a0, a1>;
  expect_error<typemesh::shape_error>([] { M({65536, 65536}); },
                                      {"mesh 'huge'", "a0=65536 a1=65536", "number of devices", "overflows"});
  expect_error<typemesh::shape_error>([] { M({65536, 65536}, {0}); }, {"a0=65536 a1=65536", "overflows"});
  using M3 = mesh<"huge3", a0, a1, a2>;
  expect_error<typemesh::shape_error>([] { M3({2048, 2048, 2048}); }, {"a0=2048 a1=2048 a2=2048", "overflows"});
}

TEST(Sizes, DeviceRangesStayWithinInts) {
  const int max = std::numeric_limits<int>::max();
  EXPECT_EQ(typemesh::devices::range(max - 1, 2), (std::vector<int>{max - 1, max}));
  expect_error<typemesh::device_error>([&] { typemesh::devices::range(max, 2); },
                                       {"devices::range(2147483647, 2)", "overflows"});
  EXPECT_TRUE(typemesh::devices::range(max, 0).empty());
}

}  // namespace

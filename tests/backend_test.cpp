// The host space's kernel patterns and strided kernels: every index run
// once, on the device's threads; sums and reductions the same bits at any
// thread count and equal to a plain serial loop; errors from a kernel body
// reach the caller; launch's thread option checked.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gemm_reference.hpp"
#include "support.hpp"

namespace {
namespace be = typemesh::backend;
using typemesh::host_space;

// Runs f on one device whose kernels use `threads` threads.
template <class F>
void with_threads(int threads, F f) {
  typemesh::launch({.devices = 1, .threads_per_device = threads}, [&](typemesh::device&) {
    ASSERT_EQ(be::host::kernel_threads(), threads);
    f();
  });
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ParallelFor, RunsEveryIndexOnce) {
  for (int threads : {1, 2, 3, 7}) {
    for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, be::default_grain - 1, 3 * be::default_grain + 5}) {
      with_threads(threads, [&] {
        std::vector<int> hits(static_cast<std::size_t>(n));
        be::parallel_for(host_space{}, n, [&](std::int64_t i) { ++hits[static_cast<std::size_t>(i)]; });
        EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; })) << threads << " " << n;
      });
    }
  }
}

TEST(ParallelFor, SplitsIntoOnePartPerThreadRunningAtOnce) {
  // The first index of each part waits until every thread has arrived: that
  // only ends (before the 20 s limit) if the parts run on `threads` threads
  // at the same time.
  for (int threads : {2, 3}) {
    with_threads(threads, [&] {
      std::atomic<int> arrived{0};
      std::mutex m;
      std::set<std::thread::id> ids;
      const std::int64_t n = threads * be::default_grain;
      be::parallel_for(host_space{}, n, [&](std::int64_t i) {
        if (i % be::default_grain != 0) return;
        {
          std::lock_guard lk(m);
          ids.insert(std::this_thread::get_id());
        }
        ++arrived;
        const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (arrived.load() < threads && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
      });
      EXPECT_EQ(arrived.load(), threads);
      EXPECT_EQ(static_cast<int>(ids.size()), threads);
    });
  }
}

TEST(ParallelFor, AnExceptionFromABodyReachesTheCallerAndThePoolGoesOn) {
  with_threads(3, [] {
    const std::int64_t n = 4 * be::default_grain;
    EXPECT_THROW(be::parallel_for(host_space{}, n,
                                  [&](std::int64_t i) {
                                    if (i == n - 1) throw std::runtime_error("last index");
                                  }),
                 std::runtime_error);
    std::vector<int> hits(static_cast<std::size_t>(n));
    be::parallel_for(host_space{}, n, [&](std::int64_t i) { hits[static_cast<std::size_t>(i)] = 1; });
    EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), n);
  });
}

TEST(ParallelFor, ANestedCallRunsInlineInsteadOfWaitingOnItself) {
  with_threads(2, [] {
    const std::int64_t n = 2 * be::default_grain;
    std::vector<std::int64_t> out(static_cast<std::size_t>(n));
    be::parallel_for(
        host_space{}, 4,
        [&](std::int64_t part) {
          be::parallel_for(host_space{}, n / 4, [&](std::int64_t i) {
            out[static_cast<std::size_t>(part * (n / 4) + i)] = part * (n / 4) + i;
          });
        },
        1);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out[static_cast<std::size_t>(i)], i);
  });
}

TEST(ParallelSum, SameBitsAtAnyThreadCountAndCloseToADoubleSum) {
  const auto x = random_floats(100'003, 1);
  double exact = 0;
  for (float v : x) exact += v;
  std::vector<float> sums;
  for (int threads : {1, 2, 5}) {
    with_threads(threads, [&] { sums.push_back(be::sum(host_space{}, x.data(), static_cast<std::int64_t>(x.size()))); });
  }
  EXPECT_TRUE(same_bits(sums, std::vector<float>(3, sums[0])));
  EXPECT_NEAR(sums[0], exact, 1e-3);
  with_threads(3, [&] {
    EXPECT_EQ(be::max(host_space{}, x.data(), static_cast<std::int64_t>(x.size()), -2.0f),
              *std::max_element(x.begin(), x.end()));
    EXPECT_EQ(be::sum(host_space{}, x.data(), 0), 0.0f);
    EXPECT_EQ(be::first_where(host_space{}, 100'000, [](std::int64_t i) { return i >= 77'777; }), 77'777);
    EXPECT_EQ(be::first_where(host_space{}, 100'000, [](std::int64_t) { return false; }), 100'000);
  });
}

// dims with the given ids and extents.
be::dims make_dims(std::initializer_list<std::pair<int, std::int64_t>> ds) {
  be::dims d;
  for (auto [id, e] : ds) {
    d.id[d.rank] = id;
    d.extent[d.rank++] = e;
  }
  return d;
}

// The row-major offset of the index `at` (over all ids) in operand d.
std::int64_t offset(const be::dims& d, const std::array<std::int64_t, 4>& at) {
  std::int64_t o = 0;
  for (int i = 0; i < d.rank; ++i) o = o * d.extent[i] + at[static_cast<std::size_t>(d.id[i])];
  return o;
}

// Every index over ids 0..3 with the given extents, row-major.
template <class F>
void each_index(const std::array<std::int64_t, 4>& e, F f) {
  for (std::int64_t a = 0; a < e[0]; ++a)
    for (std::int64_t b = 0; b < e[1]; ++b)
      for (std::int64_t c = 0; c < e[2]; ++c)
        for (std::int64_t d = 0; d < e[3]; ++d) f(std::array<std::int64_t, 4>{a, b, c, d});
}

TEST(StridedKernels, MatchSerialLoopsBitForBitAtAnyThreadCount) {
  // Large enough that the inner dim and the rows both split over threads.
  const std::array<std::int64_t, 4> e{3, 70, 5, 200};
  const auto x_dims = make_dims({{3, e[3]}, {0, e[0]}, {2, e[2]}, {1, e[1]}});  // permuted
  const auto kept = make_dims({{1, e[1]}, {3, e[3]}});
  const auto y_dims = make_dims({{2, e[2]}, {1, e[1]}});
  const auto out_dims = make_dims({{0, e[0]}, {1, e[1]}, {2, e[2]}, {3, e[3]}});
  const auto x = random_floats(static_cast<std::size_t>(x_dims.elements()), 2);
  const auto y = random_floats(static_cast<std::size_t>(y_dims.elements()), 3);

  // Serial references: the sum over ids 0 and 2 in x's row-major order, the
  // transpose, x * y broadcast, and x contracted with y over id 2.
  std::vector<float> sum_ref(static_cast<std::size_t>(kept.elements()), 0.0f),
      copy_ref(static_cast<std::size_t>(out_dims.elements())), prod_ref(copy_ref.size()),
      contract_ref(static_cast<std::size_t>(e[0] * e[1] * e[3]), 0.0f);
  const auto contracted = make_dims({{0, e[0]}, {1, e[1]}, {3, e[3]}});
  const std::array<std::int64_t, 4> x_order{e[3], e[0], e[2], e[1]};
  for (std::int64_t i3 = 0; i3 < x_order[0]; ++i3)
    for (std::int64_t i0 = 0; i0 < x_order[1]; ++i0)
      for (std::int64_t i2 = 0; i2 < x_order[2]; ++i2)
        for (std::int64_t i1 = 0; i1 < x_order[3]; ++i1) {
          const std::array<std::int64_t, 4> at{i0, i1, i2, i3};
          sum_ref[static_cast<std::size_t>(offset(kept, at))] += x[static_cast<std::size_t>(offset(x_dims, at))];
        }
  each_index(e, [&](const auto& at) {
    const float xv = x[static_cast<std::size_t>(offset(x_dims, at))];
    const float yv = y[static_cast<std::size_t>(offset(y_dims, at))];
    copy_ref[static_cast<std::size_t>(offset(out_dims, at))] = xv;
    prod_ref[static_cast<std::size_t>(offset(out_dims, at))] = xv * yv;
  });
  // Contraction: ids 0,1,3 kept; id 2 summed in order.
  for (std::int64_t i0 = 0; i0 < e[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < e[1]; ++i1)
      for (std::int64_t i3 = 0; i3 < e[3]; ++i3) {
        float acc = 0;
        for (std::int64_t i2 = 0; i2 < e[2]; ++i2) {
          const std::array<std::int64_t, 4> at{i0, i1, i2, i3};
          acc += x[static_cast<std::size_t>(offset(x_dims, at))] * y[static_cast<std::size_t>(offset(y_dims, at))];
        }
        contract_ref[static_cast<std::size_t>(offset(contracted, {i0, i1, 0, i3}))] = acc;
      }

  for (int threads : {1, 3}) {
    with_threads(threads, [&] {
      std::vector<float> sum(sum_ref.size()), copy(copy_ref.size()), prod(prod_ref.size()),
          con(contract_ref.size());
      be::reduce(host_space{}, x.data(), x_dims, sum.data(), kept, 0.0f, be::plus<float>{});
      be::broadcast(host_space{}, x.data(), x_dims, copy.data(), out_dims);
      be::binary(host_space{}, x.data(), x_dims, y.data(), y_dims, prod.data(), out_dims,
                 [](float a, float b) { return a * b; });
      be::contract(host_space{}, x.data(), x_dims, y.data(), y_dims, con.data(), contracted);
      EXPECT_TRUE(same_bits(sum, sum_ref)) << threads << " threads";
      EXPECT_TRUE(same_bits(copy, copy_ref)) << threads << " threads";
      EXPECT_TRUE(same_bits(prod, prod_ref)) << threads << " threads";
      // The contraction goes through BLAS (x is packed first): equal to rounding.
      for (std::size_t i = 0; i < con.size(); ++i) ASSERT_NEAR(con[i], contract_ref[i], 1e-5) << i;
    });
  }
}

TEST(StridedKernels, AContractionWithADimInOneOperandOnlyFoldsInOrder) {
  // id 0 only in x: not GEMM-shaped, so the kernel folds it with id 1.
  const auto x_dims = make_dims({{0, 40}, {1, 30}}), y_dims = make_dims({{1, 30}, {2, 50}});
  const auto out_dims = make_dims({{2, 50}});
  const auto x = random_floats(1200, 4), y = random_floats(1500, 5);
  std::vector<float> ref(50, 0.0f);
  for (std::int64_t k = 0; k < 50; ++k) {
    float acc = 0;
    for (std::int64_t i = 0; i < 40; ++i)
      for (std::int64_t j = 0; j < 30; ++j)
        acc += x[static_cast<std::size_t>(i * 30 + j)] * y[static_cast<std::size_t>(j * 50 + k)];
    ref[static_cast<std::size_t>(k)] = acc;
  }
  for (int threads : {1, 2}) {
    with_threads(threads, [&] {
      std::vector<float> out(50);
      be::contract(host_space{}, x.data(), x_dims, y.data(), y_dims, out.data(), out_dims);
      EXPECT_TRUE(same_bits(out, ref)) << threads << " threads";
    });
  }
}

// copy_box joins trailing dims that are whole in both arrays into one row;
// stream_box writes with non-temporal stores from unaligned starts, in
// blocks of rows with a fence each. Both must copy exactly the box, leaving
// everything around it as it was, at any thread count and element size.
template <class T>
void check_box_copies(std::mt19937& rng, int threads) {
  using region = be::region<3>;
  for (int trial = 0; trial < 60; ++trial) {
    std::array<std::int64_t, 3> src_ext{}, dst_ext{}, ext{};
    region from{}, to{};
    for (std::size_t i = 0; i < 3; ++i) {
      ext[i] = 1 + static_cast<std::int64_t>(rng() % (i == 2 ? 300 : 40));
      // Often the whole dim in both arrays, so that dims join.
      src_ext[i] = ext[i] + (rng() % 2 ? 0 : static_cast<std::int64_t>(rng() % 5));
      dst_ext[i] = ext[i] + (rng() % 2 ? 0 : static_cast<std::int64_t>(rng() % 5));
      from.array_extent[i] = src_ext[i];
      to.array_extent[i] = dst_ext[i];
      from.begin[i] = static_cast<std::int64_t>(rng() % (src_ext[i] - ext[i] + 1));
      to.begin[i] = static_cast<std::int64_t>(rng() % (dst_ext[i] - ext[i] + 1));
    }
    const std::size_t ns = static_cast<std::size_t>(src_ext[0] * src_ext[1] * src_ext[2]);
    const std::size_t nd = static_cast<std::size_t>(dst_ext[0] * dst_ext[1] * dst_ext[2]);
    std::vector<T> src(ns), expected(nd);
    for (std::size_t i = 0; i < ns; ++i) src[i] = static_cast<T>(i * 7 + 1);
    for (std::size_t i = 0; i < nd; ++i) expected[i] = static_cast<T>(3);
    for (std::int64_t a = 0; a < ext[0]; ++a)
      for (std::int64_t b = 0; b < ext[1]; ++b)
        for (std::int64_t c = 0; c < ext[2]; ++c) {
          const auto s = ((from.begin[0] + a) * src_ext[1] + from.begin[1] + b) * src_ext[2] + from.begin[2] + c;
          const auto d = ((to.begin[0] + a) * dst_ext[1] + to.begin[1] + b) * dst_ext[2] + to.begin[2] + c;
          expected[static_cast<std::size_t>(d)] = src[static_cast<std::size_t>(s)];
        }
    std::vector<T> copied(nd, static_cast<T>(3)), streamed(nd, static_cast<T>(3));
    with_threads(threads, [&] {
      be::copy_box(host_space{}, src.data(), from, copied.data(), to, ext);
      be::stream_box(host_space{}, src.data(), from, streamed.data(), to, ext);
    });
    ASSERT_EQ(copied, expected) << "copy_box, trial " << trial << ", " << threads << " threads";
    ASSERT_EQ(streamed, expected) << "stream_box, trial " << trial << ", " << threads << " threads";
  }
}

TEST(BoxCopies, CopyAndStreamWriteExactlyTheBox) {
  std::mt19937 rng(17);
  for (int threads : {1, 3}) {
    check_box_copies<float>(rng, threads);
    check_box_copies<std::uint8_t>(rng, threads);
    check_box_copies<double>(rng, threads);
  }
}

// host::copy_bytes takes its own loop from 4 KiB where the two ends are not
// aligned alike modulo 64, else memcpy. It, and its loop on each instruction
// set (SSE2, and AVX where the CPU has it), and stream_bytes' non-temporal
// loop on each (SSE2, AVX, AVX-512, those the CPU has) must copy exactly the
// bytes asked for, for every size, from offsets across a line at either end,
// for sizes around the threshold and the loops' block lengths, leaving the
// bytes around the destination as they were.
TEST(CopyBytes, CopiesExactlyTheBytesFromAnyAlignment) {
  namespace host = be::host;
  using copy = std::function<void(void*, const void*, std::size_t)>;
  std::vector<std::pair<std::string, copy>> copies{
      {"copy_bytes", [](void* d, const void* s, std::size_t n) { host::copy_bytes(d, s, n); }}};
#if TYPEMESH_HOST_SIMD
  copies.emplace_back("copy_bytes' SSE2 loop", [](void* d, const void* s, std::size_t n) {
    host::detail::copy_vectors(d, s, n, host::simd_isa::none);
  });
  if (host::detected_simd_isa() != host::simd_isa::none) {
    copies.emplace_back("copy_bytes' AVX loop", [](void* d, const void* s, std::size_t n) {
      host::detail::copy_vectors(d, s, n, host::detected_simd_isa());
    });
  }
#endif
#if TYPEMESH_STREAM_STORES
  const char* stream_names[] = {"stream_bytes' SSE2 loop", "stream_bytes' AVX loop", "stream_bytes' AVX-512 loop"};
  for (auto isa : {host::simd_isa::none, host::simd_isa::avx2, host::simd_isa::avx512}) {
    if (isa > host::detected_simd_isa()) continue;
    copies.emplace_back(stream_names[static_cast<int>(isa)], [isa](void* d, const void* s, std::size_t n) {
      be::detail::stream_vectors(static_cast<std::byte*>(d), static_cast<const std::byte*>(s), n, isa);
      be::detail::stream_fence();
    });
  }
#endif
  const std::size_t sizes[] = {0, 1, 63, 255, 256, 511, 512, 4095, 4096, 4097, 4096 + 63, 4096 + 127, 5000, 65536 + 77};
  std::vector<unsigned char> src(70'000 + 128), dst(70'000 + 256);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (const auto& [name, copy_with] : copies) {
    for (std::size_t n : sizes) {
      for (std::size_t from : {0, 1, 8, 16, 33, 63}) {
        for (std::size_t to : {0, 4, 16, 31, 32, 48, 63}) {
          std::fill(dst.begin(), dst.end(), static_cast<unsigned char>(0xA5));
          copy_with(dst.data() + 64 + to, src.data() + from, n);
          for (std::size_t i = 0; i < dst.size(); ++i) {
            const bool inside = i >= 64 + to && i < 64 + to + n;
            const unsigned char want = inside ? src[from + i - 64 - to] : static_cast<unsigned char>(0xA5);
            ASSERT_EQ(dst[i], want) << "byte " << i << " of a copy of " << n << " bytes from offset " << from
                                    << " to offset " << to << " by " << name;
          }
        }
      }
    }
  }
}

// Host storage: blocks of 2 MiB and more start on a 2 MiB boundary (so that
// 2 MiB pages can back them), smaller ones as operator new places them;
// every size keeps its values, and a freed block of either kind is reused
// by the next storage of its size on the same thread.
TEST(HostStorage, LargeBlocksStartOnA2MiBBoundaryAndEverySizeKeepsItsValues) {
  constexpr std::uintptr_t two_mib = std::uintptr_t(2) << 20;
  for (std::size_t bytes : {std::size_t(1) << 20, (std::size_t(2) << 20) - 4, std::size_t(2) << 20,
                            (std::size_t(3) << 20) + 8, (std::size_t(9) << 20) + 12}) {
    SCOPED_TRACE(testing::Message() << bytes << " bytes");
    const std::size_t n = bytes / sizeof(float);
    const float* first = nullptr;
    for (int round = 0; round < 2; ++round) {
      be::storage<float, host_space> s(n);
      float* p = be::view(s).data();
      if (bytes >= (std::size_t(2) << 20)) {
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % two_mib, 0u);
      }
      for (std::size_t i = 0; i < n; i += 1021) p[i] = static_cast<float>(i);
      p[n - 1] = -1.0f;
      for (std::size_t i = 0; i + 1 < n; i += 1021) ASSERT_EQ(p[i], static_cast<float>(i));
      EXPECT_EQ(p[n - 1], -1.0f);
      if (round == 0) {
        first = p;
      } else {
        EXPECT_EQ(p, first) << "the freed block was not reused";
      }
    }
  }
}

// A sum (and a max) over x's leading dims, the shape of a bias's gradient:
// whole rows at a time, the same bits as a serial loop per output at any
// number of threads, with more outputs than one block of the kernel holds.
TEST(StridedKernels, ReductionsOverLeadingDimsMatchASerialLoopBitForBit) {
  const auto x_dims = make_dims({{0, 7}, {1, 300}, {2, 3}, {3, 400}});
  const auto kept = make_dims({{2, 3}, {3, 400}});
  const std::int64_t rows = 7 * 300, cols = 3 * 400;
  const auto x = random_floats(static_cast<std::size_t>(rows * cols), 21);
  std::vector<float> sum_ref(static_cast<std::size_t>(cols)), max_ref(sum_ref.size());
  for (std::int64_t c = 0; c < cols; ++c) {
    float sum = 0, top = -1e30f;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float v = x[static_cast<std::size_t>(r * cols + c)];
      sum += v;
      top = top < v ? v : top;
    }
    sum_ref[static_cast<std::size_t>(c)] = sum, max_ref[static_cast<std::size_t>(c)] = top;
  }
  for (int threads : {1, 2, 3}) {
    with_threads(threads, [&] {
      std::vector<float> sum(sum_ref.size()), top(max_ref.size());
      be::reduce(host_space{}, x.data(), x_dims, sum.data(), kept, 0.0f, be::plus<float>{});
      be::reduce(host_space{}, x.data(), x_dims, top.data(), kept, -1e30f, be::maximum<float>{});
      EXPECT_TRUE(same_bits(sum, sum_ref)) << threads << " threads";
      EXPECT_TRUE(same_bits(top, max_ref)) << threads << " threads";
    });
  }
}

// Attention's products: q[b, l, h, d] . k[b, m, h, d] over d, batch dims b
// and h in the middle of both operands. Every order below is a GEMM per
// (b, h) read in place, written in place, written transposed or staged;
// each must equal a plain loop.
TEST(StridedKernels, ContractionsWithBatchDimsInsideTheOperandsMatchALoop) {
  enum { B, L, H, D, M };  // dim ids
  const std::array<std::int64_t, 5> e{2, 5, 3, 4, 6};
  auto dims_of = [&](std::initializer_list<int> ids) {
    be::dims d;
    for (int id : ids) {
      d.id[d.rank] = id;
      d.extent[d.rank++] = e[static_cast<std::size_t>(id)];
    }
    return d;
  };
  auto at = [](const be::dims& d, const std::array<std::int64_t, 5>& i) {
    std::int64_t o = 0;
    for (int r = 0; r < d.rank; ++r) o = o * d.extent[r] + i[static_cast<std::size_t>(d.id[r])];
    return o;
  };
  struct order {
    const char* what;
    be::dims q, k, out;
  };
  const std::vector<order> orders{
      {"q, k, out as attention has them", dims_of({B, L, H, D}), dims_of({B, M, H, D}), dims_of({B, H, L, M})},
      {"out transposed", dims_of({B, L, H, D}), dims_of({B, M, H, D}), dims_of({B, H, M, L})},
      {"out with a batch dim innermost (staged)", dims_of({B, L, H, D}), dims_of({B, M, H, D}),
       dims_of({B, L, M, H})},
      {"k with d outside m", dims_of({H, B, L, D}), dims_of({D, B, H, M}), dims_of({L, B, H, M})},
      {"q with d outside l", dims_of({B, D, H, L}), dims_of({H, M, B, D}), dims_of({H, L, B, M})},
      {"q's d between its batch dims (packed)", dims_of({B, D, L, H}), dims_of({B, M, H, D}), dims_of({B, H, L, M})},
      {"batch dims outermost in all three (one batched call)", dims_of({B, H, L, D}), dims_of({B, H, M, D}),
       dims_of({B, H, L, M})},
      {"batch dims merged, out transposed", dims_of({B, H, L, D}), dims_of({B, H, D, M}), dims_of({B, H, M, L})},
  };
  const auto q = random_floats(2 * 5 * 3 * 4, 11), k = random_floats(2 * 6 * 3 * 4, 12);
  for (const order& o : orders) {
    std::vector<float> ref(static_cast<std::size_t>(o.out.elements()));
    std::array<std::int64_t, 5> i{};
    for (i[B] = 0; i[B] < e[B]; ++i[B])
      for (i[H] = 0; i[H] < e[H]; ++i[H])
        for (i[L] = 0; i[L] < e[L]; ++i[L])
          for (i[M] = 0; i[M] < e[M]; ++i[M]) {
            float acc = 0;
            for (i[D] = 0; i[D] < e[D]; ++i[D]) {
              acc += q[static_cast<std::size_t>(at(o.q, i))] * k[static_cast<std::size_t>(at(o.k, i))];
            }
            i[D] = 0;
            ref[static_cast<std::size_t>(at(o.out, i))] = acc;
          }
    for (int threads : {1, 2}) {
      with_threads(threads, [&] {
        std::vector<float> out(ref.size(), -7.0f);
        be::contract(host_space{}, q.data(), o.q, k.data(), o.k, out.data(), o.out);
        for (std::size_t j = 0; j < out.size(); ++j) ASSERT_NEAR(out[j], ref[j], 1e-5) << o.what << ", element " << j;
      });
    }
  }
}

// backend::gemm cuts a large BLAS product into one block of C per kernel
// thread. At one thread it is one BLAS call; at more, every block is a part of
// the same matrix product (against a double loop; the last bits may differ
// from one call's, as with OpenBLAS's own threads).
template <class T>
void check_blas_blocks() {
  struct product {
    bool trans_a, trans_b;
    std::int64_t m, n, k, lda, ldb, ldc;
    T alpha, beta;
  };
  const product cases[] = {
      {false, false, 512, 128, 256, 256, 128, 128, 1, 0},  // blocks of rows
      {true, false, 500, 96, 900, 500, 100, 97, 1, 1},     // A transposed, strides past the edges, k in blocks
      {false, true, 64, 1000, 200, 210, 200, 1000, 1, 0},  // blocks of columns
      {true, true, 72, 700, 333, 80, 333, 701, T(0.5), T(-2)},
      {false, false, 100, 100, 100, 100, 100, 100, 1, 0},  // too small to cut: one call
  };
  for (const product& g : cases) {
    const std::string what = std::string(g.trans_a ? "A^T" : "A") + (g.trans_b ? " B^T" : " B") + " m " +
                             std::to_string(g.m) + " n " + std::to_string(g.n) + " k " + std::to_string(g.k);
    const std::int64_t a_rows = g.trans_a ? g.k : g.m, b_rows = g.trans_b ? g.n : g.k;
    std::vector<T> a(static_cast<std::size_t>(a_rows * g.lda)), b(static_cast<std::size_t>(b_rows * g.ldb)),
        c0(static_cast<std::size_t>(g.m * g.ldc));
    std::mt19937 rng(7);
    std::uniform_real_distribution<T> u(-1, 1);
    for (auto* v : {&a, &b, &c0}) {
      for (auto& x : *v) x = u(rng);
    }
    // The double loop once per product (it is most of the test's time under
    // the sanitizers), each element's bound beside it.
    std::vector<double> want(c0.size()), bound(c0.size());
    for (std::int64_t i = 0; i < g.m; ++i) {
      for (std::int64_t j = 0; j < g.n; ++j) {
        const auto e = static_cast<std::size_t>(i * g.ldc + j);
        const tt::dot_and_scale r = tt::reference_dot(g, a.data(), b.data(), i, j);
        want[e] = double(g.alpha) * r.dot + double(g.beta) * c0[e];
        bound[e] = 4 * double(std::numeric_limits<T>::epsilon()) * (r.scale + std::abs(double(c0[e])) + 1);
      }
    }
    const auto check = [&](const std::vector<T>& got, int threads) {
      for (std::int64_t i = 0; i < g.m; ++i) {
        for (std::int64_t j = 0; j < g.ldc; ++j) {
          const auto e = static_cast<std::size_t>(i * g.ldc + j);
          if (j >= g.n) {
            ASSERT_EQ(got[e], c0[e]) << what << " at " << threads << " threads: a column past C's was written";
            continue;
          }
          ASSERT_NEAR(got[e], want[e], bound[e]) << what << " at " << threads << " threads, (" << i << ", " << j
                                                 << ")";
        }
      }
    };
    for (int threads : {1, 2, 3, 4}) {
      std::vector<T> got = c0;
      with_threads(threads, [&] {
        EXPECT_EQ(be::blas_blocks(g.m, g.n, g.k), g.m * g.n * g.k > 8'000'000 ? threads : 1) << what;
        be::gemm(host_space{}, g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a.data(), g.lda, b.data(), g.ldb,
                 g.beta, got.data(), g.ldc);
      });
      check(got, threads);
      if (threads == 1) {  // one BLAS call
        std::vector<T> direct = c0;
        be::blas_gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a.data(), g.lda, b.data(), g.ldb, g.beta,
                      direct.data(), g.ldc);
        EXPECT_EQ(std::memcmp(got.data(), direct.data(), got.size() * sizeof(T)), 0) << what;
      }
    }
  }
}

TEST(BlasGemm, BlocksOnTheKernelThreadsMakeTheWholeProduct) {
  check_blas_blocks<float>();
  check_blas_blocks<double>();
}

// A batch of products as many as the threads or more is spread over them,
// each product whole on one thread: the bits of one BLAS call per product.
TEST(BlasGemm, ABatchOfProductsGivesEachProductsOwnCall) {
  const std::int64_t m = 64, n = 48, k = 40, count = 7, lda = 40, ldb = 50, ldc = 49;
  const std::int64_t sa = m * lda + 3, sb = n * ldb + 5, sc = m * ldc + 2;  // B stored transposed
  const auto a = random_floats(static_cast<std::size_t>(count * sa), 3);
  const auto b = random_floats(static_cast<std::size_t>(count * sb), 4);
  const auto c0 = random_floats(static_cast<std::size_t>(count * sc), 5);
  std::vector<float> want = c0;
  for (std::int64_t i = 0; i < count; ++i) {
    be::blas_gemm(false, true, m, n, k, 1.5f, a.data() + i * sa, lda, b.data() + i * sb, ldb, 0.5f,
                  want.data() + i * sc, ldc);
  }
  for (int threads : {1, 2, 3, 4}) {
    std::vector<float> got = c0;
    with_threads(threads, [&] {
      be::gemm_batched(host_space{}, false, true, m, n, k, 1.5f, a.data(), lda, sa, b.data(), ldb, sb, 0.5f,
                       got.data(), ldc, sc, count);
    });
    EXPECT_TRUE(same_bits(got, want)) << threads << " threads";
  }
}

TEST(Launch, ThreadsPerDeviceDefaultsToTheCoresSharedAndRejectsNegatives) {
  typemesh::launch({.devices = 2}, [](typemesh::device&) {
    EXPECT_EQ(be::host::kernel_threads(), be::blas_threads_per_device(2));
  });
  tt::expect_error<typemesh::device_error>(
      [] { typemesh::launch({.devices = 1, .threads_per_device = -2}, [](typemesh::device&) {}); },
      {"threads_per_device", "-2"});
  EXPECT_EQ(be::host::kernel_threads(), 1);  // outside a device
}

}  // namespace

// Direct convolution on the host, float only: no im2col matrix and no GEMM
// packing. backend/conv.hpp calls it for the forward product, the filter's
// gradient and (stride 1) the image's gradient when direct_conv_suits()
// says so, and falls back to im2col + GEMM otherwise.
//
// Layouts as in backend/conv.hpp: images [images, height, width, channels],
// filters [height, width, channels, out-channels], outputs [images, out
// height, out width, out-channels].
//
// The kernels are compiled for AVX-512 and for AVX2 and picked at run time
// (host/simd.hpp); one template body serves both widths. Where neither
// target exists (other CPUs, other compilers, nvcc), the direct path is off
// and conv.hpp uses im2col.
//
// Sums run in one fixed order per output element (forward: taps row by row,
// then in-channels; filter gradient: output pixels in order), whichever
// thread computes them, so results have the same bits at any thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "typemesh/backend/host/simd.hpp"
#include "typemesh/backend/parallel.hpp"
#include "typemesh/backend/storage.hpp"

#define TYPEMESH_DIRECT_CONV TYPEMESH_HOST_SIMD

namespace typemesh::backend::host {

using conv_isa = simd_isa;

// One convolution for the direct kernels: the output's size is given, not
// derived, so the image gradient can run as a forward convolution of the
// output gradient.
struct direct_conv_shape {
  std::int64_t images = 0, in_h = 0, in_w = 0, channels = 0, out_channels = 0;
  std::int64_t filter_h = 1, filter_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  std::int64_t out_h = 0, out_w = 0;
};

// The strongest set the direct kernels may use, for tests and benchmarks
// that compare the paths; none turns the direct path off.
inline std::atomic<conv_isa>& direct_conv_limit() {
  static std::atomic<conv_isa> limit{conv_isa::avx512};
  return limit;
}

inline conv_isa direct_conv_isa() { return std::min(detected_simd_isa(), direct_conv_limit().load()); }

// The instruction set for `channels` vector lanes: the strongest there is
// with a multiple of 8, none otherwise. AVX-512's kernels end a block of 8
// mod 16 channels with an 8-lane vector.
inline conv_isa direct_conv_isa_for(std::int64_t channels) {
  return channels % 8 == 0 ? direct_conv_isa() : conv_isa::none;
}

// The widest convolution, in in- and out-channels alike, that the AVX2
// kernels take. They hold 32 out-channels by 3 pixels in their 16 registers
// and read the input once per block of 32, so past 64 channels on either
// side im2col + GEMM was faster on an AVX2 CPU (Zen 3) for nearly every
// product at 96 to 384 channels (up to 2.7x), where at 32-64 the direct
// kernels took 0.5-0.9 of its time (docs/performance.md, "Direct
// convolution on an AVX2 CPU"). AVX-512's kernels, with twice the lanes
// and registers, keep every width.
inline constexpr std::int64_t avx2_direct_max_channels = 64;

// `isa`, or none where its kernels would be slower than im2col for `s`.
inline conv_isa where_faster(conv_isa isa, const direct_conv_shape& s) {
  const bool wide = s.channels > avx2_direct_max_channels || s.out_channels > avx2_direct_max_channels;
  return isa == conv_isa::avx2 && wide ? conv_isa::none : isa;
}

// The rule: out-channels a multiple of 8, any filter size, stride and
// padding; on AVX2, at most avx2_direct_max_channels in- and out-channels.
// The image gradient runs as a forward convolution whose out-channels are
// the in-channels, so it needs stride 1 and in-channels a multiple of 8.
inline conv_isa direct_conv_suits(const direct_conv_shape& s) {
  return where_faster(direct_conv_isa_for(s.out_channels), s);
}
inline conv_isa direct_conv_image_grad_suits(const direct_conv_shape& s) {
  return s.stride_h == 1 && s.stride_w == 1 ? where_faster(direct_conv_isa_for(s.channels), s) : conv_isa::none;
}

#if TYPEMESH_DIRECT_CONV
namespace direct {

using simd::load;
using simd::store;
using simd::v16;
using simd::v8;

// The vector of half V's lanes, for a block's last 8 out-channels in
// AVX-512's kernels (24 out-channels: one vector of 16, one of 8).
template <class V>
struct half_of;
template <>
struct half_of<v16> {
  using type = v8;
};

// A block of out-channels: NV vectors of V, then one of half V's lanes
// where H (AVX-512 only). Arrays of accumulators and loaded vectors are
// sized slots<NV>, never 0 (NV is 0 in an 8-channel block).
template <int NV>
inline constexpr int slots = NV > 0 ? NV : 1;

// Output pixels [ow0, ow0 + P) of row (b, oh), out-channels [k0, k0 + NV
// lanes + H half lanes): P x (NV + H) accumulators; for each tap, each
// in-channel: NV (+ H) filter vectors, and one broadcast input value per
// pixel. Taps above or below the image are skipped; taps left or right of
// it read `zeros`.
template <class V, int NV, bool H, int P>
[[gnu::always_inline]] inline void forward_block(const float* x, const float* f, float* y,
                                                 const direct_conv_shape& g, const float* zeros, std::int64_t b,
                                                 std::int64_t oh, std::int64_t ow0, std::int64_t k0) {
  constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(float));
  using half = typename std::conditional_t<H, half_of<V>, std::type_identity<V>>::type;
  const std::int64_t c = g.channels, k = g.out_channels;
  V acc[P][slots<NV>];
  half acc_h[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[p][v] = V{};
    if constexpr (H) acc_h[p] = half{};
  }
  const std::int64_t ih0 = oh * g.stride_h - g.pad_h;
  const std::int64_t i0 = std::max<std::int64_t>(0, -ih0), i1 = std::min(g.filter_h, g.in_h - ih0);
  for (std::int64_t i = i0; i < i1; ++i) {
    const float* row = x + (b * g.in_h + ih0 + i) * g.in_w * c;
    for (std::int64_t j = 0; j < g.filter_w; ++j) {
      const float* src[P];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const std::int64_t iw = (ow0 + p) * g.stride_w - g.pad_w + j;
        src[p] = iw >= 0 && iw < g.in_w ? row + iw * c : zeros;
      }
      const float* tap = f + (i * g.filter_w + j) * c * k + k0;
      for (std::int64_t ci = 0; ci < c; ++ci, tap += k) {
        V w[slots<NV>];
        half w_h;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) load(w[v], tap + v * lanes);
        if constexpr (H) load(w_h, tap + NV * lanes);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          const float s = src[p][ci];
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[p][v] += w[v] * s;
          if constexpr (H) acc_h[p] += w_h * s;
        }
      }
    }
  }
  float* out = y + ((b * g.out_h + oh) * g.out_w + ow0) * k + k0;
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store(out + p * k + v * lanes, acc[p][v]);
    if constexpr (H) store(out + p * k + NV * lanes, acc_h[p]);
  }
}

// forward_block for a block of n <= P pixels.
template <class V, int NV, bool H, int P>
[[gnu::always_inline]] inline void forward_pixels(std::int64_t n, const float* x, const float* f, float* y,
                                                  const direct_conv_shape& g, const float* zeros, std::int64_t b,
                                                  std::int64_t oh, std::int64_t ow0, std::int64_t k0) {
  if constexpr (P > 1) {
    if (n < P) return forward_pixels<V, NV, H, P - 1>(n, x, f, y, g, zeros, b, oh, ow0, k0);
  }
  forward_block<V, NV, H, P>(x, f, y, g, zeros, b, oh, ow0, k0);
}

// One output row's out-channels [k0, k0 + NV lanes + H half lanes), in the
// fewest blocks of at most P pixels, of sizes differing by at most one (32
// pixels: 6, 6, 5, 5, 5, 5), so no block is left nearly empty.
template <class V, int NV, bool H, int P>
[[gnu::always_inline]] inline void forward_row(const float* x, const float* f, float* y, const direct_conv_shape& g,
                                               const float* zeros, std::int64_t b, std::int64_t oh,
                                               std::int64_t k0) {
  const std::int64_t blocks = (g.out_w + P - 1) / P;
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t ow0 = g.out_w * block / blocks, ow1 = g.out_w * (block + 1) / blocks;
    forward_pixels<V, NV, H, P>(ow1 - ow0, x, f, y, g, zeros, b, oh, ow0, k0);
  }
}

// Filter gradient of tap (i, j), in-channels [c0, c0 + CB) counted from the
// tap's first (where filter_row_span allows, c0 + CB may run on into the
// row's next taps) and out-channels [k0, k0 + NV lanes + H half lanes), over
// output rows [row0, row1) (row = image * out_h + out row): adds, pixel by
// pixel in order, x[pixel moved by the tap] * d_out[pixel] to the sums kept
// in df.
template <class V, int NV, bool H, int CB>
[[gnu::always_inline]] inline void filter_rows(const float* x, const float* dy, float* df,
                                               const direct_conv_shape& g, std::int64_t row0, std::int64_t row1,
                                               std::int64_t i, std::int64_t j, std::int64_t c0, std::int64_t k0) {
  constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(float));
  using half = typename std::conditional_t<H, half_of<V>, std::type_identity<V>>::type;
  const std::int64_t c = g.channels, k = g.out_channels;
  // The output columns whose tap j lands inside the image: 0 <= ow * stride - pad + j < in_w.
  const std::int64_t lo = g.pad_w - j, hi = g.in_w - 1 + g.pad_w - j;
  const std::int64_t ow0 = lo <= 0 ? 0 : (lo + g.stride_w - 1) / g.stride_w;
  const std::int64_t ow1 = hi < 0 ? 0 : std::min(g.out_w, hi / g.stride_w + 1);
  if (ow0 >= ow1) return;
  float* d = df + ((i * g.filter_w + j) * c + c0) * k + k0;
  V acc[CB][slots<NV>];
  half acc_h[CB];
#pragma GCC unroll 8
  for (int q = 0; q < CB; ++q) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) load(acc[q][v], d + q * k + v * lanes);
    if constexpr (H) load(acc_h[q], d + q * k + NV * lanes);
  }
  const std::int64_t x_step = g.stride_w * c;
  std::int64_t b = row0 / g.out_h, oh = row0 % g.out_h;
  for (std::int64_t row = row0; row < row1; ++row, ++oh) {
    if (oh == g.out_h) oh = 0, ++b;
    const std::int64_t ih = oh * g.stride_h - g.pad_h + i;
    if (ih < 0 || ih >= g.in_h) continue;
    const float* xp = x + ((b * g.in_h + ih) * g.in_w + ow0 * g.stride_w - g.pad_w + j) * c + c0;
    const float* dp = dy + (row * g.out_w + ow0) * k + k0;
    for (std::int64_t ow = ow0; ow < ow1; ++ow, xp += x_step, dp += k) {
      V e[slots<NV>];
      half e_h;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) load(e[v], dp + v * lanes);
      if constexpr (H) load(e_h, dp + NV * lanes);
#pragma GCC unroll 8
      for (int q = 0; q < CB; ++q) {
        const float s = xp[q];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[q][v] += e[v] * s;
        if constexpr (H) acc_h[q] += e_h * s;
      }
    }
  }
#pragma GCC unroll 8
  for (int q = 0; q < CB; ++q) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store(d + q * k + v * lanes, acc[q][v]);
    if constexpr (H) store(d + q * k + NV * lanes, acc_h[q]);
  }
}

// How one instruction set blocks the work: out-channels in blocks of `wide`
// vectors, the rest (1 to wide - 1 vectors) in one last block; `pixels`
// output pixels per forward block, `channels` in-channels per filter-gradient
// block (the rest in one block). Sized so the accumulators and the loaded
// vectors fit the registers.
template <class V, int Wide, int Pixels, int Channels>
struct blocking {
  using vec = V;
  static constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(float));
  static constexpr int wide = Wide, pixels = Pixels, channels = Channels;
  static constexpr std::int64_t wide_width = std::int64_t{Wide} * lanes;
  // Whether the last block may end in half a vector (8 of 16 lanes).
  static constexpr bool halves = lanes == 16;
};
using avx512_blocking = blocking<v16, 4, 6, 6>;  // 24 accumulators of 32 registers
using avx2_blocking = blocking<v8, 4, 3, 3>;     // 12 accumulators of 16 registers

// Out-channel blocks: k / wide_width wide ones, then the rest in one; block
// b starts at out-channel b * wide_width.
template <class B>
inline std::int64_t out_blocks(std::int64_t k) {
  return k / B::wide_width + (k % B::wide_width != 0 ? 1 : 0);
}
// The whole vectors of out-channel block `block`: wide, or the rest's.
template <class B>
inline int block_vectors(std::int64_t block, std::int64_t k) {
  return block < k / B::wide_width ? B::wide : static_cast<int>(k % B::wide_width / B::lanes);
}
// Whether block `block` ends in half a vector: the last one, where k is 8
// mod 16 in AVX-512's kernels (direct_conv_isa_for keeps k a multiple of 8).
template <class B>
inline bool block_half(std::int64_t block, std::int64_t k) {
  return B::halves && block == k / B::wide_width && k % B::lanes != 0;
}
static_assert(avx512_blocking::wide == 4 && avx2_blocking::wide == 4,
              "with_block's switch on a block's vectors goes up to 4");
// In-channel blocks of the filter gradient: c / channels full ones, then
// the rest in one. Each block's sums are separate chains of additions that
// wait on each other's latency only, so the rest is not cut further: 3
// in-channels of 24 out-channels are 6 chains in one block, against 4 and 2
// as a pair and a single channel, which made AVX-512 slower than AVX2 on
// AlexNet's first layer.
template <class B>
inline std::int64_t in_blocks(std::int64_t c) {
  return c / B::channels + (c % B::channels != 0 ? 1 : 0);
}

// Calls call.template run<NV, H>() for a block of `vectors` whole vectors,
// ending in half a vector where `half`: the one switch from a block's size
// to the kernels' template arguments, for the forward and the filter
// gradient. `call` is a struct whose member is always inlined, not a
// lambda: a lambda's body would be compiled for the plain target, not the
// instruction set's function it is called from.
template <class B, class Call>
[[gnu::always_inline]] inline void with_block(int vectors, bool half, const Call& call) {
  if constexpr (B::halves) {
    if (half) {
      switch (vectors) {
        case 0: return call.template run<0, true>();
        case 1: return call.template run<1, true>();
        case 2: return call.template run<2, true>();
        default: return call.template run<3, true>();
      }
    }
  }
  switch (vectors) {
    case 1: return call.template run<1, false>();
    case 2: return call.template run<2, false>();
    case 3: return call.template run<3, false>();
    default: return call.template run<4, false>();
  }
}

// forward_row of one output row and out-channel block, for with_block.
template <class B>
struct forward_row_call {
  const float *x, *f;
  float* y;
  const direct_conv_shape& g;
  const float* zeros;
  std::int64_t b, oh, k0;
  template <int NV, bool H>
  [[gnu::always_inline]] void run() const {
    forward_row<typename B::vec, NV, H, B::pixels>(x, f, y, g, zeros, b, oh, k0);
  }
};

// Forward item: output row item / blocks, out-channel block item % blocks.
template <class B>
[[gnu::always_inline]] inline void forward_item(const float* x, const float* f, float* y, const direct_conv_shape& g,
                                                const float* zeros, std::int64_t item) {
  const std::int64_t blocks = out_blocks<B>(g.out_channels);
  const std::int64_t row = item / blocks, block = item % blocks;
  const std::int64_t b = row / g.out_h, oh = row % g.out_h, k0 = block * B::wide_width;
  with_block<B>(block_vectors<B>(block, g.out_channels), block_half<B>(block, g.out_channels),
                forward_row_call<B>{x, f, y, g, zeros, b, oh, k0});
}

// filter_rows for a block of 1 to B::channels in-channels.
template <class B, int NV, bool H>
[[gnu::always_inline]] inline void filter_block(const float* x, const float* dy, float* df,
                                                const direct_conv_shape& g, std::int64_t row0, std::int64_t row1,
                                                std::int64_t i, std::int64_t j, std::int64_t c0, std::int64_t k0,
                                                int channels) {
  using V = typename B::vec;
  static_assert(B::channels >= 3 && B::channels <= 6, "the switch below has a case for 1 to 6 channels");
  switch (channels) {
    case 1: filter_rows<V, NV, H, 1>(x, dy, df, g, row0, row1, i, j, c0, k0); break;
    case 2: filter_rows<V, NV, H, 2>(x, dy, df, g, row0, row1, i, j, c0, k0); break;
    case 3: filter_rows<V, NV, H, 3>(x, dy, df, g, row0, row1, i, j, c0, k0); break;
    case 4:
      if constexpr (B::channels >= 4) filter_rows<V, NV, H, 4>(x, dy, df, g, row0, row1, i, j, c0, k0);
      break;
    case 5:
      if constexpr (B::channels >= 5) filter_rows<V, NV, H, 5>(x, dy, df, g, row0, row1, i, j, c0, k0);
      break;
    default: filter_rows<V, NV, H, B::channels>(x, dy, df, g, row0, row1, i, j, c0, k0); break;
  }
}

// filter_block of one item over a chunk of rows, for with_block.
template <class B>
struct filter_block_call {
  const float *x, *dy;
  float* df;
  const direct_conv_shape& g;
  std::int64_t row0, row1, i, j, c0, k0;
  int channels;
  template <int NV, bool H>
  [[gnu::always_inline]] void run() const {
    filter_block<B, NV, H>(x, dy, df, g, row0, row1, i, j, c0, k0, channels);
  }
};

// The taps of a filter row that one filter-gradient block may span. Taps
// next to each other in a row read pixels next to each other, and their
// gradients are next to each other in the filter, so a row's taps and
// in-channels are one run of filter_w x channels in both. Where every tap of
// a row reads inside the image at every output column (no padding left or
// right), a block takes its in-channels across the row's taps: AlexNet's
// first layer (3 in-channels, 11 taps a row) then has blocks of 6 rather
// than 3, 12 sums going at once with AVX-512 rather than 6 (each sum waits
// on the last add's latency). Each sum still runs over the pixels in order.
inline std::int64_t filter_row_span(const direct_conv_shape& g) {
  const bool inside = g.pad_w == 0 && (g.out_w - 1) * g.stride_w + g.filter_w <= g.in_w;
  return inside ? g.filter_w : 1;
}

// Filter-gradient items [first, last), numbered (first tap, in-channel
// block, out-channel block), where a block's in-channels run across
// filter_row_span taps: zeroed, then summed over the output rows in order, a
// chunk of rows at a time, all of this group's items per chunk while its
// rows are in cache. The sums wait in df between chunks; a float's store and
// load are exact, so each element's sum is the plain pixel-order sum.
template <class B>
[[gnu::always_inline]] inline void filter_items(const float* x, const float* dy, float* df,
                                                const direct_conv_shape& g, std::int64_t first, std::int64_t last) {
  const std::int64_t c = g.channels, k = g.out_channels;
  const std::int64_t span = filter_row_span(g), row_channels = span * c;
  const std::int64_t kb = out_blocks<B>(k), cb = in_blocks<B>(row_channels);
  struct item_t {
    std::int64_t i, j, c0, k0;
    int channels;  // 1 to B::channels
    int vectors;   // whole out-channel vectors
    bool half;     // and half a vector after them
  };
  std::vector<item_t> items;
  for (std::int64_t item = first; item < last; ++item) {
    const std::int64_t tap = item / (cb * kb) * span, in_block = item / kb % cb;
    const std::int64_t c0 = in_block * B::channels;  // from tap's first in-channel, across the span
    const item_t t{tap / g.filter_w,
                   tap % g.filter_w,
                   c0,
                   item % kb * B::wide_width,
                   static_cast<int>(std::min<std::int64_t>(B::channels, row_channels - c0)),
                   block_vectors<B>(item % kb, k),
                   block_half<B>(item % kb, k)};
    items.push_back(t);
    const std::int64_t width = std::int64_t{t.vectors} * B::lanes + (t.half ? B::lanes / 2 : 0);
    for (int q = 0; q < t.channels; ++q) std::fill_n(df + (tap * c + t.c0 + q) * k + t.k0, width, 0.0f);
  }
  // About 2 x out-channels output pixels per chunk (whole rows): d_out's
  // chunk stays in cache while every item passes. Against a fixed 256
  // pixels, on an Emerald Rapids Xeon at one thread: 32 out-channels 1.23x
  // as fast, 64 1.10x, 256 1.06x, 128 level (docs/performance.md).
  const std::int64_t rows = g.images * g.out_h;
  const std::int64_t chunk = std::max<std::int64_t>(1, 2 * k / std::max<std::int64_t>(1, g.out_w));
  for (std::int64_t row0 = 0; row0 < rows; row0 += chunk) {
    const std::int64_t row1 = std::min(rows, row0 + chunk);
    for (const item_t& t : items) {
      with_block<B>(t.vectors, t.half,
                    filter_block_call<B>{x, dy, df, g, row0, row1, t.i, t.j, t.c0, t.k0, t.channels});
    }
  }
}

// The instruction-set-specific functions: the templates above are inlined
// into them and compiled for their target. Not inlined into the
// (plain-target) callers.
__attribute__((target("avx512f,fma"))) inline void forward_avx512(const float* x, const float* f, float* y,
                                                                  const direct_conv_shape& g, const float* zeros,
                                                                  std::int64_t item) {
  forward_item<avx512_blocking>(x, f, y, g, zeros, item);
}
__attribute__((target("avx2,fma"))) inline void forward_avx2(const float* x, const float* f, float* y,
                                                             const direct_conv_shape& g, const float* zeros,
                                                             std::int64_t item) {
  forward_item<avx2_blocking>(x, f, y, g, zeros, item);
}
__attribute__((target("avx512f,fma"))) inline void filter_avx512(const float* x, const float* dy, float* df,
                                                                 const direct_conv_shape& g, std::int64_t first,
                                                                 std::int64_t last) {
  filter_items<avx512_blocking>(x, dy, df, g, first, last);
}
__attribute__((target("avx2,fma"))) inline void filter_avx2(const float* x, const float* dy, float* df,
                                                            const direct_conv_shape& g, std::int64_t first,
                                                            std::int64_t last) {
  filter_items<avx2_blocking>(x, dy, df, g, first, last);
}

}  // namespace direct

// y = x (*) f with the kernels of `isa` (avx2 or avx512; direct_conv_suits).
// One index per output row and out-channel block.
inline void direct_conv_forward(const float* x, const float* f, float* y, const direct_conv_shape& g, conv_isa isa) {
  using namespace direct;
  const std::int64_t blocks = isa == conv_isa::avx512 ? out_blocks<avx512_blocking>(g.out_channels)
                                                      : out_blocks<avx2_blocking>(g.out_channels);
  const std::vector<float> zero_row(static_cast<std::size_t>(g.channels), 0.0f);
  const float* zeros = zero_row.data();
  const std::int64_t work = g.out_w * (g.out_channels / blocks) * g.filter_h * g.filter_w * g.channels;
  parallel_for(
      host_space{}, g.images * g.out_h * blocks,
      [=](std::int64_t item) {
        if (isa == conv_isa::avx512) {
          forward_avx512(x, f, y, g, zeros, item);
        } else {
          forward_avx2(x, f, y, g, zeros, item);
        }
      },
      grain_for(work));
}

// df = the filter gradient of y = x (*) f given dy, summed over every output
// pixel. The items (tap, in-channel block, out-channel block) are split into
// one contiguous group per thread; each group walks the output rows once.
inline void direct_conv_filter_grad(const float* x, const float* dy, float* df, const direct_conv_shape& g,
                                    conv_isa isa) {
  using namespace direct;
  // With fewer in-channels than a full block and out-channels 8 mod 16, AVX2's
  // kernels keep more sums going at once (3 in-channels, 24 out-channels: 9
  // against AVX-512's 6), and each pass waits on the adds' latency.
  const std::int64_t span = filter_row_span(g), row_channels = span * g.channels;
  const bool wide = isa == conv_isa::avx512 &&
                    !(g.out_channels % avx512_blocking::lanes != 0 && row_channels < avx512_blocking::channels);
  const std::int64_t items =
      g.filter_h * g.filter_w / span *
      (wide ? in_blocks<avx512_blocking>(row_channels) : in_blocks<avx2_blocking>(row_channels)) *
      (wide ? out_blocks<avx512_blocking>(g.out_channels) : out_blocks<avx2_blocking>(g.out_channels));
  // A group's work in multiply-adds; small problems stay on one thread.
  const std::int64_t work = g.images * g.out_h * g.out_w * g.filter_h * g.filter_w * g.channels * g.out_channels;
  const std::int64_t groups =
      std::clamp<std::int64_t>(std::min<std::int64_t>(kernel_threads(), work / (16 * default_grain)), 1, items);
  parallel_for(
      host_space{}, groups,
      [=](std::int64_t group) {
        const std::int64_t first = items * group / groups, last = items * (group + 1) / groups;
        if (wide) {
          filter_avx512(x, dy, df, g, first, last);
        } else {
          filter_avx2(x, dy, df, g, first, last);
        }
      },
      1);
}

// dx = the image gradient of y = x (*) f given dy, for stride 1
// (direct_conv_image_grad_suits): the forward convolution of dy with the
// filter turned round (taps reversed, in- and out-channels swapped), padded
// so that every tap that read an image pixel reaches it back.
inline void direct_conv_image_grad(const float* dy, const float* f, float* dx, const direct_conv_shape& g,
                                   conv_isa isa) {
  const std::int64_t fh = g.filter_h, fw = g.filter_w, c = g.channels, k = g.out_channels;
  // From the cache of freed buffers (a fresh one of a few hundred KiB is
  // mapped and faulted in page by page on every call), written in parallel,
  // one row of the turned filter (a tap and an out-channel) per index:
  // AlexNet's step at two threads spent 1.4% here on one thread.
  const scratch<float> turned_filter(static_cast<std::size_t>(fh * fw * c * k));
  float* turned = turned_filter.data();
  parallel_for(
      host_space{}, fh * fw * k,
      [=](std::int64_t row) {
        const std::int64_t tap = row / k, ko = row % k;  // tap of the turned filter
        const float* from = f + (fh * fw - 1 - tap) * c * k + ko;
        float* to = turned + row * c;
        for (std::int64_t ci = 0; ci < c; ++ci) to[ci] = from[ci * k];
      },
      grain_for(c));
  direct_conv_shape t;
  t.images = g.images;
  t.in_h = g.out_h, t.in_w = g.out_w, t.channels = k, t.out_channels = c;
  t.filter_h = fh, t.filter_w = fw;
  t.pad_h = fh - 1 - g.pad_h, t.pad_w = fw - 1 - g.pad_w;
  t.out_h = g.in_h, t.out_w = g.in_w;
  direct_conv_forward(dy, turned, dx, t, isa);
}
#else
// Never called: direct_conv_suits is none here.
inline void direct_conv_forward(const float*, const float*, float*, const direct_conv_shape&, conv_isa) {}
inline void direct_conv_filter_grad(const float*, const float*, float*, const direct_conv_shape&, conv_isa) {}
inline void direct_conv_image_grad(const float*, const float*, float*, const direct_conv_shape&, conv_isa) {}
#endif

}  // namespace typemesh::backend::host

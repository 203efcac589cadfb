// Counter-based random numbers keyed by (seed, name, step, global element
// index). A value depends on where the element sits in the whole tensor, never
// on the layout or the device count, so parameter initialisation and dropout
// masks are the same under every strategy. The numbers and the fills of local
// slices are backend/random.hpp's kernels.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "typemesh/backend/random.hpp"

namespace typemesh {

// What a stream of random numbers is keyed by.
struct rng_key {
  std::uint64_t seed = 0;
  std::string_view name;   // a variable's or a dropout's name
  std::uint64_t step = 0;  // e.g. the training step, for dropout masks
};

namespace random_detail {
constexpr std::uint64_t mix(std::uint64_t z) { return backend::splitmix64(z); }
constexpr std::uint64_t hash(std::string_view s) {  // FNV-1a
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}
}  // namespace random_detail

// What a stream is for: streams of different uses never coincide, even under
// the same key (a dropout named like a variable draws other numbers).
enum class rng_use : std::uint64_t { dropout = 0, initialisation = 1 };

// A stream: uniform(i) and normal(i) for any element index i.
class random_stream {
 public:
  explicit random_stream(const rng_key& k, rng_use use = rng_use::dropout)
      : base_(backend::random_base(k.seed, random_detail::hash(k.name), k.step, static_cast<std::uint64_t>(use))) {}

  // In [0, 1), with 53 random bits.
  double uniform(std::uint64_t i, std::uint64_t lane = 0) const { return backend::random_uniform(base_, i, lane); }
  // Standard normal (Box-Muller on two uniforms of the same index).
  double normal(std::uint64_t i) const { return backend::random_normal(base_, i); }
  // The stream's key bits, which the backend's fills take.
  std::uint64_t base() const { return base_; }

 private:
  std::uint64_t base_;
};

// The row-major strides of a shape: the global index of an element is the sum
// of its coordinates times these.
template <class S>
std::array<std::int64_t, S::rank> row_major_strides(const S& s) {
  std::array<std::int64_t, S::rank> stride{};
  std::int64_t n = 1;
  for (std::size_t i = S::rank; i-- > 0;) {
    stride[i] = n;
    n *= s[i];
  }
  return stride;
}

// Where a tensor's local slice sits in the whole tensor, for the fills of
// backend/random.hpp, each element keyed by the sum of its global coordinates
// times `strides`. Empty on a device outside the tensor's mesh; a scalar is
// one dim of extent 1.
template <class Tensor>
backend::slice_geometry<std::max<std::size_t>(Tensor::rank, 1)> global_index_geometry(
    const Tensor& t, const std::array<std::int64_t, Tensor::rank>& strides) {
  constexpr std::size_t r = Tensor::rank;
  backend::slice_geometry<std::max<std::size_t>(r, 1)> g{};
  if constexpr (r == 0) {
    g.extent[0] = 1;
  } else {
    for (std::size_t i = 0; i < r; ++i) {
      g.extent[i] = t.slice().extent[i];
      g.begin[i] = t.slice().begin[i];
      g.stride[i] = strides[i];
    }
  }
  if (!t.holds_data()) g.extent[0] = 0;
  return g;
}

// The same, keyed by the element's row-major index in the whole tensor.
template <class Tensor>
auto global_index_geometry(const Tensor& t) {
  return global_index_geometry(t, row_major_strides(t.shape()));
}

}  // namespace typemesh

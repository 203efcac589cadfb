// Counter-based random numbers keyed by (seed, name, step, global element
// index). A value depends on where the element sits in the whole tensor, never
// on the layout or the device count, so parameter initialisation and dropout
// masks are the same under every strategy.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace typemesh {

// What a stream of random numbers is keyed by.
struct rng_key {
  std::uint64_t seed = 0;
  std::string_view name;   // a variable's or a dropout's name
  std::uint64_t step = 0;  // e.g. the training step, for dropout masks
};

namespace random_detail {
constexpr std::uint64_t mix(std::uint64_t z) {  // the splitmix64 finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
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
      : base_(random_detail::mix(random_detail::mix(k.seed) ^ random_detail::hash(k.name) ^
                                 random_detail::mix(k.step + 0x632be59bd9b4e019ull) ^
                                 random_detail::mix(static_cast<std::uint64_t>(use) + 0x2545f4914f6cdd1dull))) {}

  // In [0, 1), with 53 random bits.
  double uniform(std::uint64_t i, std::uint64_t lane = 0) const {
    return static_cast<double>(random_detail::mix(base_ ^ random_detail::mix(2 * i + lane)) >> 11) * 0x1.0p-53;
  }
  // Standard normal (Box-Muller on two uniforms of the same index).
  double normal(std::uint64_t i) const {
    const double u = 1.0 - uniform(i, 0), v = uniform(i, 1);
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  std::uint64_t base_;
};

// Calls f(local offset, global row-major index) for every element of a
// tensor's local slice.
template <class Tensor, class F>
void for_each_element(const Tensor& t, F f) {
  constexpr std::size_t r = Tensor::rank;
  const auto& b = t.slice();
  const auto& sizes = t.shape().sizes();
  const std::int64_t n = t.holds_data() ? b.elements() : 0;
  std::array<std::int64_t, r> idx{};
  for (std::int64_t off = 0; off < n; ++off) {
    std::int64_t g = 0;
    for (std::size_t i = 0; i < r; ++i) g = g * sizes[i] + b.begin[i] + idx[i];
    f(off, static_cast<std::uint64_t>(g));
    for (std::size_t i = r; i-- > 0;) {
      if (++idx[i] < b.extent[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace typemesh

// A shape: an ordered list of dims (the type) with their sizes (the value).
//
//   typemesh::shape<batch, k> s{64, 128};
//   s.size<k>() == 128
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/dim.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/type_list.hpp"

namespace typemesh {

template <class... Dims>
class shape {
  static_assert((Dim<Dims> && ...), "typemesh: every entry of shape<...> must be a dim tag");
  static_assert((sizeof(diagnostic::dim_repeated_in_shape<Dims, shape, (detail::count<Dims, Dims...> > 1)>) && ...));

 public:
  static constexpr std::size_t rank = sizeof...(Dims);

  template <class D>
  static constexpr bool has = detail::contains<D, Dims...>;

  // Position of D in the shape.
  template <class D>
  static constexpr std::size_t index_of = detail::index_of<D, Dims...>;

  static constexpr std::array<std::string_view, rank> dim_names{Dims::name...};

  constexpr shape() = default;

  template <std::integral... Sizes>
    requires(sizeof...(Sizes) == rank && rank > 0)
  explicit(false) shape(Sizes... sizes) : sizes_{checked_size(sizes)...} {
    validate();
  }

  explicit shape(const std::array<std::int64_t, rank>& sizes) : shape() {
    sizes_ = sizes;
    validate();
  }

  template <class D>
  std::int64_t size() const {
    static_assert(has<D>, "typemesh: shape::size<D>() names a dim the shape does not have");
    return sizes_[index_of<D>];
  }

  std::int64_t operator[](std::size_t i) const { return sizes_[i]; }
  const std::array<std::int64_t, rank>& sizes() const { return sizes_; }

  // Never overflows: the constructors reject shapes whose product does not
  // fit in 64 bits.
  std::int64_t elements() const {
    std::int64_t n = 1;
    for (auto s : sizes_) n *= s;
    return n;
  }

  // "[batch=64 k=128]", for messages.
  std::string describe() const {
    std::string out = "[";
    for (std::size_t i = 0; i < rank; ++i) {
      out += detail::cat(i ? " " : "", dim_names[i], "=", sizes_[i]);
    }
    return out + "]";
  }

  friend bool operator==(const shape&, const shape&) = default;

 private:
  // A size given as an unsigned or wider integer must survive the conversion
  // to int64: 2^64 - 1 must not become -1, and 2^63 must not wrap.
  template <std::integral I>
  static std::int64_t checked_size(I size) {
    if constexpr (std::is_unsigned_v<I>) {
      if (size > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw shape_error(detail::cat("a shape ", describe_names(), " is given the size ", +size,
                                      ", which does not fit in a 64-bit signed size"));
      }
    }
    return static_cast<std::int64_t>(size);
  }

  // No negative size, and a number of elements that fits in 64 bits, so that
  // elements() and every offset into the tensor are exact.
  void validate() const {
    for (std::size_t i = 0; i < rank; ++i) {
      if (sizes_[i] < 0) {
        throw shape_error(detail::cat("dim ", dim_names[i], " has negative size ", sizes_[i]));
      }
    }
    std::int64_t n = 1;
    for (std::size_t i = 0; i < rank; ++i) {
      if (__builtin_mul_overflow(n, sizes_[i], &n)) {
        throw shape_error(detail::cat("shape ", describe(), ": the number of elements (the product of the sizes) ",
                                      "overflows a 64-bit size"));
      }
    }
  }

  // "[batch k]": the dims alone, for a message about a size not yet stored.
  static std::string describe_names() {
    std::string out = "[";
    for (std::size_t i = 0; i < rank; ++i) out += detail::cat(i ? " " : "", dim_names[i]);
    return out + "]";
  }

  std::array<std::int64_t, rank> sizes_{};
};

template <class T>
inline constexpr bool is_shape = false;
template <class... D>
inline constexpr bool is_shape<shape<D...>> = true;

}  // namespace typemesh

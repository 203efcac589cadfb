// A shape: an ordered list of dims (the type) with their sizes (the value).
//
//   typemesh::shape<batch, k> s{64, 128};
//   s.size<k>() == 128
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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
  explicit(false) shape(Sizes... sizes) : sizes_{static_cast<std::int64_t>(sizes)...} {
    for (std::size_t i = 0; i < rank; ++i) {
      if (sizes_[i] < 0) {
        throw shape_error(detail::cat("dim ", dim_names[i], " has negative size ", sizes_[i]));
      }
    }
  }

  explicit shape(const std::array<std::int64_t, rank>& sizes) : shape() {
    sizes_ = sizes;
    for (std::size_t i = 0; i < rank; ++i) {
      if (sizes_[i] < 0) {
        throw shape_error(detail::cat("dim ", dim_names[i], " has negative size ", sizes_[i]));
      }
    }
  }

  template <class D>
  std::int64_t size() const {
    static_assert(has<D>, "typemesh: shape::size<D>() names a dim the shape does not have");
    return sizes_[index_of<D>];
  }

  std::int64_t operator[](std::size_t i) const { return sizes_[i]; }
  const std::array<std::int64_t, rank>& sizes() const { return sizes_; }

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
  std::array<std::int64_t, rank> sizes_{};
};

template <class T>
inline constexpr bool is_shape = false;
template <class... D>
inline constexpr bool is_shape<shape<D...>> = true;

}  // namespace typemesh

// A whole tensor in host memory, row-major: what a program imports onto a
// mesh and exports back.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <vector>

#include "typemesh/core/error.hpp"
#include "typemesh/core/shape.hpp"

namespace typemesh {

template <class T, class Shape>
class host_tensor {
  static_assert(is_shape<Shape>, "typemesh: host_tensor<T, Shape> needs a typemesh::shape<...>");

 public:
  using value_type = T;
  using shape_type = Shape;
  static constexpr std::size_t rank = Shape::rank;

  host_tensor() = default;
  explicit host_tensor(const Shape& s, T value = T{}) : shape_(s), data_(allocate(s, value)) {}
  host_tensor(const Shape& s, std::vector<T> data) : shape_(s), data_(std::move(data)) {
    if (static_cast<std::int64_t>(data_.size()) != s.elements()) {
      throw shape_error(detail::cat("a host tensor of shape ", s.describe(), " needs ", s.elements(),
                                    " elements, but ", data_.size(), " were given"));
    }
  }

  const Shape& shape() const { return shape_; }
  bool empty() const { return data_.empty(); }
  std::size_t size() const { return data_.size(); }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  std::vector<T>& values() { return data_; }
  const std::vector<T>& values() const { return data_; }

  // Row-major offset of a global index.
  std::int64_t offset(const std::array<std::int64_t, rank>& index) const {
    std::int64_t off = 0;
    for (std::size_t i = 0; i < rank; ++i) off = off * shape_[i] + index[i];
    return off;
  }
  T& operator[](const std::array<std::int64_t, rank>& index) { return data_[offset(index)]; }
  const T& operator[](const std::array<std::int64_t, rank>& index) const { return data_[offset(index)]; }

  friend bool operator==(const host_tensor&, const host_tensor&) = default;

 private:
  // The shape's element count fits in 64 bits (shape checks that); its byte
  // count may still not, or may exceed memory: both are errors naming the
  // shape, not a length_error or bad_alloc from inside std::vector.
  static std::vector<T> allocate(const Shape& s, const T& value) {
    const std::int64_t n = s.elements();
    if (static_cast<std::uint64_t>(n) > std::vector<T>().max_size()) {
      throw shape_error(detail::cat("a host tensor of shape ", s.describe(), " has ", n, " elements of ", sizeof(T),
                                    " bytes each: more bytes than this machine can address"));
    }
    try {
      return std::vector<T>(static_cast<std::size_t>(n), value);
    } catch (const std::bad_alloc&) {
      throw error(detail::cat("a host tensor of shape ", s.describe(), " needs ", n, " elements of ", sizeof(T),
                              " bytes each, and that much memory could not be allocated"));
    }
  }

  Shape shape_{};
  std::vector<T> data_;
};

}  // namespace typemesh

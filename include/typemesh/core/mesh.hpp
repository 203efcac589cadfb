// A mesh: a named n-d grid of devices. The axes are types; the axis sizes and
// the device list are values, given at run time.
//
//   struct axis0 : typemesh::axis<"axis0"> {};
//   using lstm_mesh = typemesh::mesh<"lstm", axis0, axis1>;
//   lstm_mesh m({2, 4}, {4, 5, 6, 7, 0, 1, 2, 3});
//
// Devices are numbered row-major over the axes, the first axis slowest: the
// device at coordinate (i, j) is devices[i * 4 + j].
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/dim.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/core/name.hpp"
#include "typemesh/core/space.hpp"
#include "typemesh/core/type_list.hpp"

namespace typemesh {

// What every mesh is, whatever its name: axes, sizes, devices, in a space.
// The name is a value here and a type only in mesh<> and cuda_mesh<> below,
// so that this class's own template arguments hold no string (nvcc's host
// pass cannot spell a string argument it must write out itself).
template <class Space, class... Axes>
class mesh_base {
  static_assert(typemesh::space<Space>, "typemesh: the space of a mesh must be typemesh::host_space or cuda_space");
  static_assert((Axis<Axes> && ...), "typemesh: every axis of mesh<name, axes...> must be an axis tag");

 public:
  using space = Space;
  static constexpr std::size_t rank = sizeof...(Axes);
  static constexpr std::array<std::string_view, rank> axis_names{Axes::name...};

  template <class A>
  static constexpr bool has = detail::contains<A, Axes...>;

  // Position of axis A among the mesh's axes.
  template <class A>
  static constexpr std::size_t index_of = detail::index_of<A, Axes...>;

  using coords = std::array<int, rank>;

  // Devices 0 .. n-1 in order.
  mesh_base(std::string_view name, const std::array<int, rank>& sizes) : mesh_base(name, sizes, iota(name, sizes)) {}

  mesh_base(std::string_view name, const std::array<int, rank>& sizes, std::vector<int> devices) {
    const std::size_t n = static_cast<std::size_t>(device_count_of(name, sizes));
    if (devices.size() != n) {
      throw shape_error(detail::cat("mesh '", name, "' of shape ", describe_sizes(sizes), " needs ", n,
                                    " devices, but its device list ", detail::list(devices), " has ", devices.size()));
    }
    // The lookup from device id to position is a sorted list, not a table
    // indexed by id: its size is the mesh's, whatever ids it names (a mesh
    // naming device 2000000000 costs no more than one naming device 1).
    // Whether the run has those devices is checked where the mesh meets a
    // device (a tensor on it), before anything is allocated for them.
    std::vector<std::pair<int, int>> index;
    index.reserve(n);
    for (std::size_t p = 0; p < n; ++p) {
      if (devices[p] < 0) {
        throw device_error(detail::cat("mesh '", name, "': device list ", detail::list(devices),
                                       " has a negative device id ", devices[p]));
      }
      index.emplace_back(devices[p], static_cast<int>(p));
    }
    std::sort(index.begin(), index.end());
    for (std::size_t i = 1; i < index.size(); ++i) {
      if (index[i].first == index[i - 1].first) {
        throw device_error(detail::cat("mesh '", name, "': device ", index[i].first,
                                       " appears twice in the device list ", detail::list(devices)));
      }
    }
    auto d = std::make_shared<data>();
    d->name = name;
    d->sizes = sizes;
    d->devices = std::move(devices);
    d->position = std::move(index);
    data_ = std::move(d);
  }

  const std::array<int, rank>& sizes() const { return data_->sizes; }
  int size(std::size_t axis_index) const { return data_->sizes[axis_index]; }

  // The coordinate of `device` on axis A; an error for a device outside the mesh.
  template <class A>
  int coordinate(int device) const {
    static_assert(sizeof(diagnostic::axis_not_in_mesh<A, mesh_base, !has<A>>));
    auto c = coordinate_of(device);
    if (!c) {
      throw device_error(detail::cat("device ", device, " is not in ", describe()));
    }
    return (*c)[index_of<A>];
  }

  template <class A>
  int size() const {
    static_assert(has<A>, "typemesh: mesh::size<A>() names an axis the mesh does not have");
    return data_->sizes[index_of<A>];
  }

  int device_count() const { return static_cast<int>(data_->devices.size()); }
  const std::vector<int>& devices() const { return data_->devices; }

  bool contains(int device) const { return position(device) >= 0; }

  // Row-major coordinate of a device, or nothing for a device outside the mesh.
  std::optional<coords> coordinate_of(int device) const {
    int p = position(device);
    if (p < 0) return std::nullopt;
    coords c{};
    for (std::size_t a = rank; a-- > 0;) {
      c[a] = p % data_->sizes[a];
      p /= data_->sizes[a];
    }
    return c;
  }

  int device_at(const coords& c) const {
    int p = 0;
    for (std::size_t a = 0; a < rank; ++a) {
      if (c[a] < 0 || c[a] >= data_->sizes[a]) {
        throw device_error(detail::cat("mesh '", data_->name, "': coordinate ", c[a], " is outside axis ", axis_names[a],
                                       " of size ", data_->sizes[a]));
      }
      p = p * data_->sizes[a] + c[a];
    }
    return data_->devices[p];
  }

  // The group of `device` along the chosen axes: the devices that share its
  // coordinates on every other axis, ordered row-major over the chosen axes.
  group group_along(int device, const std::array<bool, rank>& along) const {
    auto c = coordinate_of(device);
    if (!c) {
      throw device_error(detail::cat("device ", device, " is not in mesh '", data_->name, "' (devices ",
                                     detail::list(data_->devices), ")"));
    }
    group g;
    g.label = detail::cat("mesh '", data_->name, "' along {");
    bool first = true;
    int members = 1;
    for (std::size_t a = 0; a < rank; ++a) {
      if (!along[a]) continue;
      g.label += detail::cat(first ? "" : " ", axis_names[a]);
      first = false;
      members *= data_->sizes[a];
    }
    g.label += "}";
    g.devices.reserve(members);
    coords m = *c;
    for (int i = 0; i < members; ++i) {
      int rest = i;
      for (std::size_t a = rank; a-- > 0;) {
        if (!along[a]) continue;
        m[a] = rest % data_->sizes[a];
        rest /= data_->sizes[a];
      }
      g.devices.push_back(device_at(m));
    }
    return g;
  }

  template <class... A>
  group group_along(int device) const {
    static_assert((sizeof(diagnostic::axis_not_in_mesh<A, mesh_base, !has<A>>) && ...));
    std::array<bool, rank> along{};
    ((along[index_of<A>] = true), ...);
    return group_along(device, along);
  }

  // "mesh 'lstm' [axis0=2 axis1=4] on devices [4 5 6 7 0 1 2 3]"; a CUDA
  // mesh says "on cuda devices".
  std::string describe() const {
    return detail::cat("mesh '", data_->name, "' ", describe_sizes(data_->sizes), " on ",
                       std::is_same_v<Space, host_space> ? "" : "cuda ", "devices ", detail::list(data_->devices));
  }

  friend bool operator==(const mesh_base& a, const mesh_base& b) {
    return a.data_ == b.data_ || (a.data_->sizes == b.data_->sizes && a.data_->devices == b.data_->devices);
  }

 private:
  struct data {
    std::string_view name;  // a template argument's, which lives as long as the program
    std::array<int, rank> sizes{};
    std::vector<int> devices;
    std::vector<std::pair<int, int>> position;  // (device id, index in devices), sorted by id
  };

  // The number of devices a mesh of these axis sizes has: every axis at least
  // one device, and a product that fits in an int (a device id).
  static int device_count_of(std::string_view name, const std::array<int, rank>& sizes) {
    int n = 1;
    for (std::size_t a = 0; a < rank; ++a) {
      if (sizes[a] < 1) {
        throw shape_error(detail::cat("mesh '", name, "': axis ", axis_names[a], " has size ", sizes[a],
                                      "; every axis needs at least one device"));
      }
      if (__builtin_mul_overflow(n, sizes[a], &n)) {
        throw shape_error(detail::cat("mesh '", name, "' of shape ", describe_sizes(sizes),
                                      ": the number of devices (the product of the axis sizes) overflows an int"));
      }
    }
    return n;
  }

  static std::vector<int> iota(std::string_view name, const std::array<int, rank>& sizes) {
    std::vector<int> v(static_cast<std::size_t>(device_count_of(name, sizes)));
    std::iota(v.begin(), v.end(), 0);
    return v;
  }

  static std::string describe_sizes(const std::array<int, rank>& sizes) {
    std::string out = "[";
    for (std::size_t a = 0; a < rank; ++a) out += detail::cat(a ? " " : "", axis_names[a], "=", sizes[a]);
    return out + "]";
  }

  int position(int device) const {
    const auto& index = data_->position;
    auto it = std::lower_bound(index.begin(), index.end(), std::pair<int, int>{device, -1});
    return it != index.end() && it->first == device ? it->second : -1;
  }

  std::shared_ptr<const data> data_;
};

// A mesh of host devices (threads or MPI ranks), the default.
template <fixed_name Name, class... Axes>
class mesh : public mesh_base<host_space, Axes...> {
  static_assert((sizeof(diagnostic::axis_repeated_in_mesh<Axes, mesh, (detail::count<Axes, Axes...> > 1)>) && ...));

 public:
  static constexpr std::string_view name = Name.view();
  explicit mesh(const std::array<int, sizeof...(Axes)>& sizes) : mesh_base<host_space, Axes...>(name, sizes) {}
  mesh(const std::array<int, sizeof...(Axes)>& sizes, std::vector<int> devices)
      : mesh_base<host_space, Axes...>(name, sizes, std::move(devices)) {}
};

// A mesh of CUDA GPUs: its tensors live in device memory and its kernels run
// on the GPUs (a CUDA build only).
template <fixed_name Name, class... Axes>
class cuda_mesh : public mesh_base<cuda_space, Axes...> {
  static_assert((sizeof(diagnostic::axis_repeated_in_mesh<Axes, cuda_mesh, (detail::count<Axes, Axes...> > 1)>) &&
                 ...));
#if !defined(TYPEMESH_CUDA)
  static_assert(sizeof(Name) == 0,
                "typemesh: a cuda_mesh needs a CUDA build: compile with nvcc (the CMake option TYPEMESH_CUDA)");
#endif

 public:
  static constexpr std::string_view name = Name.view();
  explicit cuda_mesh(const std::array<int, sizeof...(Axes)>& sizes) : mesh_base<cuda_space, Axes...>(name, sizes) {}
  cuda_mesh(const std::array<int, sizeof...(Axes)>& sizes, std::vector<int> devices)
      : mesh_base<cuda_space, Axes...>(name, sizes, std::move(devices)) {}
};

// Detected by members, not by matching mesh<Name, Axes...>: nvcc does not
// deduce class-type template arguments in partial specialisations.
template <class T>
inline constexpr bool is_mesh = requires {
  typename T::coords;
  T::name;
  T::rank;
  T::axis_names;
};

}  // namespace typemesh

// Gathering launch's per-device results on every rank under MPI, so that a
// program reads results[i] exactly as it does with host threads.
//
// A result travels as bytes. What can travel, recursively:
//   - trivially copyable types (numbers, enums, plain structs): as they are;
//   - std::string, std::vector, std::optional, std::pair, std::tuple,
//     std::array of such;
//   - aggregates (structs with public fields and no constructors) of such,
//     field by field, up to 16 fields; so a program's own result struct with
//     strings in it needs nothing extra;
//   - classes with a Boost.Serialization member serialize().
// Anything else fails to compile with a message saying so.
#pragma once

#include <mpi.h>

#include <array>
#include <boost/mpi/packed_iarchive.hpp>
#include <boost/mpi/packed_oarchive.hpp>
#include <boost/mpi/communicator.hpp>
#include <climits>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "typemesh/core/error.hpp"

namespace typemesh::detail {

// ---- counting an aggregate's fields: T{f, f, ...} with a value convertible to anything

struct any_field {
  template <class T>
  operator T() const;  // never defined: used in unevaluated contexts only
};

template <class T, class... Fields>
constexpr std::size_t field_count() {
  if constexpr (sizeof...(Fields) > 16) return sizeof...(Fields);
  else if constexpr (requires { T{Fields{}..., any_field{}}; }) return field_count<T, Fields..., any_field>();
  else return sizeof...(Fields);
}

// Calls f(field...) with references to t's fields.
template <class T, class F>
decltype(auto) with_fields(T& t, F&& f) {
  constexpr std::size_t n = field_count<std::remove_const_t<T>>();
  // clang-format off
  if constexpr (n == 0) return f();
  else if constexpr (n == 1) { auto& [a] = t; return f(a); }
  else if constexpr (n == 2) { auto& [a, b] = t; return f(a, b); }
  else if constexpr (n == 3) { auto& [a, b, c] = t; return f(a, b, c); }
  else if constexpr (n == 4) { auto& [a, b, c, d] = t; return f(a, b, c, d); }
  else if constexpr (n == 5) { auto& [a, b, c, d, e] = t; return f(a, b, c, d, e); }
  else if constexpr (n == 6) { auto& [a, b, c, d, e, g] = t; return f(a, b, c, d, e, g); }
  else if constexpr (n == 7) { auto& [a, b, c, d, e, g, h] = t; return f(a, b, c, d, e, g, h); }
  else if constexpr (n == 8) { auto& [a, b, c, d, e, g, h, i] = t; return f(a, b, c, d, e, g, h, i); }
  else if constexpr (n == 9) { auto& [a, b, c, d, e, g, h, i, j] = t; return f(a, b, c, d, e, g, h, i, j); }
  else if constexpr (n == 10) { auto& [a, b, c, d, e, g, h, i, j, k] = t; return f(a, b, c, d, e, g, h, i, j, k); }
  else if constexpr (n == 11) { auto& [a, b, c, d, e, g, h, i, j, k, l] = t; return f(a, b, c, d, e, g, h, i, j, k, l); }
  else if constexpr (n == 12) { auto& [a, b, c, d, e, g, h, i, j, k, l, m] = t; return f(a, b, c, d, e, g, h, i, j, k, l, m); }
  else if constexpr (n == 13) { auto& [a, b, c, d, e, g, h, i, j, k, l, m, o] = t; return f(a, b, c, d, e, g, h, i, j, k, l, m, o); }
  else if constexpr (n == 14) { auto& [a, b, c, d, e, g, h, i, j, k, l, m, o, p] = t; return f(a, b, c, d, e, g, h, i, j, k, l, m, o, p); }
  else if constexpr (n == 15) { auto& [a, b, c, d, e, g, h, i, j, k, l, m, o, p, q] = t; return f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q); }
  else { auto& [a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, r] = t; return f(a, b, c, d, e, g, h, i, j, k, l, m, o, p, q, r); }
  // clang-format on
}

// ---- what can travel

template <class T>
concept boost_serializable = requires(T& t, boost::mpi::packed_oarchive& ar) { t.serialize(ar, 0u); };

// packable_v<T>(): whether T can travel. packable<T> answers for the types
// listed above, aggregates aside.
template <class T>
constexpr bool packable_v();

template <class T>
struct packable : std::bool_constant<std::is_trivially_copyable_v<T> || boost_serializable<T>> {};
template <class C, class Tr, class A>
struct packable<std::basic_string<C, Tr, A>> : std::true_type {};
template <class T, class A>
struct packable<std::vector<T, A>> : std::bool_constant<packable_v<T>()> {};
template <class T>
struct packable<std::optional<T>> : std::bool_constant<packable_v<T>()> {};
template <class A, class B>
struct packable<std::pair<A, B>> : std::bool_constant<packable_v<A>() && packable_v<B>()> {};
template <class... T>
struct packable<std::tuple<T...>> : std::bool_constant<(packable_v<T>() && ...)> {};
template <class T, std::size_t N>
struct packable<std::array<T, N>> : std::bool_constant<packable_v<T>()> {};

template <class T>
constexpr bool packable_fields() {
  auto all = [](auto&... f) { return std::bool_constant<(packable_v<std::remove_cvref_t<decltype(f)>>() && ...)>{}; };
  return decltype(with_fields(std::declval<T&>(), all))::value;
}

template <class T>
constexpr bool packable_v() {
  if constexpr (packable<T>::value) return true;
  else if constexpr (std::is_aggregate_v<T> && !std::is_array_v<T> && field_count<T>() <= 16) return packable_fields<T>();
  else return false;
}

// ---- bytes out and back

struct byte_writer {
  std::vector<std::byte> bytes;
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
};

struct byte_reader {
  const std::byte* at;
  const std::byte* end;
  void raw(void* p, std::size_t n) {
    if (n > static_cast<std::size_t>(end - at)) throw device_error("a gathered launch result is shorter than its type");
    std::memcpy(p, at, n);
    at += n;
  }
};

template <class T>
void pack(byte_writer& w, const T& v);
template <class T>
void unpack(byte_reader& r, T& v);

template <class T>
void pack(byte_writer& w, const T& v) {
  if constexpr (std::is_trivially_copyable_v<T>) {
    w.raw(&v, sizeof(T));
  } else if constexpr (requires { v.size(); v.data(); typename T::traits_type; }) {  // strings
    const std::size_t n = v.size();
    w.raw(&n, sizeof n);
    w.raw(v.data(), n * sizeof(typename T::value_type));
  } else if constexpr (requires { typename T::allocator_type; v.size(); v.begin(); }) {  // vectors
    const std::size_t n = v.size();
    w.raw(&n, sizeof n);
    for (const auto& x : v) pack(w, x);
  } else if constexpr (requires { v.has_value(); *v; }) {  // optionals
    const bool has = v.has_value();
    w.raw(&has, sizeof has);
    if (has) pack(w, *v);
  } else if constexpr (requires { std::tuple_size<T>::value; }) {  // pairs, tuples, arrays
    std::apply([&](const auto&... x) { (pack(w, x), ...); }, v);
  } else if constexpr (boost_serializable<T>) {
    boost::mpi::communicator self(MPI_COMM_SELF, boost::mpi::comm_attach);
    boost::mpi::packed_oarchive ar(self);
    ar << v;
    const std::size_t n = ar.size();
    w.raw(&n, sizeof n);
    w.raw(ar.address(), n);
  } else {
    with_fields(v, [&](const auto&... f) { (pack(w, f), ...); });
  }
}

template <class T>
void unpack(byte_reader& r, T& v) {
  if constexpr (std::is_trivially_copyable_v<T>) {
    r.raw(&v, sizeof(T));
  } else if constexpr (requires { v.size(); v.data(); typename T::traits_type; }) {
    std::size_t n = 0;
    r.raw(&n, sizeof n);
    v.resize(n);
    r.raw(v.data(), n * sizeof(typename T::value_type));
  } else if constexpr (requires { typename T::allocator_type; v.size(); v.begin(); }) {
    std::size_t n = 0;
    r.raw(&n, sizeof n);
    v.clear();
    v.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      typename T::value_type x{};  // not emplace_back(): vector<bool> hands out proxies
      unpack(r, x);
      v.push_back(std::move(x));
    }
  } else if constexpr (requires { v.has_value(); *v; }) {
    bool has = false;
    r.raw(&has, sizeof has);
    v.reset();
    if (has) unpack(r, v.emplace());
  } else if constexpr (requires { std::tuple_size<T>::value; }) {
    std::apply([&](auto&... x) { (unpack(r, x), ...); }, v);
  } else if constexpr (boost_serializable<T>) {
    std::size_t n = 0;
    r.raw(&n, sizeof n);
    boost::mpi::communicator self(MPI_COMM_SELF, boost::mpi::comm_attach);
    boost::mpi::packed_iarchive ar(self);
    ar.resize(n);
    r.raw(ar.address(), n);
    ar >> v;
  } else {
    with_fields(v, [&](auto&... f) { (unpack(r, f), ...); });
  }
}

// Every rank's `value`, indexed by rank; this rank's own value is moved in.
template <class T>
std::vector<T> mpi_gather_all(MPI_Comm comm, int rank, int size, T value) {
  static_assert(packable_v<T>(),
                "typemesh: under MPI, launch gathers every device's result on every rank, so f's result must be "
                "made of numbers, plain structs, std::string, std::vector, std::optional, std::pair, std::tuple, "
                "std::array, aggregates of these, or classes with a Boost.Serialization serialize() member "
                "(see runtime/mpi_gather.hpp)");
  byte_writer w;
  pack(w, value);
  if (w.bytes.size() > static_cast<std::size_t>(INT_MAX)) {
    throw shape_error(detail::cat("a launch result of ", w.bytes.size(), " bytes is too large to gather under MPI"));
  }
  const int mine = static_cast<int>(w.bytes.size());
  std::vector<int> sizes(size), offsets(size);
  MPI_Allgather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm);
  long long total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = static_cast<int>(total);
    total += sizes[r];
  }
  if (total > INT_MAX) throw shape_error(detail::cat("the launch results hold ", total, " bytes: too large to gather under MPI"));
  std::vector<std::byte> all(static_cast<std::size_t>(total));
  MPI_Allgatherv(w.bytes.data(), mine, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, comm);

  std::vector<T> out;
  out.reserve(size);
  for (int r = 0; r < size; ++r) {
    if (r == rank) {
      out.push_back(std::move(value));
      continue;
    }
    byte_reader reader{all.data() + offsets[r], all.data() + offsets[r] + sizes[r]};
    if constexpr (std::is_default_constructible_v<T>) {
      unpack(reader, out.emplace_back());
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "typemesh: a launch result gathered under MPI needs a default constructor");
      alignas(T) std::byte storage[sizeof(T)];
      reader.raw(storage, sizeof(T));
      out.push_back(*std::launder(reinterpret_cast<T*>(storage)));
    }
  }
  return out;
}

}  // namespace typemesh::detail

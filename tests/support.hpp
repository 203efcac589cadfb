// Tags and helpers shared by the test translation units.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <typemesh/typemesh.hpp>

namespace tt {

struct d0 : typemesh::dim<"d0"> {};
struct d1 : typemesh::dim<"d1"> {};
struct d2 : typemesh::dim<"d2"> {};
struct a0 : typemesh::axis<"a0"> {};
struct a1 : typemesh::axis<"a1"> {};
struct a2 : typemesh::axis<"a2"> {};

// The axis with index I.
template <int I>
using axis_n = std::tuple_element_t<I, std::tuple<a0, a1, a2>>;

// layout<D(axis Digit - 1)>, or layout<> for digit 0: the tests build every
// layout of a shape from a code with one digit per dim.
template <class D, int Digit>
struct entry {
  using type = typemesh::layout<>;
};
template <class D, int Digit>
  requires(Digit > 0)
struct entry<D, Digit> {
  using type = typemesh::layout<D(axis_n<Digit - 1>)>;
};

// Expects every local element of a rank-3 tensor t to equal f(global index).
template <class Tensor, class F>
void expect_local(const Tensor& t, F f) {
  const auto& b = t.slice();
  auto local = t.local();
  ASSERT_EQ(static_cast<std::int64_t>(local.size()), t.holds_data() ? b.elements() : 0);
  std::int64_t at = 0;
  for (std::int64_t i = 0; i < b.extent[0]; ++i)
    for (std::int64_t j = 0; j < b.extent[1]; ++j)
      for (std::int64_t k = 0; k < b.extent[2]; ++k, ++at) {
        std::array<std::int64_t, 3> g{b.begin[0] + i, b.begin[1] + j, b.begin[2] + k};
        ASSERT_EQ(local[at], f(g)) << "device " << t.device() << " at " << g[0] << "," << g[1] << "," << g[2];
      }
}

// Expects `stmt` to throw E with a message containing every one of `parts`.
template <class E, class F>
void expect_error(F&& stmt, std::initializer_list<std::string> parts) {
  try {
    stmt();
    ADD_FAILURE() << "no exception; expected one mentioning " << *parts.begin();
  } catch (const E& e) {
    std::string what = e.what();
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' missing from: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace tt

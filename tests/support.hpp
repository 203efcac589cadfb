// Tags and helpers shared by the test translation units.
#pragma once

#include <gtest/gtest.h>

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

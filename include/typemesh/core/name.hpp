// Compile-time names: the text a dim, axis or mesh is known by in messages.
#pragma once

#include <cstddef>
#include <string_view>

namespace typemesh {

// A string literal usable as a template argument: dim<"batch">.
template <std::size_t N>
struct fixed_name {
  char text[N]{};
  constexpr fixed_name(const char (&s)[N]) {
    for (std::size_t i = 0; i < N; ++i) text[i] = s[i];
  }
  constexpr std::string_view view() const { return {text, N - 1}; }
};

}  // namespace typemesh

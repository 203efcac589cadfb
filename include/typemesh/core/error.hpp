// The error hierarchy. Every message names what is wrong: dims, axes, sizes,
// devices, collectives and groups.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace typemesh {

// Base of everything typemesh throws.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error("typemesh: " + what) {}
};

// A size, extent or index that does not fit: indivisible dims, wrong device
// lists, shapes of the wrong length.
class shape_error : public error {
 public:
  using error::error;
};

// A device id or group that does not exist or does not hold what it should.
class device_error : public error {
 public:
  using error::error;
};

// A collective whose members disagree on what they are doing.
class collective_error : public error {
 public:
  using error::error;
};

// A wait that never completed.
class timeout_error : public collective_error {
 public:
  using collective_error::collective_error;
};

// Thrown on the devices that were stopped because another device failed.
class aborted_error : public error {
 public:
  using error::error;
};

namespace detail {
// Builds a message from pieces: cat("dim ", name, " has size ", n).
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <class Range>
std::string list(const Range& r) {
  std::ostringstream out;
  out << '[';
  bool first = true;
  for (const auto& x : r) {
    out << (first ? "" : " ") << x;
    first = false;
  }
  out << ']';
  return out.str();
}
}  // namespace detail

}  // namespace typemesh

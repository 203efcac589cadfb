// The label every message of a named operation carries (a transfer of
// replace_mesh or relayout, say): which operation sent it and its place in
// the stream from its sender, so that a receiver never takes another call's
// message for its own. A label travels as a small message of its own just
// ahead of the data, on a channel apart from the program's tagged messages;
// every backend keeps the two in order. Where one message costs less than
// two (MPI, up to a few KiB of data) the label leads the data's message
// instead (inline_label_communicator).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <typeinfo>

#include "typemesh/core/error.hpp"
#include "typemesh/runtime/dtype.hpp"

namespace typemesh::detail {

// The channel of labelled messages. Program tags are 0 or more.
inline constexpr int labelled_tag = -1;

inline std::string describe_tag(int tag) { return tag == labelled_tag ? std::string("labelled") : cat("tag ", tag); }

struct message_label {
  static constexpr std::size_t bytes = 256;
  static constexpr std::size_t text_bytes = bytes - 3 * sizeof(std::uint64_t) - 2;

  std::uint64_t identity = 0;  // a hash of the whole description
  std::uint64_t sequence = 0;  // labelled messages from this sender to this receiver before this one
  std::uint64_t count = 0;     // elements of the data message
  dtype type{};
  std::string what;            // the operation, cut to text_bytes

  static std::uint64_t identity_of(std::string_view what) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : what) h = (h ^ c) * 1099511628211ull;
    return h;
  }

  std::array<std::uint8_t, bytes> encode() const {
    std::array<std::uint8_t, bytes> out{};
    std::uint8_t* at = out.data();
    for (std::uint64_t v : {identity, sequence, count}) {
      std::memcpy(at, &v, sizeof v);
      at += sizeof v;
    }
    *at++ = static_cast<std::uint8_t>(type);
    const std::size_t n = std::min(what.size(), text_bytes);
    *at++ = static_cast<std::uint8_t>(std::min<std::size_t>(n, 255));
    std::memcpy(at, what.data(), n);
    return out;
  }

  static message_label decode(const std::uint8_t* in) {
    message_label l;
    for (std::uint64_t* v : {&l.identity, &l.sequence, &l.count}) {
      std::memcpy(v, in, sizeof *v);
      in += sizeof *v;
    }
    l.type = static_cast<dtype>(*in++);
    const std::size_t n = std::min<std::size_t>(*in++, text_bytes);
    l.what.assign(reinterpret_cast<const char*>(in), n);
    return l;
  }
};

// Rethrows the exception in flight as the same kind of typemesh error, its
// message led by the operation that was running: "replace_mesh from ...:
// recv on device 1 ... timed out". Other exceptions pass unchanged, and a
// message that already names the operation is not named twice.
[[noreturn]] inline void rethrow_within(const std::string& op) {
  auto inner = [&](const std::exception& e) -> std::string {
    std::string_view s = e.what();
    if (s.starts_with("typemesh: ")) s.remove_prefix(10);
    return cat(op, ": ", s);
  };
  auto named = [&](const std::exception& e) {
    std::string_view s = e.what();
    if (s.starts_with("typemesh: ")) s.remove_prefix(10);
    return s.starts_with(op);
  };
  try {
    throw;
  } catch (const error& e) {
    if (named(e)) throw;
    // Only the kinds named here are rebuilt; any other kind keeps its type.
    const std::type_info& kind = typeid(e);
    if (kind == typeid(aborted_error)) throw aborted_error(inner(e));
    if (kind == typeid(timeout_error)) throw timeout_error(inner(e));
    if (kind == typeid(collective_error)) throw collective_error(inner(e));
    if (kind == typeid(device_error)) throw device_error(inner(e));
    if (kind == typeid(shape_error)) throw shape_error(inner(e));
    if (kind == typeid(error)) throw error(inner(e));
    throw;
  }
}

}  // namespace typemesh::detail

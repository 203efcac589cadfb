// The label every message of a named operation carries (a transfer of
// replace_mesh or relayout, say): which operation sent it and its place in
// the stream from its sender, so that a receiver never takes another call's
// message for its own. A label travels as a small message of its own just
// ahead of the data, on a channel apart from the program's tagged messages;
// every backend keeps the two in order. Where one message costs less than
// two (MPI, up to a few KiB of data) the label leads the data's message
// instead (inline_label_communicator), and there it carries its text only
// the first time (mpi_state::sends_header_only).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "typemesh/core/error.hpp"
#include "typemesh/runtime/dtype.hpp"

namespace typemesh::detail {

// The channel of labelled messages. Program tags are 0 or more.
inline constexpr int labelled_tag = -1;

// Negative tags are the library's own channels (labelled_tag, and the MPI
// backend's labelled_data_tag).
inline std::string describe_tag(int tag) { return tag < 0 ? std::string("labelled") : cat("tag ", tag); }

struct message_label {
  static constexpr std::size_t bytes = 256;         // a whole label, its text included
  static constexpr std::size_t header_bytes = 32;   // all but its text
  static constexpr std::size_t text_bytes = bytes - header_bytes;
  // Identity, sequence and count at bytes 0, 8 and 16, then the type, the
  // text's length, whether the text follows the header, and the text from
  // header_bytes. Where one message carries a label and its data, the label
  // of an operation whose text its receiver already has from that sender
  // goes without it (mpi_state::sends_header_only), and the receiver restores
  // it where it names the message.
  static constexpr std::size_t identity_offset = 0, sequence_offset = 8, count_offset = 16;
  static constexpr std::size_t type_offset = 24, length_offset = 25, described_offset = 26;

  std::uint64_t identity = 0;  // a hash of the whole description
  std::uint64_t sequence = 0;  // labelled messages from this sender to this receiver before this one
  std::uint64_t count = 0;     // elements of the data message
  dtype type{};
  std::string what;            // the operation, cut to text_bytes

  // A hash of a description, eight bytes a step in four independent lanes
  // (in one chain of multiplies it took a third of the sender's own time
  // for a 1 KiB labelled message): labels
  // are made and checked for every message, and a transfer's description
  // runs to a couple of hundred characters.
  static std::uint64_t identity_of(std::string_view what) {
    constexpr std::uint64_t k = 0x9E3779B97F4A7C15ull;
    auto mix = [](std::uint64_t& h, std::uint64_t w) {
      h = (h ^ w) * k;
      h ^= h >> 29;
    };
    auto word = [&](std::size_t at) {
      std::uint64_t w;
      std::memcpy(&w, what.data() + at, 8);
      return w;
    };
    const std::size_t n = what.size();
    std::uint64_t lane[4] = {0xCBF29CE484222325ull ^ (n * k), 0x84222325CBF29CE4ull, 0x6A09E667F3BCC908ull,
                             0xBB67AE8584CAA73Bull};
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32)
      for (std::size_t j = 0; j < 4; ++j) mix(lane[j], word(i + 8 * j));
    for (std::size_t j = 0; i + 8 <= n; i += 8, ++j) mix(lane[j], word(i));
    if (i < n) {
      std::uint64_t w = 0;
      std::memcpy(&w, what.data() + i, n - i);
      mix(lane[3], w);
    }
    std::uint64_t h = lane[0];
    for (std::size_t j = 1; j < 4; ++j) mix(h, lane[j]);
    return h;
  }

  // A label's header: everything but its text, marked as coming without it.
  static std::array<std::uint8_t, header_bytes> header(std::uint64_t identity, std::uint64_t sequence,
                                                       std::uint64_t count, dtype type) {
    std::array<std::uint8_t, header_bytes> out{};
    std::memcpy(out.data() + identity_offset, &identity, 8);
    std::memcpy(out.data() + sequence_offset, &sequence, 8);
    std::memcpy(out.data() + count_offset, &count, 8);
    out[type_offset] = static_cast<std::uint8_t>(type);
    return out;
  }

  // A whole label: its header, then its text.
  static std::array<std::uint8_t, bytes> encode(std::uint64_t identity, std::uint64_t sequence, std::uint64_t count,
                                                dtype type, std::string_view what) {
    return described_label(header(identity, sequence, count, type).data(), what);
  }
  static std::array<std::uint8_t, bytes> described_label(const std::uint8_t* header, std::string_view what) {
    std::array<std::uint8_t, bytes> out{};
    std::memcpy(out.data(), header, header_bytes);
    describe(out.data(), what);
    return out;
  }

  // A whole label (described).
  static message_label decode(const std::uint8_t* in) {
    message_label l{identity_at(in), sequence_at(in), count_at(in), type_at(in), {}};
    const std::size_t n = std::min<std::size_t>(in[length_offset], text_bytes);
    l.what.assign(reinterpret_cast<const char*>(in + header_bytes), n);
    return l;
  }

  static std::uint64_t identity_at(const std::uint8_t* in) { return word_at(in, identity_offset); }
  static std::uint64_t sequence_at(const std::uint8_t* in) { return word_at(in, sequence_offset); }
  static std::uint64_t count_at(const std::uint8_t* in) { return word_at(in, count_offset); }
  static dtype type_at(const std::uint8_t* in) { return static_cast<dtype>(in[type_offset]); }
  static std::uint64_t word_at(const std::uint8_t* in, std::size_t offset) {
    std::uint64_t w;
    std::memcpy(&w, in + offset, sizeof w);
    return w;
  }
  static bool described(const std::uint8_t* in) { return in[described_offset] != 0; }
  // The bytes a label takes in its message, from its header.
  static std::size_t size_at(const std::uint8_t* in) { return described(in) ? bytes : header_bytes; }
  // Gives a label that came without its text the text `what`.
  static void describe(std::uint8_t* label, std::string_view what) {
    const std::size_t n = std::min(what.size(), text_bytes);
    label[length_offset] = static_cast<std::uint8_t>(n);
    label[described_offset] = 1;
    std::memcpy(label + header_bytes, what.data(), n);
  }
};

// The identities of the last descriptions a device labelled or checked its
// labelled messages with. A training step repeats its conversions, each
// with its own description, and finding a description of a couple of
// hundred characters among the remembered ones costs a seventh of hashing
// it (6 ns against 42): a labelled round trip hashes four times on its
// critical path (making and checking each label), 170 ns of a 1 KiB one's
// 2 us over MPI.
class identity_memo {
 public:
  std::uint64_t operator()(std::string_view what) {
    for (const entry& e : entries_)
      if (e.text == what) return e.identity;
    if (entries_.size() < kept) entries_.emplace_back();
    entry& e = entries_[next_];
    next_ = (next_ + 1) % kept;
    e.text.assign(what);
    e.identity = message_label::identity_of(what);
    return e.identity;
  }

 private:
  static constexpr std::size_t kept = 16;
  struct entry {
    std::string text;
    std::uint64_t identity = 0;
  };
  std::vector<entry> entries_;
  std::size_t next_ = 0;  // the entry to replace next, once all are kept
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

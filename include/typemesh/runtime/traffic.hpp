// Counted communication: every byte a collective moves, per device and per
// kind of operation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace typemesh {

enum class op_kind { allreduce, allgather, reduce_scatter, alltoall, broadcast, send, recv, barrier };
inline constexpr std::size_t op_kind_count = 8;

constexpr std::string_view name_of(op_kind k) {
  constexpr std::array<std::string_view, op_kind_count> names{
      "allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "send", "recv", "barrier"};
  return names[static_cast<std::size_t>(k)];
}

struct op_traffic {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
};

// What one device sent and received. Bytes are those that cross between
// devices: a device never counts what it keeps.
class traffic {
 public:
  op_traffic& operator[](op_kind k) { return per_kind_[static_cast<std::size_t>(k)]; }
  const op_traffic& operator[](op_kind k) const { return per_kind_[static_cast<std::size_t>(k)]; }

  std::uint64_t bytes_sent() const {
    std::uint64_t n = 0;
    for (const auto& k : per_kind_) n += k.bytes_sent;
    return n;
  }
  std::uint64_t bytes_received() const {
    std::uint64_t n = 0;
    for (const auto& k : per_kind_) n += k.bytes_received;
    return n;
  }
  std::uint64_t calls() const {
    std::uint64_t n = 0;
    for (const auto& k : per_kind_) n += k.calls;
    return n;
  }
  void reset() { per_kind_ = {}; }

 private:
  std::array<op_traffic, op_kind_count> per_kind_{};
};

}  // namespace typemesh

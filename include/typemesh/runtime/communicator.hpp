// The communicator concept: what every backend (host threads, Boost.MPI, NCCL)
// provides. Buffers are untyped with a dtype and an element count, the shape
// of the MPI and NCCL calls, so those implementations map onto it one call to
// one call. Checking the arguments and counting the bytes happen once, above
// the concept, in typemesh::device.
//
// Counts are per member: allgather's `count` is what each member contributes;
// reduce_scatter's is what each member receives; alltoall's is what each pair
// exchanges. Groups list global device ids in member order; `root` is a member
// index.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "typemesh/core/group.hpp"
#include "typemesh/runtime/dtype.hpp"

namespace typemesh {

enum class reduce_op { sum, max, min, prod };

constexpr std::string_view name_of(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
    case reduce_op::prod: return "prod";
  }
  return "?";
}

template <class C>
concept communicator = requires(C& c, const group& g, const void* in, void* out, std::size_t count, dtype type,
                                reduce_op op, int peer, int tag) {
  { c.device() } -> std::convertible_to<int>;        // this device's global id
  { c.device_count() } -> std::convertible_to<int>;  // devices in the run
  { c.local_device() } -> std::convertible_to<int>;   // this device's index on its node
  { c.devices_on_node() } -> std::convertible_to<int>;
  c.allreduce(g, in, out, count, type, op);          // out may equal in
  c.allgather(g, in, out, count, type);              // out: size * count, member order
  c.reduce_scatter(g, in, out, count, type, op);     // in: size * count; out: member's block
  c.alltoall(g, in, out, count, type);               // block j of in goes to member j
  c.broadcast(g, out, count, type, peer);            // from member `peer` to all
  c.send(peer, in, count, type, tag);                // buffered: never waits for the receiver
  c.recv(peer, out, count, type, tag);               // blocks until the message arrives
  c.barrier(g);
};

// One device's side of a transfer moved through shared memory at once
// (exchanging_communicator). `what` names the transfer (its description);
// `members` lists, in ascending order, every device that sends or receives
// in it. This device shows `source` to the `readers` (read_counts[i]
// elements each, for the traffic and for reports) and reads the sources of
// the `senders` (device, elements read): for each, as soon as it is shown,
// read(context, sender, its source). In
// between, once its own source is shown, it runs meanwhile(context) (its
// local copies), so that its readers need not wait for them.
struct exchange_side {
  std::string_view what;
  std::span<const int> members;
  const void* source = nullptr;
  std::size_t source_count = 0;
  dtype type{};
  std::span<const int> readers;
  std::span<const std::size_t> read_counts;
  std::span<const std::pair<int, std::size_t>> senders;
  void* context = nullptr;
  void (*read)(void* context, int sender, const void* source) = nullptr;
  void (*meanwhile)(void* context) = nullptr;
};

// Optional: a communicator whose devices share memory (host threads) moves
// a transfer's pieces through one exchange instead of a message per pair:
// each sender shows its source once, each receiver copies its pieces from
// the senders' sources in the order they are shown, and exchange returns
// once this device's source is no longer read. A source not read after a
// short while (its reader is busy elsewhere, has failed or
// finished) is copied out, so a sender never waits longer than a buffered
// send would, and no order of devices can deadlock. Devices call the
// exchanges of a set of members in the same order; one that skipped a
// transfer meets another's exchange, which is an error naming both.
template <class C>
concept exchanging_communicator = communicator<C> && requires(C& c, const exchange_side& side) {
  c.exchange(side);
};

// Optional: a communicator that sends and receives a labelled message's
// label and data itself (MPI: in one message where that costs less than
// two), instead of the device sending the label as a message of its own
// just ahead of the data. send_with_label sends a label, given as its
// header and its operation's text (`what`), and the data on the labelled
// channel; recv_with_label takes them into `label` and `data` and returns
// the bytes of data that came. Labels are message_label::bytes
// (label_bytes); on the way a label may go as its header alone, and
// recv_with_label gives it back as it came: whole, or its header alone
// (message_label::described false), whose text label_text(peer, label)
// gives when the caller needs it to name a mismatch. A message of another
// size is taken whole, its label still filled in (when it has one), so
// that the caller names the mismatch from the label; its data is not
// written then.
template <class C>
concept inline_label_communicator = communicator<C> && requires(C& c, const void* in, void* out, std::size_t bytes,
                                                                int peer, const std::uint8_t* header,
                                                                std::string_view what) {
  c.send_with_label(peer, header, what, in, bytes);
  { c.recv_with_label(peer, out, bytes, out, bytes) } -> std::same_as<std::size_t>;
  { c.label_text(peer, header) } -> std::convertible_to<std::string>;
};

}  // namespace typemesh

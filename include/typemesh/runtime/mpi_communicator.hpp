// The MPI backend: one process per device, device id = rank in MPI_COMM_WORLD.
// Needs MPI (the C API) and is compiled only in programs that link
// typemesh::mpi; typemesh::launch picks it under mpirun/srun (see
// runtime/mpi_launcher.hpp and docs/mpi.md).
//
// A group maps to a communicator whose ranks are the group's members in member
// order, created once with MPI_Comm_create_group (only the members take part)
// and cached by the group's device list. allgather, alltoall, broadcast and
// barrier are MPI's nonblocking collectives on that communicator, so member m
// of the group is rank m there and the results land in member order.
// Reductions (allreduce, reduce_scatter) are point-to-point messages instead:
// each member receives its chunk from every member and folds the pieces in
// member order, as the host backend does, so float results are bit-identical
// on both backends (MPI's own reductions choose their order).
// Small calls (small_bytes) are point to point too, in one round: a small
// allreduce sends every member the whole input and each folds all of it in
// member order (same bits, half the latency of two phases); a small
// allgather or alltoall skips the nonblocking-collective machinery, whose
// set-up costs more than moving a kilobyte.
//
// Point to point, send returns at once (as on host threads: no order of
// devices can deadlock), so it copies the message before MPI_Isend. Past
// the eager limit of MPI's shared-memory transport (eager_bytes) MPI hands
// a message over with a handshake; up to direct_bytes the message goes as
// two or three pieces below that limit instead (send_pieces). From
// direct_bytes on a message skips the copy when its receiver is already
// waiting for it: a recv of that size tells the sender so with a small
// ready notice while it looks for the message, and a send that finds the
// notice (or sees it arrive within about what the copy would cost) sends
// from the caller's memory and waits for MPI to finish with it. Which way a message went never changes what
// arrives. Between ranks of one node a ready notice is a word in shared
// memory (an MPI shared window), not a message.
//
// Nothing waits forever: every wait polls its request until the launch
// timeout and then throws timeout_error naming the collective, the group and
// this device. MPI cannot cancel a collective, so after a timed-out
// collective only MPI_Abort ends the job cleanly; launch does exactly that for
// any exception that leaves the program's function. A timed-out recv is
// cancelled cleanly (MPI_Cancel of the posted receive).
//
// Not detected here (the host backend detects it): members calling different
// collectives or counts. MPI leaves that erroneous; it shows up as a timeout,
// a truncation error or wrong data.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "typemesh/backend/host/copy_bytes.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/runtime/communicator.hpp"
#include "typemesh/runtime/dtype.hpp"
#include "typemesh/runtime/member_order.hpp"
#include "typemesh/runtime/message_label.hpp"

namespace typemesh {

namespace detail {

inline MPI_Datatype mpi_datatype(dtype t) {
  switch (t) {
    case dtype::f32: return MPI_FLOAT;
    case dtype::f64: return MPI_DOUBLE;
    case dtype::i32: return MPI_INT32_T;
    case dtype::i64: return MPI_INT64_T;
    case dtype::u8: return MPI_UNSIGNED_CHAR;
  }
  return MPI_BYTE;
}

inline MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return MPI_SUM;
    case reduce_op::max: return MPI_MAX;
    case reduce_op::min: return MPI_MIN;
    case reduce_op::prod: return MPI_PROD;
  }
  return MPI_SUM;
}

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return detail::cat("MPI error ", code);
  return std::string(text, length);
}

}  // namespace detail

// What the devices of one launch share in this process: the run's duplicate
// of the world communicator, the cached group communicators and the sends
// still in flight. mpi_communicator is a handle to it.
class mpi_state {
 public:
  // Collective over `world`: duplicates it, so the run's messages never mix
  // with the program's own MPI traffic or with another launch's.
  mpi_state(MPI_Comm world, std::chrono::milliseconds timeout) : timeout_(timeout) {
    const bool shared_notices = shared_ready_notices();  // before any collective
    // All at once: each duplication is a collective round, and a program
    // may launch many times.
    MPI_Comm* const comms[] = {&world_,          &everyone_, &labelled_, &pieces_world_,  &pieces_labelled_,
                               &large_world_,    &large_labelled_, &notices_, &ready_, &labelled_ready_};
    MPI_Request dups[std::size(comms)];
    for (std::size_t i = 0; i < std::size(comms); ++i) check(MPI_Comm_idup(world, comms[i], &dups[i]), "MPI_Comm_idup");
    check(MPI_Waitall(static_cast<int>(std::size(comms)), dups, MPI_STATUSES_IGNORE), "MPI_Comm_idup");
    for (MPI_Comm* c : comms) MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    sent_to_.assign(size_, 0);
    received_from_.assign(size_, 0);
    readies_to_.assign(size_, 0);
    readies_from_.assign(size_, 0);
    described_to_.resize(static_cast<std::size_t>(size_));
    descriptions_from_.resize(static_cast<std::size_t>(size_));
    void* ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(world_, MPI_TAG_UB, &ub, &found);
    tag_ub_ = found ? *static_cast<int*>(ub) : 32767;
    // The ranks on this node: more than its cores, and spinning would starve them.
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    MPI_Comm_size(node, &ranks_on_node_);
    MPI_Comm_rank(node, &rank_on_node_);
    open_ready_slots(node, shared_notices);
    MPI_Comm_free(&node);
    oversubscribed_ = ranks_on_node_ > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }

  mpi_state(const mpi_state&) = delete;
  mpi_state& operator=(const mpi_state&) = delete;

  ~mpi_state() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (auto& s : sends_) {  // only left after a failure: finish() drains them
      for (auto& r : s.requests) {
        if (r == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    }
    for (auto& r : notice_sends_) {
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    }
    // MPI_Win_free waits for every rank of the node: only after a clean end
    // (finish). After a failure MPI_Abort ends the job and frees it.
    if (ready_window_ != MPI_WIN_NULL && finished_) {
      MPI_Win_unlock_all(ready_window_);
      MPI_Win_free(&ready_window_);
    }
    MPI_Comm_free(&notices_);
    MPI_Comm_free(&labelled_ready_);
    MPI_Comm_free(&ready_);
    for (auto& [devices, comm] : groups_) MPI_Comm_free(&comm);
    MPI_Comm_free(&everyone_);
    MPI_Comm_free(&large_labelled_);
    MPI_Comm_free(&large_world_);
    MPI_Comm_free(&pieces_labelled_);
    MPI_Comm_free(&pieces_world_);
    MPI_Comm_free(&labelled_);
    MPI_Comm_free(&world_);
  }

  int rank() const { return rank_; }
  int ranks_on_node() const { return ranks_on_node_; }
  int rank_on_node() const { return rank_on_node_; }
  int size() const { return size_; }
  MPI_Comm world() const { return world_; }
  // Where messages of a tag and size go: program tags on world(), labelled
  // messages (detail::labelled_tag) on a communicator of their own, as MPI
  // tag 0, and the data of a labelled message whose label went ahead of it
  // (labelled_data_tag) there as MPI tag 1; messages sent in pieces (more
  // than eager_bytes) and from direct_bytes on each on others again, so
  // that a receive posted for fewer bytes never meets a large message (see
  // recv_large) and pieces never meet whole messages.
  MPI_Comm comm_of(int tag, std::size_t bytes) const {
    const bool labelled = tag < 0;
    if (bytes >= direct_bytes) return labelled ? large_labelled_ : large_world_;
    if (bytes > eager_bytes) return labelled ? pieces_labelled_ : pieces_world_;
    return labelled ? labelled_ : world_;
  }
  static constexpr int labelled_data_tag = -2;
  static int mpi_tag(int tag) {
    if (tag == detail::labelled_tag) return 0;
    if (tag == labelled_data_tag) return 1;
    return tag;
  }
  std::chrono::milliseconds timeout() const { return timeout_; }
  int tag_ub() const { return tag_ub_; }

  // The communicator of g: rank m is member m. Collectives never use world(),
  // which carries the program's send/recv, so their messages cannot meet.
  MPI_Comm comm_for(const group& g) {
    bool identity = g.size() == size_;
    for (int i = 0; identity && i < g.size(); ++i) identity = g.devices[i] == i;
    if (identity) return everyone_;
    auto it = groups_.find(g.devices);
    if (it != groups_.end()) return it->second;

    MPI_Group all = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_group(world_, &all);
    MPI_Group_incl(all, g.size(), g.devices.data(), &members);
    // The tag tells apart creations that could overlap; members create their
    // groups in the same program order, so equal tags never meet by mistake.
    std::size_t hash = 0;
    for (int d : g.devices) hash = hash * 1000003u + static_cast<std::size_t>(d) + 1;
    int rc = MPI_Comm_create_group(world_, members, static_cast<int>(hash % 32768), &comm);
    MPI_Group_free(&members);
    MPI_Group_free(&all);
    if (rc != MPI_SUCCESS) {
      throw device_error(detail::cat("creating the MPI communicator of group ", detail::list(g.devices), " (", g.label,
                                     ") on device ", rank_, " failed: ", detail::mpi_error_string(rc)));
    }
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    groups_.emplace(g.devices, comm);
    return comm;
  }

  // Polls `request` until it completes (true) or the timeout passes (false).
  bool wait(MPI_Request& request, std::chrono::steady_clock::time_point deadline) { return wait(&request, 1, deadline); }
  bool wait(MPI_Request* requests, int count, std::chrono::steady_clock::time_point deadline) {
    return poll_until(deadline, [&] {
      int done = 0;
      check(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      return done != 0;
    });
  }

  // Polls requests [0, count) until all complete (true) or `timeout` passes (false).
  bool wait_all(MPI_Request* requests, int count, std::chrono::milliseconds timeout) {
    return poll_for(timeout, [&] {
      int done = 0;
      check(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      return done != 0;
    });
  }

  // poll_until with the deadline `timeout` from now, but the clock is read
  // only when the first polls fail: a small call is done before that.
  template <class Ready>
  bool poll_for(std::chrono::milliseconds timeout, Ready ready) const {
    for (int i = 0; i < 16; ++i)
      if (ready()) return true;
    return poll_until(std::chrono::steady_clock::now() + timeout, ready);
  }

  // Calls ready() until it returns true (true) or the deadline passes
  // (false). Like a blocking MPI call it spins, which is what keeps small
  // messages fast; but only for a while, and not at all when this node runs
  // more ranks than it has cores: then a waiting rank must leave the core to
  // the peer it waits for.
  template <class Ready>
  bool poll_until(std::chrono::steady_clock::time_point deadline, Ready ready) const {
    using namespace std::chrono_literals;
    const auto start = std::chrono::steady_clock::now();
    const auto spin_until = start + (oversubscribed_ ? 0ms : 10ms), yield_until = start + 50ms;
    for (long polls = 0;; ++polls) {
      if (ready()) return true;
      if (polls % 64 != 63) continue;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      if (now < spin_until) continue;
      if (now < yield_until) std::this_thread::yield();
      else std::this_thread::sleep_for(20us);
    }
  }

  // Reusable memory for received pieces, at least `bytes` of it.
  std::byte* scratch(std::size_t bytes) {
    if (bytes > scratch_size_) {
      scratch_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      scratch_size_ = bytes;
    }
    return scratch_.get();
  }

  std::chrono::steady_clock::time_point deadline() const { return std::chrono::steady_clock::now() + timeout_; }

  // Reusable room for `count` requests, all MPI_REQUEST_NULL.
  MPI_Request* requests(std::size_t count) {
    requests_.assign(count, MPI_REQUEST_NULL);
    return requests_.data();
  }

  // The largest message that Open MPI's shared-memory transport sends at
  // once: its eager limit (4 KiB) less its header (4000 B went at once,
  // 4064 B waited for the receiver's handshake). Larger messages MPI hands
  // over with a handshake, which costs as much again as the transfer up to
  // about 10 KiB.
  static constexpr std::size_t eager_bytes = 4000;
  // A message of more than eager_bytes and fewer than direct_bytes goes as
  // eager pieces (send_pieces), the first led by the message's size.
  static constexpr std::size_t piece_header_bytes = sizeof(std::uint64_t);
  static constexpr std::size_t max_pieces = 3;
  // From this many bytes a message goes whole, with MPI's handshake, and a
  // ready notice costs little beside it (post). Below, pieces cost less.
  static constexpr std::size_t direct_bytes = max_pieces * eager_bytes - piece_header_bytes;

  // The pieces of a message of `bytes` (more than eager_bytes): its size
  // and the message, cut into the fewest runs of at most eager_bytes, of
  // equal length give or take a byte. Piece i starts at piece_start(bytes, i).
  static std::size_t pieces_of(std::size_t bytes) { return (piece_header_bytes + bytes + eager_bytes - 1) / eager_bytes; }
  static std::size_t piece_start(std::size_t bytes, std::size_t i) {
    return (piece_header_bytes + bytes) * i / pieces_of(bytes);
  }

  // Takes `count` more pieces of a message from `from` (MPI tag `mpi_tag`
  // on `comm`) into scratch memory: the rest of one that is not received
  // (its size was wrong, or nobody took it). They were sent before the
  // first piece came, so only a failing sender keeps them past the timeout.
  void take_pieces(int from, int mpi_tag, MPI_Comm comm, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Irecv(scratch(eager_bytes), static_cast<int>(eager_bytes), MPI_BYTE, from, mpi_tag, comm, &request),
            "MPI_Irecv");
      if (!wait(request, deadline())) {
        MPI_Cancel(&request);
        MPI_Request_free(&request);
        throw timeout_error(detail::cat("device ", rank_, ": the rest of a message from device ", from,
                                        " sent in pieces did not arrive within ", timeout_.count(), " ms"));
      }
      ++received_from_[from];
    }
  }

  // What a labelled message from device `from` to device `to` says of
  // itself, from its label (whole, or without its text: restore_label):
  // "3 f32 of <operation> (its labelled message 0 to device 1)".
  std::string described_by_label(int from, const std::uint8_t* message, std::size_t got, int to) {
    std::array<std::uint8_t, detail::message_label::bytes> label;
    if (!restore_label(from, message, got, label.data())) return detail::cat(got, " bytes (labelled)");
    const auto l = detail::message_label::decode(label.data());
    return detail::cat(l.count, " ", name_of(l.type), " of ", l.what, " (its labelled message ", l.sequence,
                       " to device ", to, ")");
  }

  // Whether a label that leads its data in one message of at most
  // eager_bytes goes as its header alone (message_label::header): once
  // this device has sent device `to` a label of the same operation with
  // its text. A 1 KiB labelled round trip took 2.1-2.4 us with whole labels
  // and 1.9-2.1 us with 64 B ones, against raw MPI's 1.7-1.9 us
  // (docs/performance.md).
  bool sends_header_only(int to, std::uint64_t identity, std::size_t data_bytes) {
    if (detail::message_label::bytes + data_bytes > eager_bytes) return false;
    return !described_to_[to].insert(identity).second;
  }

  // The label of a labelled message from `from` whose first `got` bytes
  // are at `message`, into `label` (message_label::bytes) as it came: whole,
  // or its header alone. The text of a whole one is kept for that
  // operation's later labels from that device. Returns the bytes the label
  // takes in the message, or 0 where the message is too short to hold one.
  std::size_t take_label(int from, const std::uint8_t* message, std::size_t got, std::uint8_t* label) {
    using L = detail::message_label;
    if (got < L::header_bytes || got < L::size_at(message)) return 0;
    if (!L::described(message)) {
      std::memcpy(label, message, L::header_bytes);
      return L::header_bytes;
    }
    std::memcpy(label, message, L::bytes);
    auto& known = descriptions_from_[from];
    if (const auto id = L::identity_at(message); !known.contains(id)) known.emplace(id, L::decode(message).what);
    return L::bytes;
  }

  // The text of the operation of a label from `from` that came without it:
  // that of the first of the operation's labels from that device.
  std::string_view label_text(int from, const std::uint8_t* label) const {
    const auto& known = descriptions_from_[from];
    const auto it = known.find(detail::message_label::identity_at(label));
    return it != known.end() ? std::string_view(it->second)
                             : std::string_view("an operation whose first message this device never took");
  }

  // take_label, and a label that came without its text gets it (label_text).
  std::size_t restore_label(int from, const std::uint8_t* message, std::size_t got, std::uint8_t* label) {
    const std::size_t lead = take_label(from, message, got, label);
    if (lead == detail::message_label::header_bytes) detail::message_label::describe(label, label_text(from, label));
    return lead;
  }

  // `got` bytes at `first` came from `from` (MPI tag `mpi_tag`) on `comm`, a
  // communicator of pieces, as the first piece of a message that will not
  // be received: takes its other pieces and returns its size (`got` when
  // they do not start a message).
  std::size_t take_rest_of_message(int from, int mpi_tag, MPI_Comm comm, const void* first, std::size_t got) {
    if (got < piece_header_bytes) return got;
    std::uint64_t size = 0;
    std::memcpy(&size, first, piece_header_bytes);
    if (size <= eager_bytes || size >= direct_bytes) return got;
    take_pieces(from, mpi_tag, comm, pieces_of(size) - 1);
    return static_cast<std::size_t>(size);
  }

  // Bytes of a message that is sent from more than one place (a label and
  // its data).
  struct part {
    const void* data;
    std::size_t bytes;
  };

  // Sends the parts as one message of bytes on `tag`, as post sends a
  // message of their size below direct_bytes: whole or in pieces, from a
  // copy. Returns at once.
  void post_parts(int to, int tag, std::initializer_list<part> parts) {
    progress_sends();
    std::size_t bytes = 0;
    for (const part& p : parts) bytes += p.bytes;
    if (bytes > eager_bytes) return send_pieces(to, tag, parts);
    ++sent_to_[to];
    send_copy(to, tag, parts, dtype::u8, comm_of(tag, bytes));
  }

  // Sends the message: in pieces when it is more than eager_bytes and less
  // than direct_bytes (send_pieces); else straight from `in` when its
  // receiver is ready (receiver_ready), or from a copy that is kept alive
  // until MPI has sent it. Returns once `in` may change.
  void post(int to, const void* in, std::size_t count, dtype t, int tag) {
    progress_sends();
    const std::size_t bytes = count * size_of(t);
    if (bytes > eager_bytes && bytes < direct_bytes) return send_pieces(to, tag, {{in, bytes}});
    ++sent_to_[to];
    if (bytes >= direct_bytes && receiver_ready(to, tag, bytes)) {
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Isend(in, mpi_count(count), detail::mpi_datatype(t), to, mpi_tag(tag), comm_of(tag, bytes), &request),
            "MPI_Isend");
      if (!wait(request, deadline())) {
        // Only when the recv that sent the notice gave up (timed out) and no
        // later recv took the message. MPI may still read `in` if one takes
        // it after this; the program is failing by then.
        MPI_Cancel(&request);
        MPI_Request_free(&request);
        throw timeout_error(detail::cat("send from device ", rank_, " to device ", to, " (", detail::describe_tag(tag),
                                        "): device ", to, " was ready for it but did not take it within ",
                                        timeout_.count(), " ms"));
      }
      return;
    }
    send_copy(to, tag, {{in, bytes}}, t, comm_of(tag, bytes));
  }

  // A recv of direct_bytes or more from `from` on `tag` is about to look for
  // its message: tells the sender, with how many such messages this device
  // has taken from it on that tag (the place of the one it now waits for).
  void announce_ready(int from, int tag) {
    progress_sends();
    const std::uint64_t taken = direct_taken_[{from, tag}];
    if (ready_slots_[from]) {  // on this node
      std::atomic_ref<std::uint64_t>(ready_slots_[rank_][from]).store(ready_key(tag, taken), std::memory_order_release);
      return;
    }
    const auto sent = static_cast<std::int64_t>(taken);
    send_copy(from, tag, {{&sent, sizeof sent}}, dtype::i64, ready_of_tag(tag));
    ++readies_to_[from];
  }

  // A message from `from` on `tag` was received (maybe too large: it is
  // taken all the same).
  void count_received(int from, int tag, std::size_t expected_bytes) {
    ++received_from_[from];
    if (expected_bytes >= direct_bytes) ++direct_taken_[{from, tag}];
  }

  // Tells every other device that this one has returned from the program,
  // so that a recv from it fails at once instead of at the timeout.
  void announce_finished() {
    notice_sends_.assign(size_, MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) check(MPI_Isend(&notice_payload_, 1, MPI_INT, r, 0, notices_, &notice_sends_[r]), "MPI_Isend");
  }

  // Whether `device` has announced that it returned. A message it sent
  // before has arrived by then: one sender's messages on one communicator
  // are matched in order.
  bool has_finished(int device) const {
    int found = 0;
    MPI_Iprobe(device, 0, notices_, &found, MPI_STATUS_IGNORE);
    return found != 0;
  }

  // After the program, on every rank together: every message sent was
  // received. Each rank learns how many messages each peer sent it and
  // received from it; a message left over is named (its operation, for a
  // labelled one) and is an error on both ends.
  void check_no_leftovers() {
    std::vector<std::uint64_t> mine(3 * size_), theirs(3 * size_);
    for (int j = 0; j < size_; ++j) {
      mine[3 * j] = sent_to_[j];
      mine[3 * j + 1] = received_from_[j];
      mine[3 * j + 2] = readies_to_[j];
    }
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ialltoall(mine.data(), 3, MPI_UINT64_T, theirs.data(), 3, MPI_UINT64_T, notices_, &request),
          "MPI_Ialltoall");
    // Devices may return far apart (one still computes), so no timeout here:
    // every wait of a device that has not returned has its own.
    wait(request, std::chrono::steady_clock::time_point::max());
    std::vector<std::string> lines;
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      while (received_from_[j] < theirs[3 * j]) lines.push_back(take_leftover(j));
      // Ready notices no send looked at (its message went before the
      // notice came, or was the last): dropped, they carry no data.
      for (std::uint64_t k = readies_from_[j]; k < theirs[3 * j + 2]; ++k) drop_ready(j);
      if (sent_to_[j] > theirs[3 * j + 1]) {
        lines.push_back(detail::cat("device ", rank_, " sent device ", j, " ", sent_to_[j] - theirs[3 * j + 1],
                                    " message(s) that device ", j, " never received"));
      }
    }
    for (int j = 0; j < size_; ++j) {  // every notice was sent before the exchange above
      if (j == rank_) continue;
      int payload = 0;
      MPI_Request r = MPI_REQUEST_NULL;
      check(MPI_Irecv(&payload, 1, MPI_INT, j, 0, notices_, &r), "MPI_Irecv");
      if (!wait(r, deadline())) throw timeout_error(detail::cat("device ", rank_, ": device ", j, "'s end notice never came"));
    }
    for (auto& r : notice_sends_) {
      if (r != MPI_REQUEST_NULL && !wait(r, deadline())) throw timeout_error("an end notice was never received");
    }
    if (!lines.empty()) {
      std::string text;
      for (const auto& line : lines) text += detail::cat("\n  ", line);
      throw collective_error(detail::cat("the program ended with messages nobody received (a device skipped a recv or a "
                                         "transfer):", text));
    }
  }

  // Completes the sends still in flight; launch calls it after the program's
  // function, so a message nobody receives is an error rather than a hang.
  void finish() {
    const auto until = deadline();
    for (auto& s : sends_) {
      if (!wait(s.requests.data(), static_cast<int>(s.requests.size()), until)) {
        throw timeout_error(detail::cat("send from device ", rank_, " to device ", s.to, " (", detail::describe_tag(s.tag),
                                        ") was not received within ", timeout_.count(), " ms"));
      }
    }
    sends_.clear();
    finished_ = true;
  }

  void check(int rc, std::string_view call) const {
    if (rc != MPI_SUCCESS) {
      throw collective_error(detail::cat(call, " failed on device ", rank_, ": ", detail::mpi_error_string(rc)));
    }
  }

  static int mpi_count(std::size_t count) {
    if (count > static_cast<std::size_t>(INT_MAX)) {
      throw shape_error(detail::cat("a message of ", count, " elements is too large for one MPI call (at most ", INT_MAX, ")"));
    }
    return static_cast<int>(count);
  }

 private:
  // Receives the next message from `from` that nobody took, and says what it was.
  std::string take_leftover(int from) {
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    MPI_Comm comm = MPI_COMM_NULL;
    const bool found = poll_until(deadline(), [&] {
      for (MPI_Comm c : {labelled_, world_, pieces_labelled_, pieces_world_, large_labelled_, large_world_}) {
        int flag = 0;
        check(MPI_Improbe(from, MPI_ANY_TAG, c, &flag, &message, &status), "MPI_Improbe");
        if (flag) {
          comm = c;
          return true;
        }
      }
      return false;
    });
    if (!found) return detail::cat("device ", from, " sent device ", rank_, " a message that never arrived");
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    std::vector<std::uint8_t> data(std::max(bytes, 1));
    MPI_Mrecv(data.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    ++received_from_[from];
    const std::uint8_t* start = data.data();  // of the message, past a size where it came in pieces
    if (comm == pieces_labelled_ || comm == pieces_world_) {
      const std::size_t size = take_rest_of_message(from, status.MPI_TAG, comm, data.data(), static_cast<std::size_t>(bytes));
      if (size != static_cast<std::size_t>(bytes)) start += piece_header_bytes;
      bytes = static_cast<int>(size);
    }
    // A labelled message starts with its label, but for data whose label
    // went ahead of it (labelled_data_tag).
    const bool labelled = comm == labelled_ || comm == pieces_labelled_ || comm == large_labelled_;
    const bool led = labelled && status.MPI_TAG == mpi_tag(detail::labelled_tag);
    if (led && static_cast<std::size_t>(bytes) >= detail::message_label::header_bytes) {
      return detail::cat("device ", from, " sent device ", rank_, " ",
                         described_by_label(from, start, static_cast<std::size_t>(bytes), rank_), ", which device ",
                         rank_, " never received");
    }
    return detail::cat("device ", from, " sent device ", rank_, " ", bytes, " bytes (",
                       labelled ? std::string("labelled") : detail::cat("tag ", status.MPI_TAG),
                       "), which device ", rank_, " never received");
  }

  // Whether `to` waits for this device's next message of direct_bytes or
  // more on `tag`: its ready notice for that message came. Notices for
  // earlier messages (which went before their notice) are dropped on the
  // way. Waits for the notice about as long as copying the message would
  // take (at 8 GB/s, at least 1 us). Not at all when the node runs more
  // ranks than cores: a rank that yields there may lose its core for a
  // whole time slice, far longer than the copy.
  bool receiver_ready(int to, int tag, std::size_t bytes) {
    const std::uint64_t place = direct_sent_[{to, tag}]++;
    const auto wait = oversubscribed_ ? std::chrono::nanoseconds(0)
                                      : std::max(std::chrono::nanoseconds(1000), std::chrono::nanoseconds(bytes / 8));
    const auto until = std::chrono::steady_clock::now() + wait;
    if (ready_slots_[to]) {  // on this node: the receiver's slot for this device
      const std::atomic_ref<std::uint64_t> slot(ready_slots_[to][rank_]);
      const std::uint64_t key = ready_key(tag, place);
      for (;;) {
        if (slot.load(std::memory_order_acquire) == key) return true;
        if (std::chrono::steady_clock::now() >= until) return false;
      }
    }
    for (;;) {
      if (auto taken = next_ready(to, tag)) {
        if (*taken == place) return true;
        continue;
      }
      if (std::chrono::steady_clock::now() >= until) return false;
    }
  }

  // The next ready notice from `to` with MPI tag `mpi_tag` (MPI_ANY_TAG
  // for any) on `comm` (how many messages it had taken), if one has come.
  std::optional<std::uint64_t> next_ready(int to, int mpi_tag, MPI_Comm comm) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    check(MPI_Improbe(to, mpi_tag, comm, &found, &message, MPI_STATUS_IGNORE), "MPI_Improbe");
    if (!found) return std::nullopt;
    std::int64_t taken = 0;  // sent as dtype::i64
    check(MPI_Mrecv(&taken, 1, MPI_INT64_T, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
    ++readies_from_[to];
    return static_cast<std::uint64_t>(taken);
  }
  std::optional<std::uint64_t> next_ready(int to, int tag) { return next_ready(to, mpi_tag(tag), ready_of_tag(tag)); }

  // Takes one ready notice from `from`, on any tag (at the end of the program).
  void drop_ready(int from) {
    poll_until(deadline(), [&] {
      return next_ready(from, MPI_ANY_TAG, ready_) || next_ready(from, MPI_ANY_TAG, labelled_ready_);
    });
  }

  // Copies `parts` one after the other into `at`.
  static void gather(std::byte* at, std::initializer_list<part> parts) {
    for (const part& p : parts) {
      if (p.bytes) backend::host::copy_bytes(at, p.data, p.bytes);
      at += p.bytes;
    }
  }

  // Sends the parts, elements of t, to `to` on `comm` as one message from a
  // copy, kept alive until MPI has sent it.
  void send_copy(int to, int tag, std::initializer_list<part> parts, dtype t, MPI_Comm comm) {
    std::size_t bytes = 0;
    for (const part& p : parts) bytes += p.bytes;
    pending_send s{to, tag, copy_buffer(bytes), bytes <= reused_bytes};
    gather(s.data.get(), parts);
    check(MPI_Isend(s.data.get(), mpi_count(bytes / size_of(t)), detail::mpi_datatype(t), to, mpi_tag(tag), comm,
                    &s.requests[0]),
          "MPI_Isend");
    sends_.push_back(std::move(s));
  }

  // Sends the bytes of `parts` (more than eager_bytes, less than
  // direct_bytes in all) to `to` as pieces small enough for MPI to send
  // each at once, without the handshake that one message of that size
  // waits for: its size (piece_header_bytes) and the bytes, from one copy,
  // cut into pieces_of(bytes). The receiver learns the size from the first
  // piece, so a receive of another size takes exactly the pieces sent
  // (recv_pieces).
  void send_pieces(int to, int tag, std::initializer_list<part> parts) {
    std::size_t bytes = 0;
    for (const part& p : parts) bytes += p.bytes;
    const std::size_t total = piece_header_bytes + bytes;
    const std::uint64_t size = bytes;
    pending_send s{to, tag, copy_buffer(total), total <= reused_bytes};
    std::memcpy(s.data.get(), &size, piece_header_bytes);
    gather(s.data.get() + piece_header_bytes, parts);
    const MPI_Comm comm = comm_of(tag, bytes);
    for (std::size_t i = 0; i < pieces_of(bytes); ++i) {
      const std::size_t at = piece_start(bytes, i);
      check(MPI_Isend(s.data.get() + at, static_cast<int>(piece_start(bytes, i + 1) - at), MPI_BYTE, to, mpi_tag(tag),
                      comm, &s.requests[i]),
            "MPI_Isend");
      ++sent_to_[to];
    }
    sends_.push_back(std::move(s));
  }

  MPI_Comm ready_of_tag(int tag) const { return tag < 0 ? labelled_ready_ : ready_; }

  // Ready notices between ranks of one node: every rank of the node has a
  // slot for each device of the world in a shared window, where it writes
  // the message it now waits for from that device (ready_key); the sender
  // reads its slot in the receiver's. A word written and read costs far less
  // than a notice's trip as a message (2-3 us of a 16 KiB round trip).
  // ready_slots_[r] is device r's slots, for the devices of this node only;
  // TYPEMESH_MPI_READY_NOTICES=messages sends every notice as a message
  // instead (the way they go between nodes; `shared` false). Collective over
  // the node, and made either way, so that ranks that read the variable
  // differently still take part in the same collectives.
  void open_ready_slots(MPI_Comm node, bool shared) {
    std::uint64_t* mine = nullptr;
    check(MPI_Win_allocate_shared(static_cast<MPI_Aint>(size_ * sizeof(std::uint64_t)), sizeof(std::uint64_t),
                                  MPI_INFO_NULL, node, &mine, &ready_window_),
          "MPI_Win_allocate_shared");
    std::fill_n(mine, size_, 0);  // no key is 0 (ready_key)
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, ready_window_), "MPI_Win_lock_all");
    MPI_Group world_group = MPI_GROUP_NULL, node_group = MPI_GROUP_NULL;
    MPI_Comm_group(world_, &world_group);
    MPI_Comm_group(node, &node_group);
    std::vector<int> world_ranks(size_), node_ranks(size_);
    for (int r = 0; r < size_; ++r) world_ranks[r] = r;
    check(MPI_Group_translate_ranks(world_group, size_, world_ranks.data(), node_group, node_ranks.data()),
          "MPI_Group_translate_ranks");
    MPI_Group_free(&node_group);
    MPI_Group_free(&world_group);
    ready_slots_.assign(size_, nullptr);
    for (int r = 0; r < size_; ++r) {
      if (node_ranks[r] == MPI_UNDEFINED) continue;
      MPI_Aint bytes = 0;
      int unit = 0;
      void* base = nullptr;
      check(MPI_Win_shared_query(ready_window_, node_ranks[r], &bytes, &unit, &base), "MPI_Win_shared_query");
      ready_slots_[r] = static_cast<std::uint64_t*>(base);
    }
    check(MPI_Barrier(node), "MPI_Barrier");  // every slot is zero before any is read
    if (!shared) ready_slots_.assign(size_, nullptr);
  }

  // TYPEMESH_MPI_READY_NOTICES: "shared" (or unset) or "messages". Read
  // before any collective, so that a wrong value fails on every rank before
  // any of them waits for another.
  static bool shared_ready_notices() {
    const char* how = std::getenv("TYPEMESH_MPI_READY_NOTICES");
    const std::string_view value = how ? how : "";
    if (value.empty() || value == "shared") return std::atomic_ref<std::uint64_t>::is_always_lock_free;
    if (value == "messages") return false;
    throw error(detail::cat("TYPEMESH_MPI_READY_NOTICES is '", value,
                            "': it takes 'shared' (ready notices within a node through shared memory, the default) "
                            "or 'messages'"));
  }

  // What a receiver writes in its slot for a sender: the tag and how many
  // messages of direct_bytes or more it took from it on that tag (the place
  // of the one it waits for), modulo 2^31; bit 31 set, so that no key is 0.
  static std::uint64_t ready_key(int tag, std::uint64_t taken) {
    return (std::uint64_t{static_cast<std::uint32_t>(tag)} << 32) | (std::uint64_t{1} << 31) | (taken & 0x7fffffffu);
  }

  struct pending_send {
    int to = 0, tag = 0;
    std::unique_ptr<std::byte[]> data;
    bool reused = false;  // a buffer of copy_buffer's, to give back
    std::array<MPI_Request, max_pieces> requests = filled(MPI_REQUEST_NULL);  // one, or one per piece

    static std::array<MPI_Request, max_pieces> filled(MPI_Request r) {
      std::array<MPI_Request, max_pieces> a;
      a.fill(r);
      return a;
    }
  };

  // A copy of a message's bytes, kept until MPI has sent it. Copies of
  // messages below direct_bytes (with their size ahead, when in pieces)
  // take buffers of that size that sent messages gave back: allocating
  // them cost a tenth of a 1 KiB message's round trip (malloc's slow path,
  // past its per-thread caches).
  static constexpr std::size_t reused_bytes = piece_header_bytes + direct_bytes, spares_kept = 64;
  std::unique_ptr<std::byte[]> copy_buffer(std::size_t bytes) {
    if (bytes > reused_bytes) return std::make_unique_for_overwrite<std::byte[]>(bytes);
    if (spares_.empty()) return std::make_unique_for_overwrite<std::byte[]>(reused_bytes);
    auto b = std::move(spares_.back());
    spares_.pop_back();
    return b;
  }

  void progress_sends() {
    std::erase_if(sends_, [&](pending_send& s) {
      int done = 0;
      check(MPI_Testall(static_cast<int>(s.requests.size()), s.requests.data(), &done, MPI_STATUSES_IGNORE),
            "MPI_Testall");
      if (done && s.reused && spares_.size() < spares_kept) spares_.push_back(std::move(s.data));
      return done != 0;
    });
  }

  std::chrono::milliseconds timeout_;
  MPI_Comm world_ = MPI_COMM_NULL, everyone_ = MPI_COMM_NULL, labelled_ = MPI_COMM_NULL;
  MPI_Comm pieces_world_ = MPI_COMM_NULL, pieces_labelled_ = MPI_COMM_NULL;  // messages sent in pieces
  MPI_Comm large_world_ = MPI_COMM_NULL, large_labelled_ = MPI_COMM_NULL;  // messages of direct_bytes or more
  int rank_ = 0, size_ = 0, ranks_on_node_ = 1, rank_on_node_ = 0;
  bool oversubscribed_ = false;
  std::map<std::vector<int>, MPI_Comm> groups_;
  std::vector<pending_send> sends_;
  std::vector<std::unique_ptr<std::byte[]>> spares_;  // copy_buffer's buffers, free for the next copy
  MPI_Comm notices_ = MPI_COMM_NULL;  // "this device returned", and the count exchange at the end
  MPI_Comm ready_ = MPI_COMM_NULL, labelled_ready_ = MPI_COMM_NULL;  // ready notices (world's tags, labelled)
  MPI_Win ready_window_ = MPI_WIN_NULL;      // ready notices within the node (open_ready_slots)
  std::vector<std::uint64_t*> ready_slots_;  // by device: its slots, where it is on this node
  bool finished_ = false;                    // finish() returned: the window may be freed
  std::vector<std::uint64_t> sent_to_, received_from_;
  // Operations whose labels went to each device with their text, and the
  // texts that came from each device, by identity (sends_header_only).
  std::vector<std::unordered_set<std::uint64_t>> described_to_;
  std::vector<std::unordered_map<std::uint64_t, std::string>> descriptions_from_;
  std::vector<std::uint64_t> readies_to_, readies_from_;  // ready notices sent to and taken from each device
  // Messages of direct_bytes or more, by (peer, tag): sent to it, and taken from it.
  std::map<std::pair<int, int>, std::uint64_t> direct_sent_, direct_taken_;
  std::vector<MPI_Request> notice_sends_;
  int notice_payload_ = 1;
  std::unique_ptr<std::byte[]> scratch_;
  std::size_t scratch_size_ = 0;
  std::vector<MPI_Request> requests_;
  int tag_ub_ = 32767;
};

// This process's device; a model of typemesh::communicator.
class mpi_communicator {
 public:
  explicit mpi_communicator(std::shared_ptr<mpi_state> state) : s_(std::move(state)) {}

  int device() const { return s_->rank(); }
  int device_count() const { return s_->size(); }
  int local_device() const { return s_->rank_on_node(); }
  int devices_on_node() const { return s_->ranks_on_node(); }

  // Phase 1 (a reduce-scatter) leaves chunk `me` reduced on member me; phase 2
  // (an allgather) sends it to every member. Chunks as the host backend's.
  // Up to this many bytes of a device's result, allgather and alltoall take
  // one round of point-to-point messages (see the top).
  static constexpr std::size_t small_bytes = 64 * 1024;
  // Up to this many bytes, allreduce takes one round. Its messages are the
  // whole input, so the limit stays below shared-memory transports' eager
  // limit (4 KiB in Open MPI): past it a message waits for the receiver's
  // handshake, and two rounds of smaller pieces are faster.
  static constexpr std::size_t small_reduce_bytes = 2 * 1024;

  void allreduce(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) {
    with_dtype(t, [&]<class T>() {
      const std::size_t gs = g.size(), me = g.index_of(device());
      if (n * sizeof(T) <= small_reduce_bytes) {
        // Every member receives every member's whole input and folds it in
        // member order: the two-phase result, bit for bit, in one round.
        const T* src = static_cast<const T*>(in);
        T* slots = reinterpret_cast<T*>(s_->scratch(gs * n * sizeof(T)));
        if (src == out && n) {
          backend::host::copy_bytes(slots + me * n, src, n * sizeof(T));
          src = slots + me * n;
        }
        // No allocation for groups of up to 16 (a heap block costs a few
        // percent of a 1 KiB call).
        std::array<const T*, 16> few;
        std::vector<const T*> many(gs > few.size() ? gs : 0);
        const std::span<const T*> pieces = gs > few.size() ? std::span<const T*>(many) : std::span<const T*>(few.data(), gs);
        for (std::size_t j = 0; j < gs; ++j) pieces[j] = j == me ? src : slots + j * n;
        one_round("allreduce", g, small_reduce_tag, t, n, [&](std::size_t j) { return slots + j * n; },
                  [&](std::size_t) { return src; });
        detail::reduce_in_member_order<T>(static_cast<T*>(out), pieces, 0, n, op);
        return;
      }
      auto begin = [&](std::size_t j) { return j * n / gs; };
      const std::size_t own = begin(me + 1) - begin(me);
      const T* src = static_cast<const T*>(in);
      T* dst = static_cast<T*>(out);
      // Slot j receives member j's piece of chunk `me`; slot `me` keeps this
      // member's own piece when the call is in place (out overwrites it).
      T* slots = reinterpret_cast<T*>(s_->scratch(gs * own * sizeof(T)));
      std::vector<piece> receives, sends;
      std::vector<const T*> pieces(gs);
      for (std::size_t j = 0; j < gs; ++j) {
        if (j == me) continue;
        receives.push_back({static_cast<int>(j), slots + j * own, own});
        sends.push_back({static_cast<int>(j), const_cast<T*>(src) + begin(j), begin(j + 1) - begin(j)});
        pieces[j] = slots + j * own;
      }
      pieces[me] = src + begin(me);
      if (src == dst && own) {
        backend::host::copy_bytes(slots + me * own, src + begin(me), own * sizeof(T));
        pieces[me] = slots + me * own;
      }
      exchange("allreduce", g, reduce_tag, t, receives, sends);
      detail::reduce_in_member_order<T>(dst + begin(me), pieces, 0, own, op);

      receives.clear();
      sends.clear();
      for (std::size_t j = 0; j < gs; ++j) {
        if (j == me) continue;
        receives.push_back({static_cast<int>(j), dst + begin(j), begin(j + 1) - begin(j)});
        sends.push_back({static_cast<int>(j), dst + begin(me), own});
      }
      exchange("allreduce", g, gather_tag, t, receives, sends);
    });
  }

  void allgather(const group& g, const void* in, void* out, std::size_t n, dtype t) {
    const std::size_t gs = g.size(), bytes = n * size_of(t);
    if (gs * bytes <= small_bytes) {
      std::byte* dst = static_cast<std::byte*>(out);
      if (bytes) backend::host::copy_bytes(dst + g.index_of(device()) * bytes, in, bytes);
      one_round("allgather", g, small_gather_tag, t, n, [&](std::size_t j) { return dst + j * bytes; },
                [&](std::size_t) { return in; });
      return;
    }
    const MPI_Datatype type = detail::mpi_datatype(t);
    collective("allgather", g, [&](MPI_Comm c, MPI_Request* r) {
      return MPI_Iallgather(in, count(n), type, out, count(n), type, c, r);
    });
  }

  void reduce_scatter(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) {
    with_dtype(t, [&]<class T>() {
      const std::size_t gs = g.size(), me = g.index_of(device());
      const T* src = static_cast<const T*>(in);
      T* slots = reinterpret_cast<T*>(s_->scratch(gs * n * sizeof(T)));
      std::vector<piece> receives, sends;
      std::vector<const T*> pieces(gs, src + me * n);
      for (std::size_t j = 0; j < gs; ++j) {
        if (j == me) continue;
        receives.push_back({static_cast<int>(j), slots + j * n, n});
        sends.push_back({static_cast<int>(j), const_cast<T*>(src) + j * n, n});
        pieces[j] = slots + j * n;
      }
      exchange("reduce_scatter", g, reduce_tag, t, receives, sends);
      detail::reduce_in_member_order<T>(static_cast<T*>(out), pieces, 0, n, op);
    });
  }

  void alltoall(const group& g, const void* in, void* out, std::size_t n, dtype t) {
    const std::size_t gs = g.size(), bytes = n * size_of(t);
    if (gs * bytes <= small_bytes) {
      const std::byte* src = static_cast<const std::byte*>(in);
      std::byte* dst = static_cast<std::byte*>(out);
      const std::size_t me = g.index_of(device());
      if (bytes) backend::host::copy_bytes(dst + me * bytes, src + me * bytes, bytes);
      one_round("alltoall", g, small_alltoall_tag, t, n, [&](std::size_t j) { return dst + j * bytes; },
                [&](std::size_t j) { return src + j * bytes; });
      return;
    }
    const MPI_Datatype type = detail::mpi_datatype(t);
    collective("alltoall", g, [&](MPI_Comm c, MPI_Request* r) {
      return MPI_Ialltoall(in, count(n), type, out, count(n), type, c, r);
    });
  }

  void broadcast(const group& g, void* buffer, std::size_t n, dtype t, int root) {
    collective("broadcast", g, [&](MPI_Comm c, MPI_Request* r) {
      return MPI_Ibcast(buffer, count(n), detail::mpi_datatype(t), root, c, r);
    });
  }

  void send(int to, const void* in, std::size_t n, dtype t, int tag) {
    check_tag(tag);
    s_->post(to, in, n, t, tag);
  }

  // Up to eager_bytes the receive is posted at once, so the message lands
  // in `out` without a stop in MPI's queue of unexpected messages (a copy);
  // a receive that times out or whose sender has finished is cancelled.
  // Below direct_bytes the message comes in pieces (recv_pieces); from
  // there on it is found first (recv_large).
  void recv(int from, void* out, std::size_t n, dtype t, int tag) {
    check_tag(tag);
    const std::size_t expected = n * size_of(t);
    if (expected >= mpi_state::direct_bytes) {
      const std::size_t size = recv_large(from, out, n, t, tag, announced::not_yet);
      if (size != expected) throw wrong_size(from, n, t, tag, static_cast<int>(size));
      return;
    }
    if (expected > mpi_state::eager_bytes) {
      const std::size_t size = recv_pieces(from, {}, out, n, t, tag);
      if (size != expected) throw wrong_size(from, n, t, tag, static_cast<int>(size));
      return;
    }
    bool truncated = false;
    const std::size_t bytes =
        receive_posted(from, out, count(n), detail::mpi_datatype(t), expected, n, t, tag, truncated);
    s_->count_received(from, tag, expected);
    if (truncated) throw wrong_size(from, n, t, tag, detail::cat("more than ", expected, " bytes"));
    if (bytes != expected) throw wrong_size(from, n, t, tag, static_cast<int>(bytes));
  }

  // A labelled message's label leads its data in one message below
  // direct_bytes in all (one message saves a round of MPI's matching, a
  // third of a 1 KiB round trip): whole up to eager_bytes, else in pieces.
  // Within one eager message a label whose text the receiver has goes as
  // its header alone. From direct_bytes the label goes as a message of its
  // own, just ahead of the data (label_apart).
  void send_with_label(int to, const std::uint8_t* header, std::string_view what, const void* in, std::size_t bytes) {
    using L = detail::message_label;
    if (s_->sends_header_only(to, L::identity_at(header), bytes))
      return s_->post_parts(to, detail::labelled_tag, {{header, L::header_bytes}, {in, bytes}});
    const auto label = L::described_label(header, what);
    if (label_apart(bytes)) {
      s_->post_parts(to, detail::labelled_tag, {{label.data(), label.size()}});
      return s_->post(to, in, bytes, dtype::u8, mpi_state::labelled_data_tag);
    }
    s_->post_parts(to, detail::labelled_tag, {{label.data(), label.size()}, {in, bytes}});
  }

  // Whether the label of a labelled message of `bytes` of data goes apart,
  // as a message of its own just ahead of the data: where the two would
  // make a message of direct_bytes or more. The data then goes from the
  // caller's memory to a receiver that waits for it, or from a copy, as
  // any such message does (mpi_state::post). One message from the label's
  // and the data's places at once (an MPI struct datatype) was measured and
  // left: Open MPI moves such a message through its shared-memory
  // fragments, not its single copy, and on a busy 2-core machine a 16 KiB
  // round trip took 1.6 times as long (docs/performance.md).
  static bool label_apart(std::size_t bytes) {
    return detail::message_label::bytes + bytes >= mpi_state::direct_bytes;
  }

  // The text of the operation of a label that recv_with_label gave back
  // without it (message_label::described false): a message from `from`
  // that went as its label's header, restored from the first of that
  // operation's labels. Only a mismatch needs it, so a receive does not
  // copy it in.
  std::string label_text(int from, const std::uint8_t* label) const { return std::string(s_->label_text(from, label)); }

  // Whether a receive's ready notice has gone out (recv_large).
  enum class announced { not_yet, already };

  // A whole message is taken into scratch memory (any message of its size
  // class fits), then copied out; one in pieces as recv_pieces does. One of
  // another size class, found once the receive times out, gives its label.
  std::size_t recv_with_label(int from, void* label, std::size_t label_bytes, void* out, std::size_t bytes) {
    taken_label_.reset();
    std::size_t got = 0;
    try {
      got = receive_with_label(from, label, label_bytes, out, bytes);
    } catch (const collective_error&) {
      if (!taken_label_) throw;
      std::memcpy(label, taken_label_->label.data(), label_bytes);
      got = taken_label_->data_bytes;
    }
    // A label that came alone in the place of a message whose label leads
    // its data went ahead of its own data: that is taken too, so that the
    // next labelled message arrives intact.
    if (!label_apart(bytes) && got == 0) take_data_after(from, static_cast<const std::uint8_t*>(label));
    return got;
  }

  // Takes the data that a label announces, where it went apart from it
  // (label_apart), into scratch memory.
  void take_data_after(int from, const std::uint8_t* label) {
    using L = detail::message_label;
    const std::size_t data = L::count_at(label) * size_of(L::type_at(label));
    if (!label_apart(data)) return;
    std::vector<std::byte> taken(data);  // not scratch memory: recv_pieces takes its first piece there
    recv_data_apart(from, taken.data(), data, announced::not_yet);
  }

  // The data of a labelled message whose label went ahead of it
  // (label_apart): more than eager_bytes, so in pieces or whole with MPI's
  // handshake. Returns the message's size; one of another size is taken
  // whole, `out` untouched.
  std::size_t recv_data_apart(int from, void* out, std::size_t bytes, announced notice) {
    constexpr int tag = mpi_state::labelled_data_tag;
    if (bytes < mpi_state::direct_bytes) return recv_pieces(from, {}, out, bytes, dtype::u8, tag);
    return recv_large(from, out, bytes, dtype::u8, tag, notice);
  }

  void barrier(const group& g) {
    collective("barrier", g, [&](MPI_Comm c, MPI_Request* r) { return MPI_Ibarrier(c, r); });
  }

 private:
  // Posts a receive of up to `capacity` elements of `type` into `out` on the
  // communicator of a message of `message_bytes` on `tag`, and waits for it:
  // returns the bytes that came, or sets `truncated` when more came. A
  // receive that times out, or whose sender has finished, is cancelled and
  // named (nothing_received) as one of n elements of t.
  std::size_t receive_posted(int from, void* out, int capacity, MPI_Datatype type, std::size_t message_bytes,
                             std::size_t n, dtype t, int tag, bool& truncated) {
    MPI_Request request = MPI_REQUEST_NULL;
    s_->check(MPI_Irecv(out, capacity, type, from, mpi_state::mpi_tag(tag), s_->comm_of(tag, message_bytes), &request),
              "MPI_Irecv");
    MPI_Status status;
    truncated = false;
    auto done = [&] {
      int flag = 0;
      const int rc = MPI_Test(&request, &flag, &status);
      if (rc == MPI_SUCCESS) return flag != 0;
      int error_class = 0;
      MPI_Error_class(rc, &error_class);
      if (error_class != MPI_ERR_TRUNCATE) s_->check(rc, "MPI_Test");
      MPI_Request_free(&request);  // a request that failed stays allocated
      truncated = true;
      return true;
    };
    bool sender_finished = false;
    const bool arrived = wait_for_message(from, done, sender_finished);
    if (sender_finished || !arrived) {
      // The message may have come meanwhile: then the cancel fails and the
      // receive stands. Either way it ends locally.
      MPI_Cancel(&request);
      int cancelled = 1;
      if (s_->poll_for(s_->timeout(), done)) {
        if (truncated) cancelled = 0;  // it came, too large: named by the caller
        else MPI_Test_cancelled(&status, &cancelled);
      }
      if (cancelled) nothing_received(from, n, t, tag, sender_finished, message_bytes);
    }
    int bytes = 0;
    if (!truncated) MPI_Get_count(&status, MPI_BYTE, &bytes);
    return static_cast<std::size_t>(bytes);
  }

  // A message of more than eager_bytes and less than direct_bytes comes in
  // pieces (mpi_state::send_pieces): `lead` (a label, or nothing), then n
  // elements of t into `out`. The first piece, led by the message's size,
  // is taken into scratch memory; when the size is right its bytes are
  // copied into `lead` and `out` and the other pieces received straight
  // into `out`. A message of another size is taken whole, every piece of
  // it, with `lead` filled in from it (where it is long enough) and `out`
  // untouched. Returns the message's size; the caller names a wrong one.
  std::size_t recv_pieces(int from, std::span<std::byte> lead, void* out, std::size_t n, dtype t, int tag) {
    constexpr std::size_t header = mpi_state::piece_header_bytes, piece = mpi_state::eager_bytes;
    const std::size_t expected = lead.size() + n * size_of(t);
    std::byte* first = s_->scratch(piece);
    bool truncated = false;
    const std::size_t got =
        receive_posted(from, first, static_cast<int>(piece), MPI_BYTE, expected, n, t, tag, truncated);
    s_->count_received(from, tag, expected);
    std::uint64_t size = 0;
    if (!truncated && got >= header) std::memcpy(&size, first, header);
    if (truncated || size <= piece || size >= mpi_state::direct_bytes || got != mpi_state::piece_start(size, 1)) {
      // Pieces are taken whole and in order, so this is not the first one
      // of a message: only a broken sender gets here.
      throw wrong_size(from, n, t, tag, "a piece that does not start a message");
    }
    // A first piece is longer than a third of eager_bytes, so it holds a label.
    const bool has_lead = got >= header + lead.size();
    if (has_lead && !lead.empty()) std::memcpy(lead.data(), first + header, lead.size());
    const MPI_Comm comm = s_->comm_of(tag, expected);
    if (size != expected || !has_lead) {
      s_->take_pieces(from, mpi_state::mpi_tag(tag), comm, mpi_state::pieces_of(size) - 1);
      return static_cast<std::size_t>(size);
    }
    const std::size_t skip = header + lead.size();  // where `out` starts in the message with its size
    backend::host::copy_bytes(out, first + skip, got - skip);
    // The other pieces, straight into `out`.
    const std::size_t rest = mpi_state::pieces_of(expected) - 1;
    std::array<MPI_Request, mpi_state::max_pieces> requests;
    requests.fill(MPI_REQUEST_NULL);
    for (std::size_t i = 0; i < rest; ++i) {
      const std::size_t at = mpi_state::piece_start(expected, i + 1);
      s_->check(MPI_Irecv(static_cast<std::byte*>(out) + (at - skip),
                          static_cast<int>(mpi_state::piece_start(expected, i + 2) - at), MPI_BYTE, from,
                          mpi_state::mpi_tag(tag), comm, &requests[i]),
                "MPI_Irecv");
    }
    if (!s_->wait_all(requests.data(), static_cast<int>(rest), s_->timeout())) {
      for (std::size_t i = 0; i < rest; ++i) {
        if (requests[i] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&requests[i]);
        MPI_Request_free(&requests[i]);
      }
      throw timeout_error(detail::cat("recv on device ", device(), " from device ", from, " (", detail::describe_tag(tag),
                                      "): the first piece of the message came but the rest did not arrive within ",
                                      s_->timeout().count(), " ms"));
    }
    for (std::size_t i = 0; i < rest; ++i) s_->count_received(from, tag, expected);
    return expected;
  }

  // What recv_with_label receives; a message of another size class ends it
  // with collective_error once the receive times out (nothing_received
  // keeps its label).
  std::size_t receive_with_label(int from, void* label, std::size_t label_bytes, void* out, std::size_t bytes) {
    constexpr int tag = detail::labelled_tag;
    const std::size_t expected = label_bytes + bytes;
    std::size_t got = 0;
    if (label_apart(bytes)) {
      // The label alone, then the data; a ready notice goes first, so that
      // it travels while the label does.
      const bool large = bytes >= mpi_state::direct_bytes;
      if (large) s_->announce_ready(from, mpi_state::labelled_data_tag);
      const std::size_t with_label = receive_with_label(from, label, label_bytes, nullptr, 0);
      if (with_label != 0) return with_label;  // a label with data: of another size, named by the caller
      return recv_data_apart(from, out, bytes, large ? announced::already : announced::not_yet);
    }
    if (expected > mpi_state::eager_bytes) {
      got = recv_pieces(from, {static_cast<std::byte*>(label), label_bytes}, out, bytes, dtype::u8, tag);
    } else {
      std::byte* in = s_->scratch(mpi_state::eager_bytes);
      bool truncated = false;
      got = receive_posted(from, in, static_cast<int>(mpi_state::eager_bytes), MPI_BYTE, expected, expected, dtype::u8,
                           tag, truncated);
      s_->count_received(from, tag, expected);
      if (truncated) throw wrong_size(from, expected, dtype::u8, tag, detail::cat("more than ", mpi_state::eager_bytes, " bytes"));
      // Its label whole, or without its text (mpi_state::sends_header_only),
      // which the caller asks for only to name a mismatch (label_text).
      const std::size_t lead = s_->take_label(from, reinterpret_cast<const std::uint8_t*>(in), got,
                                              static_cast<std::uint8_t*>(label));
      if (lead == 0) throw wrong_size(from, expected, dtype::u8, tag, static_cast<int>(got));
      if (got - lead == bytes && bytes) backend::host::copy_bytes(out, in + lead, bytes);
      return got - lead;
    }
    if (got < label_bytes) throw wrong_size(from, expected, dtype::u8, tag, static_cast<int>(got));
    return got - label_bytes;
  }

  // A message of direct_bytes or more passes MPI's eager limit, so MPI hands
  // it over with a handshake and finding it before receiving costs nothing
  // (the data still moves once, straight into `out`). Its size is then
  // known first: one of n elements of t is received into `out`, one of
  // another size taken into scratch memory, `out` untouched; returns the
  // message's size, for the caller to name a wrong one. A receive must
  // never be posted for fewer bytes than such a message holds: Open MPI
  // 4.1's shared-memory single copy writes all of it, past the end of the
  // receive buffer. Hence also their communicators of their own (comm_of):
  // a small receive, posted at once, never meets one. The ready notice goes
  // out once this device looks for the message, unless it went already.
  std::size_t recv_large(int from, void* out, std::size_t n, dtype t, int tag, announced notice) {
    const std::size_t expected = n * size_of(t);
    if (notice == announced::not_yet) s_->announce_ready(from, tag);
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    auto found = [&] {
      int flag = 0;
      s_->check(MPI_Improbe(from, mpi_state::mpi_tag(tag), s_->comm_of(tag, expected), &flag, &message, &status),
                "MPI_Improbe");
      return flag != 0;
    };
    bool sender_finished = false;
    const bool arrived = wait_for_message(from, found, sender_finished);
    if (sender_finished || !arrived) nothing_received(from, n, t, tag, sender_finished, expected);
    s_->count_received(from, tag, expected);
    MPI_Count size = 0;
    MPI_Get_elements_x(&status, MPI_BYTE, &size);
    const auto bytes = static_cast<std::size_t>(size);
    if (bytes != expected) {
      s_->check(MPI_Mrecv(s_->scratch(bytes), mpi_state::mpi_count(bytes), MPI_BYTE, &message, MPI_STATUS_IGNORE),
                "MPI_Mrecv");
      return bytes;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    s_->check(MPI_Imrecv(out, count(n), detail::mpi_datatype(t), &message, &request), "MPI_Imrecv");
    if (!s_->wait_all(&request, 1, s_->timeout())) {
      throw timeout_error(detail::cat("recv on device ", device(), " from device ", from, " (", detail::describe_tag(tag),
                                      "): the message came but its data did not arrive within ", s_->timeout().count(),
                                      " ms"));
    }
    return bytes;
  }

  // Polls came() until it says the message from `from` is there (true), the
  // timeout passes (false), or `from` has returned without sending it
  // (true, with sender_finished set).
  template <class Came>
  bool wait_for_message(int from, Came& came, bool& sender_finished) {
    long polls = 0;
    return s_->poll_for(s_->timeout(), [&] {
      if (came()) return true;
      if (++polls % 256 == 0 && s_->has_finished(from)) {
        sender_finished = !came();  // what it sent came before its notice
        return true;
      }
      return false;
    });
  }

  collective_error wrong_size(int from, std::size_t n, dtype t, int tag, const std::string& holds) const {
    return collective_error(detail::cat("device ", device(), " expects ", n, " ", name_of(t), " from device ", from,
                                        " (", detail::describe_tag(tag), "), but the message holds ", holds));
  }
  collective_error wrong_size(int from, std::size_t n, dtype t, int tag, int bytes) const {
    return wrong_size(from, n, t, tag,
                      detail::cat(bytes, " bytes (", bytes / static_cast<int>(size_of(t)), " ", name_of(t), ")"));
  }

  // No message of `message_bytes` (n elements of t, maybe after a label)
  // came: its sender has returned from the program, or the timeout passed. A message of another size class (see
  // comm_of) is taken and named, as one of the wrong size.
  [[noreturn]] void nothing_received(int from, std::size_t n, dtype t, int tag, bool sender_finished,
                                     std::size_t message_bytes) {
    const MPI_Comm own = s_->comm_of(tag, message_bytes);
    // One size of each class: whole and small, in pieces, whole and large.
    for (std::size_t bytes : {std::size_t(0), mpi_state::eager_bytes + 1, mpi_state::direct_bytes}) {
      const MPI_Comm comm = s_->comm_of(tag, bytes);
      if (comm == own) continue;
      int found = 0;
      MPI_Message message = MPI_MESSAGE_NULL;
      MPI_Status status;
      s_->check(MPI_Improbe(from, mpi_state::mpi_tag(tag), comm, &found, &message, &status), "MPI_Improbe");
      if (!found) continue;
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      std::byte* data = s_->scratch(static_cast<std::size_t>(got));
      s_->check(MPI_Mrecv(data, got, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
      // Counted in the size class it came in, as its sender counted it: the
      // ready notices of large messages name them by that count.
      s_->count_received(from, tag, bytes);
      // A labelled message's label is kept (read before the rest of one in
      // pieces overwrites the scratch memory): the receive names it by that.
      const bool in_pieces = bytes == mpi_state::eager_bytes + 1;
      const std::size_t skip = in_pieces ? mpi_state::piece_header_bytes : 0;
      std::size_t lead = 0;
      if (tag == detail::labelled_tag && static_cast<std::size_t>(got) >= skip) {
        taken_label_.emplace();
        lead = s_->restore_label(from, reinterpret_cast<const std::uint8_t*>(data + skip),
                                 static_cast<std::size_t>(got) - skip, taken_label_->label.data());
        if (lead == 0) taken_label_.reset();
      }
      std::size_t size = static_cast<std::size_t>(got);
      if (in_pieces) size = s_->take_rest_of_message(from, mpi_state::mpi_tag(tag), comm, data, size);
      if (taken_label_) taken_label_->data_bytes = size - lead;
      throw wrong_size(from, n, t, tag, static_cast<int>(size));
    }
    if (sender_finished) {
      throw collective_error(detail::cat("recv on device ", device(), " from device ", from, " (",
                                          detail::describe_tag(tag), "): device ", from,
                                          " has already finished the program without sending it"));
    }
    throw timeout_error(detail::cat("recv on device ", device(), " from device ", from, " (", detail::describe_tag(tag),
                                    ") timed out after ", s_->timeout().count(), " ms: no message arrived"));
  }

  template <class Start>
  void collective(std::string_view what, const group& g, Start start) {
    MPI_Comm comm = s_->comm_for(g);
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = start(comm, &request);
    if (rc != MPI_SUCCESS) {
      throw collective_error(detail::cat(what, " over group ", detail::list(g.devices), " (", g.label, ") on device ",
                                         device(), " failed: ", detail::mpi_error_string(rc)));
    }
    if (!s_->wait_all(&request, 1, s_->timeout())) throw collective_timeout(what, g);
  }

  static int count(std::size_t n) { return mpi_state::mpi_count(n); }

  timeout_error collective_timeout(std::string_view what, const group& g) const {
    return timeout_error(detail::cat(what, " over group ", detail::list(g.devices), " (", g.label, ") on device ",
                                     device(), " timed out after ", s_->timeout().count(),
                                     " ms: not every member joined (MPI does not tell which are missing)"));
  }

  // One message of an exchange: `count` elements to or from member `member`.
  struct piece {
    int member;
    void* data;
    std::size_t count;
  };
  // Tags of the reductions' messages on a group's communicator, which carries
  // nothing else point to point. Messages between two ranks with one tag
  // arrive in order, so consecutive collectives cannot mix.
  static constexpr int reduce_tag = 1, gather_tag = 2;
  static constexpr int small_reduce_tag = 3, small_gather_tag = 4, small_alltoall_tag = 5;

  // One round among g's members: n elements from every other member j into
  // into(j), n elements of from(j) to it; receives posted first.
  template <class Into, class From>
  void one_round(std::string_view what, const group& g, int tag, dtype t, std::size_t n, Into into, From from) {
    MPI_Comm comm = s_->comm_for(g);
    const MPI_Datatype type = detail::mpi_datatype(t);
    const int gs = g.size(), me = g.index_of(device()), c = count(n);
    MPI_Request* requests = s_->requests(2 * static_cast<std::size_t>(gs - 1));
    int r = 0;
    for (int j = 0; j < gs; ++j)
      if (j != me) s_->check(MPI_Irecv(into(j), c, type, j, tag, comm, &requests[r++]), "MPI_Irecv");
    for (int j = 0; j < gs; ++j)
      if (j != me) s_->check(MPI_Isend(from(j), c, type, j, tag, comm, &requests[r++]), "MPI_Isend");
    if (!s_->wait_all(requests, r, s_->timeout())) throw collective_timeout(what, g);
  }

  // Posts every receive, then every send, among g's members and waits for all.
  void exchange(std::string_view what, const group& g, int tag, dtype t, const std::vector<piece>& receives,
                const std::vector<piece>& sends) {
    MPI_Comm comm = s_->comm_for(g);
    const MPI_Datatype type = detail::mpi_datatype(t);
    std::vector<MPI_Request> requests(receives.size() + sends.size(), MPI_REQUEST_NULL);
    std::size_t r = 0;
    for (const piece& p : receives)
      s_->check(MPI_Irecv(p.data, count(p.count), type, p.member, tag, comm, &requests[r++]), "MPI_Irecv");
    for (const piece& p : sends)
      s_->check(MPI_Isend(p.data, count(p.count), type, p.member, tag, comm, &requests[r++]), "MPI_Isend");
    if (!s_->wait_all(requests.data(), static_cast<int>(requests.size()), s_->timeout()))
      throw collective_timeout(what, g);
  }

  void check_tag(int tag) const {
    if (tag == detail::labelled_tag) return;
    const int upper = s_->tag_ub();
    if (tag < 0 || tag > upper) {
      throw device_error(detail::cat("device ", device(), ": message tag ", tag, " is outside 0 to ", upper,
                                     " (MPI_TAG_UB)"));
    }
  }

  std::shared_ptr<mpi_state> s_;
  // The label of a labelled message of another size class that a receive
  // took in the place of its own (nothing_received).
  struct taken_label {
    std::array<std::uint8_t, detail::message_label::bytes> label;
    std::size_t data_bytes = 0;  // that came with it
  };
  std::optional<taken_label> taken_label_;
};

static_assert(communicator<mpi_communicator>);
static_assert(inline_label_communicator<mpi_communicator>);

}  // namespace typemesh

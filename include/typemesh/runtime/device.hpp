// A device: this SPMD program's place in the run, holding the communicator
// of whichever backend runs it. Model code sees only this class, so nothing
// in a program depends on the backend.
//
// The typed collectives below check their arguments (group membership, buffer
// sizes) and count the bytes every collective moves, the same way for every
// backend, then hand the call to the communicator.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>
#include <array>
#include <string_view>

#include "typemesh/backend/storage.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/space.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/runtime/communicator.hpp"
#include "typemesh/runtime/dtype.hpp"
#include "typemesh/runtime/message_label.hpp"
#include "typemesh/runtime/traffic.hpp"

namespace typemesh {

class device {
 public:
  template <communicator C>
  explicit device(C comm)
      : impl_(std::make_unique<model<C>>(std::move(comm))),
        labelled_sent_(static_cast<std::size_t>(impl_->device_count())),
        labelled_received_(static_cast<std::size_t>(impl_->device_count())) {
#if defined(TYPEMESH_CUDA)
    // The GPU this thread's cuda_mesh tensors go to: bound at its first GPU allocation.
    backend::cuda::this_thread_device() = impl_->local_device();
#endif
  }

  int id() const { return impl_->device(); }
  int count() const { return impl_->device_count(); }
  // This device's place on its machine (node): the reference's GPU index
  // within gpus_per_node. Host threads share one node (local_id() == id());
  // under MPI, the node's ranks in rank order, so with mpirun's default
  // placement device d is local device d % devices_on_node().
  int local_id() const { return impl_->local_device(); }
  int devices_on_node() const { return impl_->devices_on_node(); }

  // What this device has sent and received so far.
  typemesh::traffic& traffic() { return traffic_; }
  const typemesh::traffic& traffic() const { return traffic_; }

  // Every member ends with the elementwise reduction of all members' `in`.
  template <class T>
  void allreduce(const group& g, std::span<const std::type_identity_t<T>> in, std::span<T> out, reduce_op op = reduce_op::sum) {
    allreduce_in(host_space{}, g, in.data(), in.size(), out.data(), out.size(), op);
  }
  template <class T>
  void allreduce(const group& g, std::span<T> inout, reduce_op op = reduce_op::sum) {
    allreduce_in(host_space{}, g, inout.data(), inout.size(), inout.data(), inout.size(), op);
  }

  // out = the members' `in`, concatenated in member order.
  template <class T>
  void allgather(const group& g, std::span<const std::type_identity_t<T>> in, std::span<T> out) {
    allgather_in(host_space{}, g, in.data(), in.size(), out.data(), out.size());
  }

 private:
  template <class Space, class T>
  void allreduce_in(Space s, const group& g, const T* in, std::size_t n, T* out, std::size_t n_out, reduce_op op) {
    check_type<T>();
    int m = member("allreduce", g);
    same_size("allreduce", g, n, n_out);
    if (in != out && overlaps(in, n, out, n_out)) overlap_error("allreduce", g);
    std::size_t gs = g.size();
    std::size_t own = (m + 1) * n / gs - m * n / gs;  // the chunk this member reduces
    count(op_kind::allreduce, ((gs - 1) * own + (n - own)) * sizeof(T), ((gs - 1) * own + (n - own)) * sizeof(T));
    if (gs == 1 && in == out) return;  // in place over one member: already its own reduction
    in_communicator_memory(s, in, n, out, n_out, [&](const T* i, T* o) { impl_->allreduce(g, i, o, n, dtype_of<T>, op); });
  }

  template <class Space, class T>
  void allgather_in(Space s, const group& g, const T* in, std::size_t n, T* out, std::size_t n_out) {
    check_type<T>();
    member("allgather", g);
    std::size_t gs = g.size();
    if (n_out != gs * n) {
      throw shape_error(detail::cat("allgather over group ", detail::list(g.devices), " (", g.label, "): the output holds ",
                                    n_out, " elements, but ", gs, " members of ", n, " need ", gs * n));
    }
    if (overlaps(in, n, out, n_out)) overlap_error("allgather", g);
    std::size_t bytes = (gs - 1) * n * sizeof(T);
    count(op_kind::allgather, bytes, bytes);
    in_communicator_memory(s, in, n, out, n_out, [&](const T* i, T* o) { impl_->allgather(g, i, o, n, dtype_of<T>); });
  }

 public:

  // Reduces the members' `in` and leaves block m (of size out.size()) on member m.
  template <class T>
  void reduce_scatter(const group& g, std::span<const std::type_identity_t<T>> in, std::span<T> out, reduce_op op = reduce_op::sum) {
    reduce_scatter_in(host_space{}, g, in.data(), in.size(), out.data(), out.size(), op);
  }

  // Block j of `in` goes to member j; block j of `out` comes from member j.
  template <class T>
  void alltoall(const group& g, std::span<const std::type_identity_t<T>> in, std::span<T> out) {
    alltoall_in(host_space{}, g, in.data(), in.size(), out.data(), out.size());
  }

  // Member `root` (an index into the group) sends `buffer` to every member.
  template <class T>
  void broadcast(const group& g, std::span<T> buffer, int root) {
    broadcast_in(host_space{}, g, buffer.data(), buffer.size(), root);
  }

 private:
  template <class Space, class T>
  void reduce_scatter_in(Space s, const group& g, const T* in, std::size_t n_in, T* out, std::size_t n, reduce_op op) {
    check_type<T>();
    member("reduce_scatter", g);
    std::size_t gs = g.size();
    if (n_in != gs * n) {
      throw shape_error(detail::cat("reduce_scatter over group ", detail::list(g.devices), " (", g.label, "): the input holds ",
                                    n_in, " elements, but ", gs, " blocks of ", n, " need ", gs * n));
    }
    if (overlaps(in, n_in, out, n)) overlap_error("reduce_scatter", g);
    std::size_t bytes = (gs - 1) * n * sizeof(T);
    count(op_kind::reduce_scatter, bytes, bytes);
    in_communicator_memory(s, in, n_in, out, n, [&](const T* i, T* o) { impl_->reduce_scatter(g, i, o, n, dtype_of<T>, op); });
  }

  template <class Space, class T>
  void alltoall_in(Space s, const group& g, const T* in, std::size_t n, T* out, std::size_t n_out) {
    check_type<T>();
    member("alltoall", g);
    same_size("alltoall", g, n, n_out);
    std::size_t gs = g.size();
    if (n % gs != 0) {
      throw shape_error(detail::cat("alltoall over group ", detail::list(g.devices), " (", g.label, "): ", n,
                                    " elements do not split into ", gs, " equal blocks"));
    }
    if (overlaps(in, n, out, n_out)) overlap_error("alltoall", g);
    std::size_t block = n / gs, bytes = (gs - 1) * block * sizeof(T);
    count(op_kind::alltoall, bytes, bytes);
    in_communicator_memory(s, in, n, out, n_out, [&](const T* i, T* o) { impl_->alltoall(g, i, o, block, dtype_of<T>); });
  }

  template <class Space, class T>
  void broadcast_in(Space s, const group& g, T* buffer, std::size_t n, int root) {
    check_type<T>();
    int m = member("broadcast", g);
    if (root < 0 || root >= g.size()) {
      throw device_error(detail::cat("broadcast over group ", detail::list(g.devices), " (", g.label, "): root ", root,
                                     " is not a member index (the group has ", g.size(), " members)"));
    }
    std::size_t bytes = n * sizeof(T);
    if (m == root) count(op_kind::broadcast, (g.size() - 1) * bytes, 0);
    else count(op_kind::broadcast, 0, bytes);
    in_communicator_memory(s, buffer, n, buffer, n, [&](const T*, T* b) { impl_->broadcast(g, b, n, dtype_of<T>, root); });
  }

 public:

  // Buffered: returns without waiting for the receiver, once the data is
  // copied out (or, on MPI from 4 KiB, taken by a receiver that was already
  // waiting); the receiver's recv takes it. Tags are 0 or more; messages
  // with different tags do not mix.
  template <class T>
  void send(int to, std::span<T> data, int tag = 0) {
    send_in(host_space{}, to, static_cast<const T*>(data.data()), data.size(), tag);
  }
  template <class T>
  void recv(int from, std::span<T> data, int tag = 0) {
    recv_in(host_space{}, from, data.data(), data.size(), tag);
  }

  // A message of the operation `what` (its full description, the same on
  // both sides): it carries a label with that description and its place in
  // the stream from this sender, apart from tagged messages. The receiver
  // takes only its own operation's message: another operation's, or one out
  // of order, is an error naming both (a device skipped a transfer or ran
  // them in another order).
  template <class T>
  void send_labelled(std::string_view what, int to, std::span<T> data) {
    send_labelled_in(host_space{}, what, to, static_cast<const T*>(data.data()), data.size());
  }
  template <class T>
  void recv_labelled(std::string_view what, int from, std::span<T> data) {
    recv_labelled_in(host_space{}, what, from, data.data(), data.size());
  }

  // Whether this device's communicator moves a transfer through shared
  // memory at once (host threads; see exchanging_communicator).
  bool exchanges() const { return impl_->exchanges(); }

  // One transfer of the operation `what` through shared memory, all its
  // pairs at once: `members` (ascending) are the devices that send or
  // receive in it; this device shows `source` to each device of `readers`
  // (which reads `counts` elements of it) and calls read(sender, its
  // source) for each of `senders` once that one shows its source, in the
  // order they do; before those, once its own source is shown, it calls
  // meanwhile() (what it keeps). Returns once `source` is no longer read; it must not
  // change before. Traffic counts one send and one recv per pair. A device
  // that skipped a transfer meets another's exchange: an error naming both.
  // Only where exchanges().
  template <class T, class Read, class Meanwhile = void (*)()>
  void exchange_shared(std::string_view what, std::span<const int> members, std::span<const T> source,
                       std::span<const int> readers, std::span<const std::size_t> counts,
                       std::span<const std::pair<int, std::size_t>> senders, Read&& read,
                       Meanwhile&& meanwhile = [] {}) {
    check_type<T>();
    check_exchange(what, members, readers, counts);
    for (auto [sender, n] : senders) {
      peer("recv from", sender);
      exchange_member(what, members, sender);
    }
    struct calls {
      Read& read;
      Meanwhile& meanwhile;
    } both{read, meanwhile};
    exchange_side side{what, members, source.data(), source.size(), dtype_of<T>, readers, counts, senders, &both,
                       [](void* context, int sender, const void* theirs) {
                         static_cast<calls*>(context)->read(sender, static_cast<const T*>(theirs));
                       },
                       [](void* context) { static_cast<calls*>(context)->meanwhile(); }};
    impl_->exchange(side);
    for (std::size_t n : counts) count(op_kind::send, n * sizeof(T), 0);
    for (auto [sender, n] : senders) count(op_kind::recv, 0, n * sizeof(T));
  }

#if defined(TYPEMESH_CUDA)
  // The same calls on GPU memory (a cuda_mesh tensor's elements). A
  // communicator of host memory (host threads, MPI) gets them staged through
  // the host; one of GPU memory (NCCL) takes them as they are.
  template <class T>
  void allreduce(const group& g, backend::device_span<const std::type_identity_t<T>> in, backend::device_span<T> out,
                 reduce_op op = reduce_op::sum) {
    allreduce_in(cuda_space{}, g, in.data(), in.size(), out.data(), out.size(), op);
  }
  template <class T>
  void allreduce(const group& g, backend::device_span<T> inout, reduce_op op = reduce_op::sum) {
    allreduce_in(cuda_space{}, g, inout.data(), inout.size(), inout.data(), inout.size(), op);
  }
  template <class T>
  void allgather(const group& g, backend::device_span<const std::type_identity_t<T>> in, backend::device_span<T> out) {
    allgather_in(cuda_space{}, g, in.data(), in.size(), out.data(), out.size());
  }
  template <class T>
  void reduce_scatter(const group& g, backend::device_span<const std::type_identity_t<T>> in,
                      backend::device_span<T> out, reduce_op op = reduce_op::sum) {
    reduce_scatter_in(cuda_space{}, g, in.data(), in.size(), out.data(), out.size(), op);
  }
  template <class T>
  void alltoall(const group& g, backend::device_span<const std::type_identity_t<T>> in, backend::device_span<T> out) {
    alltoall_in(cuda_space{}, g, in.data(), in.size(), out.data(), out.size());
  }
  template <class T>
  void broadcast(const group& g, backend::device_span<T> buffer, int root) {
    broadcast_in(cuda_space{}, g, buffer.data(), buffer.size(), root);
  }
  template <class T>
  void send(int to, backend::device_span<T> data, int tag = 0) {
    send_in(cuda_space{}, to, static_cast<const T*>(data.data()), data.size(), tag);
  }
  template <class T>
  void recv(int from, backend::device_span<T> data, int tag = 0) {
    recv_in(cuda_space{}, from, data.data(), data.size(), tag);
  }
  template <class T>
  void send_labelled(std::string_view what, int to, backend::device_span<T> data) {
    send_labelled_in(cuda_space{}, what, to, static_cast<const T*>(data.data()), data.size());
  }
  template <class T>
  void recv_labelled(std::string_view what, int from, backend::device_span<T> data) {
    recv_labelled_in(cuda_space{}, what, from, data.data(), data.size());
  }
#endif

 private:
  template <class Space, class T>
  void send_in(Space s, int to, const T* data, std::size_t n, int tag) {
    using E = std::remove_cv_t<T>;
    check_type<E>();
    peer("send to", to);
    check_tag(tag);
    count(op_kind::send, n * sizeof(E), 0);
    in_communicator_memory<Space, E>(s, data, n, nullptr, 0, [&](const E* d, E*) { impl_->send(to, d, n, dtype_of<E>, tag); });
  }

  template <class Space, class T>
  void recv_in(Space s, int from, T* data, std::size_t n, int tag) {
    check_type<T>();
    peer("recv from", from);
    check_tag(tag);
    count(op_kind::recv, 0, n * sizeof(T));
    in_communicator_memory<Space, T>(s, nullptr, 0, data, n, [&](const T*, T* d) { impl_->recv(from, d, n, dtype_of<T>, tag); });
  }

  // The header of this device's next labelled message to `to` (n elements
  // of type t, of the operation `what`); next_label: the whole label, its
  // text too.
  std::array<std::uint8_t, detail::message_label::header_bytes> next_header(std::string_view what, int to,
                                                                            std::size_t n, dtype t) {
    using L = detail::message_label;
    return L::header(identities_(what), labelled_sent_[to]++, n, t);
  }
  std::array<std::uint8_t, detail::message_label::bytes> next_label(std::string_view what, int to, std::size_t n, dtype t) {
    return detail::message_label::described_label(next_header(what, to, n, t).data(), what);
  }

  // The label ahead of a labelled message of n elements of type t.
  void send_label(std::string_view what, int to, std::size_t n, dtype t) {
    const auto bytes = next_label(what, to, n, t);
    in_communicator_memory<host_space, std::uint8_t>({}, bytes.data(), bytes.size(), nullptr, 0, [&](const std::uint8_t* b, std::uint8_t*) {
      impl_->send(to, b, bytes.size(), dtype::u8, detail::labelled_tag);
    });
  }

  // Takes the label ahead of a labelled message and checks it (check_label).
  template <class T>
  void receive_label(std::string_view what, int from, std::size_t n) {
    std::array<std::uint8_t, detail::message_label::bytes> bytes;
    in_communicator_memory<host_space, std::uint8_t>({}, nullptr, 0, bytes.data(), bytes.size(), [&](const std::uint8_t*, std::uint8_t* b) {
      impl_->recv(from, b, bytes.size(), dtype::u8, detail::labelled_tag);
    });
    check_label<T>(what, from, n, bytes.data());
  }

  // Checks that the label of the next labelled message from `from`
  // belongs to `what`, comes in order and announces n elements of T.
  template <class T>
  void check_label(std::string_view what, int from, std::size_t n, const std::uint8_t* bytes) {
    using L = detail::message_label;
    const std::uint64_t expected = labelled_received_[from]++;
    if (L::identity_at(bytes) != identities_(what) || L::sequence_at(bytes) != expected) {
      throw collective_error(detail::cat(
          "device ", id(), " expects its labelled message ", expected, " from device ", from, " to belong to ", what,
          ", but device ", from, "'s message ", L::sequence_at(bytes), " belongs to ",
          L::described(bytes) ? L::decode(bytes).what : impl_->label_text(from, bytes),
          ": a device skipped a transfer, or the devices ran their transfers in different orders"));
    }
    if (L::count_at(bytes) != n || L::type_at(bytes) != dtype_of<T>) {
      throw collective_error(detail::cat("device ", id(), " expects ", n, " ", name_of(dtype_of<T>),
                                         " from device ", from, ", but device ", from, " sent ", L::count_at(bytes), " ",
                                         name_of(L::type_at(bytes))));
    }
  }

  template <class Space, class T>
  void send_labelled_in(Space s, std::string_view what, int to, const T* data, std::size_t n) {
    using E = std::remove_cv_t<T>;
    check_type<E>();
    peer("send to", to);
    const std::size_t bytes = n * sizeof(E);
    if (impl_->labels_inline()) {  // the communicator sends label and data its own way
      const auto header = next_header(what, to, n, dtype_of<E>);
      count(op_kind::send, bytes, 0);
      in_communicator_memory<Space, E>(s, data, n, nullptr, 0, [&](const E* d, E*) {
        impl_->send_with_label(to, header.data(), what, d, bytes);
      });
      return;
    }
    send_label(what, to, n, dtype_of<E>);
    count(op_kind::send, bytes, 0);
    in_communicator_memory<Space, E>(s, data, n, nullptr, 0, [&](const E* d, E*) {
      impl_->send(to, d, n, dtype_of<E>, detail::labelled_tag);
    });
  }

  template <class Space, class T>
  void recv_labelled_in(Space s, std::string_view what, int from, T* data, std::size_t n) {
    check_type<T>();
    peer("recv from", from);
    const std::size_t bytes = n * sizeof(T);
    if (impl_->labels_inline()) {  // the communicator sends label and data its own way
      in_communicator_memory<Space, T>(s, nullptr, 0, data, n, [&](const T*, T* d) {
        std::array<std::uint8_t, detail::message_label::bytes> label;
        const std::size_t got = impl_->recv_with_label(from, label.data(), label.size(), d, bytes);
        check_label<T>(what, from, n, label.data());  // names a message of another size
        if (got != bytes) {
          throw collective_error(detail::cat("device ", id(), " expects ", n, " ", name_of(dtype_of<T>), " from device ",
                                             from, " (labelled), but the message holds ", got, " bytes"));
        }
      });
      count(op_kind::recv, 0, bytes);
      return;
    }
    receive_label<T>(what, from, n);
    count(op_kind::recv, 0, n * sizeof(T));
    in_communicator_memory<Space, T>(s, nullptr, 0, data, n, [&](const T*, T* d) {
      impl_->recv(from, d, n, dtype_of<T>, detail::labelled_tag);
    });
  }

  // Runs call(in, out) on buffers in the communicator's memory: the caller's
  // own where they are already there, else copies (in copied over before,
  // out copied back after; in == out stays one buffer). in or out may be
  // absent (null, 0 elements).
  template <class Space, class T, class Call>
  void in_communicator_memory(Space, const T* in, [[maybe_unused]] std::size_t n_in, T* out,
                              [[maybe_unused]] std::size_t n_out, Call call) {
#if defined(TYPEMESH_CUDA)
    constexpr bool on_gpu = std::is_same_v<Space, cuda_space>;
    if (impl_->gpu_buffers() != on_gpu) {
      if (on_gpu) stage<host_space>(Space{}, in, n_in, out, n_out, call);
      else stage<cuda_space>(Space{}, in, n_in, out, n_out, call);
      return;
    }
#else
    if (impl_->gpu_buffers()) {
      throw device_error(detail::cat("device ", id(), ": its communicator takes GPU memory (NCCL), but this program "
                                     "was not compiled by nvcc, so host buffers cannot be staged to the GPU: build it "
                                     "as CUDA (docs/backend.md)"));
    }
#endif
    call(in, out);
  }

#if defined(TYPEMESH_CUDA)
  template <class To, class From, class T, class Call>
  static void stage(From from, const T* in, std::size_t n_in, T* out, std::size_t n_out, Call& call) {
    const bool one = in != nullptr && static_cast<const T*>(out) == in;
    backend::scratch<T, To> staged_in(one ? 0 : n_in), staged_out(n_out);
    T* i = one ? staged_out.data() : staged_in.data();
    if (in) backend::copy_elements(To{}, i, from, in, n_in);
    call(in ? i : nullptr, out ? staged_out.data() : nullptr);
    if (out) backend::copy_elements(from, out, To{}, staged_out.data(), n_out);
  }
#endif

 public:
  void barrier(const group& g) {
    member("barrier", g);
    count(op_kind::barrier, 0, 0);
    impl_->barrier(g);
  }

 private:
  struct interface {
    virtual ~interface() = default;
    virtual int device() const = 0;
    virtual int device_count() const = 0;
    virtual int local_device() const = 0;
    virtual int devices_on_node() const = 0;
    virtual bool gpu_buffers() const = 0;
    virtual void allreduce(const group&, const void*, void*, std::size_t, dtype, reduce_op) = 0;
    virtual void allgather(const group&, const void*, void*, std::size_t, dtype) = 0;
    virtual void reduce_scatter(const group&, const void*, void*, std::size_t, dtype, reduce_op) = 0;
    virtual void alltoall(const group&, const void*, void*, std::size_t, dtype) = 0;
    virtual void broadcast(const group&, void*, std::size_t, dtype, int) = 0;
    virtual void send(int, const void*, std::size_t, dtype, int) = 0;
    virtual void recv(int, void*, std::size_t, dtype, int) = 0;
    virtual bool labels_inline() const = 0;
    virtual void send_with_label(int, const std::uint8_t*, std::string_view, const void*, std::size_t) = 0;
    virtual std::size_t recv_with_label(int, void*, std::size_t, void*, std::size_t) = 0;
    virtual std::string label_text(int, const std::uint8_t*) = 0;
    virtual void barrier(const group&) = 0;
    virtual bool exchanges() const = 0;
    virtual void exchange(const exchange_side&) = 0;
  };

  template <class C>
  struct model final : interface {
    explicit model(C comm) : c(std::move(comm)) {}
    int device() const override { return c.device(); }
    int device_count() const override { return c.device_count(); }
    int local_device() const override { return c.local_device(); }
    int devices_on_node() const override { return c.devices_on_node(); }
    // A communicator whose buffers are GPU memory says so (NCCL).
    bool gpu_buffers() const override {
      if constexpr (requires { typename C::memory_space; }) return std::is_same_v<typename C::memory_space, cuda_space>;
      else return false;
    }
    void allreduce(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) override {
      c.allreduce(g, in, out, n, t, op);
    }
    void allgather(const group& g, const void* in, void* out, std::size_t n, dtype t) override {
      c.allgather(g, in, out, n, t);
    }
    void reduce_scatter(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) override {
      c.reduce_scatter(g, in, out, n, t, op);
    }
    void alltoall(const group& g, const void* in, void* out, std::size_t n, dtype t) override {
      c.alltoall(g, in, out, n, t);
    }
    void broadcast(const group& g, void* buf, std::size_t n, dtype t, int root) override {
      c.broadcast(g, buf, n, t, root);
    }
    void send(int to, const void* in, std::size_t n, dtype t, int tag) override { c.send(to, in, n, t, tag); }
    void recv(int from, void* out, std::size_t n, dtype t, int tag) override { c.recv(from, out, n, t, tag); }
    bool labels_inline() const override { return inline_label_communicator<C>; }
    void send_with_label(int to, const std::uint8_t* header, std::string_view what, const void* in,
                         std::size_t bytes) override {
      if constexpr (inline_label_communicator<C>) c.send_with_label(to, header, what, in, bytes);
      else not_inline();
    }
    std::size_t recv_with_label(int from, void* label, std::size_t label_bytes, void* out, std::size_t bytes) override {
      if constexpr (inline_label_communicator<C>) return c.recv_with_label(from, label, label_bytes, out, bytes);
      else not_inline();
    }
    std::string label_text(int from, const std::uint8_t* label) override {
      if constexpr (inline_label_communicator<C>) return c.label_text(from, label);
      else not_inline();
    }
    [[noreturn]] void not_inline() const {
      throw device_error(detail::cat("device ", c.device(), ": its communicator sends labels apart from their data"));
    }
    void barrier(const group& g) override { c.barrier(g); }
    bool exchanges() const override { return exchanging_communicator<C>; }
    void exchange(const exchange_side& side) override {
      if constexpr (exchanging_communicator<C>) c.exchange(side);
      else throw device_error(detail::cat("device ", c.device(), ": its communicator does not share memory ",
                                          "(exchange_shared is for host threads); send and recv instead"));
    }
    C c;
  };

  template <class T>
  static void check_type() {
    static_assert(has_dtype<std::remove_cv_t<T>>,
                  "typemesh: collectives move float, double, int32_t, int64_t or uint8_t elements");
  }

  // This device's member index in g; an error if it is not a member or the
  // group names a device twice or one that does not exist.
  int member(const char* what, const group& g) const {
    int me = id(), n = count(), index = -1;
    std::vector<bool> seen(n, false);
    for (int i = 0; i < g.size(); ++i) {
      int d = g.devices[i];
      if (d < 0 || d >= n) {
        throw device_error(detail::cat(what, " over group ", detail::list(g.devices), " (", g.label, "): device ", d,
                                       " does not exist; devices are 0 to ", n - 1));
      }
      if (seen[d]) {
        throw device_error(detail::cat(what, " over group ", detail::list(g.devices), " (", g.label, "): device ", d,
                                       " appears twice"));
      }
      seen[d] = true;
      if (d == me) index = i;
    }
    if (index < 0) {
      throw device_error(detail::cat(what, " over group ", detail::list(g.devices), " (", g.label, "): device ", me,
                                     " is not a member"));
    }
    return index;
  }

  // An exchange's members are ascending devices without repeats, this one
  // among them, and each reader has its count.
  void check_exchange(std::string_view what, std::span<const int> members, std::span<const int> readers,
                      std::span<const std::size_t> counts) const {
    if (std::adjacent_find(members.begin(), members.end(), std::greater_equal<int>()) != members.end()) {
      throw device_error(detail::cat("device ", id(), ": the members of the exchange of ", what, ", ",
                                     detail::list(members), ", must be ascending devices without repeats"));
    }
    exchange_member(what, members, id());
    if (readers.size() != counts.size()) {
      throw device_error(detail::cat("device ", id(), ": the exchange of ", what, " names ", readers.size(),
                                     " readers but ", counts.size(), " counts"));
    }
    for (int reader : readers) {
      peer("send to", reader);
      exchange_member(what, members, reader);
    }
  }
  void exchange_member(std::string_view what, std::span<const int> members, int d) const {
    if (!std::binary_search(members.begin(), members.end(), d)) {
      throw device_error(detail::cat("device ", id(), ": device ", d, " takes part in the exchange of ", what,
                                     " but is not among its members ", detail::list(members)));
    }
  }

  void peer(const char* what, int other) const {
    if (other < 0 || other >= count() || other == id()) {
      throw device_error(detail::cat("device ", id(), ": ", what, " device ", other, " is impossible; devices are 0 to ",
                                     count() - 1, " and a device does not message itself"));
    }
  }

  void check_tag(int tag) const {
    if (tag < 0) {
      throw device_error(detail::cat("device ", id(), ": message tag ", tag,
                                     " is negative; tags are 0 or more (negative tags are typemesh's own)"));
    }
  }

  static void same_size(const char* what, const group& g, std::size_t in, std::size_t out) {
    if (in != out) {
      throw shape_error(detail::cat(what, " over group ", detail::list(g.devices), " (", g.label, "): input of ", in,
                                    " elements but output of ", out));
    }
  }

  template <class T>
  static bool overlaps(const T* a, std::size_t na, const T* b, std::size_t nb) {
    auto a0 = reinterpret_cast<std::uintptr_t>(a), a1 = a0 + na * sizeof(T);
    auto b0 = reinterpret_cast<std::uintptr_t>(b), b1 = b0 + nb * sizeof(T);
    return na && nb && a0 < b1 && b0 < a1;
  }

  [[noreturn]] static void overlap_error(const char* what, const group& g) {
    throw shape_error(detail::cat(what, " over group ", detail::list(g.devices), " (", g.label,
                                  "): the input and output buffers overlap"));
  }

  void count(op_kind k, std::uint64_t sent, std::uint64_t received) {
    auto& t = traffic_[k];
    ++t.calls;
    t.bytes_sent += sent;
    t.bytes_received += received;
  }

  std::unique_ptr<interface> impl_;
  typemesh::traffic traffic_;
  // Labelled messages sent to and received from each device so far.
  std::vector<std::uint64_t> labelled_sent_, labelled_received_;
  detail::identity_memo identities_;  // of the descriptions of labelled messages
};

namespace detail {
inline device*& current_device() {
  thread_local device* d = nullptr;
  return d;
}
}  // namespace detail

// The device this thread runs as; set by typemesh::launch.
inline device& this_device() {
  device* d = detail::current_device();
  if (!d) throw device_error("no device runs on this thread: call this inside typemesh::launch");
  return *d;
}

}  // namespace typemesh

// Carrying out a transfer plan. On host threads (a communicator that
// exchanges through shared memory) every sender shows its source slice once
// and each receiver copies its pieces straight from the senders' slices into
// its target slice, all pairs of the transfer in one exchange; otherwise
// (small transfers, MPI, NCCL, GPU memory) each device packs what it sends
// to each peer into one message, copies what it keeps, and unpacks what it
// receives. Neither waits on a receiver for longer than a buffered send
// would, so no order of devices can deadlock.
//
// Every message is labelled with the transfer's description (the operation,
// both meshes, the dims and both layouts) and its place in the stream between
// the two devices, and every exchange carries the description, so a receiver
// never takes another transfer's data: a skipped or reordered transfer is an
// error naming both, and data left over at the end of the program is
// reported by launch. Errors raised inside a transfer lead with its
// description.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "typemesh/backend/kernels.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/autodiff/tape.hpp"
#include "typemesh/convert/memo.hpp"
#include "typemesh/convert/transfer_plan.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

namespace detail {

// A local slice: its storage and where it sits in the global index space.
template <class T, std::size_t Rank>
struct local_slice {
  T* data;
  box<Rank> slice;

  backend::region<Rank> region_of(const box<Rank>& global) const {
    backend::region<Rank> r{slice.extent, {}};
    for (std::size_t i = 0; i < Rank; ++i) r.begin[i] = global.begin[i] - slice.begin[i];
    return r;
  }

  // Where `global` starts in the slice's storage when it is one contiguous
  // run there (ones in the leading dims, whole in the trailing ones), else -1.
  std::int64_t contiguous_offset(const box<Rank>& global) const {
    std::size_t k = 0;
    while (k + 1 < Rank && global.extent[k] == 1) ++k;
    for (std::size_t i = k + 1; i < Rank; ++i)
      if (global.extent[i] != slice.extent[i]) return -1;
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < Rank; ++i) offset = offset * slice.extent[i] + (global.begin[i] - slice.begin[i]);
    return offset;
  }
};

// A transfer none of whose pairs moves this many bytes sends messages even
// on host threads: a buffered send lets the sender go on at once (a
// pipeline's first stage runs ahead of its second), where an exchange makes
// it wait for its readers, which costs more than copying a few KiB twice.
// With every small transfer exchanged, 8 devices training the RNNLM lost
// 3% of their samples a second (docs/performance.md, "One exchange per
// transfer").
inline constexpr std::int64_t exchange_bytes = std::int64_t(16) << 10;

// Device `me`'s part of a plan, grouped as run_transfer moves it. Made once
// with the plan (plan_of), not on every call: grouping the pieces into maps
// took 1-2 us a call on each device, and with 8 device threads on 2 cores
// every microsecond a device spends before it shows its source is one the
// others wait (docs/performance.md, "What a 1 MiB conversion spends").
template <std::size_t Rank>
struct transfer_route {
  using piece_list = std::vector<const transfer_piece<Rank>*>;
  std::vector<std::pair<int, piece_list>> sends, receives;  // by peer, ascending; pieces in plan order
  piece_list kept;                                          // from this device to itself
  std::vector<int> members;                 // the devices between which pieces cross, ascending
  // The same peers as `sends` and `receives`, index for index, with the
  // elements of their pieces, in the form the exchange takes them.
  std::vector<int> readers;                 // the peers of `sends`
  std::vector<std::size_t> read_counts;     // the elements each of them takes
  std::vector<std::pair<int, std::size_t>> senders;  // the peers of `receives`, with their elements
  // Some pair of devices moves exchange_bytes or more: the same on every device.
  bool large = false;

  const piece_list& received_from(int sender) const {
    for (const auto& [peer, pieces] : receives)
      if (peer == sender) return pieces;
    throw error(cat("device ", sender, " sends this device nothing in this transfer"));
  }
};

template <std::size_t Rank>
transfer_route<Rank> route_of(const transfer_plan<Rank>& plan, int me, std::size_t element_bytes) {
  transfer_route<Rank> r;
  std::map<int, typename transfer_route<Rank>::piece_list> to_send, to_receive;
  std::map<std::pair<int, int>, std::int64_t> pair_bytes;
  for (const auto& p : plan.pieces) {
    if (p.from == p.to) {
      if (p.from == me) r.kept.push_back(&p);
      continue;
    }
    if (p.from == me) to_send[p.to].push_back(&p);
    if (p.to == me) to_receive[p.from].push_back(&p);
    r.members.push_back(p.from);
    r.members.push_back(p.to);
    auto& b = pair_bytes[{p.from, p.to}];
    b += p.region.elements() * static_cast<std::int64_t>(element_bytes);
    if (b >= exchange_bytes) r.large = true;
  }
  std::sort(r.members.begin(), r.members.end());
  r.members.erase(std::unique(r.members.begin(), r.members.end()), r.members.end());
  auto elements = [](const auto& pieces) {
    std::size_t n = 0;
    for (auto* p : pieces) n += static_cast<std::size_t>(p->region.elements());
    return n;
  };
  for (auto& [peer, pieces] : to_send) {
    r.readers.push_back(peer);
    r.read_counts.push_back(elements(pieces));
    r.sends.emplace_back(peer, std::move(pieces));
  }
  for (auto& [peer, pieces] : to_receive) {
    r.senders.emplace_back(peer, elements(pieces));
    r.receives.emplace_back(peer, std::move(pieces));
  }
  return r;
}

// A plan with one device's route through it (which points into the plan).
template <std::size_t Rank>
struct routed_plan {
  routed_plan(transfer_plan<Rank> p, int me, std::size_t element_bytes)
      : plan(std::move(p)), route(route_of(plan, me, element_bytes)) {}
  routed_plan(const routed_plan&) = delete;
  routed_plan& operator=(const routed_plan&) = delete;

  const transfer_plan<Rank> plan;
  const transfer_route<Rank> route;
};

// From this many bytes a host target slice is on 2 MiB pages and written
// with non-temporal stores; from half of it, its contiguous pieces only
// (copy_piece).
inline constexpr auto stream_bytes = static_cast<std::int64_t>(backend::host_large_block_bytes);

// Where this device's target slice starts in its source slice (in elements),
// when the plan keeps the whole target slice from there as one contiguous run,
// and that run is at least half the source slice; else -1. Such a target
// shares the source's elements (copy on write, as tensor copies do) and
// nothing is copied into it: a pipeline's backward move, whose first stage
// keeps half of what it held. The half bounds the memory a small target keeps
// alive with its source's elements.
template <class T, std::size_t Rank>
std::int64_t kept_in_place(const transfer_route<Rank>& route, const local_slice<const T, Rank>& in) {
  if (!route.receives.empty() || route.kept.size() != 1) return -1;
  const transfer_piece<Rank>& kept = *route.kept[0];
  if (2 * kept.region.elements() < in.slice.elements()) return -1;
  return in.contiguous_offset(kept.region);
}

// Copies piece `global` (a box of the tensor) from src, where it is at
// `from`, into its place in the target slice `out`. A host target slice of
// stream_bytes or more is written with stores that bypass the caches
// (backend::stream_box): it does not stay in a core's cache anyway, and its
// lines are then not read in before being overwritten, a third of a copy's
// memory traffic. Between half of that and stream_bytes a slice has 4 KiB
// pages (backend/storage.hpp), and only pieces that land in one contiguous
// run stream: scattered rows of non-temporal stores a page apart ran at a
// third of memcpy's speed there.
template <class Space, class T, std::size_t Rank>
void copy_piece(Space s, const T* src, const backend::region<Rank>& from, const local_slice<T, Rank>& out,
                const box<Rank>& global) {
  const auto to = out.region_of(global);
  if constexpr (std::is_same_v<Space, host_space>) {
    const std::int64_t out_bytes = out.slice.elements() * std::int64_t(sizeof(T));
    if (out_bytes >= stream_bytes || (out_bytes >= stream_bytes / 2 && out.contiguous_offset(global) >= 0))
      return backend::stream_box(s, src, from, out.data, to, global.extent);
  }
  backend::copy_box(s, src, from, out.data, to, global.extent);
}

// Copies `pieces`, all from one source slice whose elements start at src
// (this device's own, or a sender's in an exchange), into the target slice.
template <class Space, class T, std::size_t Rank>
void copy_pieces(Space s, const T* src, const typename transfer_route<Rank>::piece_list& pieces,
                 const local_slice<T, Rank>& out) {
  if (pieces.empty()) return;
  const local_slice<const T, Rank> from{src, pieces[0]->source};
  for (auto* p : pieces) copy_piece(s, src, from.region_of(p->region), out, p->region);
}

// Moves this device's pieces (`route`) from `in` (its source slice) into
// `out` (its target slice), both in the memory of Space. Compiled once per
// space, element type and rank. With `kept_shared` the target shares the
// source's elements (kept_in_place), so this device only sends.
//
// On host threads (dev.exchanges()), where some pair moves exchange_bytes or
// more, the whole transfer is one exchange
// (exchanging_communicator): this device shows its whole source slice to the
// peers it sends to, and copies its pieces from each sender's slice as soon
// as that one shows it, straight into its target slice: every element moves
// once, and each device meets the others once, not once per pair (case 2 of
// typemesh-bench-conversions at 1 MiB: 160-170 us with a loan per pair,
// 85-97 us in one exchange; docs/performance.md). It returns once its slice
// is no longer read. Otherwise each device packs the pieces it sends to a
// peer into one message and unpacks what it receives.
template <class Space, class T, std::size_t Rank>
void run_transfer(Space s, const std::string& what, const transfer_route<Rank>& route, local_slice<const T, Rank> in,
                  local_slice<T, Rank> out, bool kept_shared = false) {
  device& dev = this_device();
  auto packed = [](const box<Rank>& b) { return backend::region<Rank>{b.extent, {}}; };
  auto keep = [&] {
    if (!kept_shared) copy_pieces(s, in.data, route.kept, out);
  };

  if constexpr (std::is_same_v<Space, host_space>) {
    if (dev.exchanges() && route.large) {
      if (route.sends.empty() && route.receives.empty()) return keep();
      dev.exchange_shared<T>(what, route.members,
                             std::span<const T>(in.data, static_cast<std::size_t>(in.slice.elements())), route.readers,
                             route.read_counts, route.senders, [&](int sender, const T* theirs) {
                               copy_pieces(s, theirs, route.received_from(sender), out);
                             }, keep);
      return;
    }
  }
  // Outgoing: one message per destination, pieces in plan order. A single
  // piece that is contiguous in the slice goes without staging.
  for (std::size_t i = 0; i < route.sends.size(); ++i) {
    const auto& [peer, pieces] = route.sends[i];
    if (std::int64_t at = pieces.size() == 1 ? in.contiguous_offset(pieces[0]->region) : -1; at >= 0) {
      dev.send_labelled(what, peer, backend::span_of(s, in.data + at, pieces[0]->region.elements()));
      continue;
    }
    backend::scratch<T, Space> message(route.read_counts[i]);
    auto* at = message.data();
    for (auto* p : pieces) {
      backend::copy_box(s, in.data, in.region_of(p->region), at, packed(p->region), p->region.extent);
      at += p->region.elements();
    }
    dev.send_labelled(what, peer, backend::span_of(s, static_cast<const T*>(message.data()), message.size()));
  }

  keep();

  // Incoming, in the senders' order: unstaged when contiguous, as above.
  for (std::size_t i = 0; i < route.receives.size(); ++i) {
    const auto& [peer, pieces] = route.receives[i];
    if (std::int64_t at = pieces.size() == 1 ? out.contiguous_offset(pieces[0]->region) : -1; at >= 0) {
      dev.recv_labelled(what, peer, backend::span_of(s, out.data + at, pieces[0]->region.elements()));
      continue;
    }
    backend::scratch<T, Space> message(route.senders[i].second);
    dev.recv_labelled(what, peer, backend::span_of(s, message.data(), message.size()));
    const T* at = message.data();
    for (auto* p : pieces) {
      copy_piece(s, at, packed(p->region), out, p->region);
      at += p->region.elements();
    }
  }
}

// "replace_mesh from mesh 'a' [4] on devices [0 1 2 3] to mesh 'b' [2] on
// devices [4 5], dims [batch=8 k=4], layout<...> to layout<...>": what a transfer's
// messages and errors name it by. Formatted once per thread for each
// operation, meshes and shape (memo.hpp).
template <class NewLayout, class X, class M2>
std::string transfer_description(std::string_view op, const X& x, const M2& to) {
  using key = std::tuple<std::string_view, typename X::mesh_type, M2, typename X::shape_type>;
  thread_local per_thread_memo<key, std::string> descriptions;
  return descriptions.get(key{op, x.mesh(), to, x.shape()}, [&] {
    return cat(op, " from ", x.mesh().describe(), " to ", to.describe(), ", dims ", x.shape().describe(), ", ",
               X::layout_type::describe(), " to ", NewLayout::describe());
  });
}

// The plan moving x's elements onto `to` under NewLayout, with x's device's
// route through it, made once per thread for each device, shape and pair of
// placements (memo.hpp).
template <class NewLayout, class T, class S, class L, class M, class M2>
std::shared_ptr<const routed_plan<S::rank>> plan_of(const tensor<T, S, L, M>& x, const M2& to) {
  constexpr std::size_t rank = S::rank;
  using placement = runtime_placement<rank>;
  using key = std::tuple<int, std::array<std::int64_t, rank>, placement, placement>;
  thread_local per_thread_memo<key, std::shared_ptr<const routed_plan<rank>>> plans;
  key k{x.device(), x.shape().sizes(), placement::template of<typename tensor<T, S, L, M>::geometry>(x.mesh()),
        placement::template of<typename tensor<T, S, NewLayout, M2>::geometry>(to)};
  return plans.get(k, [&] {
    return std::make_shared<const routed_plan<rank>>(
        make_transfer_plan<rank>(std::get<1>(k), std::get<2>(k), std::get<3>(k)), x.device(), sizeof(T));
  });
}

template <class NewLayout, class T, class S, class L, class M, class M2>
tensor<T, S, NewLayout, M2> transfer_as(const std::string& what, const tensor<T, S, L, M>& x, const M2& to);

// Records a transfer's gradient: the reverse transfer.
template <class Out, class In>
Out with_gradient(Out out, const In& x, const std::string& what) {
  using in_layout = typename In::layout_type;
  return record(std::move(out), "transfer",
                gradient_of(x, [from = x.mesh(), op = cat("the gradient of ", what)](const Out& dy) {
                  return transfer_as<in_layout>(op, dy, from);
                }));
}

// x re-placed by NewLayout on mesh `to`, as the operation `what` (its
// description): each device receives only what it lacks. Devices outside
// both meshes do nothing.
template <class NewLayout, class T, class S, class L, class M, class M2>
tensor<T, S, NewLayout, M2> transfer_as(const std::string& what, const tensor<T, S, L, M>& x, const M2& to) {
  using out_t = tensor<T, S, NewLayout, M2>;
  constexpr std::size_t rank = S::rank;
  try {
    const int me = x.device();
    // Uninitialised: the plan's pieces tile every target slice (transfer_plan.hpp).
    if (!x.mesh().contains(me) && !to.contains(me)) return with_gradient(out_t(to, x.shape(), uninitialized), x, what);
    const auto planned = plan_of<NewLayout>(x, to);
    const transfer_route<rank>& route = planned->route;
    if constexpr (std::is_same_v<space_of<M>, space_of<M2>>) {
      const local_slice<const T, rank> in{x.data(), x.slice()};
      if (const std::int64_t at = kept_in_place(route, in); at >= 0) {
        out_t out = out_t::sharing_part_of(x, to, x.shape(), at);
        run_transfer<space_of<M>, T, rank>(x.space(), what, route, in, {nullptr, out.slice()}, true);
        return with_gradient(std::move(out), x, what);
      }
      out_t out(to, x.shape(), uninitialized);
      run_transfer<space_of<M>, T, rank>(x.space(), what, route, in, {out.data(), out.slice()});
      return with_gradient(std::move(out), x, what);
    } else {
      out_t out(to, x.shape(), uninitialized);
      // Between a host mesh and a GPU mesh: this device's source slice is
      // first copied into the target's memory, then moved as within it.
      backend::storage<T, space_of<M2>> source(static_cast<std::size_t>(x.local_size()));
      backend::copy_elements(out.space(), backend::view(source).data(), x.space(), x.data(), source.size());
      run_transfer<space_of<M2>, T, rank>(out.space(), what, route, {backend::view(source).data(), x.slice()},
                                         {out.data(), out.slice()});
      return with_gradient(std::move(out), x, what);
    }
  } catch (...) {
    rethrow_within(what);
  }
}

}  // namespace detail

// x re-placed by NewLayout on mesh `to`: each device receives only what it
// lacks. Devices outside both meshes do nothing. `to` may be in another
// space (a host mesh and a cuda_mesh): the elements cross between host and
// GPU memory on the device that holds them.
template <class NewLayout, class T, class S, class L, class M, class M2>
tensor<T, S, NewLayout, M2> transfer(const tensor<T, S, L, M>& x, const M2& to) {
  return detail::transfer_as<NewLayout>(detail::transfer_description<NewLayout>("transfer", x, to), x, to);
}

}  // namespace typemesh

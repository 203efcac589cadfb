// The transfer plan behind every relayout and mesh replacement: for a tensor
// placed by (layout A, mesh A) that must end up placed by (layout B, mesh B),
// which device sends which box to which device.
//
// Each device of mesh B needs its target slice. The source slices cut that
// slice into cells (one per source block it overlaps); a cell the device
// already holds is copied locally, every other cell comes from exactly one
// device that holds it. The cells tile the target slice: every element of it
// is written by exactly one piece, so the target needs no initial values. So a device receives only the elements it lacks, and
// each of those once: the minimum traffic. When several source devices hold a
// cell (replicas along axes that split nothing), the replicas share the
// sending: the destinations that take cells of one source block, in the new
// mesh's order, are cut into as many consecutive runs as there are replicas,
// and run k takes from replica k. Consecutive destinations mostly take
// neighbouring cells, so each replica's copy is read in longer stretches
// than if the destinations alternated (where memory is shared, that made
// the transformer's 2r move 1.2-1.9x faster; docs/performance.md).
//
// The plan works on placements at run time (below), so it is compiled once
// per tensor rank, not once per pair of layouts.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "typemesh/core/placement.hpp"

namespace typemesh {

// A (layout, mesh) pair as values: enough to place any element.
template <std::size_t Rank>
struct runtime_placement {
  std::array<int, Rank> axis_index{};  // per dim: the mesh axis that splits it, or -1
  std::vector<int> sizes;              // mesh axis sizes
  std::vector<int> devices;            // row-major, as the mesh lists them

  friend bool operator==(const runtime_placement&, const runtime_placement&) = default;

  template <class Placement>
  static runtime_placement of(const typename Placement::mesh_type& m) {
    runtime_placement p;
    p.axis_index = Placement::axis_index;
    p.sizes.assign(m.sizes().begin(), m.sizes().end());
    p.devices = m.devices();
    return p;
  }

  std::optional<std::vector<int>> coordinate_of(int device) const {
    auto it = std::find(devices.begin(), devices.end(), device);
    if (it == devices.end()) return std::nullopt;
    std::vector<int> c(sizes.size());
    for (int pos = static_cast<int>(it - devices.begin()), a = static_cast<int>(sizes.size()); a-- > 0;) {
      c[a] = pos % sizes[a];
      pos /= sizes[a];
    }
    return c;
  }

  // Where coordinate c is in the device list (row-major).
  std::size_t position_at(const std::vector<int>& c) const {
    std::size_t pos = 0;
    for (std::size_t a = 0; a < sizes.size(); ++a) pos = pos * sizes[a] + c[a];
    return pos;
  }
  int device_at(const std::vector<int>& c) const { return devices[position_at(c)]; }

  std::int64_t block(const std::array<std::int64_t, Rank>& shape, std::size_t dim) const {
    return axis_index[dim] < 0 ? shape[dim] : shape[dim] / sizes[axis_index[dim]];
  }

  box<Rank> slice_at(const std::array<std::int64_t, Rank>& shape, const std::vector<int>& c) const {
    box<Rank> b;
    for (std::size_t i = 0; i < Rank; ++i) {
      b.extent[i] = block(shape, i);
      b.begin[i] = axis_index[i] < 0 ? 0 : c[axis_index[i]] * b.extent[i];
    }
    return b;
  }
};

template <std::size_t Rank>
struct transfer_piece {
  int from;          // device that sends (== to: a local copy)
  int to;            // device that receives
  box<Rank> region;  // in the tensor's global index space
  box<Rank> source;  // the sender's whole source slice, which holds region
};

template <std::size_t Rank>
struct transfer_plan {
  std::vector<transfer_piece<Rank>> pieces;  // by destination, then cell order

  // Elements that cross between devices, received or sent by `device`.
  std::int64_t elements_received(int device) const {
    std::int64_t n = 0;
    for (const auto& p : pieces)
      if (p.to == device && p.from != device) n += p.region.elements();
    return n;
  }
  std::int64_t elements_sent(int device) const {
    std::int64_t n = 0;
    for (const auto& p : pieces)
      if (p.from == device && p.to != device) n += p.region.elements();
    return n;
  }
};

// The plan moving a tensor of global extents `shape` from placement `a` to
// placement `b`. Every device computes the same plan. Sizes must divide (the
// typed callers check that first).
template <std::size_t Rank>
transfer_plan<Rank> make_transfer_plan(const std::array<std::int64_t, Rank>& shape, const runtime_placement<Rank>& a,
                                       const runtime_placement<Rank>& b) {
  transfer_plan<Rank> plan;
  for (auto e : shape)
    if (e == 0) return plan;

  std::vector<std::size_t> replica_axes;  // source axes that split nothing
  int replicas = 1;
  for (std::size_t ax = 0; ax < a.sizes.size(); ++ax) {
    if (std::find(a.axis_index.begin(), a.axis_index.end(), static_cast<int>(ax)) == a.axis_index.end()) {
      replica_axes.push_back(ax);
      replicas *= a.sizes[ax];
    }
  }

  // Per source block, the pieces that take it from a replica, in destination
  // order (their sender is chosen last), by the position in the source mesh
  // of the block's first replica.
  std::vector<std::vector<std::size_t>> takers(replicas > 1 ? a.devices.size() : 0);
  // The piece comes from the device at source coordinate c.
  auto send_from = [&](transfer_piece<Rank>& piece, const std::vector<int>& c) {
    piece.from = a.device_at(c);
    piece.source = a.slice_at(shape, c);
  };

  for (std::size_t q = 0; q < b.devices.size(); ++q) {
    const int dst = b.devices[q];
    const auto want = b.slice_at(shape, *b.coordinate_of(dst));
    const auto mine = a.coordinate_of(dst);  // where dst sits in the source mesh, if it does

    // The source blocks the target slice overlaps, per dim.
    std::array<std::int64_t, Rank> first{}, count{};
    std::int64_t cells = 1;
    for (std::size_t i = 0; i < Rank; ++i) {
      const std::int64_t blk = a.block(shape, i);
      first[i] = want.begin[i] / blk;
      count[i] = (want.begin[i] + want.extent[i] - 1) / blk - first[i] + 1;
      cells *= count[i];
    }
    for (std::int64_t c = 0; c < cells; ++c) {
      // Cell c, row-major over the overlapped blocks.
      std::array<std::int64_t, Rank> j{};
      for (std::int64_t rest = c, i = Rank; i-- > 0;) j[i] = first[i] + rest % count[i], rest /= count[i];
      transfer_piece<Rank> piece{-1, dst, {}, {}};
      std::vector<int> src(a.sizes.size(), 0);
      bool held_here = mine.has_value();
      for (std::size_t i = 0; i < Rank; ++i) {
        const std::int64_t blk = a.block(shape, i);
        const std::int64_t lo = std::max(want.begin[i], j[i] * blk);
        const std::int64_t hi = std::min(want.begin[i] + want.extent[i], (j[i] + 1) * blk);
        piece.region.begin[i] = lo;
        piece.region.extent[i] = hi - lo;
        if (int ax = a.axis_index[i]; ax >= 0) {
          src[ax] = static_cast<int>(j[i]);  // the block's coordinate on its splitting axis
          held_here = held_here && (*mine)[ax] == j[i];
        }
      }
      if (held_here) {
        send_from(piece, *mine);  // dst itself
      } else if (replicas == 1) {
        send_from(piece, src);  // the only holder
      } else {
        takers[a.position_at(src)].push_back(plan.pieces.size());  // src: replica axes at 0 so far
      }
      plan.pieces.push_back(piece);
    }
  }

  // Run k of a block's takers takes it from replica k (row-major over the
  // replica axes).
  for (std::size_t block = 0; block < takers.size(); ++block) {
    const auto& pieces = takers[block];
    const std::size_t n = pieces.size();
    if (n == 0) continue;
    const std::vector<int> first = *a.coordinate_of(a.devices[block]);  // the block's first replica
    for (std::size_t t = 0; t < n; ++t) {
      std::vector<int> src = first;
      for (int r = static_cast<int>(t * replicas / n), k = static_cast<int>(replica_axes.size()); k-- > 0;) {
        src[replica_axes[k]] = r % a.sizes[replica_axes[k]];
        r /= a.sizes[replica_axes[k]];
      }
      send_from(plan.pieces[pieces[t]], src);
    }
  }
  return plan;
}

}  // namespace typemesh

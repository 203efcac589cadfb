// Rows picked by integer ids, the kernels of embedding lookups: gather_rows
// copies the table row each id picks (zeros for ids outside the rows held);
// scatter_add_rows adds rows into the table rows their ids pick, each table
// row summing its ids' rows in position order, so the sums are the same bits
// at any thread count; first_id_outside finds the first id outside a range,
// for the caller's error message (kernels do not throw).
#pragma once

#include <algorithm>
#include <cstdint>

#include "typemesh/backend/config.hpp"
#include "typemesh/backend/kernels.hpp"
#include "typemesh/backend/parallel.hpp"
#include "typemesh/backend/storage.hpp"

namespace typemesh::backend {

// An id and where it is among the ids.
struct id_at {
  std::int64_t position;
  std::int64_t id;
};

namespace gather_detail {
template <class I>
struct outside {
  const I* ids;
  std::int64_t classes;
  TYPEMESH_KERNEL bool operator()(std::int64_t p) const {
    const auto id = static_cast<std::int64_t>(ids[p]);
    return id < 0 || id >= classes;
  }
};
}  // namespace gather_detail

// The first of the n ids outside [0, classes), or {n, 0} when none is. (A
// search for the first position, then one read: a reduction over id_at
// pairs would need a struct accumulator, which nvcc's host stubs cannot
// name.)
template <class Space, class I>
id_at first_id_outside(Space s, const I* ids, std::int64_t n, std::int64_t classes) {
  const std::int64_t p = first_where(s, n, gather_detail::outside<I>{ids, classes});
  if (p >= n) return {n, 0};
  return {p, static_cast<std::int64_t>(read_one(s, ids + p))};
}

// out[p, :] = table[ids[p] - first, :] for each of the n ids whose row is
// held (0 <= ids[p] - first < held), and zeros for the others (a masked
// gather). Rows are `width` elements, row-major.
template <class Space, class I, class T>
void gather_rows(Space s, const I* ids, std::int64_t n, const T* table, std::int64_t first, std::int64_t held,
                 std::int64_t width, T* out) {
  if (width <= 0) return;
  parallel_for(
      s, n,
      [=] TYPEMESH_KERNEL(std::int64_t p) {
        const std::int64_t r = static_cast<std::int64_t>(ids[p]) - first;
        T* o = out + p * width;
        if (r < 0 || r >= held) {
          for (std::int64_t e = 0; e < width; ++e) o[e] = T{0};
          return;
        }
        const T* in = table + r * width;
        for (std::int64_t e = 0; e < width; ++e) o[e] = in[e];
      },
      grain_for(width));
}

// table[r, :] += alpha * (the sum of rows[p, :] over the n ids p that pick
// held row r = ids[p] - first, added in increasing p from zero). With alpha
// 1 on a zeroed table that is the scatter-add of the rows, bit for bit as
// adding each into the table in turn; with an SGD step's -rate on the
// table's own values it takes the step on the rows the ids pick and leaves
// the others alone. One index per table row writes that row; the ids are
// first bucketed by row (a stable counting sort, one pass over the ids), so
// a row visits only its own ids.
template <class Space, class I, class T>
void scatter_add_rows(Space s, const I* ids, std::int64_t n, const T* rows, std::int64_t first, std::int64_t held,
                      std::int64_t width, T alpha, T* table) {
  if (n <= 0 || held <= 0 || width <= 0) return;
  scratch<std::int64_t, Space> bucket_end(static_cast<std::size_t>(held) + 1), by_row(static_cast<std::size_t>(n));
  std::int64_t* end = bucket_end.data();
  std::int64_t* order = by_row.data();
  fill(s, end, held + 1, std::int64_t{0});
  // Counts land in end[r + 1], their running sum makes end[r] row r's first
  // slot, and placing the ids advances end[r] to row r's last slot + 1, so
  // row r's ids are order[end[r - 1] .. end[r]) (from 0 for row 0). Linear in
  // the ids and the rows; one index, as every step depends on the last.
  parallel_for(s, 1, [=] TYPEMESH_KERNEL(std::int64_t) {
    for (std::int64_t p = 0; p < n; ++p) {
      const std::int64_t r = static_cast<std::int64_t>(ids[p]) - first;
      if (r >= 0 && r < held) ++end[r + 1];
    }
    for (std::int64_t r = 0; r < held; ++r) end[r + 1] += end[r];
    for (std::int64_t p = 0; p < n; ++p) {
      const std::int64_t r = static_cast<std::int64_t>(ids[p]) - first;
      if (r >= 0 && r < held) order[end[r]++] = p;
    }
  });
  const std::int64_t ids_per_row = std::max<std::int64_t>(1, n / held);
  parallel_for(
      s, held,
      [=] TYPEMESH_KERNEL(std::int64_t r) {
        const std::int64_t k0 = r == 0 ? 0 : end[r - 1], k1 = end[r];
        if (k0 == k1) return;
        constexpr std::int64_t chunk = 64;  // sums of a run of columns, kept in registers
        T* to = table + r * width;
        for (std::int64_t e0 = 0; e0 < width; e0 += chunk) {
          const std::int64_t m = width - e0 < chunk ? width - e0 : chunk;
          T sum[chunk];
          for (std::int64_t j = 0; j < m; ++j) sum[j] = T{0};
          for (std::int64_t k = k0; k < k1; ++k) {
            const T* from = rows + order[k] * width + e0;
            for (std::int64_t j = 0; j < m; ++j) sum[j] += from[j];
          }
          for (std::int64_t j = 0; j < m; ++j) to[e0 + j] += alpha * sum[j];
        }
      },
      grain_for(width * ids_per_row));
}

}  // namespace typemesh::backend

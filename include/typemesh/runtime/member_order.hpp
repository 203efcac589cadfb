// The one reduction every backend uses: member 0's values, then member 1's
// folded in, and so on in member order. Float sums depend on their order, so
// a fixed order is what makes a run on MPI give the host-thread run's bits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "typemesh/backend/host/copy_bytes.hpp"
#include "typemesh/runtime/communicator.hpp"

namespace typemesh::detail {

// out[i] = in[0][offset + i] op in[1][offset + i] op ... for i < n, folded
// left to right. out may be in[0] + offset, but no other input. `in` is any
// sized random-access range of const T* (a vector, or a span over a small
// array on the stack for a caller that avoids allocating per call).
template <class T, class Inputs = std::vector<const T*>>
void reduce_in_member_order(T* out, const Inputs& in, std::size_t offset, std::size_t n, reduce_op op) {
  if (n == 0) return;  // an empty chunk's pointers may be null
  if (out != in[0] + offset) backend::host::copy_bytes(out, in[0] + offset, n * sizeof(T));
  for (std::size_t j = 1; j < in.size(); ++j) {
    const T* src = in[j] + offset;
    switch (op) {
      case reduce_op::sum:
        for (std::size_t i = 0; i < n; ++i) out[i] += src[i];
        break;
      case reduce_op::max:
        for (std::size_t i = 0; i < n; ++i) out[i] = std::max(out[i], src[i]);
        break;
      case reduce_op::min:
        for (std::size_t i = 0; i < n; ++i) out[i] = std::min(out[i], src[i]);
        break;
      case reduce_op::prod:
        for (std::size_t i = 0; i < n; ++i) out[i] *= src[i];
        break;
    }
  }
}

}  // namespace typemesh::detail

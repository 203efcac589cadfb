// The replication replacement copies whole tensors onto more (or fewer)
// devices; a split tensor needs another kind.
// expect: typemesh: the replication kind moves fully replicated tensors
// expect: diagnostic::replication_of_a_split_tensor<k,
#include <typemesh/convert/replace_mesh.hpp>

#include "common.hpp"

using namespace typemesh;
using wide = mesh<"wide", axis0, axis1>;

#if FIXED
using weights = tensor<float, shape<batch, k>, replicated, grid>;
#else
using weights = tensor<float, shape<batch, k>, layout<k(axis1)>, grid>;
#endif

auto widen(const weights& w, const wide& m) { return replace_mesh<replicated, replication>(w, m); }

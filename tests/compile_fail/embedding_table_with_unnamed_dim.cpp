// An embedding lookup into a [vocab, heads, d] table that names only d as an
// embedding dim: the table then has two candidates for its vocab dim.
// expect: typemesh: embedding<EmbedDims...>\(ids, table\): the table must have exactly one dim besides the embedding dims
// expect: diagnostic::embedding_table_needs_one_vocab_dim<typemesh::shape<vocab, heads, d>, typemesh::type_list<d>
#include <cstdint>

#include <typemesh/layers/embedding.hpp>

#include "common.hpp"

using namespace typemesh;

struct vocab : dim<"vocab"> {};
struct heads : dim<"heads"> {};
struct d : dim<"d"> {};

using ids_t = tensor<std::int32_t, shape<batch>, layout<batch(axis0)>, grid>;
using table_t = tensor<float, shape<vocab, heads, d>, layout<vocab(axis1)>, grid>;

#if FIXED
auto embed(const ids_t& ids, const table_t& table) { return embedding<heads, d>(ids, table); }
#else
auto embed(const ids_t& ids, const table_t& table) { return embedding<d>(ids, table); }
#endif

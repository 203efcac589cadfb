// softmax_cross_entropy with class-id labels that lack a dim of the logits
// (one label per example, for logits with one per position).
// expect: typemesh: softmax_cross_entropy: integer labels \(class ids\) need the logits' dims without the vocab dim
// expect: diagnostic::labels_do_not_fit_logits<typemesh::shape<batch>, typemesh::shape<batch, seq>
#include <cstdint>

#include <typemesh/layers/softmax_cross_entropy.hpp>

#include "common.hpp"

using namespace typemesh;

struct seq : dim<"seq"> {};
struct vocab : dim<"vocab"> {};

using logits_t = tensor<float, shape<batch, seq, vocab>, layout<batch(axis0), vocab(axis1)>, grid>;
#if FIXED
using labels_t = tensor<std::int32_t, shape<batch, seq>, layout<batch(axis0)>, grid>;
#else
using labels_t = tensor<std::int32_t, shape<batch>, layout<batch(axis0)>, grid>;
#endif

auto loss(const logits_t& logits, const labels_t& labels) { return softmax_cross_entropy<vocab>(logits, labels); }

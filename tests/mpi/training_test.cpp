// A small network on two meshes, trained for a few SGD steps on the host
// backend (threads in this process) and on MPI (one device per rank), in the
// same program: the losses and the trained weights must be equal bit for bit.
//
//   tokens [batch] ─ embedding (vocab split over A's a1: masked lookup + allreduce)
//     ─ allsplit k over a1 ─ dense + tanh (k contracted while split: allreduce)
//     ─ replace_mesh A → B (B: every device, in reverse order, batch over n)
//     ─ dense to the vocab ─ softmax cross-entropy against the labels ─ mean
//
// Runs on any even number of ranks (registered with 4 and 8).
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support.hpp"

namespace {
using typemesh::layout;
using typemesh::shape;

struct batch : typemesh::dim<"batch"> {};
struct vocab : typemesh::dim<"vocab"> {};
struct k : typemesh::dim<"k"> {};
struct hidden : typemesh::dim<"hidden"> {};
struct a0 : typemesh::axis<"a0"> {};
struct a1 : typemesh::axis<"a1"> {};

using mesh_a = typemesh::mesh<"A", a0, a1>;
using mesh_b = typemesh::mesh<"B", a0>;

constexpr std::int64_t batch_size = 8, vocab_size = 16, k_size = 8, hidden_size = 12;
constexpr int steps = 4;

struct outcome {
  std::vector<float> losses;
  std::vector<float> embedding, w1, w2;  // after training, whole
};

outcome train(int n, const std::string& backend) {
  const shape<batch> s{batch_size};
  typemesh::host_tensor<std::int32_t, shape<batch>> tokens(s), labels(s);
  for (std::int64_t b = 0; b < batch_size; ++b) {
    tokens[{b}] = static_cast<std::int32_t>((3 * b + 1) % vocab_size);
    labels[{b}] = static_cast<std::int32_t>((5 * b + 2) % vocab_size);
  }
  const auto results = typemesh::launch({.devices = n, .backend = backend}, [&] {
    namespace init = typemesh::init;
    const mesh_a a(n == 1 ? mesh_a::coords{1, 1} : mesh_a::coords{2, n / 2}, typemesh::devices::all(n));
    std::vector<int> reversed = typemesh::devices::all(n);
    std::reverse(reversed.begin(), reversed.end());
    const mesh_b b({n}, reversed);

    auto table = typemesh::variable<layout<vocab(a1)>>(a, "embedding", shape<vocab, k>{vocab_size, k_size},
                                                      init::normal{1.0});
    auto w1 = typemesh::variable<layout<k(a1)>>(a, "w1", shape<k, hidden>{k_size, hidden_size},
                                               init::glorot_uniform{k_size, hidden_size});
    auto w2 = typemesh::variable<layout<>>(b, "w2", shape<hidden, vocab>{hidden_size, vocab_size},
                                          init::glorot_uniform{hidden_size, vocab_size});
    const auto x = typemesh::import_tensor<layout<batch(a0)>>(a, tokens);
    const auto y = typemesh::import_tensor<layout<batch(a0)>>(b, labels);
    typemesh::optim::sgd opt(0.5);

    outcome o;
    for (int step = 0; step < steps; ++step) {
      auto e = typemesh::allsplit<k, a1>(typemesh::embedding<k>(x, table));
      auto h = typemesh::dense(e, w1);  // k is split: partial sums, allreduced over a1
      auto moved = typemesh::replace_mesh<layout<batch(a0)>>(typemesh::tanh(h), b);
      auto loss = typemesh::reduce_mean(typemesh::softmax_cross_entropy<vocab>(typemesh::dense(moved, w2), y));
      o.losses.push_back(loss.item());
      typemesh::backward(loss);
      opt.step(table, w1, w2);
    }
    o.embedding = typemesh::export_tensor(table).values();
    o.w1 = typemesh::export_tensor(w1).values();
    o.w2 = typemesh::export_tensor(w2).values();
    return o;
  });
  for (std::size_t d = 1; d < results.size(); ++d) {
    EXPECT_EQ(results[d].losses, results[0].losses) << "device " << d;
    EXPECT_EQ(results[d].w1, results[0].w1) << "device " << d;
  }
  return results[0];
}

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

TEST(Training, SmallMultiMeshNetworkEqualsTheHostRunBitForBit) {
  const int n = world_size();
  ASSERT_EQ(n % 2, 0) << "run with an even number of ranks";
  const outcome host = train(n, "host");
  const outcome mpi = train(n, "mpi");
  ASSERT_EQ(host.losses.size(), static_cast<std::size_t>(steps));
  EXPECT_LT(host.losses.back(), host.losses.front()) << "the network does not learn: the comparison would be weak";
  EXPECT_EQ(mpi.losses, host.losses);
  EXPECT_EQ(mpi.embedding, host.embedding);
  EXPECT_EQ(mpi.w1, host.w1);
  EXPECT_EQ(mpi.w2, host.w2);
  // And against one device, up to float rounding: the split run is right, not
  // only the same on both backends.
  const outcome one = train(1, "host");
  for (int s = 0; s < steps; ++s) EXPECT_NEAR(host.losses[s], one.losses[s], 1e-5f * std::abs(one.losses[s])) << s;
}

}  // namespace

// The PaSE RNNLM, trained on four meshes, checked against one device.
//
// This is the LSTM language model of the PaSE benchmarks (rnnlm.py in
// baidu-research/PaSE, written on Mesh-TensorFlow) in its four-mesh variant:
//
//   embedding on `embed`   the vocab dim split over every device
//   LSTM layer 0 on `lstm0`, the first half of the devices    } a pipeline over
//   LSTM layer 1 on `lstm1`, the second half of the devices   } time steps
//   projection to the vocab and the loss on `proj`, the halves swapped
//
// with a mesh replacement between the meshes. It trains for a few SGD steps on
// 8 simulated devices (threads), then trains the same program again with every
// mesh on one device, and prints both losses side by side. Parameters are
// initialised from (seed, name, global element index), so both runs start
// from the same values and must give the same losses up to float rounding: the
// program exits non-zero when a step's losses differ by more than 1e-4
// (relative). That comparison is typemesh's main correctness oracle.
//
// The strategy is the seed's CreateMeshes table. Each mesh has the axes
// (axis0, axis1, axis2), which split (batch, n, k): the batch, the LSTM's gate
// columns (4 x units) and its input rows (2 x units).
//
//   devices    embed       lstm0       lstm1       proj
//         4    [1, 1, 4]   [2, 1, 1]   [2, 1, 1]   [1, 4, 1]
//         8    [1, 1, 8]   [4, 1, 1]   [4, 1, 1]   [1, 8, 1]
//        16    [1, 1, 16]  [2, 2, 2]   [2, 2, 2]   [1, 16, 1]
//        32    [1, 1, 32]  [4, 2, 2]   [4, 2, 2]   [1, 32, 1]
//        64    [1, 1, 64]  [8, 2, 2]   [8, 2, 2]   [1, 64, 1]
//   on devices all         first half  second half second half + first half
//
// In Mesh-TensorFlow a dim's name is the mesh axis it is split over, so the
// seed renames dims ('axis1' -> 'axis2', k -> a random name and back) to move
// them between axes. Here a dim keeps its name and the layout, a type, says
// where it is split; no renames are needed.
//
//   cmake --build build --target typemesh-rnnlm && build/examples/typemesh-rnnlm

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include <typemesh/typemesh.hpp>

using typemesh::layout;
using typemesh::shape;

// Tensor dims.
struct batch : typemesh::dim<"batch"> {};
struct seq : typemesh::dim<"seq"> {};      // time steps
struct vocab : typemesh::dim<"vocab"> {};  // token ids
struct k : typemesh::dim<"k"> {};          // LSTM units in (x, h: units; weights: 2 x units)
struct n : typemesh::dim<"n"> {};          // LSTM gate columns (4 x units)

// Mesh axes: the seed's batch_dim, n_dim and k_dim.
struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};
struct axis2 : typemesh::axis<"axis2"> {};

using embed_mesh = typemesh::mesh<"embed", axis0, axis1, axis2>;
using lstm0_mesh = typemesh::mesh<"lstm0", axis0, axis1, axis2>;
using lstm1_mesh = typemesh::mesh<"lstm1", axis0, axis1, axis2>;
using proj_mesh = typemesh::mesh<"proj", axis0, axis1, axis2>;

// Where every tensor lives and how it is split: the strategy, in types. The
// seed also names dims after axes of size 1: batch on axis0 of embed and proj,
// the embedding's units on axis1 of embed, k on axis2 of proj. Those dims are
// whole, and here they are written without an axis: independent_axes, like
// the reference's ReplaceMeshWithIndependentAxes, refuses a dim split in both
// layouts, and a dim named in a layout counts as split even on an axis of size 1.
template <class T, class Shape, class Layout, class Mesh>
using tensor = typemesh::tensor<T, Shape, Layout, Mesh>;

using tokens_t = tensor<std::int32_t, shape<batch, seq>, layout<>, embed_mesh>;  // inputs
using labels_t = tensor<std::int32_t, shape<batch, seq>, layout<>, proj_mesh>;
using lstm_in_layout = layout<batch(axis0), k(axis2)>;  // [batch, seq, k] on lstm0 and lstm1
using lstm_in_t = tensor<float, shape<batch, seq, k>, lstm_in_layout, lstm0_mesh>;
using lstm_out_t = tensor<float, shape<batch, seq, k>, lstm_in_layout, lstm1_mesh>;

// The parameters; variable<type>(mesh, name, sizes, init) makes each one.
using embedding_t = tensor<float, shape<vocab, k>, layout<vocab(axis2)>, embed_mesh>;
using rnn_w0_t = tensor<float, shape<k, n>, layout<k(axis2), n(axis1)>, lstm0_mesh>;
using rnn_w1_t = tensor<float, shape<k, n>, layout<k(axis2), n(axis1)>, lstm1_mesh>;
using proj_t = tensor<float, shape<k, vocab>, layout<vocab(axis1)>, proj_mesh>;

struct parameters {
  embedding_t embedding;
  rnn_w0_t rnn_w0;
  rnn_w1_t rnn_w1;
  proj_t proj;
};

struct meshes {
  embed_mesh embed;
  lstm0_mesh lstm0;
  lstm1_mesh lstm1;
  proj_mesh proj;
};

struct sizes {
  std::int64_t batch = 8, time_steps = 4, vocab = 64, units = 8;
};

// --- The LSTM: two layers on two meshes, pipelined over time steps ----------------------

// Layer 0 runs on lstm0, layer 1 on lstm1, from zero states; after every
// step, layer 0's h moves to lstm1. The move is a buffered send, so on the
// disjoint halves layer 0's devices run ahead: layer 1 works on step t while
// layer 0 works on step t + 1. Backward runs in reverse, layer 1 ahead.
lstm_out_t two_layer_lstm(const lstm_in_t& x, const rnn_w0_t& w0, const rnn_w1_t& w1) {
  const typemesh::lstm_weight w0_steps(w0);  // the steps' gradients, allreduced over the batch once
  const typemesh::lstm_weight w1_steps(w1);
  auto s0 = typemesh::lstm_zero_state<seq>(x, w0);  // h and c of layer 0, on lstm0
  auto s1 = typemesh::lstm_zero_state<seq>(x, w1);  // and of layer 1, on lstm1
  using h1_t = decltype(s1.h);                      // [batch, k] on lstm1
  std::vector<h1_t> outputs;
  for (std::int64_t t = 0; t < x.shape().size<seq>(); ++t) {
    s0 = typemesh::lstm_step(typemesh::time_step<seq>(x, t), s0.h, s0.c, w0_steps);
    const auto h0_on_lstm1 = typemesh::replace_mesh<h1_t::layout_type>(s0.h, w1.mesh());
    s1 = typemesh::lstm_step(h0_on_lstm1, s1.h, s1.c, w1_steps);
    outputs.push_back(s1.h);
  }
  return typemesh::stack_steps<lstm_out_t::shape_type>(outputs);  // [batch, seq, k] on lstm1
}

// --- The model: the seed's model(params, inputs, labels) -----------------------------

auto model(const parameters& p, const tokens_t& inputs, const labels_t& labels, const meshes& m) {
  using typemesh::independent_axes;
  // [batch, seq] -> [batch, seq, k]: vocab is split over embed's axis2, so each
  // device looks up the rows it holds and an allreduce completes them.
  auto embedded = typemesh::embedding<k>(inputs, p.embedding);
  auto x = typemesh::replace_mesh<lstm_in_layout, independent_axes>(embedded, m.lstm0);
  auto y = two_layer_lstm(x, p.rnn_w0, p.rnn_w1);  // on lstm1
  auto h = typemesh::replace_mesh<layout<>, independent_axes>(y, m.proj);
  // dense without a bias: [batch, seq, k] . [k, vocab], vocab over proj's axis1.
  auto logits = typemesh::dense(h, p.proj);
  return typemesh::reduce_mean(typemesh::softmax_cross_entropy<vocab>(logits, labels));
}

// --- The seed's CreateMeshes -------------------------------------------------------

// The mesh shapes (axis0, axis1, axis2) of embed, lstm0, lstm1 and proj for
// `count` devices; one device runs every mesh as [1, 1, 1].
std::array<embed_mesh::coords, 4> mesh_shapes(int count) {
  switch (count) {
    case 1: return {{{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}};
    case 4: return {{{1, 1, 4}, {2, 1, 1}, {2, 1, 1}, {1, 4, 1}}};
    case 8: return {{{1, 1, 8}, {4, 1, 1}, {4, 1, 1}, {1, 8, 1}}};
    case 16: return {{{1, 1, 16}, {2, 2, 2}, {2, 2, 2}, {1, 16, 1}}};
    case 32: return {{{1, 1, 32}, {4, 2, 2}, {4, 2, 2}, {1, 32, 1}}};
    case 64: return {{{1, 1, 64}, {8, 2, 2}, {8, 2, 2}, {1, 64, 1}}};
    default: throw std::invalid_argument("the RNNLM strategy is given for 1, 4, 8, 16, 32 and 64 devices");
  }
}

meshes create_meshes(int count) {
  namespace devices = typemesh::devices;
  const auto s = mesh_shapes(count);
  if (count == 1) return {embed_mesh(s[0]), lstm0_mesh(s[1]), lstm1_mesh(s[2]), proj_mesh(s[3])};
  const auto first = devices::first_half(count), second = devices::second_half(count);
  return {embed_mesh(s[0], devices::all(count)), lstm0_mesh(s[1], first), lstm1_mesh(s[2], second),
          proj_mesh(s[3], devices::concat(second, first))};
}

// --- Data and training ------------------------------------------------------------

// A token stream in which each token determines the next: t -> (5t + 3) mod
// vocab visits every id once per vocab tokens. Row b of the batch is the
// window that starts at token b * time_steps; the labels are the next tokens.
// Every step trains on this one batch.
using token_grid = typemesh::host_tensor<std::int32_t, shape<batch, seq>>;
struct batch_data {
  token_grid inputs, labels;
};

batch_data make_batch(const sizes& z) {
  auto next = [&](std::int32_t t) { return static_cast<std::int32_t>((5 * t + 3) % z.vocab); };
  const shape<batch, seq> s{z.batch, z.time_steps};
  batch_data d{token_grid(s), token_grid(s)};
  std::int32_t token = 0;
  for (std::int64_t b = 0; b < z.batch; ++b)
    for (std::int64_t t = 0; t < z.time_steps; ++t) {
      d.inputs[{b, t}] = token;
      d.labels[{b, t}] = token = next(token);
    }
  return d;
}

// The loss of each of `train_steps` SGD steps at `rate`, on `count` devices.
// The one-device reference always runs in this process (host backend), also
// when mpirun runs the 8-device strategy with one process per device.
std::vector<float> train(int count, int train_steps, double rate, const sizes& z) {
  const meshes m = create_meshes(count);
  const batch_data data = make_batch(z);
  const auto backend = count == 1 ? typemesh::backend_kind::host : typemesh::backend_kind::automatic;
  auto losses = typemesh::launch({.devices = count, .backend = backend}, [&] {
    using typemesh::init::glorot_uniform;
    using typemesh::init::normal;
    const std::int64_t u = z.units;
    // Initialisers as in the reference: mtf.layers.embedding draws N(0, 1),
    // mtf.get_variable defaults to Glorot uniform.
    parameters p{
        typemesh::variable<embedding_t>(m.embed, "embedding", {z.vocab, u}, normal{1.0}),
        typemesh::variable<rnn_w0_t>(m.lstm0, "rnn_w0", {2 * u, 4 * u}, glorot_uniform{2 * u, 4 * u}),
        typemesh::variable<rnn_w1_t>(m.lstm1, "rnn_w1", {2 * u, 4 * u}, glorot_uniform{2 * u, 4 * u}),
        typemesh::variable<proj_t>(m.proj, "proj", {u, z.vocab}, glorot_uniform{u, z.vocab}),
    };
    const auto inputs = typemesh::import_tensor<tokens_t::layout_type>(m.embed, data.inputs);
    const auto labels = typemesh::import_tensor<labels_t::layout_type>(m.proj, data.labels);
    typemesh::optim::sgd opt(rate);

    std::vector<float> out;
    for (int step = 0; step < train_steps; ++step) {
      auto loss = model(p, inputs, labels, m);
      out.push_back(loss.holds_data() ? loss.local()[0] : 0.0f);  // a scalar, on every device of proj
      typemesh::backward(loss);
      opt.step(p.embedding, p.rnn_w0, p.rnn_w1, p.proj);
    }
    return out;
  });
  return losses[m.proj.device_at({0, 0, 0})];
}

int main() {
  constexpr int device_count = 8, train_steps = 8;
  // The reference's optimizer (SGD) and rate. At these sizes the loss falls
  // by about 6e-6 a step at this rate; the losses of both runs must agree
  // either way.
  constexpr double rate = 0.01;
  const sizes z;
  std::printf("RNNLM: batch %lld, %lld time steps, vocab %lld, %lld units; SGD, rate %g\n",
              static_cast<long long>(z.batch), static_cast<long long>(z.time_steps), static_cast<long long>(z.vocab),
              static_cast<long long>(z.units), rate);
  const meshes m = create_meshes(device_count);
  for (const auto& line : {m.embed.describe(), m.lstm0.describe(), m.lstm1.describe(), m.proj.describe()})
    std::printf("  %s\n", line.c_str());

  const std::vector<float> many = train(device_count, train_steps, rate, z);
  const std::vector<float> one = train(1, train_steps, rate, z);

  std::printf("\nstep  %d devices   1 device   relative difference\n", device_count);
  bool same = true;
  for (int s = 0; s < train_steps; ++s) {
    const double diff = std::abs(double(many[s]) - double(one[s])) / std::max(std::abs(double(one[s])), 1e-30);
    same = same && diff <= 1e-4;
    std::printf("%4d  %9.6f  %9.6f  %9.2e%s\n", s, many[s], one[s], diff, diff <= 1e-4 ? "" : "  DIFFERENT");
  }
  std::printf("\n%s\n", same ? "the two strategies agree" : "the losses differ by more than 1e-4 (relative)");
  return same ? 0 : 1;
}

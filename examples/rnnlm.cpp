// The PaSE RNNLM: an LSTM language model trained under the reference's four
// strategies (rnnlm_data.py, rnnlm_opt.py, rnnlm_gnmt.py, rnnlm_flexflow.py of
// baidu-research/PaSE, written on Mesh-TensorFlow).
//
//   embedding [vocab, units] -> two LSTM layers of `units` (no biases)
//   -> projection [units, vocab] -> softmax cross-entropy
//
// Each strategy is a struct of types: its meshes, where every tensor lives
// and how it is split. The model is written once, over the strategy. The
// vocabulary is rounded up to a multiple of the device count, as the
// reference does; the padded ids get no probability (their logits are pushed
// to -1e9) and padded positions of a sentence are masked out of the loss.
//
//   typemesh-rnnlm --devices 8 --strategy pase --units 256 --seq-len 16
//   typemesh-rnnlm --help

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "network_program.hpp"

using typemesh::layout;
using typemesh::shape;

// Tensor dims.
struct batch : typemesh::dim<"batch"> {};
struct seq : typemesh::dim<"seq"> {};      // time steps
struct vocab : typemesh::dim<"vocab"> {};  // token ids
struct k : typemesh::dim<"k"> {};          // LSTM units in (x, h: units; weights: 2 x units)
struct n : typemesh::dim<"n"> {};          // LSTM gate columns (4 x units)

// Mesh axes; the reference names them axis0, axis1, ...
struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};
struct axis2 : typemesh::axis<"axis2"> {};

struct rnnlm_sizes {
  std::int64_t vocab = 100000;  // the search's RNNLM; real text: the vocabulary file's size
  std::int64_t units = 2048;
  std::int64_t real_vocab = 0;  // before the round-up (set by sizes_for)
};

namespace devices = typemesh::devices;

// Every strategy names four meshes, where the embedding, the two LSTM layers
// and the projection run (some strategies use one mesh for several), and the
// layouts of the tensors on them:
//   tokens    [batch, seq] inputs, on embed
//   labels    [batch, seq], on proj
//   embedding [vocab, k], on embed
//   lstm_io   [batch, seq, k] into and out of the LSTM, on lstm0 and lstm1
//   lstm_out  [batch, seq, k] on lstm1 before it leaves
//   rnn_w     [k, n] of each layer
//   proj_in   [batch, seq, k] on proj
//   proj      [k, vocab]
// and the kinds of the two mesh replacements around the LSTM (checked moves,
// see convert/replace_mesh.hpp).

// The batch split over axis0 everywhere, every weight whole: data parallel
// on one mesh, the GNMT pipeline on its halves.
struct batch_split {
  using tokens = layout<batch(axis0)>;
  using labels = layout<batch(axis0)>;
  using embedding = layout<>;
  using lstm_io = layout<batch(axis0)>;
  using lstm_out = lstm_io;
  using rnn_w = layout<>;
  using proj_in = layout<batch(axis0)>;
  using proj = layout<>;
};

// 0. Data parallel (rnnlm_data.py): one mesh of every device, the batch split.
struct data_parallel : batch_split {
  static constexpr const char* name = "data-parallel";
  using mesh0 = typemesh::mesh<"mesh0", axis0>;
  using embed_mesh = mesh0;
  using lstm0_mesh = mesh0;
  using lstm1_mesh = mesh0;
  using proj_mesh = mesh0;
  using into_lstm = typemesh::same_slices;
  using out_of_lstm = typemesh::same_slices;

  struct meshes {
    mesh0 embed, lstm0, lstm1, proj;
  };
  static meshes make_meshes(int count) {
    const mesh0 m({count});
    return {m, m, m, m};
  }
};

// 1. PaSE's optimum (rnnlm_opt.py): four meshes with axes (axis0, axis1,
// axis2) splitting (batch, n, k). The embedding's vocab over all devices;
// layer 0 on the first half, layer 1 on the second half (a pipeline over
// time steps); the projection's vocab over all devices, halves swapped.
struct pase {
  static constexpr const char* name = "pase";
  using embed_mesh = typemesh::mesh<"embed", axis0, axis1, axis2>;
  using lstm0_mesh = typemesh::mesh<"lstm0", axis0, axis1, axis2>;
  using lstm1_mesh = typemesh::mesh<"lstm1", axis0, axis1, axis2>;
  using proj_mesh = typemesh::mesh<"proj", axis0, axis1, axis2>;
  // The reference also names dims after axes of size 1 (the batch on embed
  // and proj); here those dims are simply whole.
  using tokens = layout<>;
  using labels = layout<>;
  using embedding = layout<vocab(axis2)>;
  using lstm_io = layout<batch(axis0), k(axis2)>;
  using lstm_out = lstm_io;
  using rnn_w = layout<k(axis2), n(axis1)>;
  using proj_in = layout<>;
  using proj = layout<vocab(axis1)>;
  using into_lstm = typemesh::independent_axes;
  using out_of_lstm = typemesh::independent_axes;

  struct meshes {
    embed_mesh embed;
    lstm0_mesh lstm0;
    lstm1_mesh lstm1;
    proj_mesh proj;
  };
  static meshes make_meshes(int count) {
    using c = embed_mesh::coords;
    std::array<c, 4> s;  // embed, lstm0, lstm1, proj: (axis0, axis1, axis2)
    switch (count) {
      case 1: s = {c{1, 1, 1}, c{1, 1, 1}, c{1, 1, 1}, c{1, 1, 1}}; break;
      case 4: s = {c{1, 1, 4}, c{2, 1, 1}, c{2, 1, 1}, c{1, 4, 1}}; break;
      case 8: s = {c{1, 1, 8}, c{4, 1, 1}, c{4, 1, 1}, c{1, 8, 1}}; break;
      case 16: s = {c{1, 1, 16}, c{2, 2, 2}, c{2, 2, 2}, c{1, 16, 1}}; break;
      case 32: s = {c{1, 1, 32}, c{4, 2, 2}, c{4, 2, 2}, c{1, 32, 1}}; break;
      case 64: s = {c{1, 1, 64}, c{8, 2, 2}, c{8, 2, 2}, c{1, 64, 1}}; break;
      default: strategy_not_given_for("rnnlm", name, count, "1, 4, 8, 16, 32 or 64 devices");
    }
    if (count == 1) return {embed_mesh(s[0]), lstm0_mesh(s[1]), lstm1_mesh(s[2]), proj_mesh(s[3])};
    const auto first = devices::first_half(count), second = devices::second_half(count);
    return {embed_mesh(s[0], devices::all(count)), lstm0_mesh(s[1], first), lstm1_mesh(s[2], second),
            proj_mesh(s[3], devices::concat(second, first))};
  }
};

// The GNMT-style pipeline and FlexFlow (rnnlm_gnmt.py, rnnlm_flexflow.py)
// share their meshes: layer 0 on the first half of the devices, layer 1 on
// the second half, each splitting the batch, and a mesh of all devices
// interleaving the halves (0, n/2, 1, n/2 + 1, ...) for the embedding and the
// projection. Moving between them pairs neighbours (the pipeline kind).
struct pipeline_meshes {
  using first_half_mesh = typemesh::mesh<"first-half", axis0>;
  using second_half_mesh = typemesh::mesh<"second-half", axis0>;
  using all_mesh = typemesh::mesh<"interleaved", axis0>;
  struct meshes {
    all_mesh embed;
    first_half_mesh lstm0;
    second_half_mesh lstm1;
    all_mesh proj;
  };
  static meshes make(const char* strategy, int count) {
    if (count == 1) return {all_mesh({1}), first_half_mesh({1}), second_half_mesh({1}), all_mesh({1})};
    if (count % 2 != 0) strategy_not_given_for("rnnlm", strategy, count, "1 device or an even device count");
    const auto first = devices::first_half(count), second = devices::second_half(count);
    std::vector<int> interleaved;
    for (std::size_t i = 0; i < first.size(); ++i) interleaved.insert(interleaved.end(), {first[i], second[i]});
    const all_mesh all({count}, interleaved);
    return {all, first_half_mesh({count / 2}, first), second_half_mesh({count / 2}, second), all};
  }
};

// 2. GNMT: the batch split everywhere; the vocab whole.
struct gnmt : pipeline_meshes, batch_split {
  static constexpr const char* name = "gnmt";
  using embed_mesh = all_mesh;
  using lstm0_mesh = first_half_mesh;
  using lstm1_mesh = second_half_mesh;
  using proj_mesh = all_mesh;
  using into_lstm = typemesh::pipeline;
  using out_of_lstm = typemesh::pipeline;
  static meshes make_meshes(int count) { return make(name, count); }
};

// 3. FlexFlow: as GNMT up to the LSTM's output, which is replicated onto all
// devices; the projection splits the vocab over them.
struct flexflow : pipeline_meshes {
  static constexpr const char* name = "flexflow";
  using embed_mesh = all_mesh;
  using lstm0_mesh = first_half_mesh;
  using lstm1_mesh = second_half_mesh;
  using proj_mesh = all_mesh;
  using tokens = layout<batch(axis0)>;
  using labels = layout<>;
  using embedding = layout<>;
  using lstm_io = layout<batch(axis0)>;
  using lstm_out = layout<>;  // gathered on lstm1 before the replication
  using rnn_w = layout<>;
  using proj_in = layout<>;
  using proj = layout<vocab(axis0)>;
  using into_lstm = typemesh::pipeline;
  using out_of_lstm = typemesh::replication;
  static meshes make_meshes(int count) { return make(name, count); }
};

// --- The model, for any strategy ------------------------------------------------------

template <class S>
class rnnlm {
 public:
  using sizes = rnnlm_sizes;
  using batch_type = typemesh::io::text_batch;
  using meshes = typename S::meshes;

  template <class T, class Shape, class Layout, class Mesh>
  using tensor = typemesh::tensor<T, Shape, Layout, Mesh>;
  using tokens_t = tensor<std::int32_t, shape<batch, seq>, typename S::tokens, typename S::embed_mesh>;
  using labels_t = tensor<std::int32_t, shape<batch, seq>, typename S::labels, typename S::proj_mesh>;
  using embedding_t = tensor<float, shape<vocab, k>, typename S::embedding, typename S::embed_mesh>;
  using lstm_in_t = tensor<float, shape<batch, seq, k>, typename S::lstm_io, typename S::lstm0_mesh>;
  using lstm_out_t = tensor<float, shape<batch, seq, k>, typename S::lstm_io, typename S::lstm1_mesh>;
  using rnn_w0_t = tensor<float, shape<k, n>, typename S::rnn_w, typename S::lstm0_mesh>;
  using rnn_w1_t = tensor<float, shape<k, n>, typename S::rnn_w, typename S::lstm1_mesh>;
  using proj_t = tensor<float, shape<k, vocab>, typename S::proj, typename S::proj_mesh>;

  // The reference rounds the vocabulary up to a multiple of the device count.
  static sizes sizes_for(sizes z, int count) {
    z.real_vocab = z.vocab;
    z.vocab = (z.vocab + count - 1) / count * count;
    return z;
  }
  static meshes make_meshes(int count) { return S::make_meshes(count); }
  static std::vector<std::string> describe(const meshes& m) {
    return {m.embed.describe() + ": embedding " + S::embedding::describe() + ", tokens " + S::tokens::describe(),
            m.lstm0.describe() + ": LSTM layer 0, weights " + S::rnn_w::describe() + ", [batch, seq, k] " +
                S::lstm_io::describe(),
            m.lstm1.describe() + ": LSTM layer 1, weights " + S::rnn_w::describe(),
            m.proj.describe() + ": projection " + S::proj::describe() + ", its input " + S::proj_in::describe() +
                ", labels " + S::labels::describe()};
  }

  rnnlm(const sizes& z, const meshes& m, const typemesh::train::options& opts)
      : z_(z), m_(m), opt_(opts.learning_rate),
        // As the reference: mtf.layers.embedding draws N(0, 1), mtf.get_variable Glorot uniform.
        embedding_(typemesh::variable<embedding_t>(m.embed, "embedding", {z.vocab, z.units},
                                                   typemesh::init::normal{1.0}, opts.seed)),
        rnn_w0_(typemesh::variable<rnn_w0_t>(m.lstm0, "rnn_w0", {2 * z.units, 4 * z.units},
                                             typemesh::init::glorot_uniform{2 * z.units, 4 * z.units}, opts.seed)),
        rnn_w1_(typemesh::variable<rnn_w1_t>(m.lstm1, "rnn_w1", {2 * z.units, 4 * z.units},
                                             typemesh::init::glorot_uniform{2 * z.units, 4 * z.units}, opts.seed)),
        proj_(typemesh::variable<proj_t>(m.proj, "proj", {z.units, z.vocab},
                                         typemesh::init::glorot_uniform{z.units, z.vocab}, opts.seed)) {}

  std::optional<double> step(const batch_type& b, std::int64_t) {
    const shape<batch, seq> s{b.rows, b.length};
    const auto inputs = typemesh::import_tensor<typename S::tokens>(m_.embed, host(s, b.source));
    const auto labels = typemesh::import_tensor<typename S::labels>(m_.proj, host(s, b.target));

    auto x = typemesh::replace_mesh<typename S::lstm_io, typename S::into_lstm>(typemesh::embedding<k>(inputs, embedding_),
                                                                              m_.lstm0);
    auto y = typemesh::relayout<typename S::lstm_out>(two_layer_lstm(x));
    auto h = typemesh::replace_mesh<typename S::proj_in, typename S::out_of_lstm>(y, m_.proj);
    auto logits = typemesh::dense(h, proj_);  // [batch, seq, vocab]
    if (z_.vocab != z_.real_vocab) logits = logits + vocab_mask(logits);
    auto cross_entropy = typemesh::softmax_cross_entropy<vocab>(logits, labels);  // [batch, seq]

    auto loss = masked_mean(cross_entropy, b.target_mask);

    opt_.minimize(loss, embedding_, rnn_w0_, rnn_w1_, proj_);
    if (!loss.holds_data()) return std::nullopt;
    return loss.local()[0];
  }

  template <class F>
  void for_each_parameter(F&& f) const {
    f("embedding", embedding_);
    f("rnn_w0", rnn_w0_);
    f("rnn_w1", rnn_w1_);
    f("proj", proj_);
  }

 private:
  template <class T>
  static typemesh::host_tensor<T, shape<batch, seq>> host(const shape<batch, seq>& s, const std::vector<T>& v) {
    typemesh::host_tensor<T, shape<batch, seq>> t(s);
    t.values() = v;
    return t;
  }

  // Layer 0 on lstm0, layer 1 on lstm1, from zero states. On the same
  // devices, each layer runs over the whole sequence at once. Otherwise,
  // after every time step, layer 0's h moves to lstm1; where the meshes are
  // disjoint the move is a buffered send, so layer 0 runs a step ahead of
  // layer 1.
  lstm_out_t two_layer_lstm(const lstm_in_t& x) const {
    if constexpr (std::is_same_v<lstm_in_t, lstm_out_t>) {
      if (m_.lstm0 == m_.lstm1) return typemesh::lstm<seq>(x, std::vector{rnn_w0_, rnn_w1_});
    }
    const typemesh::lstm_weight w0(rnn_w0_);  // the steps' gradients, reduced over the batch once
    const typemesh::lstm_weight w1(rnn_w1_);
    auto s0 = typemesh::lstm_zero_state<seq>(x, rnn_w0_);
    auto s1 = typemesh::lstm_zero_state<seq>(x, rnn_w1_);
    using h1_t = decltype(s1.h);
    std::vector<h1_t> outputs;
    for (std::int64_t t = 0; t < x.shape().template size<seq>(); ++t) {
      s0 = typemesh::lstm_step(typemesh::time_step<seq>(x, t), s0.h, s0.c, w0);
      s1 = typemesh::lstm_step(typemesh::replace_mesh<typename h1_t::layout_type>(s0.h, m_.lstm1), s1.h, s1.c, w1);
      outputs.push_back(s1.h);
    }
    return typemesh::stack_steps<typename lstm_out_t::shape_type>(outputs);
  }

  // 0 on the real vocab, -1e9 on the ids the round-up added, laid out as the
  // logits' vocab dim.
  template <class Logits>
  auto vocab_mask(const Logits&) const {
    using mask_layout = typename Logits::layout_type::template ordered<vocab>;
    typemesh::host_tensor<float, shape<vocab>> t(shape<vocab>{z_.vocab});
    for (std::int64_t v = 0; v < z_.vocab; ++v) t.values()[v] = v < z_.real_vocab ? 0.0f : -1e9f;
    return typemesh::import_tensor<mask_layout>(m_.proj, t);
  }

  sizes z_;
  meshes m_;
  typemesh::optim::sgd opt_;
  embedding_t embedding_;
  rnn_w0_t rnn_w0_;
  rnn_w1_t rnn_w1_;
  proj_t proj_;
};

int main(int argc, char** argv) {
  network_program<rnnlm, data_parallel, pase, gnmt, flexflow> program(
      "rnnlm", "Trains the PaSE RNNLM (embedding, two LSTM layers, projection) under one of its strategies");
  rnnlm_sizes sizes;
  program.cli().add_count("--units", sizes.units, "LSTM units per layer (reference: 2048)");
  auto opts = program.parse(argc, argv);
  return program.run(opts, [&] {
    auto data = language_model_data(opts, sizes.vocab);  // real text: an epoch is one pass over it
    sizes.vocab = data.source_vocabulary;
    return std::pair{sizes, data.batches};
  });
}

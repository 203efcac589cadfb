// The PaSE Transformer: an encoder-decoder translation model trained under the
// reference's three strategies (benchmarks/transformer.py of
// baidu-research/PaSE, written on Mesh-TensorFlow).
//
//   encoder: embedding [src vocab, d_model] -> x * sqrt(d_model) + positions
//            -> layers x (self-attention, add & norm, feed-forward, add & norm)
//   decoder: the same over the target, with attention over the encoder's
//            output after each self-attention
//   -> projection [d_model, tgt vocab] -> softmax cross-entropy
//
// Each strategy is a struct of types: its meshes, where every tensor lives
// and how it is split. The model is written once, over the strategy. Both
// vocabularies are rounded up to a multiple of the device count, as the
// reference does; the padded target ids get no probability (their logits are
// pushed to -1e9) and padded positions of a sentence are masked out of the
// loss.
//
//   typemesh-transformer --devices 8 --strategy pase --d-model 64 --d-ff 256 --seq-len 16
//   typemesh-transformer --help

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "network_program.hpp"

using typemesh::layout;
using typemesh::shape;

// Tensor dims. The source and the target share the length dim, as in the
// reference; attention over a sequence renames the memory side's.
struct batch : typemesh::dim<"batch"> {};
struct length : typemesh::dim<"length"> {};                // positions of the query side
struct memory_length : typemesh::dim<"memory_length"> {};  // self-attention's memory positions
struct source_length : typemesh::dim<"source_length"> {};  // the encoder's output, seen by the decoder
struct vocab : typemesh::dim<"vocab"> {};
struct d_model : typemesh::dim<"d_model"> {};
struct heads : typemesh::dim<"heads"> {};
struct d_k : typemesh::dim<"d_k"> {};  // key and value channels per head (Mesh-TensorFlow's kv_channels)
struct d_ff : typemesh::dim<"d_ff"> {};

// Mesh axes; the reference names them axis0, axis1.
struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};

struct transformer_sizes {
  bool big = false;  // --model-size: the pase meshes at 16 and 64 devices depend on it
  std::int64_t layers = 6;  // encoder and decoder layers each (the reference's nx)
  std::int64_t d_model = 512, heads = 8, d_k = 64, d_ff = 2048;
  std::int64_t src_vocab = 50000, tgt_vocab = 50000;  // the search's Transformer; real text: the files' sizes
  std::int64_t real_tgt_vocab = 0;                    // before the round-up (set by sizes_for)
};

namespace devices = typemesh::devices;

// Every strategy names two meshes, `io` (token ids, embeddings, the final
// projection and the loss) and `model` (the encoder and decoder layers), the
// same mesh where the reference uses one, and the layouts of the tensors:
//   ids          [batch, length] source and target ids, on io
//   vocab_table  the embeddings [vocab, d_model] and the projection [d_model, vocab], on io
//   embedded     [batch, length, d_model] out of the embedding, on io
//   activations  [batch, length, d_model] through the layers, on model
//   head_weights wq, wk, wv, wo [heads, d_model, d_k]
//   ff_weights   [d_model, d_ff] and [d_ff, d_model]
//   logits_in    [batch, length, d_model] into the projection, on io
// (layer norms' scale and bias and the positional table are whole). Where the
// meshes differ, `moves` is the kind of the two mesh replacements.

// 0. Data parallel: one mesh of every device, the batch split.
struct data_parallel {
  static constexpr const char* name = "data-parallel";
  using model_mesh = typemesh::mesh<"mesh0", axis0>;
  using io_mesh = model_mesh;
  using ids = layout<batch(axis0)>;
  using vocab_table = layout<>;
  using embedded = layout<batch(axis0)>;
  using activations = layout<batch(axis0)>;
  using head_weights = layout<>;
  using ff_weights = layout<>;
  using logits_in = activations;
  static constexpr bool replaces_mesh = false;

  struct meshes {
    io_mesh io;
    model_mesh model;
  };
  static meshes make_meshes(const transformer_sizes&, int count) {
    const model_mesh m({count});
    return {m, m};
  }
};

// 1. PaSE's optimum: the layers on a [dim1, dim2] mesh, the batch over axis0
// and the heads and d_ff over axis1; the ids, the embeddings and the
// projection on a one-axis mesh of the same devices, replicated except the
// vocab, which is split over all of them. Independent-axes replacements move
// the embeddings onto the layers' mesh and the decoder's output back.
struct pase {
  static constexpr const char* name = "pase";
  using model_mesh = typemesh::mesh<"mesh0", axis0, axis1>;
  using io_mesh = typemesh::mesh<"mesh1", axis0>;
  using ids = layout<>;
  using vocab_table = layout<vocab(axis0)>;
  using embedded = layout<>;
  using activations = layout<batch(axis0)>;
  using head_weights = layout<heads(axis1)>;
  using ff_weights = layout<d_ff(axis1)>;
  using logits_in = layout<>;
  static constexpr bool replaces_mesh = true;
  using moves = typemesh::independent_axes;

  struct meshes {
    io_mesh io;
    model_mesh model;
  };
  static meshes make_meshes(const transformer_sizes& z, int count) {
    using c = model_mesh::coords;
    c s;  // (dim1, dim2)
    switch (count) {
      case 1: s = {1, 1}; break;
      case 4: s = {4, 1}; break;
      case 8: s = {8, 1}; break;
      case 16: s = z.big ? c{8, 2} : c{16, 1}; break;
      case 32: s = {16, 2}; break;
      case 64: s = z.big ? c{16, 4} : c{32, 2}; break;
      default: strategy_not_given_for("transformer", name, count, "1, 4, 8, 16, 32 or 64 devices");
    }
    return {io_mesh({count}), model_mesh(s)};
  }
};

// 2. The Mesh-TensorFlow paper's: one [dim1, dim2] mesh, the batch over axis0
// and the vocab, heads and d_ff over axis1.
struct mesh_tensorflow {
  static constexpr const char* name = "mesh-tensorflow";
  using model_mesh = typemesh::mesh<"mesh0", axis0, axis1>;
  using io_mesh = model_mesh;
  using ids = layout<batch(axis0)>;
  using vocab_table = layout<vocab(axis1)>;
  using embedded = layout<batch(axis0)>;
  using activations = layout<batch(axis0)>;
  using head_weights = layout<heads(axis1)>;
  using ff_weights = layout<d_ff(axis1)>;
  using logits_in = activations;
  static constexpr bool replaces_mesh = false;

  struct meshes {
    io_mesh io;
    model_mesh model;
  };
  static meshes make_meshes(const transformer_sizes&, int count) {
    using c = model_mesh::coords;
    c s;
    switch (count) {
      case 1: s = {1, 1}; break;
      case 4: s = {4, 1}; break;
      case 8: s = {2, 4}; break;
      case 16: s = {4, 4}; break;
      case 32: s = {4, 8}; break;
      case 64: s = {8, 8}; break;
      default: strategy_not_given_for("transformer", name, count, "1, 4, 8, 16, 32 or 64 devices");
    }
    const model_mesh m(s);
    return {m, m};
  }
};

// --- The model, for any strategy ------------------------------------------------------

// The dropout rate of the attention weights and of the feed-forward hidden
// layer (the reference passes dropout=0.5 to both).
inline constexpr double dropout_rate = 0.5;

template <class S>
class transformer {
 public:
  using sizes = transformer_sizes;
  using batch_type = typemesh::io::text_batch;
  using meshes = typename S::meshes;
  using io_mesh = typename S::io_mesh;
  using model_mesh = typename S::model_mesh;

  template <class Shape, class Layout, class Mesh>
  using f32 = typemesh::tensor<float, Shape, Layout, Mesh>;
  using ids_t = typemesh::tensor<std::int32_t, shape<batch, length>, typename S::ids, io_mesh>;
  using embedding_t = f32<shape<vocab, d_model>, typename S::vocab_table, io_mesh>;
  using projection_t = f32<shape<d_model, vocab>, typename S::vocab_table, io_mesh>;
  using embedded_t = f32<shape<batch, length, d_model>, typename S::embedded, io_mesh>;
  using activations_t = f32<shape<batch, length, d_model>, typename S::activations, model_mesh>;
  using head_weight_t = f32<shape<heads, d_model, d_k>, typename S::head_weights, model_mesh>;
  using ff_in_t = f32<shape<d_model, d_ff>, typename S::ff_weights, model_mesh>;
  using ff_out_t = f32<shape<d_ff, d_model>, typename S::ff_weights, model_mesh>;
  using norm_t = f32<shape<d_model>, layout<>, model_mesh>;
  using positions_t = f32<shape<length, d_model>, layout<>, model_mesh>;

  // The reference rounds both vocabularies up to a multiple of the device count.
  static sizes sizes_for(sizes z, int count) {
    z.real_tgt_vocab = z.tgt_vocab;
    z.src_vocab = round_up(z.src_vocab, count);
    z.tgt_vocab = round_up(z.tgt_vocab, count);
    return z;
  }
  static meshes make_meshes(const sizes& z, int count) { return S::make_meshes(z, count); }
  static std::vector<std::string> describe(const meshes& m) {
    const std::string layers = "encoder and decoder layers, activations " + S::activations::describe() +
                               ", attention weights " + S::head_weights::describe() + ", feed-forward weights " +
                               S::ff_weights::describe() + ", norms and positions whole";
    const std::string io = "ids " + S::ids::describe() + ", embeddings and projection " +
                           S::vocab_table::describe() + ", embedded " + S::embedded::describe() +
                           ", projection input " + S::logits_in::describe();
    if constexpr (S::replaces_mesh) return {m.io.describe() + ": " + io, m.model.describe() + ": " + layers};
    else return {m.model.describe() + ": " + io + "; " + layers};
  }

  transformer(const sizes& z, const meshes& m, const typemesh::train::options& opts)
      : z_(z), m_(m), seed_(opts.seed), opt_(opts.learning_rate),
        // As the reference: mtf.layers.embedding draws N(0, 1); mtf.layers.dense
        // (the projection, the feed-forward) uniform in +-sqrt(3 / fan_in).
        src_embedding_(typemesh::variable<embedding_t>(m.io, "encoder_embedding", {z.src_vocab, z.d_model},
                                                       typemesh::init::normal{1.0}, opts.seed)),
        tgt_embedding_(typemesh::variable<embedding_t>(m.io, "decoder_embedding", {z.tgt_vocab, z.d_model},
                                                       typemesh::init::normal{1.0}, opts.seed)),
        projection_(typemesh::variable<projection_t>(m.io, "final_projection", {z.d_model, z.tgt_vocab},
                                                     fan_in_uniform(z.d_model), opts.seed)) {
    for (std::int64_t i = 0; i < z.layers; ++i) {
      const std::string e = "encoder_", d = "decoder_", n = std::to_string(i);
      encoder_.push_back({attention_weights_named(e + "att_" + n), norm_named(e + "att_" + n + "_norm"),
                          ff_named(e + "ff_" + n), norm_named(e + "ff_" + n + "_norm")});
      decoder_.push_back({attention_weights_named(d + "att_" + n), norm_named(d + "att_" + n + "_norm"),
                          attention_weights_named(d + "att2_" + n), norm_named(d + "att2_" + n + "_norm"),
                          ff_named(d + "ff_" + n), norm_named(d + "ff_" + n + "_norm")});
    }
  }

  std::optional<double> step(const batch_type& b, std::int64_t step) {
    const shape<batch, length> s{b.rows, b.length};
    const auto source = typemesh::import_tensor<typename S::ids>(m_.io, host(s, b.source));
    // The target is the decoder's input and its labels, as in the reference.
    const auto target = typemesh::import_tensor<typename S::ids>(m_.io, host(s, b.target));
    const auto positions = positional_table(b.length);

    // Encoder.
    auto x = to_layers(typemesh::embedding<d_model>(source, src_embedding_), positions);
    for (std::int64_t i = 0; i < z_.layers; ++i) {
      const auto& l = encoder_[i];
      const std::string n = "encoder_att_" + std::to_string(i);
      x = add_norm(x, attention<memory_length>(x, typemesh::rename<length, memory_length>(x), l.att, n, step), l.att_norm);
      x = add_norm(x, feed_forward(x, l.ff, "encoder_ff_" + std::to_string(i), step), l.ff_norm);
    }
    const auto memory = typemesh::rename<length, source_length>(x);

    // Decoder.
    auto y = to_layers(typemesh::embedding<d_model>(target, tgt_embedding_), positions);
    for (std::int64_t i = 0; i < z_.layers; ++i) {
      const auto& l = decoder_[i];
      const std::string n = std::to_string(i);
      y = add_norm(y, attention<memory_length>(y, typemesh::rename<length, memory_length>(y), l.att, "decoder_att_" + n, step),
                   l.att_norm);
      y = add_norm(y, attention<source_length>(y, memory, l.att2, "decoder_att2_" + n, step), l.att2_norm);
      y = add_norm(y, feed_forward(y, l.ff, "decoder_ff_" + n, step), l.ff_norm);
    }

    // Loss: the mean cross-entropy over the real target positions.
    auto logits = typemesh::dense(to_projection(y), projection_);  // [batch, length, vocab]
    if (z_.tgt_vocab != z_.real_tgt_vocab) logits = logits + vocab_mask(logits);
    auto cross_entropy = typemesh::softmax_cross_entropy<vocab>(logits, target);  // [batch, length]
    auto loss = masked_mean(cross_entropy, b.target_mask);

    typemesh::backward(loss);
    visit_parameters(*this, [&](const std::string&, auto& p) { opt_.step(p); });
    if (!loss.holds_data()) return std::nullopt;
    return loss.local()[0];
  }

  template <class F>
  void for_each_parameter(F&& f) const {
    visit_parameters(*this, f);
  }

 private:
  struct attention_weights {
    head_weight_t q, k, v, o;
  };
  struct norm {
    norm_t scale, bias;
  };
  struct feed_forward_weights {
    ff_in_t wi;
    ff_out_t wo;
  };
  struct encoder_layer {
    attention_weights att;
    norm att_norm;
    feed_forward_weights ff;
    norm ff_norm;
  };
  struct decoder_layer {
    attention_weights att;
    norm att_norm;
    attention_weights att2;  // over the encoder's output
    norm att2_norm;
    feed_forward_weights ff;
    norm ff_norm;
  };

  // Every parameter, in a fixed order, named as the reference's variable scopes.
  template <class Self, class F>
  static void visit_parameters(Self& self, F&& f) {
    f(std::string("encoder_embedding"), self.src_embedding_);
    f(std::string("decoder_embedding"), self.tgt_embedding_);
    auto attention = [&](const std::string& n, auto& w) {
      f(n + "/q", w.q), f(n + "/k", w.k), f(n + "/v", w.v), f(n + "/o", w.o);
    };
    auto norm = [&](const std::string& n, auto& w) { f(n + "/scale", w.scale), f(n + "/bias", w.bias); };
    auto ff = [&](const std::string& n, auto& w) { f(n + "/wi", w.wi), f(n + "/wo", w.wo); };
    for (std::size_t i = 0; i < self.encoder_.size(); ++i) {
      auto& l = self.encoder_[i];
      const std::string p = "encoder_", n = std::to_string(i);
      attention(p + "att_" + n, l.att), norm(p + "att_" + n + "_norm", l.att_norm);
      ff(p + "ff_" + n, l.ff), norm(p + "ff_" + n + "_norm", l.ff_norm);
    }
    for (std::size_t i = 0; i < self.decoder_.size(); ++i) {
      auto& l = self.decoder_[i];
      const std::string p = "decoder_", n = std::to_string(i);
      attention(p + "att_" + n, l.att), norm(p + "att_" + n + "_norm", l.att_norm);
      attention(p + "att2_" + n, l.att2), norm(p + "att2_" + n + "_norm", l.att2_norm);
      ff(p + "ff_" + n, l.ff), norm(p + "ff_" + n + "_norm", l.ff_norm);
    }
    f(std::string("final_projection"), self.projection_);
  }

  static std::int64_t round_up(std::int64_t n, std::int64_t m) { return (n + m - 1) / m * m; }

  // Mesh-TensorFlow's default dense kernel: uniform with the variance 1 / fan_in.
  static typemesh::init::uniform fan_in_uniform(std::int64_t fan_in) {
    const double limit = std::sqrt(3.0 / static_cast<double>(fan_in));
    return {-limit, limit};
  }

  // Mesh-TensorFlow's attention variables: normal, with the standard
  // deviations that fold the logits' scale into wq and wk.
  attention_weights attention_weights_named(const std::string& scope) const {
    const double dm = static_cast<double>(z_.d_model), dk = static_cast<double>(z_.d_k);
    const double qk = std::pow(dm, -0.5) * std::pow(dk, -0.25), v = std::pow(dm, -0.5),
                 o = std::pow(dm * static_cast<double>(z_.heads), -0.5);
    auto make = [&](const char* part, double stddev) {
      return typemesh::variable<head_weight_t>(m_.model, scope + "/" + part, {z_.heads, z_.d_model, z_.d_k},
                                               typemesh::init::normal{stddev}, seed_);
    };
    return {make("q", qk), make("k", qk), make("v", v), make("o", o)};
  }
  norm norm_named(const std::string& scope) const {
    return {typemesh::variable<norm_t>(m_.model, scope + "/scale", {z_.d_model}, typemesh::init::constant{1.0}, seed_),
            typemesh::variable<norm_t>(m_.model, scope + "/bias", {z_.d_model}, typemesh::init::zeros{}, seed_)};
  }
  feed_forward_weights ff_named(const std::string& scope) const {
    return {typemesh::variable<ff_in_t>(m_.model, scope + "/wi", {z_.d_model, z_.d_ff}, fan_in_uniform(z_.d_model),
                                        seed_),
            typemesh::variable<ff_out_t>(m_.model, scope + "/wo", {z_.d_ff, z_.d_model}, fan_in_uniform(z_.d_ff),
                                         seed_)};
  }

  template <class T>
  static typemesh::host_tensor<T, shape<batch, length>> host(const shape<batch, length>& s, const std::vector<T>& v) {
    typemesh::host_tensor<T, shape<batch, length>> t(s);
    t.values() = v;
    return t;
  }

  // The reference's table: channel c at position p holds p / 10000^(2c /
  // d_model), its sine on even channels and its cosine on odd ones (every
  // channel has an exponent of its own). A constant, as the reference's.
  positions_t positional_table(std::int64_t positions) const {
    typemesh::host_tensor<float, shape<length, d_model>> t(shape<length, d_model>{positions, z_.d_model});
    const double d = static_cast<double>(z_.d_model);
    for (std::int64_t p = 0; p < positions; ++p)
      for (std::int64_t c = 0; c < z_.d_model; ++c) {
        const double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * static_cast<double>(c) / d);
        t[{p, c}] = static_cast<float>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    return typemesh::import_tensor<layout<>>(m_.model, t);
  }

  // The embedding onto the layers' mesh (pase: an independent-axes move that
  // splits the batch), scaled by sqrt(d_model), plus the positions.
  activations_t to_layers(const embedded_t& e, const positions_t& positions) const {
    const auto scale = static_cast<float>(std::sqrt(static_cast<double>(z_.d_model)));
    if constexpr (S::replaces_mesh) {
      return typemesh::replace_mesh<typename S::activations, typename S::moves>(e, m_.model) * scale + positions;
    } else {
      return e * scale + positions;
    }
  }

  // The decoder's output onto the projection's mesh (pase: back to the
  // replicated one-axis mesh).
  auto to_projection(const activations_t& y) const {
    if constexpr (S::replaces_mesh) return typemesh::replace_mesh<typename S::logits_in, typename S::moves>(y, m_.io);
    else return y;
  }

  // Mesh-TensorFlow's multihead attention of x over memory (MemoryLength its
  // positions' dim): logits q.k without a 1/sqrt(d_k) (the initialisation of wq
  // and wk carries the scale), no mask, dropout on the attention weights.
  template <class MemoryLength, class Memory>
  activations_t attention(const activations_t& x, const Memory& memory, const attention_weights& w,
                          const std::string& scope, std::int64_t step) const {
    using mlen = MemoryLength;
    auto q = typemesh::einsum<shape<batch, heads, length, d_k>>(x, w.q);
    auto k = typemesh::einsum<shape<batch, heads, mlen, d_k>>(memory, w.k);
    auto v = typemesh::einsum<shape<batch, heads, mlen, d_k>>(memory, w.v);
    auto weights = typemesh::softmax<mlen>(typemesh::einsum<shape<batch, heads, length, mlen>>(q, k));
    weights = typemesh::dropout(weights, {.rate = dropout_rate, .key = {seed_, scope + "/dropout", to_u64(step)}});
    auto heads_out = typemesh::einsum<shape<batch, heads, length, d_k>>(weights, v);
    return typemesh::einsum<shape<batch, length, d_model>>(heads_out, w.o);  // sums heads and d_k
  }

  // Mesh-TensorFlow's dense_relu_dense: no biases, dropout on the hidden layer.
  activations_t feed_forward(const activations_t& x, const feed_forward_weights& w, const std::string& scope,
                             std::int64_t step) const {
    return typemesh::dense_relu_dense(x, w.wi, w.wo,
                                      {.dropout_rate = dropout_rate, .dropout_key = {seed_, scope + "/dropout",
                                                                                      to_u64(step)}});
  }

  // The reference's add_norm: the residual sum, then layer norm (after the
  // sublayer, not before it).
  static activations_t add_norm(const activations_t& x, const activations_t& y, const norm& n) {
    return typemesh::layer_norm<d_model>(x + y, n.scale, n.bias);
  }

  static std::uint64_t to_u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }

  // 0 on the real target vocab, -1e9 on the ids the round-up added, laid out
  // as the logits' vocab dim.
  template <class Logits>
  auto vocab_mask(const Logits&) const {
    using mask_layout = typename Logits::layout_type::template ordered<vocab>;
    typemesh::host_tensor<float, shape<vocab>> t(shape<vocab>{z_.tgt_vocab});
    for (std::int64_t v = 0; v < z_.tgt_vocab; ++v) t.values()[v] = v < z_.real_tgt_vocab ? 0.0f : -1e9f;
    return typemesh::import_tensor<mask_layout>(m_.io, t);
  }

  sizes z_;
  meshes m_;
  std::uint64_t seed_;
  typemesh::optim::sgd opt_;
  embedding_t src_embedding_, tgt_embedding_;
  projection_t projection_;
  std::vector<encoder_layer> encoder_;
  std::vector<decoder_layer> decoder_;
};

int main(int argc, char** argv) {
  network_program<transformer, data_parallel, pase, mesh_tensorflow> program(
      "transformer", "Trains the PaSE Transformer (encoder and decoder) under one of its strategies");
  transformer_sizes sizes;
  // Unset (0): the --model-size's value, filled in after parsing.
  sizes.d_model = sizes.heads = sizes.d_ff = 0;
  auto& cli = program.cli();
  cli.add_count("--layers", sizes.layers, "Encoder and decoder layers, each (reference: 6)");
  cli.add_count("--d-model", sizes.d_model, "Model width (reference: 512 small, 1024 big)")->default_str("model size's");
  cli.add_count("--heads", sizes.heads, "Attention heads (reference: 8 small, 16 big)")->default_str("model size's");
  cli.add_count("--d-k", sizes.d_k, "Key and value channels per head (reference: 64)");
  cli.add_count("--d-ff", sizes.d_ff, "Feed-forward width (reference: 2048 small, 4096 big)")->default_str("model size's");
  auto opts = program.parse(argc, argv);
  sizes.big = opts.model_size == "big";
  if (sizes.d_model == 0) sizes.d_model = sizes.big ? 1024 : 512;
  if (sizes.heads == 0) sizes.heads = sizes.big ? 16 : 8;
  if (sizes.d_ff == 0) sizes.d_ff = sizes.big ? 4096 : 2048;
  return program.run(opts, [&] {
    auto data = translation_data(opts, sizes.src_vocab);  // real text: an epoch is one pass over it
    sizes.src_vocab = data.source_vocabulary;
    sizes.tgt_vocab = data.target_vocabulary;
    return std::pair{sizes, data.batches};
  });
}

// The four networks of the peer benchmark, one training step each (forward +
// backward + SGD, float32), written once for any one-device mesh type: a host
// mesh in typemesh-bench-peer (peer_steps.cpp), a cuda_mesh as well in
// typemesh-bench-gpu (gpu.cpp).
//
//   mlp          x[256, 1024] -> dense 4096 + bias, relu -> dense 1024 + bias
//                -> softmax cross-entropy over 1024 classes, mean over the batch
//   transformer  one encoder layer, x[16, 128, 512] (a constant input), 8 heads
//                of 64, no projection biases: self-attention, add and layer
//                norm, relu feed-forward 512 -> 2048 -> 512 (no biases), add
//                and layer norm; loss = mean of the output
//   rnnlm        ids[32, 32] -> embedding 8192 x 512 -> 2 LSTM layers of 512
//                units (no bias, zero initial states) -> projection 512 -> 8192
//                (no bias) -> softmax cross-entropy, mean over batch and steps
//   conv         x[32, 32, 32, 64] NHWC -> 3x3 conv 64 -> 64 SAME (no bias),
//                relu -> 2x2 max pool -> dense to 10 classes + bias -> softmax
//                cross-entropy, mean over the batch
//
// Every step uses one fixed batch and SGD at rate 0.01 (0.001 for conv;
// PyTorch's side in peer.py does the same).
//
// Each network function builds its inputs and variables on the mesh and
// hands `time_steps` a callable that runs one step and returns its loss;
// what time_steps returns (the program's timing of the steps) is returned.
// The loss is read with item(), which on a GPU waits for the step's kernels,
// so a step's wall time covers all of its work.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include <typemesh/typemesh.hpp>

namespace typemesh_peer {

struct ax : typemesh::axis<"ax"> {};
using typemesh::layout;
using typemesh::shape;
using whole = layout<>;

struct batch : typemesh::dim<"batch"> {};
struct features : typemesh::dim<"features"> {};
struct hidden : typemesh::dim<"hidden"> {};
struct classes : typemesh::dim<"classes"> {};
struct length : typemesh::dim<"length"> {};
struct memory_length : typemesh::dim<"memory_length"> {};
struct d_model : typemesh::dim<"d_model"> {};
struct heads : typemesh::dim<"heads"> {};
struct d_k : typemesh::dim<"d_k"> {};
struct d_v : typemesh::dim<"d_v"> {};
struct d_ff : typemesh::dim<"d_ff"> {};
struct seq : typemesh::dim<"seq"> {};
struct vocab : typemesh::dim<"vocab"> {};
struct k : typemesh::dim<"k"> {};  // LSTM units in
struct n : typemesh::dim<"n"> {};  // LSTM gate columns
struct height : typemesh::dim<"height"> {};
struct width : typemesh::dim<"width"> {};
struct channels : typemesh::dim<"channels"> {};
struct out_channels : typemesh::dim<"out_channels"> {};
struct fh : typemesh::dim<"fh"> {};
struct fw : typemesh::dim<"fw"> {};

constexpr double learning_rate = 0.01;
constexpr double conv_learning_rate = 0.001;
constexpr std::uint64_t seed = 1;

inline constexpr std::string_view network_names[] = {"mlp", "transformer", "rnnlm", "conv"};

// Labels drawn from a fixed sequence, so both runs of a step see one batch.
template <class S>
typemesh::host_tensor<std::int32_t, S> labels(const S& s, std::int32_t count) {
  typemesh::host_tensor<std::int32_t, S> t(s);
  std::uint64_t state = 12345;
  for (auto& v : t.values()) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<std::int32_t>((state >> 33) % static_cast<std::uint64_t>(count));
  }
  return t;
}

template <class S>
typemesh::host_tensor<float, S> inputs(const S& s) {
  typemesh::host_tensor<float, S> t(s);
  for (std::size_t i = 0; i < t.size(); ++i) t.values()[i] = static_cast<float>(std::sin(0.37 * double(i)));
  return t;
}

template <class Mesh, class TimeSteps>
auto mlp(const Mesh& m, TimeSteps&& time_steps) {
  auto x = typemesh::import_tensor<whole>(m, inputs(shape<batch, features>{256, 1024}));
  auto y = typemesh::import_tensor<whole>(m, labels(shape<batch>{256}, 1024));
  auto w1 = typemesh::variable<whole>(m, "mlp/w1", shape<features, hidden>{1024, 4096},
                                      typemesh::init::glorot_uniform{1024, 4096}, seed);
  auto b1 = typemesh::variable<whole>(m, "mlp/b1", shape<hidden>{4096});
  auto w2 = typemesh::variable<whole>(m, "mlp/w2", shape<hidden, classes>{4096, 1024},
                                      typemesh::init::glorot_uniform{4096, 1024}, seed);
  auto b2 = typemesh::variable<whole>(m, "mlp/b2", shape<classes>{1024});
  typemesh::optim::sgd opt(learning_rate);
  return time_steps([&] {
    auto h = typemesh::dense(x, w1, b1, typemesh::activation::relu);
    auto logits = typemesh::dense(h, w2, b2);
    auto loss = typemesh::reduce_mean(typemesh::softmax_cross_entropy<classes>(logits, y));
    opt.minimize(loss, w1, b1, w2, b2);
    return static_cast<double>(loss.item());
  });
}

template <class Mesh, class TimeSteps>
auto transformer(const Mesh& m, TimeSteps&& time_steps) {
  auto x = typemesh::import_tensor<whole>(m, inputs(shape<batch, length, d_model>{16, 128, 512}));
  const typemesh::init::glorot_uniform proj_init{512, 512};
  auto wq = typemesh::variable<whole>(m, "enc/wq", shape<d_model, heads, d_k>{512, 8, 64}, proj_init, seed);
  auto wk = typemesh::variable<whole>(m, "enc/wk", shape<d_model, heads, d_k>{512, 8, 64}, proj_init, seed);
  auto wv = typemesh::variable<whole>(m, "enc/wv", shape<d_model, heads, d_v>{512, 8, 64}, proj_init, seed);
  auto wo = typemesh::variable<whole>(m, "enc/wo", shape<heads, d_v, d_model>{8, 64, 512}, proj_init, seed);
  auto ln1_scale = typemesh::variable<whole>(m, "enc/ln1/scale", shape<d_model>{512}, typemesh::init::constant{1});
  auto ln1_bias = typemesh::variable<whole>(m, "enc/ln1/bias", shape<d_model>{512});
  auto w1 = typemesh::variable<whole>(m, "enc/ffn/w1", shape<d_model, d_ff>{512, 2048},
                                      typemesh::init::glorot_uniform{512, 2048}, seed);
  auto w2 = typemesh::variable<whole>(m, "enc/ffn/w2", shape<d_ff, d_model>{2048, 512},
                                      typemesh::init::glorot_uniform{2048, 512}, seed);
  auto ln2_scale = typemesh::variable<whole>(m, "enc/ln2/scale", shape<d_model>{512}, typemesh::init::constant{1});
  auto ln2_bias = typemesh::variable<whole>(m, "enc/ln2/bias", shape<d_model>{512});
  typemesh::optim::sgd opt(learning_rate);
  return time_steps([&] {
    auto attended = typemesh::self_attention<length, memory_length>(x, wq, wk, wv, wo);
    auto h = typemesh::layer_norm<d_model>(x + attended, ln1_scale, ln1_bias);
    auto y = typemesh::layer_norm<d_model>(h + typemesh::dense_relu_dense(h, w1, w2), ln2_scale, ln2_bias);
    auto loss = typemesh::reduce_mean(y);
    opt.minimize(loss, wq, wk, wv, wo, ln1_scale, ln1_bias, w1, w2, ln2_scale, ln2_bias);
    return static_cast<double>(loss.item());
  });
}

template <class Mesh, class TimeSteps>
auto rnnlm(const Mesh& m, TimeSteps&& time_steps) {
  constexpr std::int64_t units = 512, words = 8192;
  auto ids = typemesh::import_tensor<whole>(m, labels(shape<batch, seq>{32, 32}, words));
  auto targets = typemesh::import_tensor<whole>(m, labels(shape<batch, seq>{32, 32}, words - 1));
  auto table = typemesh::variable<whole>(m, "rnnlm/embedding", shape<vocab, k>{words, units},
                                         typemesh::init::normal{1.0}, seed);
  const typemesh::init::glorot_uniform lstm_init{2 * units, 4 * units};
  auto w0 = typemesh::variable<whole>(m, "rnnlm/w0", shape<k, n>{2 * units, 4 * units}, lstm_init, seed);
  auto w1 = typemesh::variable<whole>(m, "rnnlm/w1", shape<k, n>{2 * units, 4 * units}, lstm_init, seed);
  auto proj = typemesh::variable<whole>(m, "rnnlm/proj", shape<k, vocab>{units, words},
                                        typemesh::init::glorot_uniform{units, words}, seed);
  typemesh::optim::sgd opt(learning_rate);
  return time_steps([&] {
    auto x = typemesh::embedding<k>(ids, table);  // [batch, seq, k]
    auto h = typemesh::lstm<seq>(x, std::vector{w0, w1});
    auto logits = typemesh::dense(h, proj);  // [batch, seq, vocab]
    auto loss = typemesh::reduce_mean(typemesh::softmax_cross_entropy<vocab>(logits, targets));
    opt.minimize(loss, table, w0, w1, proj);
    return static_cast<double>(loss.item());
  });
}

template <class Mesh, class TimeSteps>
auto conv(const Mesh& m, TimeSteps&& time_steps) {
  auto x = typemesh::import_tensor<whole>(m, inputs(shape<batch, height, width, channels>{32, 32, 32, 64}));
  auto y = typemesh::import_tensor<whole>(m, labels(shape<batch>{32}, 10));
  auto filter = typemesh::variable<whole>(m, "conv/filter", shape<fh, fw, channels, out_channels>{3, 3, 64, 64},
                                          typemesh::init::glorot_uniform{9 * 64, 9 * 64}, seed);
  auto w = typemesh::variable<whole>(m, "conv/dense/w", shape<height, width, out_channels, classes>{16, 16, 64, 10},
                                     typemesh::init::glorot_uniform{16 * 16 * 64, 10}, seed);
  auto b = typemesh::variable<whole>(m, "conv/dense/b", shape<classes>{10});
  // The dense layer sums 16384 unnormalised features: at the other steps' rate
  // the first update overshoots and the loss rises.
  typemesh::optim::sgd opt(conv_learning_rate);
  return time_steps([&] {
    auto features_map = typemesh::relu(typemesh::conv2d<height, width, fh, fw>(x, filter));  // SAME, stride 1
    auto pooled = typemesh::max_pool2d<height, width>(features_map, {.window = {2, 2}});
    auto logits = typemesh::dense(pooled, w, b);  // sums height, width, out_channels
    auto loss = typemesh::reduce_mean(typemesh::softmax_cross_entropy<classes>(logits, y));
    opt.minimize(loss, filter, w, b);
    return static_cast<double>(loss.item());
  });
}

// Runs the network called `name` (one of network_names) on m.
template <class Mesh, class TimeSteps>
auto network(std::string_view name, const Mesh& m, TimeSteps&& time_steps) {
  if (name == "mlp") return mlp(m, time_steps);
  if (name == "transformer") return transformer(m, time_steps);
  if (name == "rnnlm") return rnnlm(m, time_steps);
  return conv(m, time_steps);
}

// Whether a run's losses are as SGD on one fixed batch must leave them:
// finite, and (but for the Transformer, whose loss, a mean of layer-normed
// values, is flat by construction) lower after two steps or more.
inline bool losses_plausible(std::string_view name, int steps_run, double first_loss, double last_loss) {
  const bool finite = std::isfinite(first_loss) && std::isfinite(last_loss);
  const bool lowered = name == "transformer" || steps_run < 2 || last_loss < first_loss;
  return finite && lowered;
}

}  // namespace typemesh_peer

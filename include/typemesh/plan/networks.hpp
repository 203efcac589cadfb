// The five networks of the PaSE search tool, with its layer sizes. Only the
// batch size enters the graphs; the tool's model-size flag is accepted by its
// command line but no graph uses it, and so it is here.
#pragma once

#include <string>
#include <vector>

#include "typemesh/plan/graph.hpp"

namespace typemesh::plan {

using tensor = graph_builder::tensor;

// AlexNet on 227×227 images, 1024 classes.
inline graph alexnet(std::int64_t batch) {
  graph_builder g("alexnet");
  auto x = g.input({batch, 3, 227, 227});
  x = g.conv(x, {96, 3, 11, 11}, 4, 0, 1, "conv1");
  x = g.pooling(x, {3, 3}, 2, 0, "pool1");
  x = g.conv(x, {256, 96, 5, 5}, 1, 2, 1, "conv2");
  x = g.pooling(x, {3, 3}, 2, 0, "pool2");
  x = g.conv(x, {384, 256, 3, 3}, 1, 1, 1, "conv3");
  x = g.conv(x, {384, 384, 3, 3}, 1, 1, 1, "conv4");
  x = g.conv(x, {256, 384, 3, 3}, 1, 1, 1, "conv5");
  x = g.pooling(x, {3, 3}, 2, 0, "pool5");
  x = g.reshape(x, {batch, 256 * 6 * 6}, "flatten");
  x = g.fc(x, 4096, 1, "fc6");
  x = g.fc(x, 4096, 1, "fc7");
  x = g.fc(x, 1024, 0, "fc8");
  g.softmax_xent(x, "loss");
  return g.finish();
}

// ResNet-101 (bottleneck blocks 3, 4, 23, 3) on 227×227 images.
inline graph resnet101(std::int64_t batch) {
  graph_builder g("resnet101");
  constexpr std::int64_t expansion = 4;
  std::int64_t inplanes = 64;
  auto bottleneck = [&](tensor x, std::int64_t planes, std::int64_t stride, bool downsample,
                        const std::string& name) {
    auto y = g.conv(x, {planes, inplanes, 1, 1}, 1, 0, 0, name + ".conv1");
    y = g.batch_norm(y, name + ".bn1");
    y = g.conv(y, {planes, planes, 3, 3}, stride, 1, 0, name + ".conv2");
    y = g.batch_norm(y, name + ".bn2");
    y = g.conv(y, {planes * expansion, planes, 1, 1}, 1, 0, 0, name + ".conv3");
    y = g.batch_norm(y, name + ".bn3");
    tensor id = x;
    if (downsample) {
      id = g.conv(x, {planes * expansion, inplanes, 1, 1}, stride, 0, 0, name + ".down");
      id = g.batch_norm(id, name + ".down_bn");
    }
    return g.elementwise(y, id, 1, name + ".add");
  };
  auto stage = [&](tensor x, std::int64_t planes, int blocks, std::int64_t stride, const std::string& name) {
    const bool down = stride != 1 || inplanes != planes * expansion;
    x = bottleneck(x, planes, stride, down, name + ".0");
    inplanes = planes * expansion;
    for (int i = 1; i < blocks; ++i) x = bottleneck(x, planes, 1, false, detail::cat(name, ".", i));
    return x;
  };
  auto x = g.input({batch, 3, 227, 227});
  x = g.conv(x, {64, 3, 7, 7}, 2, 3, 0, "conv1");
  x = g.batch_norm(x, "bn1");
  x = g.pooling(x, {3, 3}, 2, 1, "pool1");
  x = stage(x, 64, 3, 1, "layer1");
  x = stage(x, 128, 4, 2, "layer2");
  x = stage(x, 256, 23, 2, "layer3");
  x = stage(x, 512, 3, 2, "layer4");
  x = g.reduce_mean(x, {2, 3}, false, "avgpool");
  x = g.fc(x, 1000, 0, "fc");
  g.softmax_xent(x, "loss");
  return g.finish();
}

// Inception-v3 on 299×299 images, 1000 classes, without the auxiliary head.
inline graph inception3(std::int64_t batch) {
  graph_builder g("inception3");
  using A2 = std::array<std::int64_t, 2>;
  auto basic = [&](tensor x, std::array<std::int64_t, 4> f, A2 stride, A2 pad, const std::string& name) {
    auto y = g.conv(x, f, stride, pad, 0, name);
    return g.batch_norm(y, name + ".bn");
  };
  auto basic1 = [&](tensor x, std::array<std::int64_t, 4> f, std::int64_t stride, std::int64_t pad,
                    const std::string& name) { return basic(x, f, {stride, stride}, {pad, pad}, name); };
  auto block_a = [&](tensor x, std::int64_t in, std::int64_t pool_features, const std::string& n) {
    auto b1 = basic1(x, {64, in, 1, 1}, 1, 0, n + ".1x1");
    auto b5 = basic1(x, {48, in, 1, 1}, 1, 0, n + ".5x5_1");
    b5 = basic1(b5, {64, 48, 5, 5}, 1, 2, n + ".5x5_2");
    auto b3 = basic1(x, {64, in, 1, 1}, 1, 0, n + ".3x3dbl_1");
    b3 = basic1(b3, {96, 64, 3, 3}, 1, 1, n + ".3x3dbl_2");
    b3 = basic1(b3, {96, 96, 3, 3}, 1, 1, n + ".3x3dbl_3");
    auto bp = g.pooling(x, {3, 3}, 1, 1, n + ".pool");
    bp = basic1(bp, {pool_features, in, 1, 1}, 1, 0, n + ".pool_proj");
    return g.concat({b1, b5, b3, bp}, 1, n + ".concat");
  };
  auto block_b = [&](tensor x, std::int64_t in, const std::string& n) {
    auto b3 = basic1(x, {384, in, 3, 3}, 2, 0, n + ".3x3");
    auto bd = basic1(x, {64, in, 1, 1}, 1, 0, n + ".3x3dbl_1");
    bd = basic1(bd, {96, 64, 3, 3}, 1, 1, n + ".3x3dbl_2");
    bd = basic1(bd, {96, 96, 3, 3}, 2, 0, n + ".3x3dbl_3");
    auto bp = g.pooling(x, {3, 3}, 2, 0, n + ".pool");
    return g.concat({b3, bd, bp}, 1, n + ".concat");
  };
  auto block_c = [&](tensor x, std::int64_t in, std::int64_t c7, const std::string& n) {
    auto b1 = basic1(x, {192, in, 1, 1}, 1, 0, n + ".1x1");
    auto b7 = basic1(x, {c7, in, 1, 1}, 1, 0, n + ".7x7_1");
    b7 = basic(b7, {c7, c7, 1, 7}, {1, 1}, {0, 3}, n + ".7x7_2");
    b7 = basic(b7, {192, c7, 7, 1}, {1, 1}, {3, 0}, n + ".7x7_3");
    auto bd = basic1(x, {c7, in, 1, 1}, 1, 0, n + ".7x7dbl_1");
    bd = basic(bd, {c7, c7, 7, 1}, {1, 1}, {3, 0}, n + ".7x7dbl_2");
    bd = basic(bd, {c7, c7, 1, 7}, {1, 1}, {0, 3}, n + ".7x7dbl_3");
    bd = basic(bd, {c7, c7, 7, 1}, {1, 1}, {3, 0}, n + ".7x7dbl_4");
    bd = basic(bd, {192, c7, 1, 7}, {1, 1}, {0, 3}, n + ".7x7dbl_5");
    auto bp = g.pooling(x, {3, 3}, 1, 1, n + ".pool");
    bp = basic1(bp, {192, in, 1, 1}, 1, 0, n + ".pool_proj");
    return g.concat({b1, b7, bd, bp}, 1, n + ".concat");
  };
  auto block_d = [&](tensor x, std::int64_t in, const std::string& n) {
    auto b3 = basic1(x, {192, in, 1, 1}, 1, 0, n + ".3x3_1");
    b3 = basic1(b3, {320, 192, 3, 3}, 2, 0, n + ".3x3_2");
    auto b7 = basic1(x, {192, in, 1, 1}, 1, 0, n + ".7x7x3_1");
    b7 = basic(b7, {192, 192, 1, 7}, {1, 1}, {0, 3}, n + ".7x7x3_2");
    b7 = basic(b7, {192, 192, 7, 1}, {1, 1}, {3, 0}, n + ".7x7x3_3");
    b7 = basic1(b7, {192, 192, 3, 3}, 2, 0, n + ".7x7x3_4");
    auto bp = g.pooling(x, {3, 3}, 2, 0, n + ".pool");
    return g.concat({b3, b7, bp}, 1, n + ".concat");
  };
  auto block_e = [&](tensor x, std::int64_t in, const std::string& n) {
    auto b1 = basic1(x, {320, in, 1, 1}, 1, 0, n + ".1x1");
    auto b3 = basic1(x, {384, in, 1, 1}, 1, 0, n + ".3x3_1");
    auto b3a = basic(b3, {384, 384, 1, 3}, {1, 1}, {0, 1}, n + ".3x3_2a");
    auto b3b = basic(b3, {384, 384, 3, 1}, {1, 1}, {1, 0}, n + ".3x3_2b");
    b3 = g.concat({b3a, b3b}, 1, n + ".3x3_concat");
    auto bd = basic1(x, {448, in, 1, 1}, 1, 0, n + ".3x3dbl_1");
    bd = basic1(bd, {384, 448, 3, 3}, 1, 1, n + ".3x3dbl_2");
    auto bda = basic(bd, {384, 384, 1, 3}, {1, 1}, {0, 1}, n + ".3x3dbl_3a");
    auto bdb = basic(bd, {384, 384, 3, 1}, {1, 1}, {1, 0}, n + ".3x3dbl_3b");
    bd = g.concat({bda, bdb}, 1, n + ".3x3dbl_concat");
    auto bp = g.pooling(x, {3, 3}, 1, 1, n + ".pool");
    bp = basic1(bp, {192, in, 1, 1}, 1, 0, n + ".pool_proj");
    return g.concat({b1, b3, bd, bp}, 1, n + ".concat");
  };
  auto x = g.input({batch, 3, 299, 299});
  x = basic1(x, {32, 3, 3, 3}, 2, 0, "conv1a");
  x = basic1(x, {32, 32, 3, 3}, 1, 0, "conv2a");
  x = basic1(x, {64, 32, 3, 3}, 1, 1, "conv2b");
  x = g.pooling(x, {3, 3}, 2, 0, "pool1");
  x = basic1(x, {80, 64, 1, 1}, 1, 0, "conv3b");
  x = basic1(x, {192, 80, 3, 3}, 1, 0, "conv4a");
  x = g.pooling(x, {3, 3}, 2, 0, "pool2");
  x = block_a(x, 192, 32, "mixed5b");
  x = block_a(x, 256, 64, "mixed5c");
  x = block_a(x, 288, 64, "mixed5d");
  x = block_b(x, 288, "mixed6a");
  x = block_c(x, 768, 128, "mixed6b");
  x = block_c(x, 768, 160, "mixed6c");
  x = block_c(x, 768, 160, "mixed6d");
  x = block_c(x, 768, 192, "mixed6e");
  x = block_d(x, 768, "mixed7a");
  x = block_e(x, 1280, "mixed7b");
  x = block_e(x, 2048, "mixed7c");
  x = g.reduce_mean(x, {2, 3}, false, "avgpool");
  x = g.fc(x, 1000, 0, "fc");
  g.softmax_xent(x, "loss");
  return g.finish();
}

// Two-layer LSTM language model: vocabulary 100000, 2048 units, 256 steps.
// Cutoff 1, so that the layer dim may be split (pipelining).
inline graph rnnlm(std::int64_t batch) {
  constexpr std::int64_t layers = 2, vocab = 100000, units = 2048, seq = 256;
  graph_builder g("rnnlm", 1.0);
  auto ids = g.input({batch, seq});
  auto x = g.embedding(ids, vocab, units, "embed");
  x = g.lstm(x, units, layers, "lstm");
  x = g.fc(x, vocab, 0, "proj");
  g.softmax_xent(x, "loss");
  return g.finish();
}

// Transformer (base): 6+6 layers, d_model 512, 8 heads of 64, d_ff 2048,
// vocabulary 50000, 256 positions. Cutoff 1, so that heads may be split.
inline graph transformer(std::int64_t batch) {
  constexpr std::int64_t seq = 256, vocab = 50000, d = 512, heads = 8, ff = 2048, dk = 64;
  constexpr int layers = 6;
  graph_builder g("transformer", 1.0);
  const auto enc_ids = g.input({batch, seq});
  const auto dec_ids = g.input({batch, seq});
  const auto pos = g.input({batch, seq, d});

  auto attention = [&](std::vector<tensor> xs, const std::string& n) {
    tensor qkv;
    const auto w = g.input({3, heads, d, dk});
    if (xs.size() == 3) {
      qkv = g.stack(xs, 0, n + ".stack");
      qkv = g.einsum("sble,shek->sbhlk", qkv, w, 0, n + ".qkv");
    } else {
      qkv = g.einsum("ble,shek->sbhlk", xs[0], w, 0, n + ".qkv");
    }
    auto parts = g.unstack(qkv, 0, n + ".unstack");
    auto logits = g.einsum("bhlk,bhmk->bhlm", parts[0], parts[1], 0, n + ".logits");
    auto weights = g.softmax(logits, 3, n + ".softmax");
    auto scores = g.einsum("bhlm,bhmk->bhlk", weights, parts[2], 0, n + ".scores");
    scores = g.einsum("bhlk,hek->ble", scores, g.input({heads, d, dk}), 0, n + ".out");
    scores = g.elementwise(xs[0], scores, 0, n + ".add");
    return g.norm(scores, -1, n + ".norm");
  };
  auto feed_forward = [&](tensor x, const std::string& n) {
    auto y = g.einsum("ble,ef->blf", x, g.input({d, ff}), 2, n + ".ff1");
    y = g.einsum("blf,fe->ble", y, g.input({ff, d}), 0, n + ".ff2");
    y = g.elementwise(x, y, 0, n + ".add");
    return g.norm(y, -1, n + ".norm");
  };

  auto x = g.embedding(enc_ids, vocab, d, "enc.embed");
  x = g.elementwise(x, pos, 0, "enc.pos");
  for (int i = 0; i < layers; ++i) {
    const auto n = detail::cat("enc", i);
    x = attention({x}, n + ".att");
    x = feed_forward(x, n + ".ff");
  }
  const auto enc = x;
  x = g.embedding(dec_ids, vocab, d, "dec.embed");
  x = g.elementwise(x, pos, 0, "dec.pos");
  for (int i = 0; i < layers; ++i) {
    const auto n = detail::cat("dec", i);
    x = attention({x}, n + ".self");
    x = attention({x, enc, enc}, n + ".cross");
    x = feed_forward(x, n + ".ff");
  }
  x = g.einsum("ble,ev->blv", x, g.input({d, vocab}), 0, "proj");
  g.softmax_xent(x, "loss");
  return g.finish();
}

inline const std::vector<std::string>& network_names() {
  static const std::vector<std::string> n{"alexnet", "resnet101", "inception3", "rnnlm", "transformer"};
  return n;
}

inline graph network(const std::string& name, std::int64_t batch) {
  if (batch < 1) throw plan_error(detail::cat("batch size ", batch, " must be positive"));
  if (name == "alexnet") return alexnet(batch);
  if (name == "resnet101") return resnet101(batch);
  if (name == "inception3") return inception3(batch);
  if (name == "rnnlm") return rnnlm(batch);
  if (name == "transformer") return transformer(batch);
  throw plan_error(detail::cat("unknown network '", name, "'; known: ", detail::list(network_names())));
}

}  // namespace typemesh::plan

// The CUDA space: every layer kind, the optimizers, the collectives and the
// moves between host and GPU memory run on a cuda_mesh and give what the
// same program gives on a host mesh (to rounding), and their gradients pass
// the same checks as on the host (tests/grad_check.hpp): under several
// layouts equal to one device, and equal to finite differences.
//
// Compiled by nvcc only (the CUDA configuration, docs/backend.md). Where the
// process sees no GPU every test reports itself skipped.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "grad_check.hpp"
#include "typemesh/backend/contract.hpp"
#include "typemesh/backend/cuda/runtime.hpp"
#include "typemesh/backend/functors.hpp"
#include "typemesh/backend/strided.hpp"
#include "typemesh/layers/attention.hpp"
#include "typemesh/layers/conv2d.hpp"
#include "typemesh/layers/dense.hpp"
#include "typemesh/layers/dropout.hpp"
#include "typemesh/layers/embedding.hpp"
#include "typemesh/layers/layer_norm.hpp"
#include "typemesh/layers/lstm.hpp"
#include "typemesh/layers/pooling.hpp"
#include "typemesh/layers/softmax_cross_entropy.hpp"
#include "typemesh/optim/optimizers.hpp"

namespace {
using namespace tt;
using typemesh::import_tensor;
using typemesh::layout;
using typemesh::shape;

using host_mesh = typemesh::mesh<"host", a0, a1>;
using gpu_mesh = typemesh::cuda_mesh<"gpu", a0, a1>;
static_assert(std::is_same_v<typemesh::space_of<gpu_mesh>, typemesh::cuda_space>);

struct batch : typemesh::dim<"batch"> {};
struct seq : typemesh::dim<"seq"> {};
struct k : typemesh::dim<"k"> {};
struct n : typemesh::dim<"n"> {};
struct vocab : typemesh::dim<"vocab"> {};
struct embed : typemesh::dim<"embed"> {};
struct h : typemesh::dim<"h"> {};
struct w : typemesh::dim<"w"> {};
struct c : typemesh::dim<"c"> {};
struct fh : typemesh::dim<"fh"> {};
struct fw : typemesh::dim<"fw"> {};
struct length : typemesh::dim<"length"> {};
struct memory_length : typemesh::dim<"memory_length"> {};
struct d_model : typemesh::dim<"d_model"> {};
struct heads : typemesh::dim<"heads"> {};
struct d_k : typemesh::dim<"d_k"> {};
struct d_v : typemesh::dim<"d_v"> {};

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (typemesh::backend::cuda::gpu_count() == 0) GTEST_SKIP() << "no CUDA GPU: cudaGetDeviceCount gives none";
  }
};

// loss = sum(y * c) for a fixed c placed like y.
template <class Y>
auto weighted_sum(const Y& y, unsigned seed = 99) {
  auto weights = import_tensor<typename Y::layout_type>(
      y.mesh(), host(y.shape(), random_values(static_cast<std::size_t>(y.shape().elements()), seed)));
  return typemesh::reduce_sum(y * weights);
}

values random_ids(std::size_t count, int classes, unsigned seed) {
  values v = random_values(count, seed, 0.0, static_cast<double>(classes));
  for (auto& x : v) x = std::floor(x);
  return v;
}

template <class S>
typemesh::host_tensor<std::int32_t, S> ids_host(const S& s, const values& v) {
  return typemesh::host_tensor<std::int32_t, S>(s, std::vector<std::int32_t>(v.begin(), v.end()));
}

// The case on GPUs under the layouts (against one GPU and finite
// differences), and on one GPU against one host device.
template <class... Layouts, class Case>
void check_on_gpu(const std::string& name, const gpu_mesh::coords& sizes, const std::vector<values>& in, Case body,
                  std::vector<bool> fd = {}) {
  check_layouts<gpu_mesh, Layouts...>(name, sizes, in, body, fd);
  const outcome on_host = run_case<host_mesh, Layouts...>({1, 1}, in, body);
  const outcome on_gpu = run_case<gpu_mesh, Layouts...>({1, 1}, in, body);
  EXPECT_NEAR(on_gpu.loss, on_host.loss, 1e-12 * (1 + std::abs(on_host.loss))) << name << ": loss, GPU vs host";
  ASSERT_EQ(on_gpu.grads.size(), on_host.grads.size());
  for (std::size_t i = 0; i < on_host.grads.size(); ++i) {
    expect_close(on_gpu.grads[i], on_host.grads[i], 1e-12, name + ": gradient " + std::to_string(i) + ", GPU vs host");
  }
}

// --- layers -----------------------------------------------------------------------

struct dense_case {  // tanh(x[batch, k] . w[k, n] + b[n])
  template <class LX, class LW, class LB, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<batch, k>{4, 6}, in[0]));
    auto wt = import_tensor<LW>(m, host(shape<k, n>{6, 8}, in[1]));
    auto b = import_tensor<LB>(m, host(shape<n>{8}, in[2]));
    x.requires_grad("x"), wt.requires_grad("w"), b.requires_grad("b");
    return finish(weighted_sum(typemesh::dense(x, wt, b, typemesh::activation::tanh)), x, wt, b);
  }
};

TEST_F(Gpu, Dense) {
  const std::vector<values> in{random_values(24, 1), random_values(48, 2), random_values(8, 3)};
  check_on_gpu<layout<batch(a0)>, layout<n(a1)>, layout<n(a1)>>("dense, batch and hidden split", {2, 2}, in,
                                                                  dense_case{});
  check_on_gpu<layout<k(a0)>, layout<k(a0)>, layout<>>("dense, contracted dim split", {2, 1}, in, dense_case{});
}

struct embedding_xent_case {  // softmax_cross_entropy(embedding(ids) . w, labels)
  template <class LI, class LT, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto table = import_tensor<LT>(m, host(shape<vocab, embed>{6, 4}, in[0]));
    auto wt = import_tensor<layout<>>(m, host(shape<embed, k>{4, 5}, in[1]));
    auto ids = import_tensor<LI>(m, ids_host(shape<batch, seq>{4, 3}, in[2]));
    auto labels = import_tensor<LI>(m, ids_host(shape<batch, seq>{4, 3}, in[3]));
    table.requires_grad("table"), wt.requires_grad("w");
    auto logits = typemesh::einsum<batch, seq, k>(typemesh::embedding<embed>(ids, table), wt);
    return finish(weighted_sum(typemesh::softmax_cross_entropy<k>(logits, labels)), table, wt);
  }
};

TEST_F(Gpu, EmbeddingAndSoftmaxCrossEntropy) {
  const std::vector<values> in{random_values(24, 11), random_values(20, 12), random_ids(12, 6, 13),
                               random_ids(12, 5, 14)};
  check_on_gpu<layout<batch(a0)>, layout<vocab(a1)>>("embedding, batch and vocab split", {2, 2}, in,
                                                      embedding_xent_case{}, {true, true, false, false});
}

struct conv_pool_case {  // avg_pool(max_pool(conv2d(x, f)))
  template <class LX, class LF, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<batch, h, w, c>{2, 6, 6, 3}, in[0]));
    auto f = import_tensor<LF>(m, host(shape<fh, fw, c, k>{3, 3, 3, 4}, in[1]));
    x.requires_grad("x"), f.requires_grad("f");
    auto y = typemesh::conv2d<h, w, fh, fw>(x, f, {.strides = {1, 1}});
    auto p = typemesh::max_pool2d<h, w>(typemesh::relu(y), {.window = {2, 2}, .strides = {2, 2}});
    auto q = typemesh::avg_pool2d<h, w>(p, {.window = {2, 2}, .strides = {1, 1}});
    return finish(weighted_sum(q), x, f);
  }
};

TEST_F(Gpu, ConvolutionAndPooling) {
  const std::vector<values> in{random_values(216, 21), random_values(108, 22)};
  check_on_gpu<layout<batch(a0)>, layout<k(a1)>>("conv2d, batch and filters split", {2, 2}, in, conv_pool_case{});
}

struct layer_norm_dropout_case {  // dropout(layer_norm(x) . w)
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<batch, length, d_model>{2, 3, 8}, in[0]));
    auto s = import_tensor<layout<>>(m, host(shape<d_model>{8}, in[1]));
    auto b = import_tensor<layout<>>(m, host(shape<d_model>{8}, in[2]));
    auto wt = import_tensor<LW>(m, host(shape<d_model, k>{8, 4}, in[3]));
    x.requires_grad("x"), s.requires_grad("scale"), b.requires_grad("bias"), wt.requires_grad("w");
    auto y = typemesh::layer_norm<d_model>(x, s, b, {.epsilon = 1e-6});
    auto z = typemesh::dropout(typemesh::einsum<batch, length, k>(y, wt), {.rate = 0.3, .key = {5, "gpu/dropout", 1}});
    return finish(weighted_sum(z), x, s, b, wt);
  }
};

TEST_F(Gpu, LayerNormAndDropout) {
  const std::vector<values> in{random_values(48, 31), random_values(8, 32), random_values(8, 33),
                               random_values(32, 34)};
  check_on_gpu<layout<batch(a0)>, layout<k(a1)>>("layer_norm, batch and outputs split", {2, 2}, in,
                                                 layer_norm_dropout_case{});
}

struct attention_case {  // causal self-attention
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    auto x = import_tensor<LX>(m, host(shape<batch, length, d_model>{2, 4, 6}, in[0]));
    auto wq = import_tensor<LW>(m, host(shape<d_model, heads, d_k>{6, 2, 3}, in[1]));
    auto wk = import_tensor<LW>(m, host(shape<d_model, heads, d_k>{6, 2, 3}, in[2]));
    auto wv = import_tensor<LW>(m, host(shape<d_model, heads, d_v>{6, 2, 3}, in[3]));
    auto wo = import_tensor<LW>(m, host(shape<heads, d_v, d_model>{2, 3, 6}, in[4]));
    x.requires_grad("x"), wq.requires_grad("wq"), wk.requires_grad("wk"), wv.requires_grad("wv");
    wo.requires_grad("wo");
    auto y = typemesh::self_attention<length, memory_length>(x, wq, wk, wv, wo, {.causal = true});
    return finish(weighted_sum(y), x, wq, wk, wv, wo);
  }
};

TEST_F(Gpu, SelfAttention) {
  const std::vector<values> in{random_values(48, 41), random_values(36, 42), random_values(36, 43),
                               random_values(36, 44), random_values(36, 45)};
  check_on_gpu<layout<batch(a0)>, layout<heads(a1)>>("attention, batch and heads split", {2, 2}, in,
                                                     attention_case{});
}

struct lstm_case {  // two LSTM steps
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    constexpr int B = 4, U = 3;
    auto x = import_tensor<LX>(m, host(shape<batch, seq, k>{B, 2, U}, in[0]));
    auto wt = import_tensor<LW>(m, host(shape<k, n>{2 * U, 4 * U}, in[1]));
    auto h0 = import_tensor<typename LX::template without<seq>>(m, host(shape<batch, k>{B, U}, in[2]));
    auto c0 = import_tensor<layout<batch(a0)>>(m, host(shape<batch, n>{B, U}, in[3]));
    x.requires_grad("x"), wt.requires_grad("w"), h0.requires_grad("h0"), c0.requires_grad("c0");
    const typemesh::lstm_weight steps(wt);
    auto s1 = typemesh::lstm_step(typemesh::time_step<seq>(x, 0), h0, c0, steps);
    auto s2 = typemesh::lstm_step(typemesh::time_step<seq>(x, 1), s1.h, s1.c, steps);
    return finish(weighted_sum(s2.h), x, wt, h0, c0);
  }
};

TEST_F(Gpu, LstmSteps) {
  const std::vector<values> in{random_values(24, 51), random_values(72, 52, -0.6, 0.6), random_values(12, 53),
                               random_values(12, 54)};
  check_on_gpu<layout<batch(a0)>, layout<>>("lstm, batch split", {2, 1}, in, lstm_case{});
}

struct lstm_sequence_case {  // two layers of three steps, each layer one operation over the sequence
  template <class LX, class LW, class M>
  outcome operator()(const M& m, const std::vector<values>& in) const {
    constexpr int B = 4, U = 3;
    auto x = import_tensor<LX>(m, host(shape<batch, seq, k>{B, 3, U}, in[0]));
    std::vector<decltype(import_tensor<LW>(m, host(shape<k, n>{2 * U, 4 * U}, in[1])))> w;
    for (int l = 0; l < 2; ++l) w.push_back(import_tensor<LW>(m, host(shape<k, n>{2 * U, 4 * U}, in[1 + l])));
    using state_t = decltype(typemesh::lstm_zero_state<seq>(x, w[0]));
    std::vector<state_t> states;
    for (int l = 0; l < 2; ++l) {
      states.push_back({import_tensor<typename LX::template without<seq>>(m, host(shape<batch, k>{B, U}, in[3 + l])),
                        import_tensor<layout<batch(a0)>>(m, host(shape<batch, n>{B, U}, in[5 + l]))});
    }
    x.requires_grad("x");
    for (auto& t : w) t.requires_grad("w");
    for (auto& s : states) s.h.requires_grad("h"), s.c.requires_grad("c");
    auto y = typemesh::lstm<seq>(x, w, states);
    // In the order of `in` (h of both layers, then c), which the finite differences perturb.
    return finish(weighted_sum(y), x, w[0], w[1], states[0].h, states[1].h, states[0].c, states[1].c);
  }
};

TEST_F(Gpu, LstmSequence) {
  const std::vector<values> in{random_values(36, 55), random_values(72, 56, -0.6, 0.6),
                               random_values(72, 57, -0.6, 0.6), random_values(12, 58),
                               random_values(12, 59), random_values(12, 60), random_values(12, 61)};
  check_on_gpu<layout<batch(a0)>, layout<>>("lstm sequence path, batch split", {2, 1}, in, lstm_sequence_case{});
}

// --- optimizers, collectives, moves between host and GPU -----------------------------

template <class M>
std::vector<double> train_steps(std::array<int, 2> sizes, bool adam) {
  const auto xs = random_values(8 * 6, 61), ts = random_values(8 * 4, 62);
  return typemesh::launch(sizes[0] * sizes[1], [&] {
    M m(sizes);
    auto w1 = typemesh::variable<layout<n(a1)>, double>(m, "w1", shape<k, n>{6, 10},
                                                        typemesh::init::glorot_uniform{6, 10}, 1);
    auto w2 = typemesh::variable<layout<n(a1)>, double>(m, "w2", shape<n, embed>{10, 4}, typemesh::init::normal{0.3}, 1);
    auto step = [&](auto& opt) {
      std::vector<double> losses;
      for (int i = 0; i < 3; ++i) {
        auto x = import_tensor<layout<batch(a0)>>(m, host(shape<batch, k>{8, 6}, xs));
        auto y = typemesh::einsum<batch, embed>(typemesh::relu(typemesh::einsum<batch, n>(x, w1)), w2);
        auto t = import_tensor<typename decltype(y)::layout_type>(m, host(y.shape(), ts));
        auto loss = typemesh::reduce_mean(typemesh::square(y - t));
        losses.push_back(loss.item());
        typemesh::backward(loss);
        opt.step(w1, w2);
      }
      return losses;
    };
    if (adam) {
      auto opt = typemesh::optim::adam(0.01);
      return step(opt);
    }
    auto opt = typemesh::optim::sgd(0.1);
    return step(opt);
  })[0];
}

TEST_F(Gpu, OptimizerStepsMatchTheHost) {
  for (bool adam : {false, true}) {
    const auto want = train_steps<host_mesh>({1, 1}, adam);
    expect_close(train_steps<gpu_mesh>({1, 1}, adam), want, 1e-12, adam ? "adam on one GPU" : "sgd on one GPU");
    expect_close(train_steps<gpu_mesh>({2, 2}, adam), want, 1e-10, adam ? "adam on 4 devices" : "sgd on 4 devices");
  }
}

TEST_F(Gpu, CollectivesOnGpuMemory) {
  const auto xs = random_values(4 * 6, 71);
  auto run = [&]<class M>() {
    return typemesh::launch(4, [&] {
      M m({2, 2});
      auto x = import_tensor<layout<batch(a0)>>(m, host(shape<batch, k>{4, 6}, xs));
      auto gathered = typemesh::allconcat<batch>(x);                   // allgather
      auto moved = typemesh::alltoall<batch, k>(x);                     // alltoall
      auto split = typemesh::allsplit<k, a1>(gathered);                 // local copy
      auto summed = typemesh::allreduce<a1>(gathered);                  // allreduce
      auto scattered = typemesh::reduce_scatter<k, a1>(gathered);       // reduce-scatter
      return std::vector<values>{typemesh::export_tensor(gathered).values(), typemesh::export_tensor(moved).values(),
                                 typemesh::export_tensor(split).values(), typemesh::export_tensor(summed).values(),
                                 typemesh::export_tensor(scattered).values()};
    });
  };
  const auto on_host = run.template operator()<host_mesh>();
  const auto on_gpu = run.template operator()<gpu_mesh>();
  for (int d = 0; d < 4; ++d) EXPECT_EQ(on_gpu[d], on_host[d]) << "device " << d;
}

TEST_F(Gpu, ReplaceMeshBetweenHostAndGpu) {
  // x on the host, moved to GPUs under another layout, squared there, moved
  // back: values and the gradient that crosses back to the host as the host
  // alone computes them.
  const auto xs = random_values(4 * 6, 81);
  auto run = [&](bool via_gpu) {
    return typemesh::launch(4, [&] {
      host_mesh hm({2, 2});
      gpu_mesh gm({2, 2}, typemesh::devices::range(0, 4));
      auto x = import_tensor<layout<batch(a0)>>(hm, host(shape<batch, k>{4, 6}, xs));
      x.requires_grad("x");
      auto y = [&] {
        if (!via_gpu) return typemesh::square(x);
        auto on_gpu = typemesh::replace_mesh<layout<k(a0), batch(a1)>>(x, gm);
        return typemesh::replace_mesh<layout<batch(a0)>>(typemesh::square(on_gpu), hm);
      }();
      return finish(weighted_sum(y), x);
    });
  };
  const auto want = run(false), got = run(true);
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(got[d].loss, want[d].loss) << "device " << d;
    EXPECT_EQ(got[d].grads, want[d].grads) << "device " << d;
  }
}

TEST_F(Gpu, BadIdsAreFoundBeforeTheKernel) {
  // A kernel's bad index is found before the kernel runs, as on the host.
  typemesh::launch(1, [] {
    gpu_mesh m({1, 1});
    auto table = import_tensor<layout<>>(m, host(shape<vocab, embed>{3, 2}, random_values(6, 91)));
    auto ids = import_tensor<layout<>>(m, ids_host(shape<batch, seq>{1, 2}, {0, 7}));
    EXPECT_THROW((void)typemesh::embedding<embed>(ids, table), typemesh::error);
  });
}

// --- backend kernels against the host's ----------------------------------------

namespace be = typemesh::backend;

be::dims dims_with(std::initializer_list<std::pair<int, std::int64_t>> ds) {
  be::dims d;
  for (auto [id, e] : ds) {
    d.id[d.rank] = id;
    d.extent[d.rank++] = e;
  }
  return d;
}

template <class T>
std::vector<T> random_of(std::int64_t n, unsigned seed) {
  const values v = random_values(static_cast<std::size_t>(n), seed);
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
be::device_buffer<T> on_gpu(const std::vector<T>& x) {
  be::device_buffer<T> d(x.size());
  be::cuda::copy_bytes(d.data(), x.data(), sizeof(T) * x.size());
  return d;
}

template <class T>
std::vector<T> on_host(const be::device_buffer<T>& d) {
  std::vector<T> x(d.size());
  be::cuda::copy_bytes(x.data(), d.data(), sizeof(T) * x.size());
  return x;
}

// x (dims xd) reduced to od on the GPU, twice, and on the host: the GPU's
// two runs are the same bits (the order is fixed by the sizes); against the
// host, sums agree to `tolerance` and maxima exactly.
template <class T, class Combine>
void expect_reduce_matches_host(const std::string& what, const be::dims& xd, const be::dims& od, T init,
                                Combine combine, double tolerance) {
  const auto x = random_of<T>(xd.elements(), 7);
  std::vector<T> want(static_cast<std::size_t>(od.elements()), T{-9});
  be::reduce(typemesh::host_space{}, x.data(), xd, want.data(), od, init, combine);
  const auto dx = on_gpu(x);
  std::vector<T> runs[2];
  for (auto& got : runs) {
    be::device_buffer<T> out(want.size());
    be::reduce(typemesh::cuda_space{}, dx.data(), xd, out.data(), od, init, combine);
    got = on_host(out);
  }
  ASSERT_EQ(runs[0].size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&runs[0][i], &runs[1][i], sizeof(T)), 0) << what << ": output " << i << " differs between runs";
    if (tolerance == 0) ASSERT_EQ(runs[0][i], want[i]) << what << ": output " << i;
    else ASSERT_NEAR(runs[0][i], want[i], tolerance * (1 + std::abs(want[i]))) << what << ": output " << i;
  }
}

// Each reduction path of the CUDA fold_into (backend/cuda/strided.hpp):
// columns (outputs contiguous, chunks of rows, a ragged last chunk), blocks
// (sums along contiguous memory, a scalar over more than one 64K chunk, a
// strided sum), and a thread per output for short strided sums.
TEST_F(Gpu, ReductionsMatchTheHost) {
  struct shape_case {
    std::string what;
    be::dims xd, od;
  };
  const std::vector<shape_case> cases{
      {"column sums of x[5003, 1000]", dims_with({{0, 5003}, {1, 1000}}), dims_with({{1, 1000}})},
      {"over a middle dim", dims_with({{0, 7}, {1, 999}, {2, 130}}), dims_with({{0, 7}, {2, 130}})},
      {"over two leading dims, two kept dims", dims_with({{0, 40}, {1, 50}, {2, 8}, {3, 16}}),
       dims_with({{2, 8}, {3, 16}})},
      {"over two leading dims, kept dims transposed", dims_with({{0, 40}, {1, 50}, {2, 8}, {3, 16}}),
       dims_with({{3, 16}, {2, 8}})},
      {"a scalar of 300300 elements (19 chunks)", dims_with({{0, 300}, {1, 1001}}), dims_with({})},
      {"row sums", dims_with({{0, 300}, {1, 1001}}), dims_with({{0, 300}})},
      {"row sums over several chunks each", dims_with({{0, 3}, {1, 100003}}), dims_with({{0, 3}})},
      {"a short strided sum, many outputs", dims_with({{0, 5000}, {1, 3}, {2, 4}}), dims_with({{2, 4}, {0, 5000}})},
      {"few outputs, long strided sums", dims_with({{0, 20000}, {1, 5}}), dims_with({{1, 5}})},
  };
  typemesh::launch(1, [&] {
    gpu_mesh m({1, 1});  // binds this thread's GPU
    for (const auto& c : cases) {
      expect_reduce_matches_host<double>(c.what + ", double sum", c.xd, c.od, 0.0, be::plus<double>{}, 1e-12);
      expect_reduce_matches_host<float>(c.what + ", float max", c.xd, c.od, -1e30f, be::maximum<float>{}, 0);
    }
  });
}

// out = a . b on the GPU against the host: batch dims that merge into one
// strided-batched call, batch dims that do not (a call per outer element),
// transposed, staged and packed operands, and contractions that are no
// GEMM (a dim in one input only: the fold paths with two operands).
TEST_F(Gpu, ContractionsMatchTheHost) {
  enum { B, L, H, D, M, N };
  const std::array<std::int64_t, 6> e{3, 17, 4, 8, 19, 300};
  auto dims_of = [&](std::initializer_list<int> ids) {
    be::dims d;
    for (int id : ids) {
      d.id[d.rank] = id;
      d.extent[d.rank++] = e[static_cast<std::size_t>(id)];
    }
    return d;
  };
  struct order {
    const char* what;
    be::dims a, b, out;
  };
  const std::vector<order> orders{
      {"attention's q, k and scores", dims_of({B, L, H, D}), dims_of({B, M, H, D}), dims_of({B, H, L, M})},
      {"scores transposed", dims_of({B, L, H, D}), dims_of({B, M, H, D}), dims_of({B, H, M, L})},
      {"batch dims outermost (one batched call)", dims_of({B, H, L, D}), dims_of({B, H, M, D}),
       dims_of({B, H, L, M})},
      {"batch dims outermost, b transposed", dims_of({B, H, L, D}), dims_of({B, H, D, M}), dims_of({B, H, L, M})},
      {"batch dims outermost, out transposed", dims_of({B, H, L, D}), dims_of({B, H, D, M}), dims_of({B, H, M, L})},
      {"a batch dim innermost in out (staged)", dims_of({B, L, H, D}), dims_of({B, M, H, D}), dims_of({B, L, M, H})},
      {"a's d between its batch dims (packed)", dims_of({B, D, L, H}), dims_of({B, M, H, D}), dims_of({B, H, L, M})},
      {"no batch dims", dims_of({L, D}), dims_of({D, M}), dims_of({L, M})},
      {"m only in a, summed (fold, columns)", dims_of({M, D, N}), dims_of({D}), dims_of({N})},
      {"m only in b, summed (fold, blocks)", dims_of({L, D}), dims_of({D, M}), dims_of({L})},
  };
  typemesh::launch(1, [&] {
    gpu_mesh m({1, 1});
    for (const order& o : orders) {
      const auto a = random_of<double>(o.a.elements(), 21), b = random_of<double>(o.b.elements(), 22);
      std::vector<double> want(static_cast<std::size_t>(o.out.elements()), -7.0);
      be::contract(typemesh::host_space{}, a.data(), o.a, b.data(), o.b, want.data(), o.out);
      const auto da = on_gpu(a), db = on_gpu(b);
      be::device_buffer<double> out(want.size());
      be::contract(typemesh::cuda_space{}, da.data(), o.a, db.data(), o.b, out.data(), o.out);
      const auto got = on_host(out);
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << o.what << ", element " << i;
      }
    }
  });
}

// Layer norm's and softmax cross-entropy's backward row kernels on rows
// shorter and longer than a block (the layer tests above have short rows
// only): against the host, to rounding.
TEST_F(Gpu, RowGradientsMatchTheHost) {
  typemesh::launch(1, [&] {
    gpu_mesh m({1, 1});
    for (std::int64_t held : {5, 1000}) {
      const std::int64_t rows = 37, n = rows * held;
      const std::string what = "rows of " + std::to_string(held);
      const auto dy = random_of<double>(n, 51), x_hat = random_of<double>(n, 52);
      const auto inv_sigma = random_of<double>(rows, 53);
      const be::layer_norm_rows g{rows, held, held};
      values want(static_cast<std::size_t>(n)), want_sums(static_cast<std::size_t>(2 * rows));
      be::layer_norm_gradient(typemesh::host_space{}, dy.data(), x_hat.data(), inv_sigma.data(),
                              static_cast<const double*>(nullptr), want.data(), g);
      be::layer_norm_gradient_sums(typemesh::host_space{}, dy.data(), x_hat.data(), want_sums.data(), g);
      const auto ddy = on_gpu(dy), dxh = on_gpu(x_hat), dinv = on_gpu(inv_sigma);
      be::device_buffer<double> dx(want.size()), sums(want_sums.size());
      be::layer_norm_gradient(typemesh::cuda_space{}, ddy.data(), dxh.data(), dinv.data(),
                              static_cast<const double*>(nullptr), dx.data(), g);
      be::layer_norm_gradient_sums(typemesh::cuda_space{}, ddy.data(), dxh.data(), sums.data(), g);
      expect_close(on_host(dx), want, 1e-12, "layer norm gradient, " + what);
      expect_close(on_host(sums), want_sums, 1e-12, "layer norm gradient sums, " + what);

      // Softmax cross-entropy: labels in and out of this slice of columns.
      const auto x = random_of<double>(n, 54), lse = random_of<double>(rows, 55), dys = random_of<double>(rows, 56);
      const values ids = random_ids(static_cast<std::size_t>(rows), static_cast<int>(held + 3), 57);
      const std::vector<std::int32_t> labels(ids.begin(), ids.end());
      const be::softmax_rows sg{rows, held, 0};
      values want_dx(static_cast<std::size_t>(n));
      be::softmax_cross_entropy_gradient(typemesh::host_space{}, x.data(), labels.data(), lse.data(), dys.data(),
                                         want_dx.data(), sg);
      const auto dxs = on_gpu(x), dlse = on_gpu(lse), ddys = on_gpu(dys);
      const auto dl = on_gpu(labels);
      be::device_buffer<double> got(want_dx.size());
      be::softmax_cross_entropy_gradient(typemesh::cuda_space{}, dxs.data(), dl.data(), dlse.data(), ddys.data(),
                                         got.data(), sg);
      expect_close(on_host(got), want_dx, 1e-12, "softmax cross-entropy gradient, " + what);
    }
  });
}

}  // namespace

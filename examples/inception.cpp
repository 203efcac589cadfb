// The PaSE Inception-v3: an image classifier trained under the reference's
// four strategies (inception.py of baidu-research/PaSE, written on
// Mesh-TensorFlow).
//
//   299x299x3 images -> conv1a .. conv4a, two max pools -> mixed5b..5d (A)
//   -> mixed6a (B) -> mixed6b..6e (C) -> mixed7a (D) -> mixed7b, 7c (E)
//   -> mean over height and width -> dense to the classes -> softmax cross-entropy
//
// Every convolution is the reference's BasicConv: a convolution with a bias,
// then a layer norm over the batch dim (the reference normalises over the
// output's first dim, which is the batch), with no activation. Each strategy
// is a struct of types: its meshes and where every tensor lives. The network
// is written once, over the strategy. Where the reference rounds the classes
// up to a multiple of the device count, the padded classes get no
// probability (their logits are pushed to -1e9), so the loss is the unpadded
// model's.
//
//   typemesh-inception --devices 8 --strategy pase --image-size 75 --channel-divisor 16
//   typemesh-inception --help

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "network_program.hpp"

using typemesh::layout;
using typemesh::shape;

// Tensor dims. Images are [batch, height, width, channels]; a filter is
// [fh, fw, channels, out_channels] and its convolution's output channels are
// renamed back to `channels` (the reference gives each a fresh random name,
// which is not split).
struct batch : typemesh::dim<"batch"> {};
struct height : typemesh::dim<"height"> {};
struct width : typemesh::dim<"width"> {};
struct channels : typemesh::dim<"channels"> {};
struct out_channels : typemesh::dim<"out_channels"> {};
struct fh : typemesh::dim<"fh"> {};
struct fw : typemesh::dim<"fw"> {};
struct classes : typemesh::dim<"classes"> {};

// Mesh axes; the reference names them axis0, axis1.
struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};

// The reference's meshes: mesh0 is one axis of every device; mesh1, where a
// strategy has one, is a 2-d grid of the same devices in the same order.
using mesh0 = typemesh::mesh<"mesh0", axis0>;
using mesh1 = typemesh::mesh<"mesh1", axis0, axis1>;

using image_shape = shape<batch, height, width, channels>;
using filter_shape = shape<fh, fw, channels, out_channels>;
// Images, activations and the layer norms' scale and shift: the batch over axis0.
using by_batch = layout<batch(axis0)>;

struct inception_sizes {
  std::int64_t image = 299;         // height and width
  std::int64_t channel_divisor = 1;  // every channel count of the reference divided by this
  std::int64_t classes = 1000;
  std::int64_t real_classes = 0;  // before the round-up (set by sizes_for)
};

namespace {

void require_supported(const char* strategy, int count) {
  for (int c : {1, 4, 8, 16, 32, 64})
    if (c == count) return;
  strategy_not_given_for("inception", strategy, count, "1, 4, 8, 16, 32 or 64 devices");
}

}  // namespace

// Every strategy names three meshes: `front` (conv1a to mixed7a), `tail`
// (mixed7b and mixed7c) and `head` (the classifier and the loss), some of them
// the same mesh, and the layouts that differ between strategies:
//   tail_filter  [fh, fw, channels, out_channels] filters of mixed7b and mixed7c
//   head_in      [batch, channels] the pooled features entering the classifier
//   fc           [channels, classes] the classifier's kernel (its bias: classes as here)
//   labels       [batch]
// Everything else is split by the batch over axis0 in every strategy.

// 0. Data parallel: one mesh, the batch split everywhere.
struct data_parallel {
  static constexpr const char* name = "data-parallel";
  using front_mesh = mesh0;
  using tail_mesh = mesh0;
  using head_mesh = mesh0;
  using tail_filter = layout<>;
  using head_in = by_batch;
  using fc = layout<>;
  using labels = by_batch;
  static constexpr bool round_up_classes = false;
  struct meshes {
    mesh0 front, tail, head;
  };
  static meshes make_meshes(int count) {
    require_supported(name, count);
    const mesh0 m({count});
    return {m, m, m};
  }
};

// 1. PaSE's optimum: mesh0 up to mixed7a; mixed7b and mixed7c on mesh1
// ([4, 1] on 4 devices, [n/2, 2] otherwise), reached by concatenating the
// batch's slices in pairs, where each convolution splits its output channels
// over axis1 and gathers them after its layer norm; the classifier's input
// channels over axis0 and its classes over axis1, with the labels whole.
struct pase {
  static constexpr const char* name = "pase";
  using front_mesh = mesh0;
  using tail_mesh = mesh1;
  using head_mesh = mesh1;
  using tail_filter = layout<out_channels(axis1)>;
  using head_in = layout<channels(axis0)>;
  using fc = layout<channels(axis0), classes(axis1)>;
  using labels = layout<>;
  static constexpr bool round_up_classes = false;
  struct meshes {
    mesh0 front;
    mesh1 tail, head;
  };
  static meshes make_meshes(int count) {
    require_supported(name, count);
    const mesh1 grid(count == 4 ? mesh1::coords{4, 1} : count == 1 ? mesh1::coords{1, 1}
                                                                   : mesh1::coords{count / 2, 2});
    return {mesh0({count}), grid, grid};
  }
};

// 2. OWT ("one weird trick", the expert's): the batch split in the
// convolutions, the classes split in the classifier, on one mesh; the pooled
// features are gathered whole onto every device first.
struct owt {
  static constexpr const char* name = "owt";
  using front_mesh = mesh0;
  using tail_mesh = mesh0;
  using head_mesh = mesh0;
  using tail_filter = layout<>;
  using head_in = layout<>;
  using fc = layout<classes(axis0)>;
  using labels = layout<>;
  static constexpr bool round_up_classes = true;
  struct meshes {
    mesh0 front, tail, head;
  };
  static meshes make_meshes(int count) {
    require_supported(name, count);
    const mesh0 m({count});
    return {m, m, m};
  }
};

// 3. FlexFlow's: the convolutions as data parallel; the classifier on mesh1
// ([2, n/2]), the batch over its axis0 (concatenating the slices of n/2
// devices) and the classes over axis1.
struct flexflow {
  static constexpr const char* name = "flexflow";
  using front_mesh = mesh0;
  using tail_mesh = mesh0;
  using head_mesh = mesh1;
  using tail_filter = layout<>;
  using head_in = by_batch;
  using fc = layout<classes(axis1)>;
  using labels = by_batch;
  static constexpr bool round_up_classes = true;
  struct meshes {
    mesh0 front, tail;
    mesh1 head;
  };
  static meshes make_meshes(int count) {
    require_supported(name, count);
    return {mesh0({count}), mesh0({count}), mesh1(count == 1 ? mesh1::coords{1, 1} : mesh1::coords{2, count / 2})};
  }
};

// --- The building blocks ----------------------------------------------------------

// A BasicConv's filter, as the reference writes it: (fh, fw, in, out).
struct filter_dims {
  std::int64_t h, w, in, out;
};
struct conv_options {
  std::int64_t stride = 1;
  typemesh::padding padding = typemesh::padding::valid;  // the reference's BasicConv default
};

// The network run without data: only the channel count flows. It is run once,
// to create every parameter in the order the forward pass takes them.
struct channel_count {
  std::int64_t channels;
};

// One BasicConv's parameters: Conv2d's filter and bias, and the scale and
// shift of the layer norm after it (over the batch, so of the batch's size).
template <class Mesh, class FilterLayout>
struct conv_weights {
  using filter_t = typemesh::tensor<float, filter_shape, FilterLayout, Mesh>;
  using bias_t = typemesh::tensor<float, shape<out_channels>, typename FilterLayout::template ordered<out_channels>, Mesh>;
  using norm_t = typemesh::tensor<float, shape<batch>, by_batch, Mesh>;
  std::string name;
  filter_t filter;
  bias_t bias;
  norm_t scale, shift;
};

// The BasicConvs of one part of the network, in the order the forward pass
// uses them; `next` restarts at every step.
template <class Mesh, class FilterLayout>
struct conv_stack {
  using weights = conv_weights<Mesh, FilterLayout>;
  Mesh mesh;
  std::vector<weights> all;
  std::size_t next = 0;

  const weights& take(const std::string& name) {
    if (next >= all.size() || all[next].name != name) {
      throw typemesh::error(typemesh::detail::cat("inception: convolution '", name, "' has no parameters at position ",
                                                  next, " of ", all.size()));
    }
    return all[next++];
  }
};

// --- The model, for any strategy ------------------------------------------------------

template <class S>
class inception {
 public:
  using sizes = inception_sizes;
  using batch_type = typemesh::io::image_batch;
  using meshes = typename S::meshes;

  using front_stack = conv_stack<typename S::front_mesh, layout<>>;
  using tail_stack = conv_stack<typename S::tail_mesh, typename S::tail_filter>;
  using fc_t = typemesh::tensor<float, shape<channels, classes>, typename S::fc, typename S::head_mesh>;
  using fc_bias_t = typemesh::tensor<float, shape<classes>, typename S::fc::template ordered<classes>,
                                     typename S::head_mesh>;

  // The image must survive the stem and the two strided reductions (75 is
  // the smallest side that does); the divisor must divide every channel count
  // of the reference (all are multiples of 16). The classes are rounded up to
  // a multiple of the device count where the reference does it.
  static sizes sizes_for(sizes z, int count) {
    if (z.image < 75) {
      throw typemesh::error(typemesh::detail::cat("inception: --image-size ", z.image,
                                                  " is too small; the network needs at least 75"));
    }
    if (16 % z.channel_divisor != 0) {
      throw typemesh::error(typemesh::detail::cat("inception: --channel-divisor ", z.channel_divisor,
                                                  " must divide 16 (1, 2, 4, 8 or 16), so that every channel count "
                                                  "of the reference divides by it"));
    }
    z.real_classes = z.classes;
    if (S::round_up_classes && count > 0) z.classes = (z.classes + count - 1) / count * count;
    return z;
  }
  static meshes make_meshes(int count) { return S::make_meshes(count); }
  static std::vector<std::string> describe(const meshes& m) {
    const std::string activations = std::string("images and activations [batch, height, width, channels] ") +
                                    by_batch::describe() + ", layer-norm scale and shift [batch] " +
                                    by_batch::describe();
    return {m.front.describe() + ": conv1a to mixed7a, filters " + layout<>::describe() + ", " + activations,
            m.tail.describe() + ": mixed7b and mixed7c, filters " + S::tail_filter::describe() + ", " + activations,
            m.head.describe() + ": classifier " + S::fc::describe() + ", its input [batch, channels] " +
                S::head_in::describe() + ", labels " + S::labels::describe()};
  }

  inception(const sizes& z, const meshes& m, const typemesh::train::options& opts)
      : z_(z), m_(m), opts_(opts), opt_(opts.learning_rate), front_{m.front, {}, 0}, tail_{m.tail, {}, 0},
        // mtf.layers.dense: a kernel of variance 1 / fan_in, a zero bias.
        fc_(typemesh::variable<fc_t>(m.head, "fc/kernel", {c(2048), z.classes},
                                     typemesh::init::normal{1.0 / std::sqrt(double(c(2048)))}, opts.seed)),
        fc_bias_(typemesh::variable<fc_bias_t>(m.head, "fc/bias", shape<classes>{z.classes}, typemesh::init::zeros{},
                                               opts.seed)) {
    const auto traced = features(channel_count{3});
    if (traced.channels != c(2048)) {
      throw typemesh::error(typemesh::detail::cat("inception: mixed7c gives ", traced.channels,
                                                  " channels, the classifier expects ", c(2048)));
    }
  }

  std::optional<double> step(const batch_type& b, std::int64_t) {
    front_.next = tail_.next = 0;
    typemesh::host_tensor<float, image_shape> pixels(image_shape{b.rows, b.height, b.width, b.channels});
    pixels.values() = b.pixels;
    typemesh::host_tensor<std::int32_t, shape<batch>> label_values(shape<batch>{b.rows});
    label_values.values() = b.labels;
    const auto img = typemesh::import_tensor<by_batch>(m_.front, pixels);
    const auto labels = typemesh::import_tensor<typename S::labels>(m_.head, label_values);

    auto mean = typemesh::reduce_mean<height, width>(features(img));  // [batch, channels]
    auto logits = typemesh::dense(to_head(mean), fc_, fc_bias_);       // [batch, classes]
    if (z_.classes != z_.real_classes) logits = logits + class_mask();
    auto loss = typemesh::reduce_mean(typemesh::softmax_cross_entropy<classes>(logits, labels));

    typemesh::backward(loss);
    for (auto& w : front_.all) opt_.step(w.filter, w.bias, w.scale, w.shift);
    for (auto& w : tail_.all) opt_.step(w.filter, w.bias, w.scale, w.shift);
    opt_.step(fc_, fc_bias_);
    if (!loss.holds_data()) return std::nullopt;
    return loss.local()[0];
  }

  template <class F>
  void for_each_parameter(F&& f) const {
    auto each = [&](const auto& stack) {
      for (const auto& w : stack.all) {
        f(w.name + "/weight", w.filter);
        f(w.name + "/bias", w.bias);
        f(w.name + "/layer_norm_scale", w.scale);
        f(w.name + "/layer_norm_bias", w.shift);
      }
    };
    each(front_);
    each(tail_);
    f("fc/kernel", fc_);
    f("fc/bias", fc_bias_);
  }

 private:
  // A channel count of the reference, divided by --channel-divisor.
  std::int64_t c(std::int64_t reference_channels) const { return reference_channels / z_.channel_divisor; }

  // The network up to mixed7c; Img is an image tensor, or a channel_count
  // when tracing.
  template <class Img>
  auto features(const Img& img) {
    auto conv1a = basic_conv(img, front_, "conv1a", {3, 3, 3, c(32)}, {.stride = 2});
    auto conv2a = basic_conv(conv1a, front_, "conv2a", {3, 3, c(32), c(32)});
    auto conv2b = basic_conv(conv2a, front_, "conv2b", {3, 3, c(32), c(64)}, {.padding = typemesh::padding::same});
    auto pool1 = max_pool(conv2b, 2, typemesh::padding::valid);
    auto conv3b = basic_conv(pool1, front_, "conv3b", {1, 1, c(64), c(80)});
    auto conv4a = basic_conv(conv3b, front_, "conv4a", {3, 3, c(80), c(192)});
    auto pool2 = max_pool(conv4a, 2, typemesh::padding::valid);

    auto mixed5b = inception_a(pool2, c(192), c(32), "mixed5b");
    auto mixed5c = inception_a(mixed5b, c(256), c(64), "mixed5c");
    auto mixed5d = inception_a(mixed5c, c(288), c(64), "mixed5d");

    auto mixed6a = inception_b(mixed5d, c(288), "mixed6a");

    auto mixed6b = inception_c(mixed6a, c(768), c(128), "mixed6b");
    auto mixed6c = inception_c(mixed6b, c(768), c(160), "mixed6c");
    auto mixed6d = inception_c(mixed6c, c(768), c(160), "mixed6d");
    auto mixed6e = inception_c(mixed6d, c(768), c(192), "mixed6e");

    auto mixed7a = inception_d(mixed6e, c(768), "mixed7a");

    auto mixed7b = inception_e(to_tail(mixed7a), c(1280), "mixed7b");
    return inception_e(mixed7b, c(2048), "mixed7c");
  }

  template <class X>
  X inception_a(const X& img, std::int64_t in, std::int64_t pool_features, const std::string& name) {
    auto branch1x1 = basic_conv(img, front_, name + "/branch1x1", {1, 1, in, c(64)});

    auto branch5x5 = basic_conv(img, front_, name + "/branch5x5_1", {1, 1, in, c(48)});
    branch5x5 = basic_conv(branch5x5, front_, name + "/branch5x5_2", {5, 5, c(48), c(64)}, same);

    auto branch3x3dbl = basic_conv(img, front_, name + "/branch3x3_1", {1, 1, in, c(64)});
    branch3x3dbl = basic_conv(branch3x3dbl, front_, name + "/branch3x3_2", {3, 3, c(64), c(96)}, same);
    branch3x3dbl = basic_conv(branch3x3dbl, front_, name + "/branch3x3_3", {3, 3, c(96), c(96)}, same);

    auto branch_pool = max_pool(img, 1, typemesh::padding::same);
    branch_pool = basic_conv(branch_pool, front_, name + "/branch_pool", {1, 1, in, pool_features});

    return concat(branch1x1, branch5x5, branch3x3dbl, branch_pool);
  }

  template <class X>
  X inception_b(const X& img, std::int64_t in, const std::string& name) {
    auto branch3x3 = basic_conv(img, front_, name + "/branch3x3", {3, 3, in, c(384)}, {.stride = 2});

    auto branch3x3dbl = basic_conv(img, front_, name + "/branch3x3_1", {1, 1, in, c(64)});
    branch3x3dbl = basic_conv(branch3x3dbl, front_, name + "/branch3x3_2", {3, 3, c(64), c(96)}, same);
    branch3x3dbl = basic_conv(branch3x3dbl, front_, name + "/branch3x3_3", {3, 3, c(96), c(96)}, {.stride = 2});

    auto branch_pool = max_pool(img, 2, typemesh::padding::valid);
    return concat(branch3x3, branch3x3dbl, branch_pool);
  }

  template <class X>
  X inception_c(const X& img, std::int64_t in, std::int64_t c7, const std::string& name) {
    auto branch1x1 = basic_conv(img, front_, name + "/branch1x1", {1, 1, in, c(192)});

    auto branch7x7 = basic_conv(img, front_, name + "/branch7x7_1", {1, 1, in, c7});
    branch7x7 = basic_conv(branch7x7, front_, name + "/branch7x7_2", {1, 7, c7, c7}, same);
    branch7x7 = basic_conv(branch7x7, front_, name + "/branch7x7_3", {7, 1, c7, c(192)}, same);

    auto branch7x7_dbl = basic_conv(img, front_, name + "/branch7x7_dbl_1", {1, 1, in, c7});
    branch7x7_dbl = basic_conv(branch7x7_dbl, front_, name + "/branch7x7_dbl_2", {7, 1, c7, c7}, same);
    branch7x7_dbl = basic_conv(branch7x7_dbl, front_, name + "/branch7x7_dbl_3", {1, 7, c7, c7}, same);
    branch7x7_dbl = basic_conv(branch7x7_dbl, front_, name + "/branch7x7_dbl_4", {7, 1, c7, c7}, same);
    branch7x7_dbl = basic_conv(branch7x7_dbl, front_, name + "/branch7x7_dbl_5", {1, 7, c7, c(192)}, same);

    auto branch_pool = avg_pool(img);
    branch_pool = basic_conv(branch_pool, front_, name + "/branch_pool", {1, 1, in, c(192)});
    return concat(branch1x1, branch7x7, branch7x7_dbl, branch_pool);
  }

  template <class X>
  X inception_d(const X& img, std::int64_t in, const std::string& name) {
    auto branch3x3 = basic_conv(img, front_, name + "/branch3x3_1", {1, 1, in, c(192)});
    branch3x3 = basic_conv(branch3x3, front_, name + "/branch3x3_2", {3, 3, c(192), c(320)}, {.stride = 2});

    auto branch7x7x3 = basic_conv(img, front_, name + "/branch7x7x3_1", {1, 1, in, c(192)});
    branch7x7x3 = basic_conv(branch7x7x3, front_, name + "/branch7x7x3_2", {1, 7, c(192), c(192)}, same);
    branch7x7x3 = basic_conv(branch7x7x3, front_, name + "/branch7x7x3_3", {7, 1, c(192), c(192)}, same);
    branch7x7x3 = basic_conv(branch7x7x3, front_, name + "/branch7x7x3_4", {3, 3, c(192), c(192)}, {.stride = 2});

    auto branch_pool = max_pool(img, 2, typemesh::padding::valid);
    return concat(branch3x3, branch7x7x3, branch_pool);
  }

  // On the tail's mesh, with the tail's filters (for pase: output channels
  // split over axis1, gathered after each layer norm).
  template <class X>
  X inception_e(const X& img, std::int64_t in, const std::string& name) {
    auto branch1x1 = basic_conv(img, tail_, name + "/branch1x1", {1, 1, in, c(320)});

    auto branch3x3 = basic_conv(img, tail_, name + "/branch3x3", {1, 1, in, c(384)});
    auto branch3x3_2a = basic_conv(branch3x3, tail_, name + "/branch3x3_2a", {1, 3, c(384), c(384)}, same);
    auto branch3x3_2b = basic_conv(branch3x3, tail_, name + "/branch3x3_2b", {3, 1, c(384), c(384)}, same);
    branch3x3 = concat(branch3x3_2a, branch3x3_2b);

    auto branch3x3dbl = basic_conv(img, tail_, name + "/branch3x3dbl", {1, 1, in, c(448)});
    branch3x3dbl = basic_conv(branch3x3dbl, tail_, name + "/branch3x3dbl_1", {3, 3, c(448), c(384)}, same);
    auto branch3x3dbl_3a = basic_conv(branch3x3dbl, tail_, name + "/branch3x3dbl_3a", {1, 3, c(384), c(384)}, same);
    auto branch3x3dbl_3b = basic_conv(branch3x3dbl, tail_, name + "/branch3x3dbl_3b", {3, 1, c(384), c(384)}, same);
    branch3x3dbl = concat(branch3x3dbl_3a, branch3x3dbl_3b);

    auto branch_pool = avg_pool(img);
    branch_pool = basic_conv(branch_pool, tail_, name + "/branch_pool", {1, 1, in, c(192)});
    return concat(branch1x1, branch3x3, branch3x3dbl, branch_pool);
  }

  static constexpr conv_options same{.padding = typemesh::padding::same};

  // BasicConv: convolution and bias, then the layer norm over the batch;
  // the output channels gathered whole (where the filter splits them) and
  // renamed to `channels`. Tracing, it creates the parameters instead.
  template <class X, class Stack>
  X basic_conv(const X& x, Stack& stack, const std::string& name, filter_dims f, conv_options o = {}) {
    if constexpr (std::is_same_v<X, channel_count>) {
      if (x.channels != f.in) {
        throw typemesh::error(typemesh::detail::cat("inception: convolution '", name, "' expects ", f.in,
                                                    " input channels but is given ", x.channels));
      }
      stack.all.push_back(make_weights<typename Stack::weights>(stack.mesh, name, f));
      return {f.out};
    } else {
      const auto& w = stack.take(name);
      auto y = typemesh::conv2d<height, width, fh, fw>(x, w.filter, {.strides = {o.stride, o.stride}, .padding = o.padding});
      auto normed = typemesh::layer_norm<batch>(y + w.bias, w.scale, w.shift);
      using normed_layout = typename decltype(normed)::layout_type;
      if constexpr (std::is_same_v<normed_layout, by_batch>) {
        return typemesh::rename<out_channels, channels>(normed);
      } else {
        return typemesh::rename<out_channels, channels>(typemesh::relayout<by_batch>(normed));
      }
    }
  }

  // Mesh-TensorFlow's get_variable: Glorot uniform filters (TensorFlow's fans
  // of a convolution: the window times the channels in, and out); zero
  // biases; layer norm scale one, shift zero.
  template <class W>
  W make_weights(const typename W::filter_t::mesh_type& mesh, const std::string& name, filter_dims f) const {
    const std::int64_t window = f.h * f.w;
    return W{name,
             typemesh::variable<typename W::filter_t>(mesh, name + "/weight", filter_shape{f.h, f.w, f.in, f.out},
                                                      typemesh::init::glorot_uniform{window * f.in, window * f.out},
                                                      opts_.seed),
             typemesh::variable<typename W::bias_t>(mesh, name + "/bias", shape<out_channels>{f.out},
                                                    typemesh::init::zeros{}, opts_.seed),
             typemesh::variable<typename W::norm_t>(mesh, name + "/layer_norm_scale", shape<batch>{opts_.batch_size},
                                                    typemesh::init::constant{1.0}, opts_.seed),
             typemesh::variable<typename W::norm_t>(mesh, name + "/layer_norm_bias", shape<batch>{opts_.batch_size},
                                                    typemesh::init::zeros{}, opts_.seed)};
  }

  // The reference's pools: 3 x 3 windows.
  template <class X>
  static X max_pool(const X& x, std::int64_t stride, typemesh::padding padding) {
    if constexpr (std::is_same_v<X, channel_count>) {
      return x;
    } else {
      return typemesh::max_pool2d<height, width>(x, {.window = {3, 3}, .strides = {stride, stride}, .padding = padding});
    }
  }
  template <class X>
  static X avg_pool(const X& x) {
    if constexpr (std::is_same_v<X, channel_count>) {
      return x;
    } else {
      return typemesh::avg_pool2d<height, width>(x, {.window = {3, 3}, .strides = {1, 1}, .padding = typemesh::padding::same});
    }
  }

  // Branches joined along the channels, in order.
  template <class X, class... Rest>
  static X concat(const X& first, const Rest&... rest) {
    if constexpr (std::is_same_v<X, channel_count>) {
      return {(first.channels + ... + rest.channels)};
    } else {
      X out = first;
      ((out = typemesh::concat<channels>(out, rest)), ...);
      return out;
    }
  }

  // Into mixed7b: pase moves the batch onto mesh1, concatenating slices in pairs.
  template <class X>
  auto to_tail(const X& x) const {
    if constexpr (std::is_same_v<X, channel_count> ||
                  std::is_same_v<typename S::front_mesh, typename S::tail_mesh>) {
      return x;
    } else {
      return typemesh::replace_mesh<by_batch, typemesh::concat_split>(x, m_.tail);
    }
  }

  // Into the classifier: the reference's renames (relayouts on one mesh) or
  // its move onto mesh1.
  template <class X>
  auto to_head(const X& mean) const {
    if constexpr (!std::is_same_v<typename S::tail_mesh, typename S::head_mesh>) {
      return typemesh::replace_mesh<typename S::head_in, typemesh::concat_split>(mean, m_.head);
    } else if constexpr (std::is_same_v<typename X::layout_type, typename S::head_in>) {
      return mean;
    } else {
      return typemesh::relayout<typename S::head_in>(mean);
    }
  }

  // 0 on the real classes, -1e9 on those the round-up added, laid out as the
  // logits' classes.
  auto class_mask() const {
    typemesh::host_tensor<float, shape<classes>> t(shape<classes>{z_.classes});
    for (std::int64_t v = 0; v < z_.classes; ++v) t.values()[v] = v < z_.real_classes ? 0.0f : -1e9f;
    return typemesh::import_tensor<typename fc_bias_t::layout_type>(m_.head, t);
  }

  sizes z_;
  meshes m_;
  typemesh::train::options opts_;
  typemesh::optim::sgd opt_;
  front_stack front_;
  tail_stack tail_;
  fc_t fc_;
  fc_bias_t fc_bias_;
};

int main(int argc, char** argv) {
  network_program<inception, data_parallel, pase, owt, flexflow> program(
      "inception", "Trains the PaSE Inception-v3 (299x299x3 images, 1000 classes) under one of its strategies");
  inception_sizes sizes;
  program.cli().add_count("--image-size", sizes.image, "Image height and width (reference: 299; at least 75)");
  program.cli().add_count("--channel-divisor", sizes.channel_divisor,
                          "Divide every channel count of the reference by this (1, 2, 4, 8 or 16)");
  program.cli().add_count("--classes", sizes.classes, "Number of classes (reference: 1000)");
  auto opts = program.parse(argc, argv);
  return program.run(opts, [&] { return std::pair{sizes, image_data(opts, sizes.image, sizes.classes)}; });
}

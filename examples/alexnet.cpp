// The PaSE AlexNet: the image classifier of benchmarks/alexnet.py of
// baidu-research/PaSE (written on Mesh-TensorFlow), trained under the
// reference's four strategies.
//
//   images [batch, 227, 227, 3]
//   conv1 11x11/4 VALID, 96 -> relu -> max pool 3x3/2
//   conv2 5x5 SAME, 256 -> relu -> max pool 3x3/2
//   conv3 3x3 SAME, 384 -> relu; conv4 3x3 SAME, 384 -> relu
//   conv5 3x3 SAME, 256 -> relu -> max pool 3x3/2        [batch, 6, 6, 256]
//   fc6 4096 -> relu -> dropout; fc7 4096 -> relu -> dropout
//   fc8 classes -> dropout -> softmax cross-entropy, mean over the batch
//
// Every strategy runs the convolutions data-parallel on a mesh of all
// devices; they differ in how the fully connected layers are split. Each
// strategy is a struct of types: its meshes, where every tensor lives and
// how it is split. The model is written once, over the strategy. Where the
// reference rounds the classes up to a multiple of the devices, the padded
// classes get no probability (their logits are pushed to -1e9).
//
//   typemesh-alexnet --devices 8 --strategy pase --image-size 67 --width-divisor 16
//   typemesh-alexnet --help

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "network_program.hpp"

using typemesh::layout;
using typemesh::shape;

// Tensor dims. Images are NHWC; each convolution's channels are a dim of
// their own, so that a filter names its in- and out-channels.
struct batch : typemesh::dim<"batch"> {};
struct height : typemesh::dim<"height"> {};
struct width : typemesh::dim<"width"> {};
struct rgb : typemesh::dim<"rgb"> {};
struct conv1_channels : typemesh::dim<"conv1_channels"> {};
struct conv2_channels : typemesh::dim<"conv2_channels"> {};
struct conv3_channels : typemesh::dim<"conv3_channels"> {};
struct conv4_channels : typemesh::dim<"conv4_channels"> {};
struct conv5_channels : typemesh::dim<"conv5_channels"> {};
struct filter_height : typemesh::dim<"filter_height"> {};
struct filter_width : typemesh::dim<"filter_width"> {};
struct features : typemesh::dim<"features"> {};  // pool5 flattened (pase only)
struct fc6_units : typemesh::dim<"fc6_units"> {};
struct fc7_units : typemesh::dim<"fc7_units"> {};
struct classes : typemesh::dim<"classes"> {};

// Mesh axes; the reference names them axis0, axis1.
struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};

struct alexnet_sizes {
  std::int64_t image = 227;  // height and width
  std::array<std::int64_t, 5> conv_channels{96, 256, 384, 384, 256};
  std::int64_t fc_units = 4096;  // fc6 and fc7
  std::int64_t classes = 1000;
  std::int64_t real_classes = 0;  // before the round-up (set by sizes_for)
};

namespace devices = typemesh::devices;

// The convolutions' mesh and layouts, the same in every strategy: all
// devices on one axis, the batch split, the filters replicated.
using conv_mesh = typemesh::mesh<"mesh0", axis0>;
using image_layout = layout<batch(axis0)>;
using filter_layout = layout<>;

// A move that stays on its mesh: the reference renames a dim from or to
// 'axisN' (mt.rename_dimension), which here is a relayout.
struct rename_on_mesh {};

template <class Fc, class Loss>
struct alexnet_meshes {
  conv_mesh conv;  // convolutions and pools
  Fc fc;           // fc6, fc7, fc8
  Loss loss;       // logits and labels
};

// Every strategy names:
//   fc_mesh, loss_mesh     where the fully connected layers and the loss run
//   flatten                whether pool5 is reshaped to [batch, features] first
//   fc_in, into_fc         pool5's layout on fc_mesh and the kind of its move
//   fc6, fc7, fc8          the kernels' layouts (the biases follow the units)
//   fc6_out, fc7_out       the layer outputs' layouts after the reference's renames
//   logits, out_of_fc      fc8's layout on loss_mesh and the kind of its move
//   labels                 the labels' layout on loss_mesh
//   class_multiple(n)      the reference's round-up of the classes

// 0. Data parallel: one mesh, the batch split everywhere.
struct data_parallel {
  static constexpr const char* name = "data-parallel";
  using fc_mesh = conv_mesh;
  using loss_mesh = conv_mesh;
  static constexpr bool flatten = false;
  using fc_in = layout<batch(axis0)>;
  using into_fc = rename_on_mesh;
  using fc6 = layout<>;
  using fc6_out = layout<batch(axis0)>;
  using fc7 = layout<>;
  using fc7_out = layout<batch(axis0)>;
  using fc8 = layout<>;
  using logits = layout<batch(axis0)>;
  using out_of_fc = rename_on_mesh;
  using labels = layout<batch(axis0)>;
  static std::int64_t class_multiple(int) { return 1; }

  using meshes = alexnet_meshes<fc_mesh, loss_mesh>;
  static meshes make_meshes(int count) {
    if (count < 1) strategy_not_given_for("alexnet", name, count, "any positive device count");
    const conv_mesh m({count});
    return {m, m, m};
  }
};

// 1. PaSE's optimum: the convolutions data-parallel on mesh0 [n]; pool5
// flattened and moved to mesh1 [dim1, dim2] with the batch whole and the
// features split over axis0; the units alternate between axis1 and axis0 so
// that no activation is relaid out; fc8's duplicates along axis0 are dropped
// onto mesh2 [1, dim2], the first dim2 devices, where the loss is computed.
struct pase {
  static constexpr const char* name = "pase";
  using fc_mesh = typemesh::mesh<"mesh1", axis0, axis1>;
  using loss_mesh = typemesh::mesh<"mesh2", axis0, axis1>;
  static constexpr bool flatten = true;
  using fc_in = layout<features(axis0)>;
  using into_fc = typemesh::independent_axes;
  using fc6 = layout<features(axis0), fc6_units(axis1)>;
  using fc6_out = layout<fc6_units(axis1)>;
  using fc7 = layout<fc6_units(axis1), fc7_units(axis0)>;
  using fc7_out = layout<fc7_units(axis0)>;
  using fc8 = layout<fc7_units(axis0), classes(axis1)>;
  using logits = layout<classes(axis1)>;
  using out_of_fc = typemesh::duplicates;
  using labels = layout<>;
  static std::int64_t class_multiple(int) { return 1; }  // the reference keeps 1000 classes

  using meshes = alexnet_meshes<fc_mesh, loss_mesh>;
  static meshes make_meshes(int count) {
    int dim1 = 1, dim2 = 1;
    switch (count) {
      case 1: break;
      case 4: dim1 = 4, dim2 = 1; break;
      case 8: dim1 = 4, dim2 = 2; break;
      case 16: dim1 = 8, dim2 = 2; break;
      case 32: dim1 = 8, dim2 = 4; break;
      case 64: dim1 = 8, dim2 = 8; break;
      default: strategy_not_given_for("alexnet", name, count, "1, 4, 8, 16, 32 or 64 devices");
    }
    return {conv_mesh({count}), fc_mesh({dim1, dim2}), loss_mesh({1, dim2}, devices::range(0, dim2))};
  }
};

// 2. One weird trick (OWT, the expert strategy): the convolutions
// data-parallel, the fully connected layers model-parallel on the same mesh:
// pool5 and every layer's output gathered whole, the units split.
struct owt {
  static constexpr const char* name = "owt";
  using fc_mesh = conv_mesh;
  using loss_mesh = conv_mesh;
  static constexpr bool flatten = false;
  using fc_in = layout<>;
  using into_fc = rename_on_mesh;
  using fc6 = layout<fc6_units(axis0)>;
  using fc6_out = layout<>;
  using fc7 = layout<fc7_units(axis0)>;
  using fc7_out = layout<>;
  using fc8 = layout<classes(axis0)>;
  using logits = layout<classes(axis0)>;
  using out_of_fc = rename_on_mesh;
  using labels = layout<>;
  static std::int64_t class_multiple(int count) { return count; }

  using meshes = alexnet_meshes<fc_mesh, loss_mesh>;
  static meshes make_meshes(int count) {
    if (count < 1) strategy_not_given_for("alexnet", name, count, "any positive device count");
    const conv_mesh m({count});
    return {m, m, m};
  }
};

// 3. FlexFlow: the convolutions data-parallel on mesh0 [n]; the fully
// connected layers on mesh1 [2, n/2] (the same devices), the batch split in
// two along axis0 and the units over axis1, each layer's output gathered.
struct flexflow {
  static constexpr const char* name = "flexflow";
  using fc_mesh = typemesh::mesh<"mesh1", axis0, axis1>;
  using loss_mesh = fc_mesh;
  static constexpr bool flatten = false;
  using fc_in = layout<batch(axis0)>;
  using into_fc = typemesh::concat_split;
  using fc6 = layout<fc6_units(axis1)>;
  using fc6_out = layout<batch(axis0)>;
  using fc7 = layout<fc7_units(axis1)>;
  using fc7_out = layout<batch(axis0)>;
  using fc8 = layout<classes(axis1)>;
  using logits = layout<batch(axis0), classes(axis1)>;
  using out_of_fc = rename_on_mesh;
  using labels = layout<batch(axis0)>;
  static std::int64_t class_multiple(int count) { return std::max(count / 2, 1); }

  using meshes = alexnet_meshes<fc_mesh, loss_mesh>;
  static meshes make_meshes(int count) {
    if (count == 1) return {conv_mesh({1}), fc_mesh({1, 1}), fc_mesh({1, 1})};
    if (count < 2 || count % 2 != 0) strategy_not_given_for("alexnet", name, count, "1 device or an even device count");
    const fc_mesh fc({2, count / 2});
    return {conv_mesh({count}), fc, fc};
  }
};

// --- The model, for any strategy ------------------------------------------------------

template <class S>
class alexnet {
 public:
  using sizes = alexnet_sizes;
  using batch_type = typemesh::io::image_batch;
  using meshes = typename S::meshes;

  template <class Shape, class Layout, class Mesh>
  using tensor = typemesh::tensor<float, Shape, Layout, Mesh>;
  template <class In, class Out>
  using filter_t = tensor<shape<filter_height, filter_width, In, Out>, filter_layout, conv_mesh>;
  template <class Out>
  using conv_bias_t = tensor<shape<Out>, filter_layout, conv_mesh>;
  // fc6 reduces pool5's height, width and channels, or (pase) its flattened features.
  using fc6_in_shape = std::conditional_t<S::flatten, shape<features, fc6_units>,
                                          shape<height, width, conv5_channels, fc6_units>>;
  using fc6_t = tensor<fc6_in_shape, typename S::fc6, typename S::fc_mesh>;
  using fc7_t = tensor<shape<fc6_units, fc7_units>, typename S::fc7, typename S::fc_mesh>;
  using fc8_t = tensor<shape<fc7_units, classes>, typename S::fc8, typename S::fc_mesh>;
  template <class Kernel, class Units>
  using fc_bias_t = tensor<shape<Units>, typename Kernel::layout_type::template ordered<Units>, typename S::fc_mesh>;

  // The reference rounds the classes up to a multiple of the devices (owt)
  // or of half of them (flexflow).
  static sizes sizes_for(sizes z, int count) {
    z.real_classes = z.classes;
    const std::int64_t m = S::class_multiple(count);
    z.classes = (z.classes + m - 1) / m * m;
    return z;
  }
  static meshes make_meshes(int count) { return S::make_meshes(count); }

  static std::vector<std::string> describe(const meshes& m) {
    std::vector<std::pair<std::string, std::string>> parts{
        {m.conv.describe(), "conv1-5 and pools, images " + image_layout::describe() + ", filters " +
                                filter_layout::describe()},
        {m.fc.describe(), std::string(S::flatten ? "pool5 flattened, " : "") + "fc input " + S::fc_in::describe() +
                              ", fc6 " + S::fc6::describe() + " out " + S::fc6_out::describe() + ", fc7 " +
                              S::fc7::describe() + " out " + S::fc7_out::describe() + ", fc8 " +
                              S::fc8::describe()},
        {m.loss.describe(), "logits " + S::logits::describe() + ", labels " + S::labels::describe()}};
    // One line per mesh: parts on the same mesh share a line.
    std::vector<std::string> lines;
    std::string last_mesh;
    for (const auto& [mesh, what] : parts) {
      if (!lines.empty() && mesh == last_mesh) {
        lines.back() += "; " + what;
      } else {
        lines.push_back(mesh + ": " + what);
      }
      last_mesh = mesh;
    }
    return lines;
  }

  alexnet(const sizes& z, const meshes& m, const typemesh::train::options& opts)
      : z_(z), m_(m), seed_(opts.seed), opt_(opts.learning_rate),
        conv1_w_(filter<rgb, conv1_channels>("conv1", 11, 3, z.conv_channels[0])),
        conv1_b_(conv_bias<conv1_channels>("conv1", z.conv_channels[0])),
        conv2_w_(filter<conv1_channels, conv2_channels>("conv2", 5, z.conv_channels[0], z.conv_channels[1])),
        conv2_b_(conv_bias<conv2_channels>("conv2", z.conv_channels[1])),
        conv3_w_(filter<conv2_channels, conv3_channels>("conv3", 3, z.conv_channels[1], z.conv_channels[2])),
        conv3_b_(conv_bias<conv3_channels>("conv3", z.conv_channels[2])),
        conv4_w_(filter<conv3_channels, conv4_channels>("conv4", 3, z.conv_channels[2], z.conv_channels[3])),
        conv4_b_(conv_bias<conv4_channels>("conv4", z.conv_channels[3])),
        conv5_w_(filter<conv4_channels, conv5_channels>("conv5", 3, z.conv_channels[3], z.conv_channels[4])),
        conv5_b_(conv_bias<conv5_channels>("conv5", z.conv_channels[4])),
        fc6_w_(fc6_kernel(z)),
        fc6_b_(fc_bias<fc6_t, fc6_units>("fc6", z.fc_units)),
        fc7_w_(kernel<fc7_t>("fc7", {z.fc_units, z.fc_units})),
        fc7_b_(fc_bias<fc7_t, fc7_units>("fc7", z.fc_units)),
        fc8_w_(kernel<fc8_t>("fc8", {z.fc_units, z.classes})),
        fc8_b_(fc_bias<fc8_t, classes>("fc8", z.classes)) {}

  std::optional<double> step(const batch_type& b, std::int64_t step) {
    const auto images = typemesh::import_tensor<image_layout>(m_.conv, pixels(b));
    const auto labels = typemesh::import_tensor<typename S::labels>(m_.loss, label_values(b));

    auto conv1 = conv(images, conv1_w_, conv1_b_, {.strides = {4, 4}, .padding = typemesh::padding::valid});
    auto pool1 = pool(conv1);
    auto conv2 = conv(pool1, conv2_w_, conv2_b_, {});
    auto pool2 = pool(conv2);
    auto conv3 = conv(pool2, conv3_w_, conv3_b_, {});
    auto conv4 = conv(conv3, conv4_w_, conv4_b_, {});
    auto conv5 = conv(conv4, conv5_w_, conv5_b_, {});
    auto pool5 = pool(conv5);

    auto x = move<typename S::fc_in, typename S::into_fc>(flattened(pool5), m_.fc);
    auto fc6 = typemesh::relayout<typename S::fc6_out>(
        dropout(typemesh::dense(x, fc6_w_, fc6_b_, typemesh::activation::relu), "alexnet/fc6/dropout", step));
    auto fc7 = typemesh::relayout<typename S::fc7_out>(
        dropout(typemesh::dense(fc6, fc7_w_, fc7_b_, typemesh::activation::relu), "alexnet/fc7/dropout", step));
    auto fc8 = dropout(typemesh::dense(fc7, fc8_w_, fc8_b_), "alexnet/fc8/dropout", step);

    auto logits = move<typename S::logits, typename S::out_of_fc>(fc8, m_.loss);
    if (z_.classes != z_.real_classes) logits = logits + class_mask(logits);
    auto cross_entropy = typemesh::softmax_cross_entropy<classes>(logits, labels);  // [batch]
    auto loss = typemesh::reduce_mean(cross_entropy);

    opt_.minimize(loss, conv1_w_, conv1_b_, conv2_w_, conv2_b_, conv3_w_, conv3_b_, conv4_w_, conv4_b_, conv5_w_,
                  conv5_b_, fc6_w_, fc6_b_, fc7_w_, fc7_b_, fc8_w_, fc8_b_);
    if (!loss.holds_data()) return std::nullopt;
    return loss.local()[0];
  }

  template <class F>
  void for_each_parameter(F&& f) const {
    f("alexnet/conv1/weight", conv1_w_);
    f("alexnet/conv1/bias", conv1_b_);
    f("alexnet/conv2/weight", conv2_w_);
    f("alexnet/conv2/bias", conv2_b_);
    f("alexnet/conv3/weight", conv3_w_);
    f("alexnet/conv3/bias", conv3_b_);
    f("alexnet/conv4/weight", conv4_w_);
    f("alexnet/conv4/bias", conv4_b_);
    f("alexnet/conv5/weight", conv5_w_);
    f("alexnet/conv5/bias", conv5_b_);
    f("alexnet/fc6/kernel", fc6_w_);
    f("alexnet/fc6/bias", fc6_b_);
    f("alexnet/fc7/kernel", fc7_w_);
    f("alexnet/fc7/bias", fc7_b_);
    f("alexnet/fc8/kernel", fc8_w_);
    f("alexnet/fc8/bias", fc8_b_);
  }

  // pool5's height and width: conv1 (11x11, stride 4, VALID) and three 3x3
  // stride-2 VALID pools; the SAME convolutions keep the size.
  static std::int64_t pool5_side(std::int64_t image) {
    std::int64_t side = (image - 11) / 4 + 1;
    for (int pool = 0; pool < 3; ++pool) side = (side - 3) / 2 + 1;
    return side;
  }

 private:
  // --- variables, initialised as the reference's ---

  // mt.Conv2d: the filter [fh, fw, in, out] by mtf.get_variable's default,
  // Glorot uniform with TensorFlow's fans (the window times the channels).
  template <class In, class Out>
  filter_t<In, Out> filter(const char* layer, std::int64_t window, std::int64_t in, std::int64_t out) const {
    return typemesh::variable<filter_t<In, Out>>(
        m_.conv, std::string("alexnet/") + layer + "/weight", {window, window, in, out},
        typemesh::init::glorot_uniform{window * window * in, window * window * out}, seed_);
  }
  template <class Out>
  conv_bias_t<Out> conv_bias(const char* layer, std::int64_t out) const {
    return typemesh::variable<conv_bias_t<Out>>(m_.conv, std::string("alexnet/") + layer + "/bias", {out},
                                                typemesh::init::zeros{}, seed_);
  }

  // mtf.layers.dense: the kernel [reduced dims..., units] Glorot uniform, with
  // TensorFlow's fans for its rank (for a 4-d kernel the leading two dims
  // multiply both fans); the bias zeros.
  template <class Kernel>
  Kernel kernel(const char* layer, const typename Kernel::shape_type& s) const {
    std::int64_t receptive = 1;
    for (std::size_t i = 0; i + 2 < Kernel::shape_type::rank; ++i) receptive *= s[i];
    const auto r = Kernel::shape_type::rank;
    return typemesh::variable<Kernel>(m_.fc, std::string("alexnet/") + layer + "/kernel", s,
                                      typemesh::init::glorot_uniform{s[r - 2] * receptive, s[r - 1] * receptive},
                                      seed_);
  }
  fc6_t fc6_kernel(const sizes& z) const {
    const std::int64_t side = pool5_side(z.image), channels = z.conv_channels[4];
    if (side < 1) {
      throw typemesh::shape_error(typemesh::detail::cat("alexnet: images of ", z.image, "x", z.image,
                                                        " leave nothing after pool5; the smallest size is 67"));
    }
    if constexpr (S::flatten) {
      return kernel<fc6_t>("fc6", {side * side * channels, z.fc_units});
    } else {
      return kernel<fc6_t>("fc6", {side, side, channels, z.fc_units});
    }
  }
  template <class Kernel, class Units>
  fc_bias_t<Kernel, Units> fc_bias(const char* layer, std::int64_t units) const {
    return typemesh::variable<fc_bias_t<Kernel, Units>>(m_.fc, std::string("alexnet/") + layer + "/bias", {units},
                                                        typemesh::init::zeros{}, seed_);
  }

  // --- layers ---

  template <class X, class W, class B>
  static auto conv(const X& x, const W& w, const B& bias, const typemesh::conv2d_options& o) {
    return typemesh::relu(typemesh::conv2d<height, width, filter_height, filter_width>(x, w, o) + bias);
  }
  template <class X>
  static auto pool(const X& x) {
    return typemesh::max_pool2d<height, width>(x, {.window = {3, 3}, .strides = {2, 2}});
  }
  template <class X>
  auto dropout(const X& x, const char* name, std::int64_t step) const {
    return typemesh::dropout(x, {.rate = 0.5, .key = typemesh::rng_key{seed_, name, static_cast<std::uint64_t>(step)}});
  }

  // pase reshapes pool5 to [batch, features] before its move; the others
  // keep its dims, and fc6 reduces all three.
  template <class X>
  static auto flattened(const X& pool5) {
    if constexpr (S::flatten) {
      const auto& s = pool5.shape();
      return typemesh::reshape(
          pool5, shape<batch, features>{s.template size<batch>(),
                                        s.template size<height>() * s.template size<width>() *
                                            s.template size<conv5_channels>()});
    } else {
      return pool5;
    }
  }

  // A move of the strategy's kind: a relayout on the same mesh, or a mesh
  // replacement.
  template <class Layout, class Kind, class X, class Mesh>
  static auto move(const X& x, const Mesh& to) {
    if constexpr (std::is_same_v<Kind, rename_on_mesh>) {
      static_assert(std::is_same_v<typename X::mesh_type, Mesh>, "a rename stays on its mesh");
      return typemesh::relayout<Layout>(x);
    } else {
      return typemesh::replace_mesh<Layout, Kind>(x, to);
    }
  }

  // 0 on the real classes, -1e9 on those the round-up added, laid out as the
  // logits' classes dim.
  template <class Logits>
  auto class_mask(const Logits&) const {
    using mask_layout = typename Logits::layout_type::template ordered<classes>;
    typemesh::host_tensor<float, shape<classes>> t(shape<classes>{z_.classes});
    for (std::int64_t c = 0; c < z_.classes; ++c) t.values()[c] = c < z_.real_classes ? 0.0f : -1e9f;
    return typemesh::import_tensor<mask_layout>(m_.loss, t);
  }

  static typemesh::host_tensor<float, shape<batch, height, width, rgb>> pixels(const batch_type& b) {
    return {shape<batch, height, width, rgb>{b.rows, b.height, b.width, b.channels}, b.pixels};
  }
  static typemesh::host_tensor<std::int32_t, shape<batch>> label_values(const batch_type& b) {
    return {shape<batch>{b.rows}, b.labels};
  }

  sizes z_;
  meshes m_;
  std::uint64_t seed_;
  typemesh::optim::sgd opt_;
  filter_t<rgb, conv1_channels> conv1_w_;
  conv_bias_t<conv1_channels> conv1_b_;
  filter_t<conv1_channels, conv2_channels> conv2_w_;
  conv_bias_t<conv2_channels> conv2_b_;
  filter_t<conv2_channels, conv3_channels> conv3_w_;
  conv_bias_t<conv3_channels> conv3_b_;
  filter_t<conv3_channels, conv4_channels> conv4_w_;
  conv_bias_t<conv4_channels> conv4_b_;
  filter_t<conv4_channels, conv5_channels> conv5_w_;
  conv_bias_t<conv5_channels> conv5_b_;
  fc6_t fc6_w_;
  fc_bias_t<fc6_t, fc6_units> fc6_b_;
  fc7_t fc7_w_;
  fc_bias_t<fc7_t, fc7_units> fc7_b_;
  fc8_t fc8_w_;
  fc_bias_t<fc8_t, classes> fc8_b_;
};

int main(int argc, char** argv) {
  network_program<alexnet, data_parallel, pase, owt, flexflow> program(
      "alexnet", "Trains the PaSE AlexNet (227x227x3 images, 1000 classes) under one of its strategies");
  alexnet_sizes sizes;
  program.cli()
      .add_count("--image-size", sizes.image, "Image height and width (reference: 227; at least 67)")
      ->check(CLI::Range(std::int64_t{67}, std::int64_t{1} << 15));
  std::int64_t divisor = 1;
  program.cli()
      .add_count("--width-divisor", divisor,
                 "Divides every convolution's channels and the fc6/fc7 units (reference: 1, at most 96)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{96}));
  program.cli().add_count("--classes", sizes.classes, "Classes (reference: 1000)");
  auto opts = program.parse(argc, argv);
  for (auto& c : sizes.conv_channels) c /= divisor;
  sizes.fc_units /= divisor;
  // The data are made inside run, so that a bad data set is reported as any
  // other error; image_data sets --dataset-size for a real data set.
  return program.run(opts, [&] { return std::pair{sizes, image_data(opts, sizes.image, sizes.classes)}; });
}

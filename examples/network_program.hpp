// What the four benchmark programs (alexnet, inception, rnnlm, transformer)
// share: the strategy chosen by flag, the data, the trainer, and --check,
// which trains the same strategy on one device and requires the same losses
// and weights. A program is its network and a short main:
//
//   int main(int argc, char** argv) {
//     network_program<alexnet, data_parallel, pase_optimal, owt, flexflow> program(
//         "alexnet", "Trains AlexNet (227x227x3 images, 1000 classes)");
//     alexnet_sizes sizes;
//     program.cli().add_count("--image-size", sizes.image, "Image height and width (reference: 227)");
//     auto opts = program.parse(argc, argv);
//     return program.run(opts, [&] {  // sizes and data; image_data sets opts.dataset_size for a real data set
//       return std::pair{sizes, image_data(opts, sizes.image, sizes.classes)};
//     });
//   }
//
// A network is a class template over its strategy, Net<Strategy>, with
//
//   using sizes = ...;                   // the model's sizes (units, classes, ...)
//   using batch = io::image_batch or io::text_batch;
//   struct meshes {...};                 // the strategy's meshes
//   static sizes sizes_for(const sizes&, int devices);   // the strategy's round-ups
//   static meshes make_meshes(int devices);  // 1 device, or the counts the
//                                        // strategy is given for; otherwise a
//                                        // typemesh::error naming them
//                                        // (or make_meshes(const sizes&, int),
//                                        // where the meshes depend on the sizes)
//   static std::vector<std::string> describe(const meshes&);  // one line per mesh/layout
//   Net(const sizes&, const meshes&, const train::options&);  // per device, inside launch
//   std::optional<double> step(const batch&, std::int64_t step);  // forward, backward, SGD
//   template <class F> void for_each_parameter(F&& f) const;     // f(name, tensor)
//
// and each Strategy type has `static constexpr const char* name`.
#pragma once

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <typemesh/io/jpeg.hpp>
#include <typemesh/io/synthetic.hpp>
#include <typemesh/io/text.hpp>
#include <typemesh/train/trainer.hpp>
#include <typemesh/typemesh.hpp>

// A device count a strategy is not given for: the error every network throws
// from make_meshes, naming the strategy and the counts it supports.
[[noreturn]] inline void strategy_not_given_for(std::string_view network, std::string_view strategy, int count,
                                                std::string_view supported) {
  throw typemesh::error(
      typemesh::detail::cat(network, " strategy '", strategy, "' is given for ", supported, ", not for ", count));
}

// The mean of per-position losses over the real positions: `mask` (a text
// batch's target_mask, row-major in the losses' dim order) is 1 at a word
// and 0 at padding.
template <class Losses>
auto masked_mean(const Losses& losses, const std::vector<float>& mask) {
  double real = 0;
  for (float v : mask) real += v;
  typemesh::host_tensor<float, typename Losses::shape_type> whole(losses.shape());
  whole.values() = mask;
  const auto on_mesh = typemesh::import_tensor<typename Losses::layout_type>(losses.mesh(), whole);
  return typemesh::reduce_sum(losses * on_mesh) * static_cast<float>(1.0 / std::max(real, 1.0));
}

// --- Data ----------------------------------------------------------------------

// Where batches come from: a function of the step. The reference repeats one
// batch of synthetic data, and so do these programs (made once, see
// one_batch); real data advances.
template <class Batch>
using batch_source = std::function<std::shared_ptr<const Batch>(std::int64_t step, std::int64_t batch_size)>;

// A source that reads a new batch at every step: read(step, batch_size).
template <class Batch, class Read>
batch_source<Batch> every_step(Read read) {
  return [read](std::int64_t step, std::int64_t b) { return std::make_shared<const Batch>(read(step, b)); };
}

// A source that hands out the same batch every step: make(batch_size), made
// at the first step asked for that size. Devices ask from their own threads.
template <class Batch, class Make>
batch_source<Batch> one_batch(Make make) {
  struct made {
    std::mutex mutex;
    std::map<std::int64_t, std::shared_ptr<const Batch>> by_size;
  };
  return [make, m = std::make_shared<made>()](std::int64_t, std::int64_t b) {
    std::lock_guard lock(m->mutex);
    auto& batch = m->by_size[b];
    if (!batch) batch = std::make_shared<const Batch>(make(b));
    return batch;
  };
}

// The data functions below take the options to set --dataset-size to the
// data set's size when they read one, so that an epoch is one pass over it
// (the reference's dataset_size).

// Images: synthetic unless --dataset-dir is given.
inline batch_source<typemesh::io::image_batch> image_data(typemesh::train::options& opts, std::int64_t side,
                                                           std::int64_t classes) {
  if (opts.dataset_dir.empty()) {
    typemesh::io::synthetic_images images{.seed = opts.seed, .height = side, .width = side, .classes = classes};
    return one_batch<typemesh::io::image_batch>([images](std::int64_t b) { return images.batch(0, b); });
  }
  auto images = std::make_shared<typemesh::io::image_dataset>(
      opts.dataset_dir, opts.labels_filename,
      typemesh::io::image_options{.height = side, .width = side, .classes = classes});
  opts.dataset_size = images->size();
  return every_step<typemesh::io::image_batch>(
      [images](std::int64_t step, std::int64_t b) { return images->batch(step, b); });
}

// Text, and the vocabulary sizes the model must have for it.
struct text_data {
  batch_source<typemesh::io::text_batch> batches;
  std::int64_t source_vocabulary = 0, target_vocabulary = 0;
};

// A language model's text: synthetic unless --src-text is given (then
// --src-vocab too); the target is the next word. --src-vocab-size overrides
// the default (or caps the file's).
inline text_data language_model_data(typemesh::train::options& opts, std::int64_t default_vocabulary) {
  if (opts.src_text.empty()) {
    const std::int64_t v = opts.src_vocab_size > 0 ? opts.src_vocab_size : default_vocabulary;
    typemesh::io::synthetic_text text{.seed = opts.seed, .vocabulary = v, .length = opts.seq_len};
    return {one_batch<typemesh::io::text_batch>([text](std::int64_t b) { return text.batch(0, b); }), v, v};
  }
  if (opts.src_vocab.empty()) throw typemesh::train::flag_error("--src-text needs --src-vocab, the vocabulary file");
  auto text = std::make_shared<typemesh::io::text_dataset>(typemesh::io::text_dataset::language_model(
      opts.src_vocab, opts.src_text, {.length = opts.seq_len, .source_vocabulary_size = opts.src_vocab_size, .max_sentences = opts.sentences_size}));
  const std::int64_t v = opts.src_vocab_size > 0 ? opts.src_vocab_size : text->source_vocabulary().size();
  opts.dataset_size = text->sentence_count();
  return {every_step<typemesh::io::text_batch>(
              [text](std::int64_t step, std::int64_t b) { return text->batch(step, b); }),
          v, v};
}

// A translation model's text: synthetic unless --src-text is given (then
// --tgt-text and both vocabularies too).
inline text_data translation_data(typemesh::train::options& opts, std::int64_t default_vocabulary) {
  if (opts.src_text.empty()) {
    const std::int64_t sv = opts.src_vocab_size > 0 ? opts.src_vocab_size : default_vocabulary;
    const std::int64_t tv = opts.tgt_vocab_size > 0 ? opts.tgt_vocab_size : default_vocabulary;
    typemesh::io::synthetic_text text{.seed = opts.seed, .vocabulary = sv, .length = opts.seq_len, .target_vocabulary = tv};
    return {one_batch<typemesh::io::text_batch>([text](std::int64_t b) { return text.batch(0, b); }), sv, tv};
  }
  if (opts.tgt_text.empty() || opts.src_vocab.empty() || opts.tgt_vocab.empty())
    throw typemesh::train::flag_error("--src-text needs --tgt-text, --src-vocab and --tgt-vocab for a translation model");
  auto text = std::make_shared<typemesh::io::text_dataset>(typemesh::io::text_dataset::translation(
      opts.src_vocab, opts.tgt_vocab, opts.src_text, opts.tgt_text,
      {.length = opts.seq_len, .source_vocabulary_size = opts.src_vocab_size,
       .target_vocabulary_size = opts.tgt_vocab_size, .max_sentences = opts.sentences_size}));
  const std::int64_t sv = opts.src_vocab_size > 0 ? opts.src_vocab_size : text->source_vocabulary().size();
  const std::int64_t tv = opts.tgt_vocab_size > 0 ? opts.tgt_vocab_size : text->target_vocabulary().size();
  opts.dataset_size = text->sentence_count();
  return {every_step<typemesh::io::text_batch>(
              [text](std::int64_t step, std::int64_t b) { return text->batch(step, b); }),
          sv, tv};
}

// --- Running a network ------------------------------------------------------------

namespace network_detail {

// One batch per step for all the devices of this process: the first device
// that asks makes it, the others share it, and it is dropped when every
// device has taken it.
template <class Batch>
class batch_cache {
 public:
  batch_cache(batch_source<Batch> source, std::int64_t batch_size, int takers)
      : source_(std::move(source)), batch_size_(batch_size), takers_(takers) {}

  std::shared_ptr<const Batch> take(std::int64_t step) {
    std::unique_lock lock(mutex_);
    auto& e = entries_[step];
    if (!e.batch && !e.making) {
      e.making = true;
      lock.unlock();
      std::shared_ptr<const Batch> made;
      std::exception_ptr failure;
      try {
        made = source_(step, batch_size_);
      } catch (...) {
        failure = std::current_exception();
      }
      lock.lock();
      auto& f = entries_[step];
      f.making = false;
      f.batch = made;
      f.failure = failure;
      ready_.notify_all();
    }
    ready_.wait(lock, [&] { return entries_[step].batch || entries_[step].failure; });
    auto& g = entries_[step];
    if (g.failure) std::rethrow_exception(g.failure);  // every device reports the data error
    auto out = g.batch;
    if (++g.taken == takers_) entries_.erase(step);
    return out;
  }

 private:
  struct entry {
    std::shared_ptr<const Batch> batch;
    std::exception_ptr failure;
    bool making = false;
    int taken = 0;
  };
  batch_source<Batch> source_;
  std::int64_t batch_size_;
  int takers_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::int64_t, entry> entries_;
};

// How many devices this process drives.
inline int local_devices(const typemesh::train::options& opts) {
  return typemesh::devices_in_this_process(opts.launch());
}

// The strategy's meshes, from the sizes too where the network asks for them
// (the Transformer's meshes depend on its model size).
template <class Net, class Sizes>
auto make_meshes(const Sizes& sizes, int devices) {
  if constexpr (requires { Net::make_meshes(sizes, devices); }) return Net::make_meshes(sizes, devices);
  else return Net::make_meshes(devices);
}

// The whole value of every parameter, by name.
using parameter_values = std::map<std::string, std::vector<float>>;

template <class Net>
parameter_values export_parameters(const Net& net) {
  parameter_values out;
  net.for_each_parameter([&](const std::string& name, const auto& t) {
    auto whole = typemesh::export_tensor(t);  // collective over the parameter's mesh
    if (t.holds_data()) out[name] = std::vector<float>(whole.values().begin(), whole.values().end());
  });
  return out;
}

// |a - b| / |b|, with |b| floored so that values near zero compare absolutely.
inline double relative_difference(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-6);
}

// Trained weights are compared by what training did to them: the
// difference of two runs' parameters (their initial values are the same)
// over the size of the update, both in the L2 norm. A wrong gradient on any
// shard changes a parameter's update by its own size (a difference of order
// one), while float rounding changes it by little; a comparison of the
// weights themselves would hide a wrong update behind the initial values.
// Rounding can flip a discrete choice (the maximum of a pooling window
// holding two values equal up to rounding, a ReLU of a value within
// rounding of zero), which moves single entries of an update; in the L2
// norm such a flip stays a fraction of the update: measured on Inception
// and AlexNet at the tests' tiny sizes, rounding alone moves an update by
// 3e-4 to 9e-4, a flip by 2e-3 to 7e-2, a wrong gradient by its own size. The denominator is floored at
// update_floor x the model's RMS update per entry, so that a parameter that
// training leaves at noise (a bias cancelled by the normalisation after it,
// as Inception's before its layer norms) compares on the model's scale, not
// on its own noise.
inline constexpr double update_floor = 1e-1;

struct update_scale {
  double sum_squares = 0;  // of every entry of every reference update
  double entries = 0;
  double rms() const { return entries > 0 ? std::sqrt(sum_squares / entries) : 0; }
};

inline update_scale scale_of_updates(const parameter_values& initial, const parameter_values& trained) {
  update_scale s;
  for (const auto& [name, values] : trained) {
    const auto& start = initial.at(name);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double u = double(values[i]) - double(start[i]);
      s.sum_squares += u * u;
    }
    s.entries += static_cast<double>(values.size());
  }
  return s;
}

// ||a - b|| / max(||b - initial||, floor): a's trained values against the
// reference's b.
inline double update_difference(const std::vector<float>& a, const std::vector<float>& b,
                                const std::vector<float>& initial, const update_scale& scale) {
  if (a.size() != b.size() || b.size() != initial.size()) return 1e300;
  double diff = 0, update = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    update += (double(b[i]) - double(initial[i])) * (double(b[i]) - double(initial[i]));
  }
  const double floor = update_floor * scale.rms() * std::sqrt(static_cast<double>(b.size()));
  const double denominator = std::max(std::sqrt(update), floor);
  if (denominator == 0) return diff == 0 ? 0 : 1e300;
  return std::sqrt(diff) / denominator;
}

// The one-device run that --check compares with.
struct reference_run {
  std::vector<double> losses;  // per step
  parameter_values initial, parameters;
};

}  // namespace network_detail

// The relative tolerance of --check on the losses: every step's loss within
// this of the one-device run's.
inline constexpr double check_tolerance = 1e-4;
// The tolerance of --check on the trained weights: every parameter's update
// within this of the one-device run's (see update_difference): above what
// a flipped pooling or ReLU choice does, below what a wrong gradient does.
inline constexpr double update_tolerance = 1e-1;

template <template <class> class Net, class... Strategies>
class network_program {
 public:
  network_program(std::string name, std::string description) : cli_(std::move(name), std::move(description)) {
    cli_.strategies({Strategies::name...});
    cli_.app().add_flag("--check", check_,
                        "Train the same strategy on one device too and require every step's loss and the trained "
                        "weights to agree (relative 1e-4); exit 1 when they do not");
    cli_.app().add_flag("--show-strategy", show_,
                        "Print the strategy's meshes and layouts for --devices and exit");
  }

  typemesh::train::cli& cli() { return cli_; }
  typemesh::train::options parse(int argc, const char* const* argv) { return cli_.parse(argc, argv); }
  bool check() const { return check_; }

  // Trains the strategy opts.strategy; returns the program's exit status.
  // make() returns the model's sizes and the data, as a std::pair; it runs
  // here so that a missing or malformed data file is reported as every
  // other error: by train::guard, naming the rank under MPI, with status 1.
  template <class Make>
  int run(const typemesh::train::options& opts, Make&& make) {
    int status = 0;
    const int failed = typemesh::train::guard([&] {
      auto [sizes, data] = make();
      std::size_t i = 0;
      ((opts.strategy == static_cast<int>(i++) ? (status = run_strategy<Strategies>(opts, sizes, data), 0) : 0), ...);
    });
    return failed != 0 ? failed : status;
  }

  template <class Sizes, class Batch>
  int run(const typemesh::train::options& opts, const Sizes& sizes, batch_source<Batch> data) {
    return run(opts, [&] { return std::pair{sizes, data}; });
  }

 private:
  template <class S, class Sizes, class Batch>
  int run_strategy(const typemesh::train::options& given, const Sizes& requested, const batch_source<Batch>& data) {
    using net_t = Net<S>;
    typemesh::train::options opts = given;
    if (check_) opts.display_steps = 1;  // a loss for every step
    const auto sizes = net_t::sizes_for(requested, opts.devices);
    const auto meshes = network_detail::make_meshes<net_t>(sizes, opts.devices);
    const bool speaks = typemesh::train::detail::process_rank() == 0;
    if (show_) {
      if (speaks) {
        std::printf("%s, strategy %d (%s), %d devices:\n", cli_.app().get_name().c_str(), opts.strategy, S::name,
                    opts.devices);
        for (const auto& line : net_t::describe(meshes)) std::printf("  %s\n", line.c_str());
      }
      return 0;
    }

    std::optional<network_detail::reference_run> reference;
    if (check_) reference = train_one_device<net_t>(opts, sizes, data);

    typemesh::train::trainer trainer(opts);
    network_detail::batch_cache<Batch> cache(data, opts.batch_size, network_detail::local_devices(opts));
    if (speaks) {
      std::printf("%s: strategy %d (%s) on %d devices, batch %lld\n", cli_.app().get_name().c_str(), opts.strategy,
                  S::name, opts.devices, static_cast<long long>(opts.batch_size));
      for (const auto& line : net_t::describe(meshes)) std::printf("  %s\n", line.c_str());
      std::fflush(stdout);
    }
    auto verdicts = typemesh::launch(opts.launch(), [&](typemesh::device& dev) {
      net_t net(sizes, meshes, opts);
      std::vector<std::optional<double>> losses;
      trainer.run(dev, [&](std::int64_t step) {
        const auto batch = cache.take(step);
        auto loss = net.step(*batch, step);
        losses.push_back(loss);
        return loss;
      });
      return reference ? compare(dev, net, losses, *reference) : 0;
    });
    return *std::max_element(verdicts.begin(), verdicts.end());
  }

  // The same strategy on one device, on host threads in this process, from
  // the same data; silent.
  template <class net_t, class Sizes, class Batch>
  network_detail::reference_run train_one_device(const typemesh::train::options& opts, const Sizes& sizes,
                                                 const batch_source<Batch>& data) {
    const auto meshes = network_detail::make_meshes<net_t>(sizes, 1);
    typemesh::train::options one = opts;
    one.devices = 1;
    one.backend = "host";
    const std::int64_t steps = opts.total_steps();
    network_detail::reference_run r;
    typemesh::launch(one.launch(), [&](typemesh::device&) {
      net_t net(sizes, meshes, one);
      r.initial = network_detail::export_parameters(net);
      for (std::int64_t step = 0; step < steps; ++step) {
        const auto loss = net.step(*data(step, opts.batch_size), step);
        r.losses.push_back(loss.value_or(std::nan("")));
      }
      r.parameters = network_detail::export_parameters(net);
    });
    return r;
  }

  // Every device compares the losses and parameters it holds with the
  // one-device run; the reporting device prints the verdict of all. Returns
  // the exit status: 0 when everything agrees.
  template <class net_t>
  int compare(typemesh::device& dev, const net_t& net, const std::vector<std::optional<double>>& losses,
              const network_detail::reference_run& reference) {
    using network_detail::relative_difference;
    const auto scale = network_detail::scale_of_updates(reference.initial, reference.parameters);
    double loss_diff = 0, weight_diff = 0;
    std::int64_t loss_count = 0, weight_count = 0;
    std::string worst;
    for (std::size_t s = 0; s < losses.size(); ++s) {
      if (!losses[s]) continue;
      const double d = relative_difference(*losses[s], reference.losses[s]);
      loss_diff = std::max(loss_diff, std::isnan(d) ? 1e300 : d);
      ++loss_count;
    }
    for (const auto& [name, values] : network_detail::export_parameters(net)) {
      const auto& expected = reference.parameters.at(name);
      const double d = network_detail::update_difference(values, expected, reference.initial.at(name), scale);
      if (d > weight_diff) worst = name;
      weight_diff = std::max(weight_diff, std::isnan(d) ? 1e300 : d);
      ++weight_count;
    }
    // Every device's findings, to every device (the loss is held on some
    // devices only, parameters on their meshes only).
    const double mine[4] = {loss_diff, weight_diff, double(loss_count), double(weight_count)};
    std::vector<double> all(4 * static_cast<std::size_t>(dev.count()));
    typemesh::group world{std::vector<int>(static_cast<std::size_t>(dev.count())), "all devices (--check)"};
    for (int d = 0; d < dev.count(); ++d) world.devices[d] = d;
    dev.allgather<double>(world, std::span<const double>(mine, 4), std::span<double>(all));
    double losses_worst = 0, weights_worst = 0, loss_seen = 0, weights_seen = 0;
    for (int d = 0; d < dev.count(); ++d) {
      losses_worst = std::max(losses_worst, all[4 * d]);
      weights_worst = std::max(weights_worst, all[4 * d + 1]);
      loss_seen += all[4 * d + 2];
      weights_seen += all[4 * d + 3];
    }
    const bool ok = losses_worst <= check_tolerance && weights_worst <= update_tolerance && loss_seen > 0 &&
                    weights_seen > 0;
    if (dev.id() == 0 && typemesh::train::detail::process_rank() == 0) {
      std::printf("check against one device: losses of %zu steps agree to %.1e (tolerance %.0e), "
                  "the weights' updates to %.1e (tolerance %.0e): %s\n",
                  reference.losses.size(), losses_worst, check_tolerance, weights_worst, update_tolerance,
                  ok ? "the same" : "DIFFERENT");
      std::fflush(stdout);
    }
    if (!ok && weight_diff > update_tolerance) {
      std::fprintf(stderr, "device %d: parameter '%s' was updated differently from the one-device run (%.3e of its "
                   "update)\n", dev.id(), worst.c_str(), weight_diff);
    }
    return ok ? 0 : 1;
  }

  typemesh::train::cli cli_;
  bool check_ = false;
  bool show_ = false;
};

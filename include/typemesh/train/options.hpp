// The trainer's flags: the reference benchmark trainer's command line, parsed
// with CLI11. A program adds its own flags (its strategy names, the sizes that
// shrink its model) before parsing:
//
//   typemesh::train::cli cli("rnnlm", "Trains the RNNLM");
//   cli.strategies({"data-parallel", "pase", "gnmt", "flexflow"});
//   std::int64_t units = 2048;
//   cli.add_count("--units", units, "LSTM units per layer");
//   const typemesh::train::options opts = cli.parse(argc, argv);  // exits on --help or a bad flag
//
// Every value is checked before anything uses it: integers are decimal and in
// range (no silent wrap-around), sizes are positive, names are among the
// allowed ones. A bad flag is a train::flag_error naming the flag and the
// value; parse(argc, argv) prints it with a hint and exits with status 2.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "typemesh/core/error.hpp"
#include "typemesh/runtime/launch.hpp"

namespace typemesh::train {

// A flag whose value is malformed, out of range or not allowed.
class flag_error : public error {
 public:
  using error::error;
};

// How the progress shows: automatic is a bar on standard error when it is a
// terminal and plain lines otherwise.
enum class progress_mode { automatic, bar, lines };

struct options {
  std::int64_t batch_size = 256;
  int devices = 8;
  int devices_per_node = 8;
  std::int64_t epochs = 100;
  std::int64_t max_steps = 0;  // steps per epoch; 0: dataset_size / batch_size
  std::int64_t display_steps = 10;
  int strategy = 0;            // index among the program's strategies
  std::string strategy_name;   // its name
  std::string dataset_dir;     // empty: synthetic data
  std::string labels_filename = "labels.txt";
  std::int64_t dataset_size = 1000;
  std::string src_vocab, tgt_vocab, src_text, tgt_text;
  std::int64_t src_vocab_size = 0;  // 0: the model's default or the vocabulary file's size
  std::int64_t tgt_vocab_size = 0;
  std::int64_t sentences_size = 0;  // 0: every sentence of the text
  std::int64_t seq_len = 256;
  std::string model_size = "small";
  double learning_rate = 0.01;
  std::uint64_t seed = 0;
  std::string backend;  // a launcher's name (runtime/launcher.hpp); empty: automatic
  std::string metrics;  // JSON lines file; empty: none
  progress_mode progress = progress_mode::automatic;
  bool all_ranks = false;  // every MPI rank prints and writes, not only the first

  launch_options launch() const { return launch_options{.devices = devices, .backend = backend}; }

  // Steps in one epoch: max_steps, or as many full batches as the data set
  // holds (a program that reads its data may set dataset_size first).
  std::int64_t steps_per_epoch() const {
    if (max_steps > 0) return max_steps;
    if (batch_size <= 0 || dataset_size < batch_size) {
      throw flag_error(detail::cat("--dataset-size ", dataset_size, " holds no full batch of --batch-size ",
                                   batch_size, ": give --max-steps or a larger data set"));
    }
    return dataset_size / batch_size;
  }

  // Steps of the whole run, epochs x steps per epoch, and the samples they
  // consume; both overflow-checked.
  std::int64_t total_steps() const {
    const std::int64_t per_epoch = steps_per_epoch();
    if (epochs <= 0 || per_epoch > std::numeric_limits<std::int64_t>::max() / epochs) {
      throw flag_error(detail::cat("--epochs ", epochs, " x ", per_epoch,
                                   " steps per epoch is not a positive 64-bit step count"));
    }
    const std::int64_t steps = epochs * per_epoch;
    if (batch_size <= 0 || steps > std::numeric_limits<std::int64_t>::max() / batch_size) {
      throw flag_error(detail::cat(steps, " steps of --batch-size ", batch_size,
                                   " samples overflow a 64-bit sample count"));
    }
    return steps;
  }
};

namespace detail {

using typemesh::detail::cat;

// A CLI11 check on the flag's text, run before CLI11 converts it: a decimal
// integer in [lo, hi]. (CLI11's own conversion accepts octal and hex and
// saturates on overflow.)
template <class Int>
CLI::Validator integer_in(Int lo, Int hi, std::string what) {
  return CLI::Validator(
      [lo, hi, what](std::string& text) -> std::string {
        Int v{};
        const char* end = text.data() + text.size();
        auto [p, ec] = std::from_chars(text.data(), end, v);
        if (ec == std::errc::result_out_of_range) {
          return cat("'", text, "' does not fit: ", what, " must be an integer from ", lo, " to ", hi);
        }
        if (ec != std::errc() || p != end || text.empty() || (text.size() > 1 && text[0] == '0')) {
          return cat("'", text, "' is not a decimal integer: ", what, " must be an integer from ", lo, " to ", hi);
        }
        if (v < lo || v > hi) return cat(what, " must be an integer from ", lo, " to ", hi, ", not ", text);
        return {};
      },
      lo == 1 ? "POSITIVE" : lo == 0 && std::is_signed_v<Int> ? "NONNEGATIVE" : "");
}

inline CLI::Validator positive_real(std::string what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        double v = 0;
        const char* end = text.data() + text.size();
        auto [p, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || p != end || text.empty()) return cat("'", text, "' is not a number: ", what);
        if (!std::isfinite(v) || v <= 0) return cat(what, " must be a positive finite number, not ", text);
        return {};
      },
      "POSITIVE REAL");
}

inline CLI::Validator one_of(std::vector<std::string> names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : "|") + n;
  return CLI::Validator(
      [names, list](std::string& text) -> std::string {
        for (const auto& n : names)
          if (text == n) return {};
        return cat("'", text, "' is not one of ", list);
      },
      list);
}

// This process's rank in an MPI job (0 outside one), from the variables MPI
// launchers set, so that it is known before MPI is initialised.
inline int process_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

inline bool in_mpi_job() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

}  // namespace detail

// The parser: every flag of options, plus those the program adds through
// add_count or app() before parse.
class cli {
 public:
  explicit cli(std::string program, std::string description = {}) : app_(std::move(description), std::move(program)) {
    app_.footer(
        "Sizes are decimal integers; overflowing or non-positive sizes are errors. Under mpirun the program "
        "prints and writes its files once, from the first rank, unless --all-ranks is given.");
    constexpr auto i64max = std::numeric_limits<std::int64_t>::max();
    constexpr auto imax = std::numeric_limits<int>::max();
    auto& o = values_;
    app_.add_option("-b,--batch-size", o.batch_size, "Samples per SGD step, over all devices")
        ->capture_default_str()->check(detail::integer_in<std::int64_t>(1, i64max, "the batch size"));
    app_.add_option("-g,--devices", o.devices, "Devices in all (under MPI: the number of ranks)")
        ->capture_default_str()->check(detail::integer_in<int>(1, imax, "the device count"));
    app_.add_option("--devices-per-node", o.devices_per_node,
                    "Devices on one machine; meshes are laid out over machines of this size")
        ->capture_default_str()->check(detail::integer_in<int>(1, imax, "the devices per node"));
    app_.add_option("-t,--epochs", o.epochs, "Passes over the data set")
        ->capture_default_str()->check(detail::integer_in<std::int64_t>(1, i64max, "the epoch count"));
    app_.add_option("--max-steps", o.max_steps, "Steps per epoch; 0: --dataset-size / --batch-size")
        ->capture_default_str()->check(detail::integer_in<std::int64_t>(0, i64max, "the steps per epoch"));
    app_.add_option("--display-steps", o.display_steps, "Print the loss and write a metrics line every this many steps")
        ->capture_default_str()->check(detail::integer_in<std::int64_t>(1, i64max, "the display interval"));
    strategy_ = app_.add_option("-s,--strategy", strategy_text_, "")->capture_default_str();
    strategies({"default"});
    app_.add_option("--dataset-dir", o.dataset_dir, "Image directory; empty: synthetic images");
    app_.add_option("--labels-filename", o.labels_filename, "Labels file inside --dataset-dir")->capture_default_str();
    app_.add_option("--dataset-size", o.dataset_size, "Samples in the data set (synthetic data)")
        ->capture_default_str()->check(detail::integer_in<std::int64_t>(1, i64max, "the data set size"));
    app_.add_option("--src-vocab", o.src_vocab, "Source vocabulary file, one word a line");
    app_.add_option("--tgt-vocab", o.tgt_vocab, "Target vocabulary file, one word a line");
    app_.add_option("--src-text", o.src_text, "Source sentences, one a line; empty: synthetic text");
    app_.add_option("--tgt-text", o.tgt_text, "Target sentences, one a line");
    app_.add_option("--src-vocab-size", o.src_vocab_size, "Source vocabulary size; 0: the model's or the file's")
        ->capture_default_str()->check(detail::integer_in<std::int64_t>(0, i64max, "the source vocabulary size"));
    app_.add_option("--tgt-vocab-size", o.tgt_vocab_size, "Target vocabulary size; 0: the model's or the file's")
        ->capture_default_str()->check(detail::integer_in<std::int64_t>(0, i64max, "the target vocabulary size"));
    app_.add_option("--sentences-size", o.sentences_size, "Sentences to read; 0: all")
        ->capture_default_str()->check(detail::integer_in<std::int64_t>(0, i64max, "the sentence count"));
    app_.add_option("--seq-len", o.seq_len, "Sequence length; longer sentences are cut, shorter padded")
        ->capture_default_str()->check(detail::integer_in<std::int64_t>(1, i64max, "the sequence length"));
    app_.add_option("--model-size", o.model_size, "Transformer size: small or big")
        ->capture_default_str()->check(detail::one_of({"small", "big"}));
    app_.add_option("--lr,--learning-rate", o.learning_rate, "SGD learning rate")
        ->capture_default_str()->check(detail::positive_real("the learning rate"));
    app_.add_option("--seed", o.seed, "Seed of parameter initialisation, dropout and synthetic data")
        ->capture_default_str()
        ->check(detail::integer_in<std::uint64_t>(0, std::numeric_limits<std::uint64_t>::max(), "the seed"));
    app_.add_option("--backend", backend_text_,
                    "auto: TYPEMESH_BACKEND if set, else MPI under an MPI launcher, else host threads; or a "
                    "launcher of this program: " + launcher_list())
        ->capture_default_str();
    app_.add_option("--metrics", o.metrics, "Write a JSON object per display step to this file; empty: none");
    app_.add_option("--progress", progress_text_,
                    "auto: a bar when standard error is a terminal, else lines; bar; lines")
        ->capture_default_str()->check(detail::one_of({"auto", "bar", "lines"}));
    app_.add_flag("--all-ranks", o.all_ranks, "Under mpirun every rank prints and writes (files get .rank<R>)");
  }

  cli(const cli&) = delete;
  cli& operator=(const cli&) = delete;

  // For flags of the program's own; CLI11's API.
  CLI::App& app() { return app_; }
  // The values the flags write into; a program may change defaults before parse.
  options& values() { return values_; }

  // The program's strategies, numbered in this order; --strategy takes a
  // number or a name. The first is the default.
  void strategies(std::vector<std::string> names) {
    if (names.empty()) throw flag_error("a program needs at least one strategy name");
    strategy_names_ = std::move(names);
    std::string text = "Strategy, by number or name:";
    for (std::size_t i = 0; i < strategy_names_.size(); ++i) text += detail::cat(" ", i, " ", strategy_names_[i], ",");
    text.pop_back();
    strategy_->description(text);
    strategy_text_ = "0";
    strategy_->default_str("0");
  }
  const std::vector<std::string>& strategies() const { return strategy_names_; }

  // A positive size of the program's own (units, layers, image size, ...),
  // with the same checks as the built-in sizes.
  CLI::Option* add_count(const std::string& flag, std::int64_t& target, const std::string& description) {
    return app_.add_option(flag, target, description)
        ->capture_default_str()
        ->check(detail::integer_in<std::int64_t>(1, std::numeric_limits<std::int64_t>::max(), "this size"));
  }

  std::string help() const { return app_.help(); }

  // Parses args (without the program name). Returns nullopt when --help was
  // asked (help() has the text); throws flag_error for a bad flag.
  std::optional<options> try_parse(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    try {
      app_.parse(args);
    } catch (const CLI::CallForHelp&) {
      return std::nullopt;
    } catch (const CLI::ParseError& e) {
      throw flag_error(e.what());
    }
    return finish();
  }

  // The program's entry: on --help prints the help and exits with 0; on a
  // bad flag prints the error and a hint and exits with 2 (in an MPI job,
  // only the first rank prints).
  options parse(int argc, const char* const* argv) {
    std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
    const bool speaks = detail::process_rank() == 0;
    try {
      if (auto o = try_parse(std::move(args))) return *o;
      if (speaks) std::cout << help() << std::flush;
      std::exit(0);
    } catch (const error& e) {
      if (speaks) {
        std::cerr << app_.get_name() << ": " << e.what() << "\nRun with --help for the flags.\n" << std::flush;
      }
      std::exit(2);
    }
  }

 private:
  options finish() {
    options o = values_;
    o.backend = backend_text_ == "auto" ? std::string() : backend_text_;
    if (!o.backend.empty() && !has_launcher(o.backend)) {
      throw flag_error(missing_launcher_message("--backend", o.backend));
    }
    o.progress = progress_text_ == "bar" ? progress_mode::bar
                 : progress_text_ == "lines" ? progress_mode::lines
                                             : progress_mode::automatic;
    o.strategy = -1;
    for (std::size_t i = 0; i < strategy_names_.size(); ++i) {
      if (strategy_text_ == strategy_names_[i] || strategy_text_ == std::to_string(i)) o.strategy = static_cast<int>(i);
    }
    if (o.strategy < 0) {
      std::string known;
      for (std::size_t i = 0; i < strategy_names_.size(); ++i) {
        known += detail::cat(known.empty() ? "" : ", ", i, " ", strategy_names_[i]);
      }
      throw flag_error(
          detail::cat("--strategy: '", strategy_text_, "' is not one of this program's strategies (", known, ")"));
    }
    o.strategy_name = strategy_names_[o.strategy];
    if (o.devices > o.devices_per_node && o.devices % o.devices_per_node != 0) {
      throw flag_error(detail::cat("--devices ", o.devices, " is not a whole number of nodes of --devices-per-node ",
                                   o.devices_per_node));
    }
    return o;
  }

  static std::string launcher_list() {
    std::string text;
    for (std::string_view name : launcher_names()) text += detail::cat(text.empty() ? "" : ", ", name);
    return text;
  }

  CLI::App app_;
  options values_;
  CLI::Option* strategy_ = nullptr;
  std::string strategy_text_ = "0";
  std::vector<std::string> strategy_names_;
  std::string backend_text_ = "auto";
  std::string progress_text_ = "auto";
};

}  // namespace typemesh::train

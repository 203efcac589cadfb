// The training loop, independent of the model. One trainer per process,
// created before launch; every device runs the loop with its own step
// function:
//
//   typemesh::train::trainer trainer(opts);
//   typemesh::launch(opts.launch(), [&](typemesh::device& dev) {
//     model m(dev, opts);
//     trainer.run(dev, [&](std::int64_t step) { return m.sgd_step(step); });  // returns the loss
//   });
//
// Only one device of the whole job prints and writes (device 0 of the first
// MPI rank, or of the process on host threads), so neither simulated devices
// nor ranks repeat the output; --all-ranks makes the first device of every
// rank report. Every display step the devices exchange their losses and
// traffic counters (a small allgather whose own bytes are taken back out of
// the counters), so the reporting device knows every device's bytes on both
// backends.
//
// A step function returns the loss (double), or std::optional<double> with
// nullopt on devices that do not hold the loss (such as the first stage of a
// pipeline); the reported loss is that of the lowest device that holds one.
#pragma once

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "typemesh/core/error.hpp"
#include "typemesh/runtime/device.hpp"
#include "typemesh/runtime/launch.hpp"
#include "typemesh/train/options.hpp"

namespace typemesh::train {

// Where the trainer writes; the process's streams by default.
struct output {
  std::ostream* out = &std::cout;  // losses and the final throughput
  std::ostream* err = &std::cerr;  // the progress bar
  // Whether err is a terminal; nullopt: isatty(2) when err is std::cerr.
  std::optional<bool> err_is_terminal;
};

// One display step, as the metrics file holds it.
struct report {
  std::int64_t step = 0;   // steps done, 1-based
  std::int64_t epoch = 0;  // 0-based epoch of that step
  std::optional<double> loss;
  double samples_per_second = 0;  // since the previous report
  double wall_seconds = 0;        // since the loop started
  std::vector<std::uint64_t> bytes_sent, bytes_received;  // per device, the counters' totals
};

inline nlohmann::json to_json(const report& r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["epoch"] = r.epoch;
  j["loss"] = r.loss && std::isfinite(*r.loss) ? nlohmann::json(*r.loss) : nlohmann::json(nullptr);
  j["samples_per_s"] = r.samples_per_second;
  j["wall_s"] = r.wall_seconds;
  j["bytes_sent"] = r.bytes_sent;
  j["bytes_received"] = r.bytes_received;
  return j;
}

namespace detail {

inline std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<std::int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                               static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

inline std::string number_text(double v, int precision) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(precision);
  s << v;
  return s.str();
}

}  // namespace detail

class trainer {
 public:
  explicit trainer(options opts, output out = {}) : opts_(std::move(opts)), out_(out) {
    total_steps_ = opts_.total_steps();
    steps_per_epoch_ = opts_.steps_per_epoch();
    const bool terminal = out_.err_is_terminal.value_or(out_.err == &std::cerr && ::isatty(2) == 1);
    bar_ = opts_.progress == progress_mode::bar || (opts_.progress == progress_mode::automatic && terminal);
  }

  // Writes to these streams; err counts as no terminal (no bar unless --progress bar).
  trainer(options opts, std::ostream& out, std::ostream& err)
      : trainer(std::move(opts), output{&out, &err, false}) {}

  const options& opts() const { return opts_; }
  std::int64_t total_steps() const { return total_steps_; }

  // What the reporting device of this process recorded (empty elsewhere).
  const std::vector<report>& reports() const { return reports_; }
  // Samples per second over the whole loop, as the reporting device measured it.
  double samples_per_second() const { return samples_per_second_; }

  // Runs every step on this device: step(i) for i = 0 .. total_steps()-1.
  // Call it from inside launch, on every device.
  template <class Step>
  void run(device& dev, Step&& step) {
    using result = std::invoke_result_t<Step&, std::int64_t>;
    static_assert(std::is_convertible_v<result, double> || std::is_same_v<std::decay_t<result>, std::optional<double>>,
                  "a trainer's step function takes the step index (std::int64_t) and returns the loss as a double, "
                  "or std::optional<double> with nullopt on devices that do not hold it");
    const bool reporter = reports_here(dev);
    const std::string prefix = rank_prefix();
    std::ofstream metrics;
    if (reporter && !opts_.metrics.empty()) {
      const std::string path = metrics_path();
      metrics.open(path, std::ios::trunc);
      if (!metrics) throw error(detail::cat(prefix, "cannot write the metrics file '", path, "' (--metrics)"));
    }
    group world{std::vector<int>(static_cast<std::size_t>(dev.count())), "all devices (the trainer's metrics)"};
    std::iota(world.devices.begin(), world.devices.end(), 0);

    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto last_report_time = start;
    auto last_bar_time = start - std::chrono::seconds(1);
    std::int64_t last_report_step = 0;
    std::optional<double> last_loss;

    for (std::int64_t i = 0; i < total_steps_; ++i) {
      std::optional<double> loss;
      if constexpr (std::is_same_v<std::decay_t<result>, std::optional<double>>) loss = step(i);
      else loss = static_cast<double>(step(i));
      const std::int64_t done = i + 1;
      const bool display = done % opts_.display_steps == 0 || done == total_steps_;
      const auto now = clock::now();
      if (display) {
        report r = gather(dev, world, done, loss);
        const double interval = std::chrono::duration<double>(now - last_report_time).count();
        const auto samples = static_cast<double>(opts_.batch_size * (done - last_report_step));
        r.samples_per_second = interval > 0 ? samples / interval : 0;
        r.wall_seconds = std::chrono::duration<double>(now - start).count();
        last_report_time = now;
        last_report_step = done;
        if (reporter) {
          if (r.loss) last_loss = r.loss;
          if (metrics.is_open()) {
            metrics << to_json(r).dump() << '\n' << std::flush;
            if (!metrics) throw error(detail::cat(prefix, "writing the metrics file '", metrics_path(), "' failed"));
          }
          print_line(prefix, r);
          reports_.push_back(std::move(r));
        }
      }
      if (reporter && bar_ && (now - last_bar_time > std::chrono::milliseconds(100) || done == total_steps_)) {
        last_bar_time = now;
        draw_bar(done, std::chrono::duration<double>(now - start).count(), last_loss);
      }
    }
    if (reporter) {
      const double seconds = std::chrono::duration<double>(clock::now() - start).count();
      samples_per_second_ = seconds > 0 ? static_cast<double>(opts_.batch_size * total_steps_) / seconds : 0;
      if (bar_) *out_.err << '\n' << std::flush;
      *out_.out << prefix << "throughput " << detail::number_text(samples_per_second_, 1) << " samples/s ("
                << total_steps_ << " steps of " << opts_.batch_size << " samples in "
                << detail::number_text(seconds, 2) << " s)\n"
                << std::flush;
    }
  }

 private:
  // Device 0 of the first rank; with --all-ranks the first device of every rank.
  bool reports_here(const device& dev) const {
    // Where the devices span the ranks (MPI: one each), ids count across the
    // job and each rank holds a block of them; else every rank runs them all.
    const int local = typemesh::devices_in_this_process(opts_.launch());
    const bool spans_ranks = local < opts_.devices;
    if (opts_.all_ranks) return spans_ranks ? dev.id() % local == 0 : dev.id() == 0;
    return dev.id() == 0 && (spans_ranks || detail::process_rank() == 0);
  }

  bool several_ranks_report() const { return opts_.all_ranks && detail::in_mpi_job(); }

  std::string rank_prefix() const {
    return several_ranks_report() ? typemesh::detail::cat("[rank ", detail::process_rank(), "] ") : std::string();
  }

  std::string metrics_path() const {
    return several_ranks_report() ? typemesh::detail::cat(opts_.metrics, ".rank", detail::process_rank())
                                  : opts_.metrics;
  }

  // Every device's loss and counters, exchanged without counting the exchange.
  report gather(device& dev, const group& world, std::int64_t done, std::optional<double> loss) const {
    const typemesh::traffic before = dev.traffic();
    const std::int64_t mine[4] = {loss ? 1 : 0, std::bit_cast<std::int64_t>(loss.value_or(0.0)),
                                  static_cast<std::int64_t>(before.bytes_sent()),
                                  static_cast<std::int64_t>(before.bytes_received())};
    std::vector<std::int64_t> all(4 * world.devices.size());
    dev.allgather<std::int64_t>(world, std::span<const std::int64_t>(mine, 4), std::span<std::int64_t>(all));
    dev.traffic() = before;
    report r;
    r.step = done;
    r.epoch = (done - 1) / steps_per_epoch_;
    for (std::size_t d = 0; d < world.devices.size(); ++d) {
      if (all[4 * d] != 0 && !r.loss) r.loss = std::bit_cast<double>(all[4 * d + 1]);
      r.bytes_sent.push_back(static_cast<std::uint64_t>(all[4 * d + 2]));
      r.bytes_received.push_back(static_cast<std::uint64_t>(all[4 * d + 3]));
    }
    return r;
  }

  std::string eta_text(std::int64_t done, double elapsed) const {
    return detail::clock_text(elapsed / static_cast<double>(done) * static_cast<double>(total_steps_ - done));
  }

  void print_line(const std::string& prefix, const report& r) {
    if (bar_) *out_.err << "\r\033[K" << std::flush;  // the line goes above the bar
    const double elapsed = r.wall_seconds;
    *out_.out << prefix << "step " << r.step << "/" << total_steps_ << "  epoch " << r.epoch + 1 << "/" << opts_.epochs
              << "  loss " << (r.loss ? detail::number_text(*r.loss, 6) : std::string("-")) << "  "
              << detail::number_text(r.samples_per_second, 1) << " samples/s  eta " << eta_text(r.step, elapsed)
              << '\n'
              << std::flush;
  }

  void draw_bar(std::int64_t done, double elapsed, std::optional<double> loss) {
    constexpr int width = 30;
    const double fraction = static_cast<double>(done) / static_cast<double>(total_steps_);
    const int filled = static_cast<int>(fraction * width);
    std::string bar(static_cast<std::size_t>(filled), '=');
    if (filled < width) bar += '>' + std::string(static_cast<std::size_t>(width - filled - 1), ' ');
    const double rate = elapsed > 0 ? static_cast<double>(opts_.batch_size * done) / elapsed : 0;
    *out_.err << "\r\033[K" << rank_prefix() << "[" << bar << "] " << done << "/" << total_steps_ << " "
              << static_cast<int>(fraction * 100) << "%  loss "
              << (loss ? detail::number_text(*loss, 4) : std::string("-")) << "  "
              << detail::number_text(rate, 1) << " samples/s  eta " << eta_text(done, elapsed) << std::flush;
  }

  options opts_;
  output out_;
  std::int64_t total_steps_ = 0, steps_per_epoch_ = 1;
  bool bar_ = false;
  std::vector<report> reports_;
  double samples_per_second_ = 0;
};

// Runs a program's body and turns an escaping exception into one line on err
// and status 1, instead of std::terminate. In an MPI job the line starts with
// "[rank R] ", so that every failing rank says which it is:
//
//   int main(int argc, char** argv) {
//     return typemesh::train::guard([&] { ... parse, launch, train ... });
//   }
template <class Body>
int guard(Body&& body, std::ostream& err = std::cerr) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    err << (detail::in_mpi_job() ? typemesh::detail::cat("[rank ", detail::process_rank(), "] ") : std::string())
        << e.what() << '\n'
        << std::flush;
  } catch (...) {
    err << "an exception that is not a std::exception\n" << std::flush;
  }
  return 1;
}

}  // namespace typemesh::train

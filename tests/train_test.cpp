// The trainer: its flags and their errors, the loop's metrics file checked
// against the devices' own counters, and where its output goes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "typemesh/runtime/launch.hpp"
#include "typemesh/train/trainer.hpp"

namespace {

using typemesh::train::cli;
using typemesh::train::flag_error;
using typemesh::train::options;

options parse(std::vector<std::string> args, cli* c = nullptr) {
  cli own("prog");
  cli& p = c ? *c : own;
  auto o = p.try_parse(std::move(args));
  if (!o) throw std::runtime_error("help was asked");
  return *o;
}

// The message of the flag_error that args give, or "" if they parse.
std::string error_of(std::vector<std::string> args) {
  cli c("prog");
  c.strategies({"data-parallel", "pase", "expert", "flexflow"});
  std::int64_t units = 2048;
  c.add_count("--units", units, "LSTM units");
  try {
    c.try_parse(std::move(args));
  } catch (const flag_error& e) {
    return e.what();
  }
  return "";
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("typemesh-train-" + std::to_string(::getpid()) + "-" + name);
}

}  // namespace

TEST(TrainFlags, DefaultsAreTheReferenceTrainers) {
  const options o = parse({});
  EXPECT_EQ(o.batch_size, 256);
  EXPECT_EQ(o.devices, 8);
  EXPECT_EQ(o.devices_per_node, 8);
  EXPECT_EQ(o.epochs, 100);
  EXPECT_EQ(o.display_steps, 10);
  EXPECT_EQ(o.strategy, 0);
  EXPECT_EQ(o.labels_filename, "labels.txt");
  EXPECT_EQ(o.dataset_size, 1000);
  EXPECT_EQ(o.seq_len, 256);
  EXPECT_EQ(o.model_size, "small");
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.01);
  EXPECT_EQ(o.backend, "");
  EXPECT_EQ(o.steps_per_epoch(), 1000 / 256);
  EXPECT_EQ(o.total_steps(), 100 * (1000 / 256));
}

TEST(TrainFlags, EveryFlagReachesItsField) {
  cli c("prog");
  c.strategies({"data-parallel", "pase", "gnmt"});
  std::int64_t units = 2048, layers = 2;
  c.add_count("--units", units, "LSTM units");
  c.add_count("--layers", layers, "LSTM layers");
  const options o = parse({"-b", "32", "-g", "16", "--devices-per-node", "4", "-t", "3", "--max-steps", "7",
                           "--display-steps", "2", "-s", "gnmt", "--dataset-dir", "imgs", "--labels-filename", "l.txt",
                           "--dataset-size", "640", "--src-vocab", "sv", "--tgt-vocab", "tv", "--src-text", "st",
                           "--tgt-text", "tt", "--src-vocab-size", "1000", "--tgt-vocab-size", "2000",
                           "--sentences-size", "50", "--seq-len", "20", "--model-size", "big", "--lr", "0.5",
                           "--seed", "18446744073709551615", "--backend", "host", "--metrics", "m.jsonl",
                           "--progress", "lines", "--all-ranks", "--units", "64", "--layers", "1"},
                          &c);
  EXPECT_EQ(o.batch_size, 32);
  EXPECT_EQ(o.devices, 16);
  EXPECT_EQ(o.devices_per_node, 4);
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.max_steps, 7);
  EXPECT_EQ(o.display_steps, 2);
  EXPECT_EQ(o.strategy, 2);
  EXPECT_EQ(o.strategy_name, "gnmt");
  EXPECT_EQ(o.dataset_dir, "imgs");
  EXPECT_EQ(o.labels_filename, "l.txt");
  EXPECT_EQ(o.dataset_size, 640);
  EXPECT_EQ(o.src_vocab + o.tgt_vocab + o.src_text + o.tgt_text, "svtvsttt");
  EXPECT_EQ(o.src_vocab_size, 1000);
  EXPECT_EQ(o.tgt_vocab_size, 2000);
  EXPECT_EQ(o.sentences_size, 50);
  EXPECT_EQ(o.seq_len, 20);
  EXPECT_EQ(o.model_size, "big");
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.5);
  EXPECT_EQ(o.seed, 18446744073709551615ull);
  EXPECT_EQ(o.backend, "host");
  EXPECT_EQ(o.launch().devices, 16);
  EXPECT_EQ(o.launch().backend, "host");
  EXPECT_EQ(o.metrics, "m.jsonl");
  EXPECT_EQ(o.progress, typemesh::train::progress_mode::lines);
  EXPECT_TRUE(o.all_ranks);
  EXPECT_EQ(units, 64);
  EXPECT_EQ(layers, 1);
  EXPECT_EQ(o.total_steps(), 21);

  EXPECT_EQ(parse({"--strategy", "1"}, &c).strategy_name, "pase");
  EXPECT_EQ(parse({"--strategy=data-parallel", "--learning-rate=2e-3"}, &c).strategy, 0);
  EXPECT_DOUBLE_EQ(parse({"--learning-rate=2e-3"}, &c).learning_rate, 2e-3);
}

TEST(TrainFlags, EveryBadFlagIsAnErrorNamingTheFlagAndValue) {
  struct bad {
    std::vector<std::string> args;
    std::vector<std::string> mentions;
  };
  const std::vector<bad> cases = {
      {{"--bogus"}, {"--bogus"}},
      {{"--batch-size", "abc"}, {"--batch-size", "abc"}},
      {{"--batch-size", "0"}, {"--batch-size", "0"}},
      {{"--batch-size=-3"}, {"--batch-size", "-3"}},
      {{"--batch-size", "99999999999999999999"}, {"--batch-size", "99999999999999999999", "does not fit"}},
      {{"--batch-size", "010"}, {"--batch-size", "010"}},
      {{"--batch-size", "0x10"}, {"--batch-size", "0x10"}},
      {{"--batch-size", "12abc"}, {"--batch-size", "12abc"}},
      {{"--devices", "0"}, {"--devices", "0"}},
      {{"--devices", "2.5"}, {"--devices", "2.5"}},
      {{"--devices", "3000000000"}, {"--devices", "3000000000"}},
      {{"--devices-per-node", "-1"}, {"--devices-per-node"}},
      {{"--devices", "12", "--devices-per-node", "8"}, {"--devices 12", "--devices-per-node 8"}},
      {{"--epochs", "0"}, {"--epochs", "0"}},
      {{"--max-steps=-1"}, {"--max-steps", "-1"}},
      {{"--display-steps", "0"}, {"--display-steps", "0"}},
      {{"--dataset-size", "0"}, {"--dataset-size", "0"}},
      {{"--seq-len", "x"}, {"--seq-len", "x"}},
      {{"--src-vocab-size=-5"}, {"--src-vocab-size", "-5"}},
      {{"--seed=-1"}, {"--seed", "-1"}},
      {{"--strategy", "4"}, {"--strategy", "'4'", "3 flexflow"}},
      {{"--strategy", "gnmt"}, {"--strategy", "'gnmt'", "0 data-parallel"}},
      {{"--model-size", "huge"}, {"--model-size", "huge"}},
      {{"--lr", "nan"}, {"--lr", "nan"}},
      {{"--lr", "-0.1"}, {"--lr", "-0.1"}},
      {{"--lr", "fast"}, {"--lr", "fast"}},
      {{"--backend", "gpu"}, {"--backend", "gpu"}},
      {{"--progress", "sometimes"}, {"--progress", "sometimes"}},
      {{"--units", "0"}, {"--units", "0"}},
      {{"--batch-size"}, {"--batch-size"}},
  };
  for (const auto& c : cases) {
    const std::string message = error_of(c.args);
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    ASSERT_FALSE(message.empty()) << shown << "was accepted";
    EXPECT_EQ(message.rfind("typemesh: ", 0), 0u) << message;
    for (const auto& m : c.mentions) EXPECT_NE(message.find(m), std::string::npos) << shown << "-> " << message;
  }
  EXPECT_EQ(error_of({"--strategy", "flexflow", "--units", "16"}), "");
}

// --backend takes "auto" or the name of a launcher this program has; this
// test program has only host.
TEST(TrainFlags, BackendIsALauncherOfTheProgram) {
  EXPECT_EQ(parse({"--backend", "auto"}).backend, "");
  EXPECT_EQ(parse({"--backend", "host"}).backend, "host");
  const std::string mpi = error_of({"--backend", "mpi"});
  for (const char* part : {"--backend", "'mpi'", "it has: host", "link the typemesh::mpi CMake target"}) {
    EXPECT_NE(mpi.find(part), std::string::npos) << part << " missing from: " << mpi;
  }
  const std::string unknown = error_of({"--backend", "gpu"});
  EXPECT_NE(unknown.find("it has: host"), std::string::npos) << unknown;
  cli c("prog");
  EXPECT_NE(c.help().find("a launcher of this program: host"), std::string::npos) << c.help();
}

TEST(TrainFlags, RunSizesAreCheckedForOverflow) {
  options o = parse({"--epochs", "9223372036854775807", "--max-steps", "2"});
  EXPECT_THROW(o.total_steps(), flag_error);
  o = parse({"--epochs", "1", "--max-steps", "4611686018427387904", "--batch-size", "4"});
  try {
    o.total_steps();
    ADD_FAILURE() << "samples overflow accepted";
  } catch (const flag_error& e) {
    EXPECT_NE(std::string(e.what()).find("--batch-size 4"), std::string::npos) << e.what();
  }
  o = parse({"--dataset-size", "100", "--batch-size", "256"});
  try {
    o.steps_per_epoch();
    ADD_FAILURE() << "a data set smaller than a batch accepted";
  } catch (const flag_error& e) {
    EXPECT_NE(std::string(e.what()).find("--dataset-size 100"), std::string::npos) << e.what();
  }
  EXPECT_THROW(typemesh::train::trainer{o}, flag_error);
}

TEST(TrainFlags, ExitPathPrintsTheErrorAndHelp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const char* bad[] = {"prog", "--batch-size", "zero"};
  EXPECT_EXIT(cli("prog").parse(3, bad), testing::ExitedWithCode(2),
              "prog: typemesh: --batch-size: 'zero' is not a decimal integer.*\n.*--help");
  const char* help[] = {"prog", "--help"};
  EXPECT_EXIT(
      {
        cli("prog").parse(2, help);
        std::exit(1);
      },
      testing::ExitedWithCode(0), "");
}

TEST(TrainFlags, HelpExplainsEveryFlagAndTheStrategies) {
  cli c("prog", "Trains a network");
  c.strategies({"data-parallel", "pase"});
  EXPECT_FALSE(c.try_parse({"--help"}).has_value());
  const std::string help = c.help();
  for (const CLI::Option* opt : c.app().get_options()) {
    EXPECT_FALSE(opt->get_description().empty()) << opt->get_name();
    EXPECT_NE(help.find(opt->get_name()), std::string::npos) << opt->get_name();
  }
  EXPECT_NE(help.find("0 data-parallel, 1 pase"), std::string::npos) << help;
}

// docs/train.md's flags table lists exactly the flags --help lists.
TEST(TrainFlags, DocsTableMatchesTheParser) {
  std::ifstream page(std::string(TYPEMESH_SOURCE_DIR) + "/docs/train.md");
  ASSERT_TRUE(page) << "docs/train.md";
  std::set<std::string> documented;
  const std::regex row(R"(^\| `(-[^`]+)` \|)");
  for (std::string line; std::getline(page, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) documented.insert(m[1]);
  }
  cli c("prog");
  std::set<std::string> parsed;
  for (const CLI::Option* opt : c.app().get_options()) {
    std::string names;
    for (const auto& s : opt->get_snames()) names += (names.empty() ? "-" : ", -") + s;
    for (const auto& l : opt->get_lnames()) names += (names.empty() ? "--" : ", --") + l;
    parsed.insert(names);
  }
  EXPECT_EQ(documented, parsed);
}

namespace {

// A stand-in for a model: an allreduce whose size depends on the step, and a
// loss that only device `holder` has.
struct recorded {
  std::mutex m;
  std::map<std::pair<int, std::int64_t>, std::pair<std::uint64_t, std::uint64_t>> traffic;  // (device, step)
  std::map<std::int64_t, double> losses;
};

void fake_training(typemesh::train::trainer& t, int devices, int holder, recorded& rec) {
  typemesh::launch(typemesh::launch_options{.devices = devices, .backend = "host"},
                   [&](typemesh::device& dev) {
                     typemesh::group all{{}, "all"};
                     for (int d = 0; d < devices; ++d) all.devices.push_back(d);
                     t.run(dev, [&](std::int64_t step) -> std::optional<double> {
                       std::vector<float> grad(static_cast<std::size_t>(3 + step % 5), 1.0f);
                       dev.allreduce<float>(all, grad);
                       if (step % 3 == 0) {  // a second kind of traffic, on some steps
                         std::vector<float> out(grad.size() * devices);
                         dev.allgather<float>(all, grad, out);
                       }
                       const double loss = 5.0 / (1.0 + static_cast<double>(step)) + grad[0];
                       std::lock_guard lk(rec.m);
                       rec.traffic[{dev.id(), step + 1}] = {dev.traffic().bytes_sent(), dev.traffic().bytes_received()};
                       if (dev.id() != holder) return std::nullopt;
                       rec.losses[step + 1] = loss;
                       return loss;
                     });
                   });
}

}  // namespace

TEST(TrainLoop, MetricsFileHoldsTheStepsLossesAndTheDevicesCounters) {
  const auto path = temp_file("metrics.jsonl");
  options o = parse({"--batch-size", "8", "--epochs", "3", "--max-steps", "5", "--display-steps", "4", "--metrics",
                     path.string(), "--progress", "lines"});
  std::ostringstream out, err;
  typemesh::train::trainer t(o, out, err);
  recorded rec;
  const int devices = 4, holder = 2;
  fake_training(t, devices, holder, rec);

  std::ifstream file(path);
  ASSERT_TRUE(file);
  std::vector<std::int64_t> steps;
  double previous_wall = 0;
  for (std::string line; std::getline(file, line);) {
    const auto j = nlohmann::json::parse(line);
    const std::int64_t step = j.at("step");
    steps.push_back(step);
    EXPECT_EQ(j.at("epoch").get<std::int64_t>(), (step - 1) / 5);
    EXPECT_EQ(j.at("loss").get<double>(), rec.losses.at(step)) << line;  // exactly what the step returned
    ASSERT_EQ(j.at("bytes_sent").size(), static_cast<std::size_t>(devices));
    for (int d = 0; d < devices; ++d) {
      EXPECT_EQ(j.at("bytes_sent")[d].get<std::uint64_t>(), rec.traffic.at({d, step}).first) << "device " << d;
      EXPECT_EQ(j.at("bytes_received")[d].get<std::uint64_t>(), rec.traffic.at({d, step}).second) << "device " << d;
    }
    EXPECT_GT(j.at("bytes_sent")[0].get<std::uint64_t>(), 0u);
    EXPECT_GT(j.at("samples_per_s").get<double>(), 0.0);
    EXPECT_GE(j.at("wall_s").get<double>(), previous_wall);
    previous_wall = j.at("wall_s");
  }
  // Every 4th step and the last one (15).
  EXPECT_EQ(steps, (std::vector<std::int64_t>{4, 8, 12, 15}));
  ASSERT_EQ(t.reports().size(), 4u);
  EXPECT_EQ(*t.reports().back().loss, rec.losses.at(15));
  EXPECT_GT(t.samples_per_second(), 0.0);
  EXPECT_EQ(err.str(), "");  // no bar in lines mode
  std::filesystem::remove(path);
}

TEST(TrainLoop, OutputComesOnceFromSeveralHostDevices) {
  for (bool all_ranks : {false, true}) {
    options o = parse({"--batch-size", "4", "--epochs", "2", "--max-steps", "3", "--display-steps", "2",
                       "--progress", "lines"});
    o.all_ranks = all_ranks;
    std::ostringstream out, err;
    typemesh::train::trainer t(o, out, err);
    recorded rec;
    fake_training(t, 6, 0, rec);
    std::istringstream lines(out.str());
    std::vector<std::string> all;
    for (std::string l; std::getline(lines, l);) all.push_back(l);
    ASSERT_EQ(all.size(), 4u) << out.str();  // steps 2, 4, 6 and the throughput
    EXPECT_EQ(all[0].rfind("step 2/6  epoch 1/2  loss ", 0), 0u) << all[0];
    EXPECT_EQ(all[2].rfind("step 6/6  epoch 2/2  loss ", 0), 0u) << all[2];
    std::ostringstream loss;
    loss << std::fixed;
    loss.precision(6);
    loss << rec.losses.at(4);
    EXPECT_NE(all[1].find("loss " + loss.str()), std::string::npos) << all[1];
    EXPECT_EQ(all[3].rfind("throughput ", 0), 0u) << all[3];
    EXPECT_NE(all[3].find("6 steps of 4 samples"), std::string::npos) << all[3];
  }
}

TEST(TrainLoop, BarOnATerminalAndTheLossLinesAboveIt) {
  options o = parse({"--batch-size", "4", "--epochs", "1", "--max-steps", "3", "--display-steps", "1",
                     "--progress", "bar"});
  std::ostringstream out, err;
  typemesh::train::trainer t(o, out, err);
  recorded rec;
  fake_training(t, 2, 0, rec);
  const std::string bar = err.str();
  EXPECT_NE(bar.find("\r\033[K[==============================] 3/3 100%"), std::string::npos) << bar;
  EXPECT_NE(bar.find("eta 0:00"), std::string::npos) << bar;
  EXPECT_EQ(bar.back(), '\n');
  const std::string lines = out.str();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 4);  // 3 losses and the throughput
}

// With the default streams the trainer asks whether standard error is a
// terminal: a file is not, so no bar and no control characters.
TEST(TrainLoop, PlainLinesWhenStandardErrorIsNotATerminal) {
  const auto path = temp_file("stderr.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(file, 0);
  ::dup2(file, 2);
  ::close(file);
  std::ostringstream out;
  {
    options o = parse({"--batch-size", "2", "--epochs", "1", "--max-steps", "4", "--display-steps", "2"});
    typemesh::train::output io;
    io.out = &out;
    typemesh::train::trainer t(o, io);
    recorded rec;
    fake_training(t, 2, 1, rec);
    std::cerr << "end\n" << std::flush;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "end\n");  // nothing but what the test wrote
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
  EXPECT_EQ(out.str().find('\033'), std::string::npos);
  EXPECT_NE(out.str().find("step 4/4"), std::string::npos) << out.str();
  std::filesystem::remove(path);
}

TEST(TrainLoop, UnwritableMetricsFileIsAnError) {
  options o = parse({"--max-steps", "1", "--epochs", "1", "--metrics", "/nonexistent-dir/m.jsonl"});
  std::ostringstream out, err;
  typemesh::train::trainer t(o, out, err);
  try {
    typemesh::launch(typemesh::launch_options{.devices = 2, .backend = "host"},
                     [&](typemesh::device& dev) { t.run(dev, [](std::int64_t) { return 1.0; }); });
    ADD_FAILURE() << "no error";
  } catch (const typemesh::error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/m.jsonl"), std::string::npos) << e.what();
  }
}

TEST(TrainLoop, GuardTurnsAnErrorIntoALineAndStatusNamingTheRank) {
  std::ostringstream err;
  EXPECT_EQ(typemesh::train::guard([] {}, err), 0);
  EXPECT_EQ(typemesh::train::guard([] { throw typemesh::device_error("device 3 is gone"); }, err), 1);
  EXPECT_EQ(err.str(), "typemesh: device 3 is gone\n");
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  std::ostringstream ranked;
  const int status = typemesh::train::guard([] { throw typemesh::device_error("device 3 is gone"); }, ranked);
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(status, 1);
  EXPECT_EQ(ranked.str(), "[rank 2] typemesh: device 3 is gone\n");
}

// A pseudo-terminal as standard error: the default streams draw the bar.
TEST(TrainLoop, BarWhenStandardErrorIsATerminal) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) GTEST_SKIP() << "no pseudo-terminal here";
  const int terminal = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(terminal, 2);
  ::close(terminal);
  std::ostringstream out;
  {
    options o = parse({"--batch-size", "2", "--epochs", "1", "--max-steps", "3", "--display-steps", "3"});
    typemesh::train::output io;
    io.out = &out;
    typemesh::train::trainer t(o, io);
    recorded rec;
    fake_training(t, 2, 0, rec);
  }
  std::cerr << std::flush;
  ::dup2(saved, 2);
  ::close(saved);
  ::fcntl(master, F_SETFL, ::fcntl(master, F_GETFL) | O_NONBLOCK);
  std::string shown;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) shown.append(buf, static_cast<std::size_t>(n));
  ::close(master);
  EXPECT_NE(shown.find("[==============================] 3/3 100%"), std::string::npos) << shown;
  EXPECT_NE(shown.find("eta 0:00"), std::string::npos) << shown;
  EXPECT_NE(out.str().find("step 3/3"), std::string::npos) << out.str();
}

// The data loaders: synthetic batches, text and vocabulary files, JPEG images.
// Every file is written by the test into its own temporary directory; every
// loader result is compared with a plain re-implementation or a direct draw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <typemesh/io/synthetic.hpp>
#include <typemesh/io/text.hpp>
#include <vector>
#ifdef TYPEMESH_WITH_JPEG
#include <typemesh/io/jpeg.hpp>
#endif

namespace {

namespace fs = std::filesystem;
using typemesh::data_error;
namespace io = typemesh::io;

// Expects `stmt` to throw a typemesh::data_error whose message holds every part.
template <class F>
void expect_data_error(F&& stmt, std::initializer_list<std::string> parts) {
  try {
    stmt();
    ADD_FAILURE() << "no exception; expected one mentioning " << *parts.begin();
  } catch (const data_error& e) {
    const std::string what = e.what();
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' missing from: " << what;
  }
}

class io_files : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "typemesh-io-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path dir_;
};

// ---- synthetic ----------------------------------------------------------------

TEST(io_synthetic, text_is_deterministic_and_the_same_for_every_device_count) {
  const io::synthetic_text gen{.seed = 7, .vocabulary = 50, .length = 6};
  const auto whole = gen.batch(3, 8);
  const auto again = gen.batch(3, 8);
  EXPECT_EQ(whole.source, again.source);
  EXPECT_EQ(whole.target, again.target);
  EXPECT_NE(whole.source, gen.batch(4, 8).source);
  EXPECT_NE(whole.source, (io::synthetic_text{.seed = 8, .vocabulary = 50, .length = 6}.batch(3, 8).source));
  for (int devices : {1, 2, 4, 8}) {
    std::vector<std::int32_t> joined;
    for (int d = 0; d < devices; ++d) {
      const auto part = gen.batch(3, 8, d * (8 / devices), 8 / devices);
      EXPECT_EQ(part.rows, 8 / devices);
      joined.insert(joined.end(), part.source.begin(), part.source.end());
    }
    EXPECT_EQ(joined, whole.source) << devices << " devices";
  }
  for (auto id : whole.source) EXPECT_TRUE(id >= 0 && id < 50);
  // Every id drawn: 48 draws from 50 ids rarely repeat one value throughout.
  EXPECT_GT(std::set<std::int32_t>(whole.source.begin(), whole.source.end()).size(), 10u);
}

TEST(io_synthetic, language_model_targets_are_the_next_token) {
  const io::synthetic_text gen{.seed = 1, .vocabulary = 1000, .length = 5};
  const auto b = gen.batch(0, 4);
  // A batch one token longer draws the same stream, so its last source token
  // is the shorter batch's last target.
  const auto longer = io::synthetic_text{.seed = 1, .vocabulary = 1000, .length = 6}.batch(0, 4);
  for (int r = 0; r < 4; ++r) {
    for (int p = 0; p + 1 < 5; ++p) EXPECT_EQ(b.target[r * 5 + p], b.source[r * 5 + p + 1]);
    for (int p = 0; p < 5; ++p) EXPECT_EQ(b.source[r * 5 + p], longer.source[r * 6 + p]);
    EXPECT_EQ(b.target[r * 5 + 4], longer.source[r * 6 + 5]);
    EXPECT_EQ(b.source_lengths[r], 5);
  }
  EXPECT_EQ(std::count(b.target_mask.begin(), b.target_mask.end(), 1.0f), 20);
  const auto mt = io::synthetic_text{.seed = 1, .vocabulary = 1000, .length = 5, .target_vocabulary = 3}.batch(0, 4);
  for (auto id : mt.target) EXPECT_TRUE(id >= 0 && id < 3);
}

TEST(io_synthetic, images_are_deterministic_in_range_and_device_independent) {
  const io::synthetic_images gen{.seed = 3, .height = 5, .width = 4, .classes = 10};
  const auto whole = gen.batch(2, 6);
  ASSERT_EQ(whole.pixels.size(), 6u * 5 * 4 * 3);
  double sum = 0;
  for (float v : whole.pixels) {
    EXPECT_TRUE(v >= 0.0f && v < 1.0f);
    sum += v;
  }
  EXPECT_NEAR(sum / whole.pixels.size(), 0.5, 0.05);
  for (auto l : whole.labels) EXPECT_TRUE(l >= 0 && l < 10);
  const auto tail = gen.batch(2, 6, 4, 2);
  EXPECT_TRUE(std::equal(tail.pixels.begin(), tail.pixels.end(), whole.pixels.begin() + 4 * 60));
  EXPECT_EQ(tail.labels[1], whole.labels[5]);
  EXPECT_EQ(whole.pixels, gen.batch(2, 6).pixels);
}

TEST(io_synthetic, bad_sizes_are_errors) {
  expect_data_error([] { io::synthetic_text{.seed = 0, .vocabulary = 10, .length = 0}.batch(0, 2); },
                    {"sequence length", "got 0"});
  expect_data_error([] { io::synthetic_text{.seed = 0, .vocabulary = 0, .length = 3}.batch(0, 2); },
                    {"vocabulary size", "got 0"});
  expect_data_error([] { io::synthetic_text{.seed = 0, .vocabulary = 10, .length = 3}.batch(0, 4, 3, 2); },
                    {"rows [3", "batch of 4"});
  expect_data_error([] { io::synthetic_images{.seed = 0, .height = 1 << 14, .width = 1 << 14}.batch(0, 64); },
                    {"over the cap"});
}

// ---- text ---------------------------------------------------------------------

// The plain version: split on whitespace, look up, truncate, pad.
struct plain_text {
  std::map<std::string, int> ids;
  int unknown = -1, pad = 0;
  std::vector<std::vector<int>> lines;
  plain_text(const std::vector<std::string>& vocab, const std::vector<std::string>& text) {
    for (int i = 0; i < static_cast<int>(vocab.size()); ++i) ids[vocab[i]] = i;
    if (ids.count("<unk>")) unknown = ids["<unk>"];
    if (ids.count("<pad>")) pad = ids["<pad>"];
    for (const auto& line : text) {
      std::istringstream in(line);
      std::vector<int> l;
      for (std::string w; in >> w;) l.push_back(ids.count(w) ? ids[w] : unknown);
      lines.push_back(l);
    }
  }
};

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST_F(io_files, vocabulary_ids_are_line_indices_with_reserved_words_by_name) {
  const auto v = io::vocabulary::read(write("v.txt", "the\n<unk>\ncat\n<pad>\n<eos>\r\nsat"));
  EXPECT_EQ(v.size(), 6);
  EXPECT_EQ(*v.find("cat"), 2);
  EXPECT_EQ(v.pad_id(), 3);
  EXPECT_EQ(v.unknown_id(), 1);
  EXPECT_EQ(v.end_id(), 4);
  EXPECT_EQ(*v.find("sat"), 5);
  EXPECT_EQ(v.word(0), "the");
  const auto bare = io::vocabulary::read(write("b.txt", "a\nb\n"));
  EXPECT_EQ(bare.pad_id(), 0);
  EXPECT_EQ(bare.unknown_id(), -1);
  EXPECT_EQ(bare.end_id(), -1);
}

TEST_F(io_files, language_model_batches_match_a_plain_loader_with_wrap_around) {
  const std::vector<std::string> vocab{"<pad>", "<unk>", "the", "cat", "sat", "on", "mat"};
  const std::vector<std::string> text{"the cat sat on the mat", "the  dog\tsat", "", "cat", "mat mat mat mat mat"};
  const plain_text plain(vocab, text);
  const auto data = io::text_dataset::language_model(write("v.txt", join_lines(vocab)), write("s.txt", join_lines(text)),
                                                     {.length = 4});
  EXPECT_EQ(data.sentence_count(), 5);
  const std::int64_t batch = 3, L = 4;
  for (std::int64_t step = 0; step < 4; ++step) {
    const auto b = data.batch(step, batch);
    for (std::int64_t r = 0; r < batch; ++r) {
      const auto& words = plain.lines[(step * batch + r) % 5];
      for (std::int64_t p = 0; p < L; ++p) {
        const bool has_source = p < static_cast<std::int64_t>(words.size());
        const bool has_target = p + 1 < static_cast<std::int64_t>(words.size());
        EXPECT_EQ(b.source[r * L + p], has_source ? words[p] : 0) << step << " " << r << " " << p;
        EXPECT_EQ(b.source_mask[r * L + p], has_source ? 1.0f : 0.0f);
        EXPECT_EQ(b.target[r * L + p], has_target ? words[p + 1] : 0);
        EXPECT_EQ(b.target_mask[r * L + p], has_target ? 1.0f : 0.0f);
      }
      EXPECT_EQ(b.source_lengths[r], std::min<std::int64_t>(L, words.size()));
    }
    // Any range of rows is the same rows of the whole batch.
    const auto part = data.batch(step, batch, 1, 2);
    EXPECT_TRUE(std::equal(part.target.begin(), part.target.end(), b.target.begin() + L));
  }
  // "dog" is unknown: the <unk> id, and it counts in the mask.
  const auto b = data.batch(0, 2);
  EXPECT_EQ(b.source[L + 1], 1);
  EXPECT_EQ(b.source_mask[L + 1], 1.0f);
  // A huge step wraps around without overflow.
  const auto far = data.batch(std::int64_t{1} << 62, 5);
  EXPECT_EQ(far.rows, 5);
}

TEST_F(io_files, unknown_words_without_unk_are_padded_and_masked) {
  const auto data = io::text_dataset::language_model(write("v.txt", "a\nb\n"), write("s.txt", "a zz b\n"),
                                                     {.length = 3});
  const auto b = data.batch(0, 1);
  EXPECT_EQ(b.source, (std::vector<std::int32_t>{0, 0, 1}));
  EXPECT_EQ(b.source_mask, (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(b.target, (std::vector<std::int32_t>{0, 1, 0}));
  EXPECT_EQ(b.target_mask, (std::vector<float>{0, 1, 0}));
}

TEST_F(io_files, max_sentences_reads_only_the_first_lines) {
  // Three lines; reading two makes the batch wrap around after line 1.
  const auto data = io::text_dataset::language_model(write("v.txt", "a\nb\nc\n"), write("s.txt", "a b\nb c\nc a\n"),
                                                     {.length = 1, .max_sentences = 2});
  EXPECT_EQ(data.sentence_count(), 2);
  const auto b = data.batch(0, 3);
  EXPECT_EQ(b.source, (std::vector<std::int32_t>{0, 1, 0}));  // lines 0, 1, 0
  EXPECT_EQ(io::text_dataset::language_model(dir_ / "v.txt", dir_ / "s.txt", {.length = 1}).sentence_count(), 3);
  EXPECT_THROW(io::text_dataset::language_model(dir_ / "v.txt", dir_ / "s.txt", {.length = 1, .max_sentences = -1}),
               data_error);
}

TEST_F(io_files, translation_reads_parallel_files_with_their_own_vocabularies) {
  const auto data = io::text_dataset::translation(write("sv", "<pad>\nhello\nworld\n"), write("tv", "<pad>\n<unk>\nhallo\nwelt\n"),
                                                  write("s", "hello world\nworld\n"), write("t", "hallo welt welt\nerde\n"),
                                                  {.length = 2});
  const auto b = data.batch(0, 2);
  EXPECT_EQ(b.source, (std::vector<std::int32_t>{1, 2, 2, 0}));
  EXPECT_EQ(b.target, (std::vector<std::int32_t>{2, 3, 1, 0}));
  EXPECT_EQ(b.target_mask, (std::vector<float>{1, 1, 1, 0}));
  EXPECT_EQ(data.target_vocabulary().size(), 4);
  expect_data_error(
      [&] {
        io::text_dataset::translation(dir_ / "sv", dir_ / "tv", dir_ / "s", write("t2", "a\nb\nc\n"), {.length = 2});
      },
      {"s has 2 lines", "t2 has 3"});
}

TEST_F(io_files, bad_text_files_are_errors_naming_file_and_line) {
  const auto sentences = write("s.txt", "a b\n");
  auto lm = [&](const fs::path& v, std::int64_t length = 3, std::int64_t size = 0) {
    io::text_dataset::language_model(v, sentences, {.length = length, .source_vocabulary_size = size});
  };
  expect_data_error([&] { lm(dir_ / "missing.txt"); }, {"missing.txt", "vocabulary file not found"});
  expect_data_error([&] { lm(write("empty.txt", "")); }, {"empty.txt", "holds no words"});
  expect_data_error([&] { lm(write("dup.txt", "a\nb\na\n")); }, {"dup.txt:3:", "'a' repeats the word of line 1"});
  expect_data_error([&] { lm(write("space.txt", "a\nb c\n")); }, {"space.txt:2:", "holds a space"});
  expect_data_error([&] { lm(write("blank.txt", "a\n\nb\n")); }, {"blank.txt:2:", "empty line"});
  expect_data_error([&] { lm(write("bin.txt", std::string("a\nb\x01\n"))); }, {"bin.txt:2:", "control character"});
  expect_data_error([&] { lm(write("big.txt", "a\nb\nc\n"), 3, 2); }, {"big.txt:3:", "more than 2 words"});
  expect_data_error([&] { lm(write("ok.txt", "a\nb\n"), 0); }, {"s.txt", "sequence length", "got 0"});
  expect_data_error([&] { lm(dir_ / "ok.txt", io::limits::max_sequence_length + 1); }, {"sequence length"});
  expect_data_error([&] { io::text_dataset::language_model(dir_ / "ok.txt", dir_ / "nope.txt", {.length = 2}); },
                    {"nope.txt", "sentences file not found"});
  expect_data_error([&] { io::text_dataset::language_model(dir_ / "ok.txt", write("e.txt", ""), {.length = 2}); },
                    {"e.txt", "no lines"});
  expect_data_error(
      [&] {
        io::text_dataset::language_model(dir_ / "ok.txt", write("nul.txt", std::string("a\na\0b\n", 6)), {.length = 2});
      },
      {"nul.txt:2:", "control character"});
  expect_data_error(
      [&] {
        io::text_dataset::language_model(dir_ / "ok.txt",
                                         write("long.txt", "a\n" + std::string(io::limits::max_line_bytes + 1, 'a')),
                                         {.length = 2});
      },
      {"long.txt:2:", "longer than the cap"});
  expect_data_error([&] { io::vocabulary::read(dir_, 0); }, {"not a regular file"});
  const auto v = io::vocabulary::read(dir_ / "ok.txt");
  expect_data_error([&] { (void)v.word(2); }, {"ok.txt", "id 2", "2 words"});
  const auto data = io::text_dataset::language_model(dir_ / "ok.txt", sentences, {.length = 2});
  expect_data_error([&] { data.batch(0, 0); }, {"batch size", "got 0"});
  expect_data_error([&] { data.batch(-1, 2); }, {"step", "-1"});
}

TEST_F(io_files, vocabulary_builder_orders_by_count_then_bytes_like_a_brute_force_count) {
  std::mt19937 rng(11);
  const std::vector<std::string> pool{"b", "a", "dd", "c", "Z", "<unk>", "e", "ff", "g", "hh", "i", "jj"};
  const std::vector<std::string> tied{"yy", "xx", "ww"};
  std::string text;
  for (int line = 0; line < 200; ++line) {
    const int n = static_cast<int>(rng() % 9);
    for (int k = 0; k < n; ++k) {
      // Skewed draw so counts differ and some tie.
      const auto i = std::min<std::size_t>(rng() % pool.size(), rng() % pool.size());
      text += pool[i] + (rng() % 5 == 0 ? "\t " : " ");
    }
    text += line % 7 == 0 ? "\r\n" : "\n";
  }
  // Words of equal counts, written against their byte order.
  text += "yy xx ww\nww yy xx\n";
  const auto file = write("corpus.txt", text);
  // Brute force: count each pool word by scanning every token.
  std::vector<std::pair<std::string, long>> counts;
  std::vector<std::string> all = pool;
  all.insert(all.end(), tied.begin(), tied.end());
  for (const auto& w : all) {
    if (w == "<unk>") continue;
    long c = 0;
    std::istringstream in(text);
    for (std::string t; in >> t;) c += t == w;
    if (c > 0) counts.emplace_back(w, c);
  }
  // Selection of the best remaining word, independent of the library's sort.
  std::vector<std::string> expected{"<pad>", "<unk>"};
  while (!counts.empty()) {
    auto best = counts.begin();
    for (auto it = counts.begin(); it != counts.end(); ++it)
      if (it->second > best->second || (it->second == best->second && it->first < best->first)) best = it;
    expected.push_back(best->first);
    counts.erase(best);
  }
  EXPECT_EQ(io::build_vocabulary(file, 0), expected);
  const auto ww = std::find(expected.begin(), expected.end(), "ww");
  ASSERT_TRUE(expected.end() - ww >= 3);
  EXPECT_EQ(std::vector<std::string>(ww, ww + 3), (std::vector<std::string>{"ww", "xx", "yy"}));
  const auto limited = io::build_vocabulary(file, 6);
  EXPECT_EQ(limited, std::vector<std::string>(expected.begin(), expected.begin() + 6));
  EXPECT_EQ(io::build_vocabulary(file, 3, {}), std::vector<std::string>(expected.begin() + 2, expected.begin() + 5));
  // Written and read back, ids follow the list.
  io::write_vocabulary(dir_ / "v.txt", limited);
  const auto v = io::vocabulary::read(dir_ / "v.txt");
  for (std::size_t i = 0; i < limited.size(); ++i) EXPECT_EQ(*v.find(limited[i]), static_cast<std::int32_t>(i));
  expect_data_error([&] { io::build_vocabulary(dir_ / "none.txt", 5); }, {"none.txt", "text file not found"});
  expect_data_error([&] { io::build_vocabulary(file, 1); }, {"2 reserved words", "vocabulary of 1"});
  expect_data_error([&] { io::build_vocabulary(file, -1); }, {"corpus.txt", "got -1"});
}

// ---- images -------------------------------------------------------------------

#ifdef TYPEMESH_WITH_JPEG

// A smooth image, so JPEG's loss stays small and a resize is predictable.
io::rgb_image gradient(std::int64_t width, std::int64_t height) {
  io::rgb_image im{width, height, std::vector<std::uint8_t>(static_cast<std::size_t>(width * height * 3))};
  for (std::int64_t y = 0; y < height; ++y)
    for (std::int64_t x = 0; x < width; ++x) {
      auto* p = &im.pixels[static_cast<std::size_t>((y * width + x) * 3)];
      p[0] = static_cast<std::uint8_t>(40 + 160 * x / width);
      p[1] = static_cast<std::uint8_t>(30 + 180 * y / height);
      p[2] = static_cast<std::uint8_t>(120 + 60 * std::sin(0.1 * static_cast<double>(x + y)));
    }
  return im;
}

TEST_F(io_files, jpeg_round_trip_is_within_tolerance) {
  const auto original = gradient(40, 24);
  io::write_jpeg(dir_ / "g.jpg", original, 100);
  const auto back = io::read_jpeg(dir_ / "g.jpg");
  ASSERT_EQ(back.width, 40);
  ASSERT_EQ(back.height, 24);
  int worst = 0;
  for (std::size_t i = 0; i < original.pixels.size(); ++i)
    worst = std::max(worst, std::abs(int(original.pixels[i]) - int(back.pixels[i])));
  EXPECT_LE(worst, 8);
  EXPECT_GT(back.pixels[0] + 0, 0);
}

TEST_F(io_files, image_dataset_crops_resizes_and_scales) {
  const auto same = gradient(16, 16);
  const auto wide = gradient(64, 32);  // crop to the centered 32 x 32, then halve
  fs::create_directories(dir_ / "train" / "sub");
  io::write_jpeg(dir_ / "train" / "same.jpg", same, 100);
  io::write_jpeg(dir_ / "train" / "sub" / "wide.jpg", wide, 100);
  write("labels.txt", "same.jpg 3\nsub/wide.jpg 9\r\n");
  const io::image_dataset data(dir_, "labels.txt", {.height = 16, .width = 16, .classes = 10});
  EXPECT_EQ(data.size(), 2);
  const auto b = data.batch(1, 3);  // rows: images 1, 0, 1
  ASSERT_EQ(b.labels, (std::vector<std::int32_t>{9, 3, 9}));
  // Against the decoded pixels (read_jpeg), so only the crop and resize are
  // being checked: at the same size the resize is the identity, and half-pixel
  // centers at scale 2 average the 2 x 2 block under each pixel.
  const auto same_back = io::read_jpeg(dir_ / "train" / "same.jpg");
  const auto wide_back = io::read_jpeg(dir_ / "train" / "sub" / "wide.jpg");
  const std::int64_t per = 16 * 16 * 3;
  double worst_same = 0, worst_wide = 0, worst_original = 0;
  for (std::int64_t y = 0; y < 16; ++y)
    for (std::int64_t x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) {
        const auto i = (y * 16 + x) * 3 + c;
        worst_same = std::max(worst_same, std::abs(b.pixels[per + i] - same_back.pixels[i] / 255.0));
        double box = 0, box_original = 0;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) {
            const auto at = ((2 * y + dy) * 64 + 16 + 2 * x + dx) * 3 + c;
            box += wide_back.pixels[at];
            box_original += wide.pixels[at];
          }
        worst_wide = std::max(worst_wide, std::abs(b.pixels[i] - box / 4 / 255.0));
        worst_original = std::max(worst_original, std::abs(b.pixels[i] - box_original / 4 / 255.0));
      }
  EXPECT_LE(worst_same, 1e-6);
  EXPECT_LE(worst_wide, 1e-6);
  EXPECT_LE(worst_original, 12 / 255.0);  // and the whole path stays near the image that was encoded
  for (float v : b.pixels) EXPECT_TRUE(v >= 0.0f && v <= 1.0f);
  EXPECT_EQ(std::vector<float>(b.pixels.begin(), b.pixels.begin() + per),
            std::vector<float>(b.pixels.begin() + 2 * per, b.pixels.end()));
}

TEST_F(io_files, bad_images_and_labels_are_errors_naming_file_and_line) {
  fs::create_directories(dir_ / "train");
  io::write_jpeg(dir_ / "train" / "ok.jpg", gradient(8, 8), 90);
  const io::image_options options{.height = 8, .width = 8, .classes = 5};
  auto open = [&](const std::string& labels) { return io::image_dataset(dir_, write("l.txt", labels), options); };
  expect_data_error([&] { open("ok.jpg 1\nmissing.jpg 2\n"); }, {"l.txt:2:", "missing.jpg not found"});
  expect_data_error([&] { open("ok.jpg 5\n"); }, {"l.txt:1:", "label 5", "[0, 5)"});
  expect_data_error([&] { open("ok.jpg -1\n"); }, {"l.txt:1:", "label -1"});
  expect_data_error([&] { open("ok.jpg one\n"); }, {"l.txt:1:", "'one' is not an integer"});
  expect_data_error([&] { open("ok.jpg 1\nok.jpg\n"); }, {"l.txt:2:", "got 1 fields"});
  expect_data_error([&] { open("ok.jpg 1 2\n"); }, {"l.txt:1:", "got 3 fields"});
  expect_data_error([&] { open("/etc/ok.jpg 1\n"); }, {"l.txt:1:", "must be relative"});
  expect_data_error([&] { open(""); }, {"l.txt", "lists no images"});
  expect_data_error([&] { io::image_dataset(dir_, "absent.txt", options); }, {"absent.txt", "labels file not found"});
  expect_data_error([&] { io::image_dataset(dir_, dir_ / "l.txt", {.height = 0, .width = 8}); }, {"image height"});

  // Truncated and undecodable images fail when read, naming image and line.
  std::ifstream in(dir_ / "train" / "ok.jpg", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write("train/cut.jpg", bytes.substr(0, bytes.size() / 2));
  write("train/text.jpg", "not a jpeg at all");
  write("train/empty.jpg", "");
  // A valid small JPEG whose frame header claims 20000 x 20000 pixels: refused
  // before anything of that size is allocated.
  std::string huge = bytes;
  const auto sof = huge.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  for (std::size_t at : {sof + 5, sof + 7}) {
    huge[at] = static_cast<char>(20000 >> 8);
    huge[at + 1] = static_cast<char>(20000 & 0xff);
  }
  write("train/huge.jpg", huge);
  const auto data = open("ok.jpg 0\ncut.jpg 1\ntext.jpg 2\nempty.jpg 3\n");
  EXPECT_EQ(data.batch(0, 1).labels[0], 0);
  expect_data_error([&] { data.batch(0, 2); }, {"cut.jpg", "l.txt:2)", "not a decodable JPEG"});
  expect_data_error([&] { data.batch(2, 1); }, {"text.jpg", "l.txt:3)", "not a decodable JPEG"});
  expect_data_error([&] { data.batch(3, 1); }, {"empty.jpg", "l.txt:4)", "empty file"});
  const auto with_huge = open("huge.jpg 0\n");
  expect_data_error([&] { with_huge.batch(0, 1); }, {"huge.jpg", "20000 x 20000 pixels", "caps"});
  fs::remove(dir_ / "train" / "ok.jpg");
  expect_data_error([&] { data.batch(0, 1); }, {"ok.jpg", "l.txt:1)", "image file not found"});
}

#endif

}  // namespace

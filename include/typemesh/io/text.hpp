// Text data as the reference reads it: a vocabulary file (one word per line,
// a line's index is its id) and a sentences file (one sentence per line,
// words split on spaces), truncated or padded to the sequence length. A
// language model takes one file and predicts the next word; a translation
// model takes parallel source and target files, line for line.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "batch.hpp"
#include "files.hpp"

namespace typemesh::io {

// The reserved words, looked up by name as the reference looks up "<pad>".
inline constexpr std::string_view pad_word = "<pad>";
inline constexpr std::string_view unknown_word = "<unk>";
inline constexpr std::string_view end_word = "<eos>";

// Word <-> id. Ids are line indices (0-based). The pad id is the line of
// "<pad>", or 0 when the file has none (the reference's synthetic data pads
// with 0); padded positions are masked, so their id only has to be valid.
// The unknown id is the line of "<unk>"; when the file has none, a word
// outside the vocabulary is padded and masked out, which is what the
// reference's lookup default of -1 amounts to (a zero one-hot: no loss).
// The end id is the line of "<eos>" or -1; the reference appends no
// end-of-sentence token (its code for that is commented out), and neither
// do these loaders.
class vocabulary {
 public:
  vocabulary() = default;

  // Reads a vocabulary file. Every line is one word: an empty line, a line
  // with a space, a tab or a control character, a repeated word, or more
  // than max_words lines (the model's vocabulary size; 0: limits'
  // max_vocabulary_words) is an error naming the file and the line.
  static vocabulary read(const std::filesystem::path& file, std::int64_t max_words = 0) {
    if (max_words < 0 || max_words > limits::max_vocabulary_words)
      throw data_error(typemesh::detail::cat(file.string(), ": the vocabulary size limit must be from 1 to ",
                                             limits::max_vocabulary_words, ", got ", max_words));
    const std::int64_t cap = max_words > 0 ? max_words : limits::max_vocabulary_words;
    vocabulary v;
    v.file_ = file;
    detail::line_reader in(file, "vocabulary file");
    std::string line;
    while (in.next(line)) {
      const auto n = in.line_number();
      if (line.empty()) detail::fail(file, n, "empty line; every line of a vocabulary file is one word");
      if (line.find_first_of(" \t") != std::string::npos)
        detail::fail(file, n, "'" + line + "' holds a space or a tab; every line of a vocabulary file is one word");
      if (detail::has_control_character(line)) detail::fail(file, n, "the line holds a control character");
      if (static_cast<std::int64_t>(v.words_.size()) >= cap)
        detail::fail(file, n,
                     typemesh::detail::cat("more than ", cap, " words; the vocabulary size is ", cap,
                                           max_words > 0 ? "" : " (the cap on vocabulary files)"));
      const auto id = static_cast<std::int32_t>(v.words_.size());
      auto [at, fresh] = v.ids_.emplace(line, id);
      if (!fresh)
        detail::fail(file, n, typemesh::detail::cat("'", line, "' repeats the word of line ", at->second + 1));
      v.words_.push_back(std::move(line));
      line = std::string();
    }
    if (v.words_.empty()) detail::fail(file, 0, "the vocabulary file holds no words");
    v.pad_ = v.find(pad_word).value_or(0);
    v.unknown_ = v.find(unknown_word).value_or(-1);
    v.end_ = v.find(end_word).value_or(-1);
    return v;
  }

  // Builds one from words in id order (same checks, without file lines).
  static vocabulary from_words(std::vector<std::string> words) {
    vocabulary v;
    v.file_ = "<words>";
    for (auto& w : words) {
      if (w.empty() || w.find_first_of(" \t") != std::string::npos || detail::has_control_character(w))
        throw data_error("vocabulary word " + std::to_string(v.words_.size()) + " ('" + w +
                         "') is empty or holds a space, a tab or a control character");
      const auto id = static_cast<std::int32_t>(v.words_.size());
      if (!v.ids_.emplace(w, id).second) throw data_error("vocabulary word '" + w + "' appears twice");
      v.words_.push_back(std::move(w));
    }
    if (v.words_.empty()) throw data_error("a vocabulary needs at least one word");
    v.pad_ = v.find(pad_word).value_or(0);
    v.unknown_ = v.find(unknown_word).value_or(-1);
    v.end_ = v.find(end_word).value_or(-1);
    return v;
  }

  std::int64_t size() const { return static_cast<std::int64_t>(words_.size()); }
  std::optional<std::int32_t> find(std::string_view word) const {
    auto it = ids_.find(std::string(word));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  const std::string& word(std::int64_t id) const {
    if (id < 0 || id >= size())
      throw data_error(typemesh::detail::cat(file_.string(), ": id ", id, " is outside the vocabulary of ", size(),
                                             " words"));
    return words_[static_cast<std::size_t>(id)];
  }
  std::int32_t pad_id() const { return pad_; }
  std::int32_t unknown_id() const { return unknown_; }  // -1: none, unknown words are masked
  std::int32_t end_id() const { return end_; }          // -1: none
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
  std::vector<std::string> words_;
  std::unordered_map<std::string, std::int32_t> ids_;
  std::int32_t pad_ = 0, unknown_ = -1, end_ = -1;
};

// A sentences file turned into ids: each line's words, truncated to `keep`
// tokens, stored without padding (so memory follows the file, not
// lines x length). A word outside the vocabulary gets the unknown id, or -1
// when the vocabulary has none (masked when batched).
struct sentences {
  std::filesystem::path file;
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> offsets{0};  // line i is ids[offsets[i], offsets[i + 1])

  std::int64_t size() const { return static_cast<std::int64_t>(offsets.size()) - 1; }

  // At most max_lines lines (0: all), as the reference's sentences_size.
  static sentences read(const std::filesystem::path& file, const vocabulary& vocab, std::int64_t keep,
                        std::int64_t max_lines = 0) {
    if (max_lines < 0)
      throw data_error(typemesh::detail::cat(file.string(), ": the sentence count must not be negative, got ", max_lines));
    sentences s;
    s.file = file;
    detail::line_reader in(file, "sentences file");
    std::string line;
    while ((max_lines == 0 || s.size() < max_lines) && in.next(line)) {
      if (detail::has_control_character(line))
        detail::fail(file, in.line_number(), "the line holds a control character; is this a text file?");
      std::int64_t taken = 0;
      detail::for_each_word(line, [&](std::string_view w) {
        if (taken >= keep) return;
        ++taken;
        const auto id = vocab.find(w);
        s.ids.push_back(id ? *id : vocab.unknown_id());
      });
      if (s.size() >= limits::max_sentences)
        detail::fail(file, in.line_number(),
                     typemesh::detail::cat("more than ", limits::max_sentences, " lines (the cap on sentences files)"));
      s.offsets.push_back(static_cast<std::int64_t>(s.ids.size()));
    }
    if (s.size() == 0) detail::fail(file, 0, "the sentences file holds no lines");
    return s;
  }
};

// Options of a text dataset. Vocabulary sizes of 0 take the files' sizes;
// a positive one is the model's vocabulary size, and a file with more words
// is an error (ids would fall outside the model's embedding).
struct text_options {
  std::int64_t length = 0;  // the sequence length: sentences are truncated or padded to it
  std::int64_t source_vocabulary_size = 0;
  std::int64_t target_vocabulary_size = 0;
  std::int64_t max_sentences = 0;  // read at most this many lines of each text file; 0: all
};

// Batches of sentences in file order, wrapping around at the end: the global
// batch at step s holds lines (s * batch + r) mod lines for r in [0, batch).
class text_dataset {
 public:
  // A language model's data: the target is the next word. Row r's source is
  // the line's first `length` words; its target is words 1 .. length (the
  // reference's labels = words[1:], truncated). Both are padded with the pad
  // id and masked where there is no word.
  static text_dataset language_model(const std::filesystem::path& vocabulary_file,
                                     const std::filesystem::path& sentences_file, const text_options& options) {
    check_length(options.length, sentences_file);
    text_dataset d;
    d.source_vocab_ = vocabulary::read(vocabulary_file, options.source_vocabulary_size);
    d.length_ = options.length;
    d.source_ = sentences::read(sentences_file, d.source_vocab_, options.length + 1, options.max_sentences);
    return d;
  }

  // A translation model's data: parallel source and target files, one
  // sentence per line and the same number of lines; each side truncated or
  // padded to `length`. The target file reads ids from target_vocabulary_file.
  static text_dataset translation(const std::filesystem::path& source_vocabulary_file,
                                  const std::filesystem::path& target_vocabulary_file,
                                  const std::filesystem::path& source_file, const std::filesystem::path& target_file,
                                  const text_options& options) {
    check_length(options.length, source_file);
    text_dataset d;
    d.translation_ = true;
    d.source_vocab_ = vocabulary::read(source_vocabulary_file, options.source_vocabulary_size);
    d.target_vocab_ = vocabulary::read(target_vocabulary_file, options.target_vocabulary_size);
    d.length_ = options.length;
    d.source_ = sentences::read(source_file, d.source_vocab_, options.length, options.max_sentences);
    d.target_ = sentences::read(target_file, d.target_vocab_, options.length, options.max_sentences);
    if (d.source_.size() != d.target_.size())
      throw data_error(typemesh::detail::cat(source_file.string(), " has ", d.source_.size(), " lines but ",
                                             target_file.string(), " has ", d.target_.size(),
                                             "; parallel files need one target line per source line"));
    return d;
  }

  std::int64_t sentence_count() const { return source_.size(); }
  std::int64_t length() const { return length_; }
  const vocabulary& source_vocabulary() const { return source_vocab_; }
  const vocabulary& target_vocabulary() const { return translation_ ? target_vocab_ : source_vocab_; }

  // Rows [first_row, first_row + rows) of the global batch at `step`
  // (rows < 0: to the end of the batch).
  text_batch batch(std::int64_t step, std::int64_t batch, std::int64_t first_row = 0, std::int64_t rows = -1) const {
    detail::check_positive(batch, "text batch size", limits::max_batch_elements);
    if (step < 0) throw data_error(typemesh::detail::cat("text batch: step must not be negative, got ", step));
    if (rows < 0) rows = batch - first_row;
    detail::check_rows(batch, first_row, rows);
    const std::int64_t n = detail::checked_product(rows, length_, limits::max_batch_elements, "text batch");
    text_batch out;
    out.rows = rows;
    out.length = length_;
    out.source.assign(n, source_vocab_.pad_id());
    out.target.assign(n, target_vocabulary().pad_id());
    out.source_mask.assign(n, 0.0f);
    out.target_mask.assign(n, 0.0f);
    out.source_lengths.assign(rows, 0);
    out.target_lengths.assign(rows, 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t line = detail::wrapped_index(step, batch, first_row + r, sentence_count());
      const std::int32_t* words = source_.ids.data() + source_.offsets[line];
      const std::int64_t count = source_.offsets[line + 1] - source_.offsets[line];
      fill(out.source, out.source_mask, out.source_lengths, r, words, std::min(count, length_));
      if (translation_) {
        const std::int32_t* t = target_.ids.data() + target_.offsets[line];
        fill(out.target, out.target_mask, out.target_lengths, r, t,
             std::min(target_.offsets[line + 1] - target_.offsets[line], length_));
      } else if (count > 1) {
        fill(out.target, out.target_mask, out.target_lengths, r, words + 1, std::min(count - 1, length_));
      }
    }
    return out;
  }

 private:
  static void check_length(std::int64_t length, const std::filesystem::path& file) {
    if (length <= 0 || length > limits::max_sequence_length)
      throw data_error(typemesh::detail::cat(file.string(), ": the sequence length must be from 1 to ",
                                             limits::max_sequence_length, ", got ", length));
  }
  // Writes one row's words; a word outside a vocabulary without "<unk>"
  // (-1) keeps the pad id and a zero mask.
  void fill(std::vector<std::int32_t>& ids, std::vector<float>& mask, std::vector<std::int32_t>& lengths,
            std::int64_t row, const std::int32_t* words, std::int64_t count) const {
    for (std::int64_t p = 0; p < count; ++p) {
      if (words[p] < 0) continue;
      ids[row * length_ + p] = words[p];
      mask[row * length_ + p] = 1.0f;
    }
    lengths[row] = static_cast<std::int32_t>(count);
  }

  vocabulary source_vocab_, target_vocab_;
  sentences source_, target_;
  std::int64_t length_ = 0;
  bool translation_ = false;
};

// Counts the words of a text (split on spaces and tabs, line by line) and
// returns a vocabulary's words: `reserved` first, in the given order, then
// the text's words by descending count, ties in byte order, until
// max_words words in all (0: no limit but limits::max_vocabulary_words).
// A reserved word met in the text is not listed twice.
inline std::vector<std::string> build_vocabulary(const std::filesystem::path& text, std::int64_t max_words,
                                                 const std::vector<std::string>& reserved = {
                                                     std::string(pad_word), std::string(unknown_word)}) {
  if (max_words < 0 || max_words > limits::max_vocabulary_words)
    throw data_error(typemesh::detail::cat(text.string(), ": the vocabulary size must be from 1 to ",
                                           limits::max_vocabulary_words, " (0: no limit), got ", max_words));
  const std::int64_t cap = max_words > 0 ? max_words : limits::max_vocabulary_words;
  if (static_cast<std::int64_t>(reserved.size()) > cap)
    throw data_error(typemesh::detail::cat(text.string(), ": ", reserved.size(),
                                           " reserved words do not fit a vocabulary of ", cap));
  std::unordered_map<std::string, std::int64_t> counts;
  detail::line_reader in(text, "text file");
  std::string line;
  while (in.next(line)) {
    if (detail::has_control_character(line))
      detail::fail(text, in.line_number(), "the line holds a control character; is this a text file?");
    detail::for_each_word(line, [&](std::string_view w) { ++counts[std::string(w)]; });
  }
  std::vector<std::pair<std::string, std::int64_t>> ranked;
  ranked.reserve(counts.size());
  for (auto& [w, c] : counts)
    if (std::find(reserved.begin(), reserved.end(), w) == reserved.end()) ranked.emplace_back(w, c);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
  std::vector<std::string> words(reserved.begin(), reserved.end());
  for (auto& [w, c] : ranked) {
    if (static_cast<std::int64_t>(words.size()) >= cap) break;
    words.push_back(std::move(w));
  }
  return words;
}

// Writes words one per line (the vocabulary file format).
inline void write_vocabulary(const std::filesystem::path& file, const std::vector<std::string>& words) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw data_error(file.string() + ": cannot be opened for writing");
  for (const auto& w : words) out << w << '\n';
  out.flush();
  if (!out) throw data_error(file.string() + ": writing failed");
}

}  // namespace typemesh::io

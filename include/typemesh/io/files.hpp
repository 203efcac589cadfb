// Reading the data files: one error type that names the file and the line,
// the caps that bound what a bad file can make us allocate, and a line
// reader that never holds more than one capped line.
#pragma once

#include <charconv>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../core/error.hpp"

namespace typemesh {

// A data file that is missing, malformed or out of range; the message names
// the file and, where there is one, the line ("corpus.txt:12: ...").
class data_error : public error {
 public:
  using error::error;
};

namespace io {

// Caps on what a file may make the loaders allocate. A file over a cap is an
// error that names the cap, never an allocation of its size.
struct limits {
  static constexpr std::int64_t max_line_bytes = std::int64_t{1} << 20;       // 1 MiB per line
  static constexpr std::int64_t max_text_file_bytes = std::int64_t{1} << 32;  // 4 GiB per text file
  static constexpr std::int64_t max_vocabulary_words = std::int64_t{1} << 24;  // 16,777,216 words
  static constexpr std::int64_t max_sentences = std::int64_t{1} << 26;        // lines per sentences file
  static constexpr std::int64_t max_image_entries = std::int64_t{1} << 26;    // lines per labels file
  static constexpr std::int64_t max_sequence_length = std::int64_t{1} << 20;  // tokens per sentence
  static constexpr std::int64_t max_image_file_bytes = std::int64_t{1} << 26;  // 64 MiB per JPEG
  static constexpr std::int64_t max_image_side = 16384;                        // pixels, decoded or requested
  static constexpr std::int64_t max_image_pixels = std::int64_t{1} << 26;     // width x height of a decoded JPEG
  static constexpr std::int64_t max_batch_elements = std::int64_t{1} << 31;   // values in one batch
};

namespace detail {

inline std::string where(const std::filesystem::path& file, std::int64_t line) {
  return line > 0 ? typemesh::detail::cat(file.string(), ":", line, ": ") : file.string() + ": ";
}

[[noreturn]] inline void fail(const std::filesystem::path& file, std::int64_t line, const std::string& what) {
  throw data_error(where(file, line) + what);
}

// The size of a regular file, checked against a cap before anything is read.
inline std::int64_t checked_file_size(const std::filesystem::path& file, std::int64_t cap, const char* role) {
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (ec || !std::filesystem::exists(status)) fail(file, 0, typemesh::detail::cat(role, " not found"));
  if (!std::filesystem::is_regular_file(status)) fail(file, 0, typemesh::detail::cat(role, " is not a regular file"));
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) fail(file, 0, typemesh::detail::cat(role, " cannot be read: ", ec.message()));
  if (size > static_cast<std::uintmax_t>(cap))
    fail(file, 0, typemesh::detail::cat(role, " has ", size, " bytes, over the cap of ", cap));
  return static_cast<std::int64_t>(size);
}

// Reads a file line by line; a line is what lies between '\n's, without a
// trailing '\r'. The last line needs no '\n'. A line over
// limits::max_line_bytes is an error naming the line.
class line_reader {
 public:
  line_reader(std::filesystem::path file, const char* role) : file_(std::move(file)) {
    checked_file_size(file_, limits::max_text_file_bytes, role);
    in_.open(file_, std::ios::binary);
    if (!in_) fail(file_, 0, typemesh::detail::cat(role, " cannot be opened"));
  }

  // The next line into `line`; false at the end of the file.
  bool next(std::string& line) {
    line.clear();
    bool any = false;
    for (;;) {
      if (at_ == filled_) {
        in_.read(buffer_, sizeof buffer_);
        filled_ = static_cast<std::size_t>(in_.gcount());
        at_ = 0;
        if (filled_ == 0) {
          if (in_.bad()) fail(file_, number_ + 1, "read failed");
          if (!any) return false;
          break;
        }
      }
      any = true;
      const char* begin = buffer_ + at_;
      const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', filled_ - at_));
      const std::size_t take = newline ? static_cast<std::size_t>(newline - begin) : filled_ - at_;
      if (static_cast<std::int64_t>(line.size() + take) > limits::max_line_bytes)
        fail(file_, number_ + 1, typemesh::detail::cat("line longer than the cap of ", limits::max_line_bytes, " bytes"));
      line.append(begin, take);
      at_ += take;
      if (newline) {
        ++at_;
        break;
      }
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++number_;
    return true;
  }

  // The number of the line last returned (1-based).
  std::int64_t line_number() const { return number_; }
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
  std::ifstream in_;
  char buffer_[1 << 16];
  std::size_t filled_ = 0, at_ = 0;
  std::int64_t number_ = 0;
};

// The words of a line, split on spaces and tabs; runs of them separate like
// one, as the reference's string split does.
template <class F>
void for_each_word(std::string_view line, F&& f) {
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) f(line.substr(i, j - i));
    i = j;
  }
}

// A control character other than tab: the mark of a binary file read as text.
inline bool has_control_character(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\t') || u == 0x7f) return true;
  }
  return false;
}

// Checks a positive count taken from the caller (batch, length, classes).
inline void check_positive(std::int64_t value, const char* what, std::int64_t cap) {
  if (value <= 0 || value > cap)
    throw data_error(typemesh::detail::cat(what, " must be from 1 to ", cap, ", got ", value));
}

// a * b, or an error naming what is being sized when it passes the cap.
inline std::int64_t checked_product(std::int64_t a, std::int64_t b, std::int64_t cap, const char* what) {
  if (a < 0 || b < 0 || (b != 0 && a > cap / b))
    throw data_error(typemesh::detail::cat(what, ": ", a, " x ", b, " values is over the cap of ", cap));
  return a * b;
}

// (step * batch + row) mod n without overflow for any step: the row of a
// dataset of n rows that a batch's row reads, wrapping around at the end.
inline std::int64_t wrapped_index(std::int64_t step, std::int64_t batch, std::int64_t row, std::int64_t n) {
  const auto un = static_cast<std::uint64_t>(n);
  // Both factors are below n <= 2^32, so their product fits in 64 bits.
  const std::uint64_t start = (static_cast<std::uint64_t>(step) % un) * (static_cast<std::uint64_t>(batch) % un) % un;
  return static_cast<std::int64_t>((start + static_cast<std::uint64_t>(row) % un) % un);
}

// Rows [first, first + count) of a global batch of `batch` rows.
inline void check_rows(std::int64_t batch, std::int64_t first, std::int64_t count) {
  if (first < 0 || count < 0 || first > batch || count > batch - first)
    throw data_error(typemesh::detail::cat("rows [", first, ", ", first, " + ", count, ") are not inside a batch of ",
                                           batch));
}

}  // namespace detail
}  // namespace io
}  // namespace typemesh

// Synthetic data, the default when no dataset is given (as in the reference
// trainer). Every value is a counter-based random number keyed by (seed,
// step, global row, position), so a batch, or any range of its rows, is the
// same whatever the device count and whichever device asks for it.
#pragma once

#include <cstdint>

#include "../ops/random.hpp"
#include "batch.hpp"
#include "files.hpp"

namespace typemesh::io {

namespace synthetic_detail {
// Keyed 64-bit value; `stream` keeps sources, targets, pixels and labels apart.
inline std::uint64_t draw(std::uint64_t seed, std::uint64_t stream, std::uint64_t step, std::uint64_t row,
                          std::uint64_t position) {
  using random_detail::mix;
  return mix(mix(mix(mix(mix(seed) ^ stream) ^ step) ^ row) ^ position);
}
// Uniform in [0, n) for n < 2^31 without modulo bias worth speaking of:
// floor(bits * n / 2^64), computed in two 32-bit halves so no partial
// product overflows.
inline std::int32_t below(std::uint64_t bits, std::int64_t n) {
  const auto m = static_cast<std::uint64_t>(n);
  const std::uint64_t high = (bits >> 32) * m + (((bits & 0xffffffffull) * m) >> 32);
  return static_cast<std::int32_t>(high >> 32);
}
// Uniform in [0, 1) from 24 random bits, exact in float.
inline float unit(std::uint64_t bits) { return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f); }
enum : std::uint64_t { source_stream = 1, target_stream = 2, pixel_stream = 3, label_stream = 4 };
}  // namespace synthetic_detail

// Uniform token ids in [0, vocabulary). With target_vocabulary = 0 (a language
// model) the target is the source shifted by one: row r is drawn as length + 1
// tokens t, source = t[0, length), target = t[1, length]. With
// target_vocabulary > 0 (a translation model) the target is drawn on its own
// in [0, target_vocabulary). Every mask is 1 and every length is `length`.
struct synthetic_text {
  std::uint64_t seed = 0;
  std::int64_t vocabulary = 0;
  std::int64_t length = 0;
  std::int64_t target_vocabulary = 0;

  // Rows [first_row, first_row + rows) of the global batch of `batch` rows at
  // `step` (rows < 0: to the end of the batch). The reference repeats one
  // batch; pass step 0 for every step to do the same.
  text_batch batch(std::int64_t step, std::int64_t batch, std::int64_t first_row = 0, std::int64_t rows = -1) const {
    using namespace synthetic_detail;
    detail::check_positive(vocabulary, "synthetic text: vocabulary size", (std::int64_t{1} << 31) - 1);
    detail::check_positive(length, "synthetic text: sequence length", limits::max_sequence_length);
    if (target_vocabulary != 0)
      detail::check_positive(target_vocabulary, "synthetic text: target vocabulary size", (std::int64_t{1} << 31) - 1);
    detail::check_positive(batch, "synthetic text: batch size", limits::max_batch_elements);
    if (rows < 0) rows = batch - first_row;
    detail::check_rows(batch, first_row, rows);
    const std::int64_t n = detail::checked_product(rows, length, limits::max_batch_elements, "synthetic text batch");
    text_batch out;
    out.rows = rows;
    out.length = length;
    out.source.resize(n);
    out.target.resize(n);
    out.source_mask.assign(n, 1.0f);
    out.target_mask.assign(n, 1.0f);
    out.source_lengths.assign(rows, static_cast<std::int32_t>(length));
    out.target_lengths.assign(rows, static_cast<std::int32_t>(length));
    const auto s = static_cast<std::uint64_t>(step);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto g = static_cast<std::uint64_t>(first_row + r);
      for (std::int64_t p = 0; p < length; ++p) {
        const auto at = r * length + p;
        out.source[at] = below(draw(seed, source_stream, s, g, p), vocabulary);
        out.target[at] = target_vocabulary > 0 ? below(draw(seed, target_stream, s, g, p), target_vocabulary)
                                               : below(draw(seed, source_stream, s, g, p + 1), vocabulary);
      }
    }
    return out;
  }
};

// Pixels uniform in [0, 1) and labels uniform in [0, classes), as the
// reference's synthetic images.
struct synthetic_images {
  std::uint64_t seed = 0;
  std::int64_t height = 0, width = 0;
  std::int64_t classes = 1000;

  image_batch batch(std::int64_t step, std::int64_t batch, std::int64_t first_row = 0, std::int64_t rows = -1) const {
    using namespace synthetic_detail;
    detail::check_positive(height, "synthetic images: height", limits::max_image_side);
    detail::check_positive(width, "synthetic images: width", limits::max_image_side);
    detail::check_positive(classes, "synthetic images: class count", (std::int64_t{1} << 31) - 1);
    detail::check_positive(batch, "synthetic images: batch size", limits::max_batch_elements);
    if (rows < 0) rows = batch - first_row;
    detail::check_rows(batch, first_row, rows);
    const std::int64_t per_image = height * width * 3;
    const std::int64_t n = detail::checked_product(rows, per_image, limits::max_batch_elements, "synthetic image batch");
    image_batch out;
    out.rows = rows;
    out.height = height;
    out.width = width;
    out.pixels.resize(n);
    out.labels.resize(rows);
    const auto s = static_cast<std::uint64_t>(step);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto g = static_cast<std::uint64_t>(first_row + r);
      out.labels[r] = below(draw(seed, label_stream, s, g, 0), classes);
      for (std::int64_t i = 0; i < per_image; ++i) out.pixels[r * per_image + i] = unit(draw(seed, pixel_stream, s, g, i));
    }
    return out;
  }
};

}  // namespace typemesh::io

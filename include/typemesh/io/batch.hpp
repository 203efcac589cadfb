// What the loaders hand to a model: whole global batches (or a range of their
// rows) as flat row-major arrays. A batch never depends on the device count;
// a program slices it the way its input layout says.
#pragma once

#include <cstdint>
#include <vector>

namespace typemesh::io {

// Token ids [rows, length], row-major. For a language model `target` is the
// source shifted by one (the next word); for a translation model it is the
// target sentence. Masks are 1 at a real token and 0 at padding, so padded
// positions drop out of the loss; lengths count each row's words after
// truncation (as the reference's sequence lengths, unknown words included).
struct text_batch {
  std::int64_t rows = 0, length = 0;
  std::vector<std::int32_t> source, target;
  std::vector<float> source_mask, target_mask;
  std::vector<std::int32_t> source_lengths, target_lengths;
};

// Images [rows, height, width, channels] (channels = 3, RGB), row-major, each
// value in [0, 1]; one int32 label per image.
struct image_batch {
  std::int64_t rows = 0, height = 0, width = 0, channels = 3;
  std::vector<float> pixels;
  std::vector<std::int32_t> labels;
};

}  // namespace typemesh::io

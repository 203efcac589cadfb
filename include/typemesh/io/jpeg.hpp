// Images from a directory and a labels file, decoded with libjpeg. Programs
// that include this header link typemesh::jpeg (which brings libjpeg); the
// rest of typemesh::io needs nothing beyond typemesh::typemesh.
//
// The layout follows the reference trainer: <dir>/<labels file> has one
// "relative/path label" line per image, and the images lie under
// <dir>/train/ (options.images_subdirectory). Each image is decoded to RGB
// (grayscale is expanded), center-cropped to the model's aspect ratio,
// resized bilinearly (half-pixel centers) to height x width and scaled to
// [0, 1]. The reference stretches instead of cropping; cropping keeps shapes
// undistorted and is the same when the aspect ratios already agree.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <csetjmp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "batch.hpp"
#include "files.hpp"

namespace typemesh::io {

// Decoded 8-bit RGB, row-major [height, width, 3].
struct rgb_image {
  std::int64_t width = 0, height = 0;
  std::vector<std::uint8_t> pixels;
};

namespace jpeg_detail {
struct error_manager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};
// libjpeg reports errors through a callback that must not return; jumping
// back keeps C++ exceptions out of the C library's frames.
inline void on_error(j_common_ptr info) {
  auto* manager = reinterpret_cast<error_manager*>(info->err);
  (*info->err->format_message)(info, manager->message);
  std::longjmp(manager->jump, 1);
}
// Warnings (level < 0) include "premature end of data", after which libjpeg
// would fill the rest with gray: a truncated file is an error here.
inline void on_message(j_common_ptr info, int level) {
  if (level >= 0) return;
  on_error(info);
}
inline std::vector<unsigned char> read_bytes(const std::filesystem::path& file, const std::string& where) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) throw data_error(where + "image file not found");
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) throw data_error(where + "image file cannot be read: " + ec.message());
  if (size > static_cast<std::uintmax_t>(limits::max_image_file_bytes))
    throw data_error(typemesh::detail::cat(where, "image file has ", size, " bytes, over the cap of ",
                                           limits::max_image_file_bytes));
  std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
  std::ifstream in(file, std::ios::binary);
  if (!in || !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    throw data_error(where + "image file cannot be read");
  return bytes;
}
}  // namespace jpeg_detail

// Decodes JPEG bytes to RGB. Anything libjpeg rejects or warns about (a
// corrupt or truncated file, an unsupported color space), and images over
// limits::max_image_side or limits::max_image_pixels, are errors that begin
// with `where` (the caller names the file).
inline rgb_image decode_jpeg(const std::vector<unsigned char>& bytes, const std::string& where) {
  if (bytes.empty()) throw data_error(where + "empty file, not a JPEG");
  // Everything that must survive a jump lives behind pointers set before it.
  auto out = std::make_unique<rgb_image>();
  auto manager = std::make_unique<jpeg_detail::error_manager>();
  auto info = std::make_unique<jpeg_decompress_struct>();
  info->err = jpeg_std_error(&manager->base);
  manager->base.error_exit = jpeg_detail::on_error;
  manager->base.emit_message = jpeg_detail::on_message;
  manager->message[0] = '\0';
  if (setjmp(manager->jump)) {
    jpeg_destroy_decompress(info.get());
    throw data_error(where + "not a decodable JPEG: " + manager->message);
  }
  jpeg_create_decompress(info.get());
  jpeg_mem_src(info.get(), bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(info.get(), TRUE);
  const std::int64_t w = info->image_width, h = info->image_height;
  if (w <= 0 || h <= 0 || w > limits::max_image_side || h > limits::max_image_side || w * h > limits::max_image_pixels) {
    jpeg_destroy_decompress(info.get());
    throw data_error(typemesh::detail::cat(where, "the JPEG is ", w, " x ", h, " pixels; the caps are ",
                                           limits::max_image_side, " per side and ", limits::max_image_pixels,
                                           " pixels"));
  }
  info->out_color_space = JCS_RGB;
  jpeg_start_decompress(info.get());
  if (info->output_components != 3 || info->output_width != w || info->output_height != h) {
    jpeg_destroy_decompress(info.get());
    throw data_error(where + "the JPEG does not decode to RGB");
  }
  try {
    out->pixels.resize(static_cast<std::size_t>(w * h * 3));
  } catch (...) {
    jpeg_destroy_decompress(info.get());
    throw;
  }
  out->width = w;
  out->height = h;
  while (info->output_scanline < info->output_height) {
    JSAMPROW row = out->pixels.data() + static_cast<std::size_t>(info->output_scanline) * static_cast<std::size_t>(w) * 3;
    jpeg_read_scanlines(info.get(), &row, 1);
  }
  jpeg_finish_decompress(info.get());
  jpeg_destroy_decompress(info.get());
  return std::move(*out);
}

inline rgb_image read_jpeg(const std::filesystem::path& file) {
  const std::string where = file.string() + ": ";
  return decode_jpeg(jpeg_detail::read_bytes(file, where), where);
}

// Writes RGB pixels [height, width, 3] as a baseline JPEG (for tests and
// tools that make small datasets).
inline void write_jpeg(const std::filesystem::path& file, const rgb_image& image, int quality = 95) {
  if (image.width <= 0 || image.height <= 0 || image.width > limits::max_image_side ||
      image.height > limits::max_image_side ||
      static_cast<std::int64_t>(image.pixels.size()) != image.width * image.height * 3)
    throw data_error(typemesh::detail::cat(file.string(), ": cannot write a ", image.width, " x ", image.height,
                                           " RGB image from ", image.pixels.size(), " bytes"));
  auto manager = std::make_unique<jpeg_detail::error_manager>();
  auto info = std::make_unique<jpeg_compress_struct>();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  auto* volatile buffer_at = &buffer;
  info->err = jpeg_std_error(&manager->base);
  manager->base.error_exit = jpeg_detail::on_error;
  if (setjmp(manager->jump)) {
    jpeg_destroy_compress(info.get());
    std::free(*buffer_at);
    throw data_error(file.string() + ": JPEG encoding failed: " + manager->message);
  }
  jpeg_create_compress(info.get());
  jpeg_mem_dest(info.get(), &buffer, &size);
  info->image_width = static_cast<JDIMENSION>(image.width);
  info->image_height = static_cast<JDIMENSION>(image.height);
  info->input_components = 3;
  info->in_color_space = JCS_RGB;
  jpeg_set_defaults(info.get());
  jpeg_set_quality(info.get(), quality, TRUE);
  jpeg_start_compress(info.get(), TRUE);
  while (info->next_scanline < info->image_height) {
    auto* row = const_cast<JSAMPROW>(image.pixels.data() + static_cast<std::size_t>(info->next_scanline) *
                                                                static_cast<std::size_t>(image.width) * 3);
    jpeg_write_scanlines(info.get(), &row, 1);
  }
  jpeg_finish_compress(info.get());
  jpeg_destroy_compress(info.get());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  const bool ok = out && out.write(reinterpret_cast<const char*>(buffer), static_cast<std::streamsize>(size));
  std::free(buffer);
  if (!ok) throw data_error(file.string() + ": cannot be written");
}

// Center crop to height:width, bilinear resize with half-pixel centers, and
// scaling to [0, 1]; writes height * width * 3 floats at `out`.
inline void crop_resize(const rgb_image& image, std::int64_t height, std::int64_t width, float* out) {
  const std::int64_t w = image.width, h = image.height;
  // The largest centered window with the target's aspect ratio.
  std::int64_t crop_w = w, crop_h = h;
  if (w * height > h * width)
    crop_w = std::max<std::int64_t>(1, (h * width + height / 2) / height);
  else
    crop_h = std::max<std::int64_t>(1, (w * height + width / 2) / width);
  const std::int64_t x0 = (w - crop_w) / 2, y0 = (h - crop_h) / 2;
  auto clamp = [](double v, std::int64_t hi) { return v < 0 ? 0.0 : (v > static_cast<double>(hi) ? static_cast<double>(hi) : v); };
  for (std::int64_t y = 0; y < height; ++y) {
    const double sy = clamp((static_cast<double>(y) + 0.5) * static_cast<double>(crop_h) / static_cast<double>(height) - 0.5, crop_h - 1);
    const auto y_lo = static_cast<std::int64_t>(sy);
    const std::int64_t y_hi = std::min(y_lo + 1, crop_h - 1);
    const double fy = sy - static_cast<double>(y_lo);
    for (std::int64_t x = 0; x < width; ++x) {
      const double sx = clamp((static_cast<double>(x) + 0.5) * static_cast<double>(crop_w) / static_cast<double>(width) - 0.5, crop_w - 1);
      const auto x_lo = static_cast<std::int64_t>(sx);
      const std::int64_t x_hi = std::min(x_lo + 1, crop_w - 1);
      const double fx = sx - static_cast<double>(x_lo);
      auto at = [&](std::int64_t yy, std::int64_t xx, int c) {
        return static_cast<double>(image.pixels[static_cast<std::size_t>(((y0 + yy) * w + (x0 + xx)) * 3 + c)]);
      };
      for (int c = 0; c < 3; ++c) {
        const double top = at(y_lo, x_lo, c) * (1 - fx) + at(y_lo, x_hi, c) * fx;
        const double bottom = at(y_hi, x_lo, c) * (1 - fx) + at(y_hi, x_hi, c) * fx;
        out[(y * width + x) * 3 + c] = static_cast<float>((top * (1 - fy) + bottom * fy) / 255.0);
      }
    }
  }
}

struct image_options {
  std::int64_t height = 0, width = 0;  // the model's image size
  std::int64_t classes = 1000;         // labels must lie in [0, classes)
  std::string images_subdirectory = "train";
};

// The images of a labels file, decoded a batch at a time. Construction reads
// and checks the whole labels file (format, label range, that every image
// exists); decoding errors come when a batch is read, naming the image and
// its labels-file line.
class image_dataset {
 public:
  image_dataset(const std::filesystem::path& directory, const std::filesystem::path& labels_file,
                image_options options)
      : options_(std::move(options)) {
    detail::check_positive(options_.height, "image height", limits::max_image_side);
    detail::check_positive(options_.width, "image width", limits::max_image_side);
    detail::check_positive(options_.classes, "class count", (std::int64_t{1} << 31) - 1);
    labels_file_ = labels_file.is_absolute() ? labels_file : directory / labels_file;
    const auto images = directory / options_.images_subdirectory;
    detail::line_reader in(labels_file_, "labels file");
    std::string line;
    while (in.next(line)) {
      const auto n = in.line_number();
      std::vector<std::string_view> fields;
      detail::for_each_word(line, [&](std::string_view w) {
        if (fields.size() < 3) fields.push_back(w);
      });
      if (fields.size() != 2)
        detail::fail(labels_file_, n,
                     typemesh::detail::cat("expected 'relative/path label', got ", fields.size(), " fields"));
      const std::filesystem::path relative{std::string(fields[0])};
      if (relative.is_absolute())
        detail::fail(labels_file_, n, "image path '" + relative.string() + "' must be relative to " + images.string());
      std::int64_t label = 0;
      const auto [end, ec] = std::from_chars(fields[1].data(), fields[1].data() + fields[1].size(), label);
      if (ec != std::errc() || end != fields[1].data() + fields[1].size())
        detail::fail(labels_file_, n, "label '" + std::string(fields[1]) + "' is not an integer");
      if (label < 0 || label >= options_.classes)
        detail::fail(labels_file_, n,
                     typemesh::detail::cat("label ", label, " is outside [0, ", options_.classes, ") classes"));
      const auto path = images / relative;
      std::error_code exists_ec;
      if (!std::filesystem::is_regular_file(path, exists_ec))
        detail::fail(labels_file_, n, "image " + path.string() + " not found");
      if (static_cast<std::int64_t>(entries_.size()) >= limits::max_image_entries)
        detail::fail(labels_file_, n,
                     typemesh::detail::cat("more than ", limits::max_image_entries, " lines (the cap on labels files)"));
      entries_.push_back({path, static_cast<std::int32_t>(label), n});
    }
    if (entries_.empty()) detail::fail(labels_file_, 0, "the labels file lists no images");
  }

  std::int64_t size() const { return static_cast<std::int64_t>(entries_.size()); }

  // Rows [first_row, first_row + rows) of the global batch at `step`: images
  // (step * batch + r) mod size(), in labels-file order.
  image_batch batch(std::int64_t step, std::int64_t batch, std::int64_t first_row = 0, std::int64_t rows = -1) const {
    detail::check_positive(batch, "image batch size", limits::max_batch_elements);
    if (step < 0) throw data_error(typemesh::detail::cat("image batch: step must not be negative, got ", step));
    if (rows < 0) rows = batch - first_row;
    detail::check_rows(batch, first_row, rows);
    const std::int64_t per_image = options_.height * options_.width * 3;
    const std::int64_t n = detail::checked_product(rows, per_image, limits::max_batch_elements, "image batch");
    image_batch out;
    out.rows = rows;
    out.height = options_.height;
    out.width = options_.width;
    out.pixels.resize(static_cast<std::size_t>(n));
    out.labels.resize(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& e = entries_[static_cast<std::size_t>(detail::wrapped_index(step, batch, first_row + r, size()))];
      const std::string where = typemesh::detail::cat(e.path.string(), " (", labels_file_.string(), ":", e.line, "): ");
      const auto image = decode_jpeg(jpeg_detail::read_bytes(e.path, where), where);
      crop_resize(image, options_.height, options_.width, out.pixels.data() + r * per_image);
      out.labels[static_cast<std::size_t>(r)] = e.label;
    }
    return out;
  }

 private:
  struct entry {
    std::filesystem::path path;
    std::int32_t label;
    std::int64_t line;
  };
  image_options options_;
  std::filesystem::path labels_file_;
  std::vector<entry> entries_;
};

}  // namespace typemesh::io

// typemesh-vocab: builds a vocabulary file from a text, for the text loaders
// (docs/data.md). Words are split on spaces and tabs and listed by
// descending count, ties in byte order, after the reserved "<pad>" and
// "<unk>" (ids 0 and 1), up to --size words in all.
//
//   typemesh-vocab [--size N] [--no-reserved] TEXT VOCABULARY
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <typemesh/io/text.hpp>
#include <vector>

namespace {

constexpr const char* usage =
    "usage: typemesh-vocab [--size N] [--no-reserved] TEXT VOCABULARY\n"
    "Writes VOCABULARY, one word per line (a line's index is its id): <pad> and <unk>\n"
    "first, then TEXT's words (split on spaces and tabs) by descending count, ties in\n"
    "byte order.\n"
    "  --size N        at most N words in all (default: every word of TEXT)\n"
    "  --no-reserved   leave out <pad> and <unk>\n";

int fail(const std::string& message) {
  std::fprintf(stderr, "typemesh-vocab: %s\n%s", message.c_str(), usage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t size = 0;
  bool reserved = true;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(usage, stdout);
      return 0;
    } else if (arg == "--no-reserved") {
      reserved = false;
    } else if (arg == "--size") {
      if (i + 1 == argc) return fail("option --size needs a number");
      const std::string_view value = argv[++i];
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), size);
      if (ec != std::errc() || end != value.data() + value.size() || size < 1 ||
          size > typemesh::io::limits::max_vocabulary_words)
        return fail("option --size needs an integer from 1 to " +
                    std::to_string(typemesh::io::limits::max_vocabulary_words) + ", got '" + std::string(value) + "'");
    } else if (arg.starts_with("-") && arg.size() > 1) {
      return fail("unknown option '" + std::string(arg) + "'");
    } else {
      files.emplace_back(arg);
    }
  }
  if (files.size() != 2) return fail("expected TEXT and VOCABULARY, got " + std::to_string(files.size()) + " files");
  try {
    const auto words = reserved ? typemesh::io::build_vocabulary(files[0], size)
                                : typemesh::io::build_vocabulary(files[0], size, {});
    typemesh::io::write_vocabulary(files[1], words);
    std::printf("typemesh-vocab: %zu words from %s written to %s\n", words.size(), files[0].c_str(), files[1].c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

#include "examples/train_gpt/char_corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#ifndef ZS_TRAIN_GPT_DATA_DIR
#error "data.cmake defines ZS_TRAIN_GPT_DATA_DIR (the absolute path of examples/train_gpt/data)"
#endif

namespace zs {
namespace {

// Appends the bytes of `path` to `out`. Errors name the path.
Status AppendFile(const std::string& path, std::string& out) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    return NotFoundError(fmt::format("corpus file '{}' does not exist", path));
  }
  if (std::filesystem::is_directory(status)) {
    return InvalidArgumentError(fmt::format("corpus path '{}' is a directory, not a file", path));
  }
  // A device (/dev/zero) or a pipe would be read without end; a file above the bound would not
  // fit the int32 token positions the sampler uses.
  if (!std::filesystem::is_regular_file(status)) {
    return InvalidArgumentError(fmt::format(
        "corpus path '{}' is not a regular file (a device, pipe or socket); give a text file",
        path));
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && out.size() + size > kMaxCorpusBytes) {
    return InvalidArgumentError(fmt::format(
        "corpus file '{}' holds {} bytes; with the {} bytes before it the corpus would exceed "
        "{} bytes, the most train_gpt loads",
        path, size, out.size(), kMaxCorpusBytes));
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return IoError(fmt::format("cannot open corpus file '{}': {}", path, std::strerror(errno)));
  }
  const size_t before = out.size();
  std::array<char, 1 << 16> buffer;
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) {
    out.append(buffer.data(), n);
  }
  const bool failed = std::ferror(f) != 0;
  const int saved_errno = errno;
  std::fclose(f);
  if (failed) {
    return IoError(fmt::format("reading corpus file '{}' failed after {} bytes: {}", path,
                               out.size() - before, std::strerror(saved_errno)));
  }
  if (out.size() == before) {
    return InvalidArgumentError(fmt::format("corpus file '{}' is empty", path));
  }
  return OkStatus();
}

}  // namespace

StatusOr<CharCorpus> CharCorpus::Load(const std::string& path) {
  return Load(std::span<const std::string>(&path, 1));
}

StatusOr<CharCorpus> CharCorpus::Load(std::span<const std::string> paths) {
  if (paths.empty()) return InvalidArgumentError("CharCorpus::Load: the list of paths is empty");
  std::string text;
  for (const std::string& path : paths) ZS_RETURN_IF_ERROR(AppendFile(path, text));
  return Build(std::move(text), std::vector<std::string>(paths.begin(), paths.end()));
}

StatusOr<CharCorpus> CharCorpus::FromText(std::string text, std::string name) {
  if (text.empty()) return InvalidArgumentError(fmt::format("corpus text '{}' is empty", name));
  return Build(std::move(text), {std::move(name)});
}

StatusOr<CharCorpus> CharCorpus::Build(std::string text, std::vector<std::string> sources) {
  CharCorpus corpus;
  bool seen[256] = {};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  std::fill(std::begin(corpus.token_of_byte_), std::end(corpus.token_of_byte_), -1);
  for (int b = 0; b < 256; ++b) {  // ascending byte order: the vocabulary comes out sorted
    if (!seen[b]) continue;
    corpus.token_of_byte_[b] = static_cast<int32_t>(corpus.vocab_.size());
    corpus.vocab_.push_back(static_cast<char>(b));
  }
  corpus.tokens_.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    corpus.tokens_[i] = corpus.token_of_byte_[static_cast<unsigned char>(text[i])];
  }
  corpus.sources_ = std::move(sources);
  return corpus;
}

std::span<const int32_t> CharCorpus::train_tokens() const {
  return tokens().subspan(0, static_cast<size_t>(split_index()));
}

std::span<const int32_t> CharCorpus::val_tokens() const {
  return tokens().subspan(static_cast<size_t>(split_index()));
}

StatusOr<std::vector<int32_t>> CharCorpus::Encode(std::string_view text) const {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const int32_t token = token_of_byte_[byte];
    if (token < 0) {
      return InvalidArgumentError(
          fmt::format("CharCorpus::Encode: byte 0x{:02x} at position {} of a {}-byte text is not "
                      "in the vocabulary of {} bytes",
                      byte, i, text.size(), vocab_.size()));
    }
    out[i] = token;
  }
  return out;
}

std::string CharCorpus::Decode(std::span<const int32_t> tokens) const {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    ZS_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size(),
             "CharCorpus::Decode: token {} at position {} is outside the vocabulary [0, {})",
             tokens[i], i, vocab_size());
    out[i] = vocab_[static_cast<size_t>(tokens[i])];
  }
  return out;
}

std::string DefaultTrainGptCorpusPath() { return ZS_TRAIN_GPT_DATA_DIR "/shakespeare.txt"; }

}  // namespace zs

// CharCorpus: the text that the train_gpt demo learns, as a byte-level vocabulary and tokens.
//
// Contract
// - Load() reads one file, or a list of files whose bytes are concatenated in list order (no
//   separator is added), into memory. Every failure is a Status naming the path: a missing file
//   is NOT_FOUND, an unreadable one IO_ERROR, an empty one (or an empty list) INVALID_ARGUMENT,
//   and so is anything but a regular file (/dev/zero, a pipe) or a corpus above
//   kMaxCorpusBytes (1 GiB) in all.
// - The vocabulary is the sorted set of distinct bytes of the text: token t stands for byte
//   vocab()[t], and tokens are the int32 values [0, vocab_size()). Any bytes work (the text
//   need not be ASCII or UTF-8); a UTF-8 character outside ASCII is several tokens.
// - Split: the last 10% of the tokens (floor(size() / 10) of them) are held out for
//   validation; training uses the first size() - floor(size() / 10). Both are contiguous views
//   of tokens(), so a sequence never straddles the split inside one view.
// - A CharCorpus is an immutable value once loaded: every method is const and safe to call
//   from any number of threads. The spans it returns live as long as the corpus.
// - Nothing here blocks except Load (file reads on the calling thread).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace zs {

inline constexpr uintmax_t kMaxCorpusBytes = uintmax_t{1} << 30;

class CharCorpus {
 public:
  // Reads `path`. Errors name the path (see the contract).
  static StatusOr<CharCorpus> Load(const std::string& path);
  // Reads each of `paths` in order and concatenates their bytes. Errors name the failing path.
  static StatusOr<CharCorpus> Load(std::span<const std::string> paths);
  // Builds a corpus from text already in memory (tests, generated data). `name` is used in
  // error messages only. An empty text is INVALID_ARGUMENT.
  static StatusOr<CharCorpus> FromText(std::string text, std::string name = "<text>");

  // Number of distinct bytes in the text, in [1, 256].
  int vocab_size() const { return static_cast<int>(vocab_.size()); }
  // The sorted distinct bytes: vocab()[t] is the byte of token t.
  const std::string& vocab() const { return vocab_; }

  // All tokens of the text, in order (size() of them).
  std::span<const int32_t> tokens() const { return tokens_; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

  // The first size() - floor(size() / 10) tokens, and the last floor(size() / 10).
  std::span<const int32_t> train_tokens() const;
  std::span<const int32_t> val_tokens() const;
  // Index of the first validation token: size() - size() / 10.
  int64_t split_index() const { return size() - size() / 10; }

  // Encodes `text`; INVALID_ARGUMENT naming the byte and its position if a byte of `text` is
  // not in the vocabulary.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  // Decodes tokens back to bytes (for printing samples). A token outside [0, vocab_size()) is a
  // programmer bug (the model's vocabulary is vocab_size()) and fails a ZS_CHECK.
  std::string Decode(std::span<const int32_t> tokens) const;

  // The files this corpus was read from, or {name} for FromText.
  const std::vector<std::string>& sources() const { return sources_; }

 private:
  CharCorpus() = default;
  static StatusOr<CharCorpus> Build(std::string text, std::vector<std::string> sources);

  std::string vocab_;                // sorted distinct bytes
  int32_t token_of_byte_[256] = {};  // -1 for bytes not in the vocabulary
  std::vector<int32_t> tokens_;
  std::vector<std::string> sources_;
};

// The corpus shipped with the demo: examples/train_gpt/data/shakespeare.txt, as an absolute path
// in the source tree this library was built from (see data/README.md for its source and license).
std::string DefaultTrainGptCorpusPath();

}  // namespace zs

// Token files (docs/formats/data.md): a 32-byte header ("HPTOKENS", version, dtype, count, vocab)
// followed by `count` little-endian token ids. TokenSource reads a token file or, when the file does
// not start with the magic, any text file as byte tokens, both memory-mapped.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "util/mapped_file.h"

namespace hp {

inline constexpr char kTokenFileMagic[8] = {'H', 'P', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderBytes = 32;

enum class TokenDType : uint32_t { kUint8 = 1, kUint16 = 2, kInt32 = 3 };

// "uint8", "uint16", "int32"; parse throws hp::Error listing the valid names.
std::string_view token_dtype_name(TokenDType d);
TokenDType parse_token_dtype(std::string_view name);
size_t token_dtype_bytes(TokenDType d);

// The smallest dtype that holds every id below `vocab`.
TokenDType token_dtype_for_vocab(int64_t vocab);

// Writes a token file atomically. Every token must lie in [0, vocab) and fit `dtype`;
// vocab is recorded in the header (0 = not recorded).
void write_token_file(const std::string& path, std::span<const int32_t> tokens, TokenDType dtype,
                      int64_t vocab);

// A read-only view of tokens from a token file or a raw text file (bytes as tokens).
class TokenSource {
 public:
  // Opens and validates `path`: header, version, dtype, size against count, and every id against
  // the header's vocab. Throws hp::Error saying what is wrong and how to remake the file.
  static TokenSource open(const std::string& path);

  int64_t size() const { return count_; }
  bool is_text() const { return is_text_; }
  TokenDType dtype() const { return dtype_; }
  int64_t header_vocab() const { return header_vocab_; }  // 0 when unknown (text or unrecorded)
  int64_t max_token() const { return max_token_; }        // -1 for an empty source
  const std::string& path() const { return file_.path(); }

  int32_t at(int64_t i) const;
  // out[0..n) = tokens[start .. start+n); the range must lie inside the source.
  void copy(int64_t start, int64_t n, int32_t* out) const;

 private:
  MappedFile file_;
  const uint8_t* tokens_ = nullptr;
  int64_t count_ = 0;
  TokenDType dtype_ = TokenDType::kUint8;
  int64_t header_vocab_ = 0;
  int64_t max_token_ = -1;
  bool is_text_ = false;
};

}  // namespace hp

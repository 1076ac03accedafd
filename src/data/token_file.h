// Token files (docs/formats/data.md): a 32-byte header ("HPTOKENS", version, dtype, count, vocab)
// followed by `count` little-endian token ids. TokenSource reads them, text files (one token per
// byte) and the token files of other trainers (llm.c shards, nanoGPT .bin, Megatron indexed
// datasets: data/token_formats.h, docs/formats/foreign-tokens.md), all memory-mapped.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_formats.h"
#include "util/mapped_file.h"

namespace hp {

// The smallest dtype that holds every id below `vocab`.
TokenDType token_dtype_for_vocab(int64_t vocab);

// Writes a token file atomically. Every token must lie in [0, vocab) and fit `dtype`;
// vocab is recorded in the header (0 = not recorded).
void write_token_file(const std::string& path, std::span<const int32_t> tokens, TokenDType dtype,
                      int64_t vocab);

// How TokenSource::open reads a path.
struct TokenOpenOptions {
  DataFormat format = DataFormat::kAuto;  // kAuto: detect (docs/formats/foreign-tokens.md)
  // The model's vocab_size: ids at or above it are an error naming their position (0: only the
  // file's own bound is checked). Files that do not record a bound (nanoGPT .bin) need it.
  int64_t vocab = 0;
};

// A read-only view of tokens from any --data source.
class TokenSource {
 public:
  // Opens and validates `path` in the given or detected format: header, version, dtype, size
  // against count, and every id against the file's and the model's vocab. Throws hp::Error saying
  // what is wrong and what to do. A Megatron dataset is named by its prefix, prefix.bin or
  // prefix.idx.
  static TokenSource open(const std::string& path, const TokenOpenOptions& options = {});

  int64_t size() const { return count_; }
  DataFormat format() const { return format_; }
  bool is_text() const { return format_ == DataFormat::kText; }
  TokenDType dtype() const { return dtype_; }
  int64_t header_vocab() const { return header_vocab_; }  // 0 when unknown (text or unrecorded)
  int64_t max_token() const { return max_token_; }        // -1 for an empty source
  const std::string& path() const { return file_.path(); }
  // Token offset where each document starts, then the total; empty when the format has no
  // document boundaries (only Megatron datasets have them).
  const std::vector<int64_t>& document_offsets() const { return document_offsets_; }
  // "llm.c token shard, uint16" etc., for headers.
  std::string describe() const;

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
  DataFormat format_ = DataFormat::kText;
  std::vector<int64_t> document_offsets_;
};

}  // namespace hp

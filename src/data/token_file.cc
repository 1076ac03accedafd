// Token file writing, validation and reading.
#include "data/token_file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <ostream>
#include <vector>

#include "util/atomic_file.h"
#include "util/error.h"

namespace hp {

namespace {

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

int64_t read_token(const uint8_t* base, TokenDType d, int64_t i) {
  switch (d) {
    case TokenDType::kUint8:
      return base[i];
    case TokenDType::kUint16:
      return static_cast<int64_t>(base[2 * i]) | (static_cast<int64_t>(base[2 * i + 1]) << 8);
    case TokenDType::kInt32:
      return static_cast<int32_t>(get_u32(base + 4 * i));
  }
  return 0;
}

}  // namespace

std::string_view token_dtype_name(TokenDType d) {
  switch (d) {
    case TokenDType::kUint8:
      return "uint8";
    case TokenDType::kUint16:
      return "uint16";
    case TokenDType::kInt32:
      return "int32";
  }
  return "?";
}

TokenDType parse_token_dtype(std::string_view name) {
  if (name == "uint8") return TokenDType::kUint8;
  if (name == "uint16") return TokenDType::kUint16;
  if (name == "int32") return TokenDType::kInt32;
  fail("unknown token dtype '{}' (use uint8, uint16 or int32)", name);
}

size_t token_dtype_bytes(TokenDType d) {
  switch (d) {
    case TokenDType::kUint8:
      return 1;
    case TokenDType::kUint16:
      return 2;
    case TokenDType::kInt32:
      return 4;
  }
  return 0;
}

TokenDType token_dtype_for_vocab(int64_t vocab) {
  if (vocab <= 256) return TokenDType::kUint8;
  if (vocab <= 65536) return TokenDType::kUint16;
  return TokenDType::kInt32;
}

void write_token_file(const std::string& path, std::span<const int32_t> tokens, TokenDType dtype,
                      int64_t vocab) {
  HP_CHECK(vocab >= 0 && vocab <= std::numeric_limits<int32_t>::max(),
           "token file '{}': vocab {} out of range", path, vocab);
  const int64_t limit = dtype == TokenDType::kUint8    ? 256
                        : dtype == TokenDType::kUint16 ? 65536
                                                       : std::numeric_limits<int32_t>::max();
  HP_CHECK(vocab <= limit, "token file '{}': vocab {} does not fit dtype {} (use a wider dtype)",
           path, vocab, token_dtype_name(dtype));
  const int64_t bound = vocab > 0 ? vocab : limit;
  for (size_t i = 0; i < tokens.size(); ++i) {
    HP_CHECK(tokens[i] >= 0 && tokens[i] < bound,
             "token file '{}': token {} at position {} is outside [0, {})", path, tokens[i], i,
             bound);
  }
  uint8_t header[kTokenFileHeaderBytes] = {};
  std::memcpy(header, kTokenFileMagic, 8);
  put_u32(header + 8, kTokenFileVersion);
  put_u32(header + 12, static_cast<uint32_t>(dtype));
  put_u64(header + 16, tokens.size());
  put_u32(header + 24, static_cast<uint32_t>(vocab));
  put_u32(header + 28, 0);
  write_file_atomic(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    const size_t w = token_dtype_bytes(dtype);
    std::vector<uint8_t> buf;
    constexpr size_t kChunk = 1 << 16;
    for (size_t start = 0; start < tokens.size(); start += kChunk) {
      size_t n = std::min(kChunk, tokens.size() - start);
      buf.assign(n * w, 0);
      for (size_t i = 0; i < n; ++i) {
        uint32_t v = static_cast<uint32_t>(tokens[start + i]);
        for (size_t b = 0; b < w; ++b) buf[i * w + b] = static_cast<uint8_t>(v >> (8 * b));
      }
      out.write(reinterpret_cast<const char*>(buf.data()), buf.size());
    }
  });
}

TokenSource TokenSource::open(const std::string& path) {
  TokenSource s;
  s.file_ = MappedFile(path);
  const uint8_t* p = s.file_.data();
  const size_t size = s.file_.size();
  const size_t prefix = std::min<size_t>(size, 8);
  // A file is a token file when it starts with the magic (or with a prefix of it, if shorter: then
  // it is a truncated token file, not text).
  if (size == 0 || std::memcmp(p, kTokenFileMagic, prefix) != 0) {
    // Not a token file: every byte of the text is one token.
    s.is_text_ = true;
    s.tokens_ = p;
    s.count_ = static_cast<int64_t>(size);
    s.dtype_ = TokenDType::kUint8;
    for (size_t i = 0; i < size; ++i) s.max_token_ = std::max<int64_t>(s.max_token_, p[i]);
    return s;
  }
  HP_CHECK(size >= kTokenFileHeaderBytes,
           "token file '{}' is truncated: {} bytes, shorter than the {}-byte header (remake it "
           "with 'helixpipe tokenize')",
           path, size, kTokenFileHeaderBytes);
  const uint32_t version = get_u32(p + 8);
  HP_CHECK(version == kTokenFileVersion,
           "token file '{}' has format version {}; this helixpipe reads version {} (remake it with "
           "'helixpipe tokenize')",
           path, version, kTokenFileVersion);
  const uint32_t dt = get_u32(p + 12);
  HP_CHECK(dt >= 1 && dt <= 3,
           "token file '{}': unknown dtype code {} in the header (1 = uint8, 2 = uint16, 3 = int32)",
           path, dt);
  s.dtype_ = static_cast<TokenDType>(dt);
  const uint64_t count = get_u64(p + 16);
  s.header_vocab_ = get_u32(p + 24);
  HP_CHECK(get_u32(p + 28) == 0, "token file '{}': reserved header field is not zero (corrupt?)",
           path);
  const size_t w = token_dtype_bytes(s.dtype_);
  const uint64_t have = size - kTokenFileHeaderBytes;
  HP_CHECK(count <= have / w && count * w == have,
           "token file '{}': the header says {} tokens of {} bytes each but the file holds {} "
           "bytes after the header; the file is truncated or corrupt, remake it with 'helixpipe "
           "tokenize'",
           path, count, w, have);
  s.tokens_ = p + kTokenFileHeaderBytes;
  s.count_ = static_cast<int64_t>(count);
  const int64_t bound = s.header_vocab_ > 0 ? s.header_vocab_ : std::numeric_limits<int32_t>::max();
  for (int64_t i = 0; i < s.count_; ++i) {
    int64_t t = read_token(s.tokens_, s.dtype_, i);
    if (t < 0 || t >= bound) {
      fail("token file '{}': token {} at position {} is outside [0, {}) (corrupt file?)", path, t,
           i, bound);
    }
    s.max_token_ = std::max(s.max_token_, t);
  }
  return s;
}

int32_t TokenSource::at(int64_t i) const {
  HP_CHECK(i >= 0 && i < count_, "token index {} outside '{}' ({} tokens)", i, path(), count_);
  return static_cast<int32_t>(read_token(tokens_, dtype_, i));
}

void TokenSource::copy(int64_t start, int64_t n, int32_t* out) const {
  HP_CHECK(start >= 0 && n >= 0 && start + n <= count_,
           "token range [{}, {}) outside '{}' ({} tokens)", start, start + n, path(), count_);
  if (dtype_ == TokenDType::kUint8) {
    for (int64_t i = 0; i < n; ++i) out[i] = tokens_[start + i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(read_token(tokens_, dtype_, start + i));
  }
}

}  // namespace hp

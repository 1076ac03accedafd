// Token file writing; opening every --data format (the parsing is in token_formats.cc).
#include "data/token_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
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
}  // namespace

TokenDType token_dtype_for_vocab(int64_t vocab) {
  if (vocab <= 256) return TokenDType::kUint8;
  if (vocab <= 65536) return TokenDType::kUint16;
  return TokenDType::kInt32;
}

void write_token_file(const std::string& path, std::span<const int32_t> tokens, TokenDType dtype,
                      int64_t vocab) {
  HP_CHECK(vocab >= 0 && vocab <= std::numeric_limits<int32_t>::max(),
           "token file '{}': vocab {} out of range", path, vocab);
  HP_CHECK(dtype != TokenDType::kUint32,
           "token file '{}': dtype uint32 cannot be written (use uint8, uint16 or int32)", path);
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

namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && std::string_view(s).substr(s.size() - tail.size()) == tail;
}

bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The prefix of a Megatron dataset named by `path` (PREFIX, PREFIX.bin or PREFIX.idx) when `format`
// asks for one or, with kAuto, when the companion files say it is one; "" otherwise.
std::string megatron_prefix(const std::string& path, DataFormat format) {
  const bool named_by_file = ends_with(path, ".idx") || ends_with(path, ".bin");
  const std::string prefix = named_by_file ? path.substr(0, path.size() - 4) : path;
  const bool idx = is_file(prefix + ".idx"), bin = is_file(prefix + ".bin");
  const auto missing = [&] {
    return fmt::format(
        "Megatron indexed dataset '{}': '{}' is missing; such a dataset is two files, PREFIX.bin "
        "(the tokens) and PREFIX.idx (the index), and --data names either or PREFIX",
        prefix, !bin ? prefix + ".bin" : prefix + ".idx");
  };
  if (format == DataFormat::kMegatron) {
    if (!idx || !bin) throw Error(missing());
    return prefix;
  }
  if (format != DataFormat::kAuto) return "";
  if (ends_with(path, ".idx")) {
    if (!bin) throw Error(missing());
    return prefix;
  }
  if (ends_with(path, ".bin")) {
    if (!idx) return "";
    if (!bin) throw Error(missing());
    return prefix;
  }
  // A bare prefix: only when `path` itself is not a file.
  if (!is_file(path) && (idx || bin)) {
    if (!idx || !bin) throw Error(missing());
    return prefix;
  }
  return "";
}

// Ids must lie below the file's own bound and the model's vocab; the message says which one.
int64_t id_bound(int64_t header_vocab, TokenDType dtype, int64_t model_vocab) {
  int64_t bound = header_vocab > 0 ? header_vocab : int64_t{std::numeric_limits<int32_t>::max()};
  if (dtype == TokenDType::kUint8) bound = std::min<int64_t>(bound, 256);
  if (dtype == TokenDType::kUint16) bound = std::min<int64_t>(bound, 65536);
  if (model_vocab > 0) bound = std::min(bound, model_vocab);
  return bound;
}

std::string id_hint(DataFormat format, int64_t bound, int64_t header_vocab, int64_t model_vocab) {
  if (model_vocab > 0 && bound == model_vocab &&
      (header_vocab == 0 || model_vocab < header_vocab)) {
    std::string s = fmt::format(
        "the model's vocab_size is {}: the data was tokenized for a larger vocabulary, so use a "
        "model (config vocab_size) that covers it",
        model_vocab);
    if (format == DataFormat::kNanoGpt)
      s += ", or, if the file is not raw uint16 tokens, name its format with --data-format";
    return s;
  }
  return "the file is corrupt or was written for another vocabulary; remake it";
}

// A file that auto-detection took for text but that holds a NUL byte is almost certainly binary
// (token ids of another format, a compressed or pickled file): training on its bytes would run
// without complaint and learn nothing useful, so it is refused unless text is asked for by name.
void refuse_binary_as_text(std::span<const uint8_t> bytes, const std::string& path) {
  const void* nul = bytes.empty() ? nullptr : std::memchr(bytes.data(), 0, bytes.size());
  if (nul == nullptr) return;
  const auto at = static_cast<const uint8_t*>(nul) - bytes.data();
  fail("'{}' has no known token-file header, so it would be read as text, but it holds a NUL byte "
       "at offset {}, which text does not: if it is a token file, name its format with "
       "--data-format=hptokens, llmc, nanogpt or megatron (docs/formats/data.md); to train on its "
       "raw bytes anyway, pass --data-format=text",
       path, at);
}

}  // namespace

TokenSource TokenSource::open(const std::string& path, const TokenOpenOptions& options) {
  TokenSource s;
  const std::string prefix = megatron_prefix(path, options.format);
  if (!prefix.empty()) {
    s.file_ = MappedFile(prefix + ".bin");
    if (options.format == DataFormat::kAuto) {
      // The .idx companion says Megatron; a .bin that carries another format's magic is ambiguous.
      const std::span<const uint8_t> head(s.file_.data(), s.file_.size());
      const DataFormat other = detect_token_format(head, "");
      if (other == DataFormat::kHpTokens || other == DataFormat::kLlmc) {
        fail("'{}.bin' starts with the magic number of another format ({}), but '{}.idx' next to "
             "it makes it a Megatron indexed dataset too; say which it is with --data-format={} "
             "or --data-format=megatron",
             prefix, data_format_what(other), prefix, data_format_name(other));
      }
    }
    const std::string idx_path = prefix + ".idx";
    const MappedFile idx(idx_path);
    MegatronIndex m =
        parse_megatron_index({idx.data(), idx.size()}, s.file_.size(), idx_path);
    s.format_ = DataFormat::kMegatron;
    s.dtype_ = m.dtype;
    s.tokens_ = s.file_.data();
    s.count_ = m.tokens;
    s.document_offsets_ = std::move(m.document_offsets);
  } else {
    s.file_ = MappedFile(path);
    const std::span<const uint8_t> bytes(s.file_.data(), s.file_.size());
    const DataFormat format = options.format == DataFormat::kAuto
                                  ? detect_token_format(bytes, path)
                                  : options.format;
    if (options.format == DataFormat::kAuto && format == DataFormat::kText)
      refuse_binary_as_text(bytes, path);
    const TokenLayout l = parse_token_layout(bytes, format, path);
    s.format_ = l.format;
    s.dtype_ = l.dtype;
    s.tokens_ = s.file_.data() + l.offset;
    s.count_ = l.count;
    s.header_vocab_ = l.header_vocab;
  }
  if (s.format_ == DataFormat::kText) {
    // Bytes are ids below 256; the model's vocab is checked by SequenceReader.
    for (int64_t i = 0; i < s.count_; ++i)
      s.max_token_ = std::max<int64_t>(s.max_token_, s.tokens_[i]);
    return s;
  }
  HP_CHECK(s.format_ != DataFormat::kNanoGpt || options.vocab > 0,
           "nanoGPT token file '{}' (raw uint16, no header) does not record its vocabulary; its "
           "ids can only be checked against the model's vocab_size, so open it with a model "
           "(train, grad, eval)",
           s.path());
  const int64_t bound = id_bound(s.header_vocab_, s.dtype_, options.vocab);
  s.max_token_ =
      check_token_ids(s.tokens_, s.dtype_, s.count_, bound, data_format_what(s.format_), s.path(),
                      id_hint(s.format_, bound, s.header_vocab_, options.vocab));
  return s;
}

std::string TokenSource::describe() const {
  if (format_ == DataFormat::kText) return "text, one token per byte";
  std::string out = fmt::format("{}, {}", data_format_what(format_), token_dtype_name(dtype_));
  if (!document_offsets_.empty())
    out += fmt::format(", {} documents", document_offsets_.size() - 1);
  return out;
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

// Header parsing and checks of every token layout --data reads (docs/formats/foreign-tokens.md).
#include "data/token_formats.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "util/error.h"
#include "util/nearest_name.h"

namespace hp {

namespace {

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

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// The tokens fill the rest of the file exactly: count * width == size - offset, without overflow.
bool fills_exactly(uint64_t count, size_t width, uint64_t have) {
  return count <= have / width && count * width == have;
}

TokenLayout parse_hptokens(std::span<const uint8_t> b, const std::string& path) {
  HP_CHECK(b.size() >= kTokenFileHeaderBytes,
           "token file '{}' is truncated: {} bytes, shorter than the {}-byte header (remake it "
           "with 'helixpipe tokenize')",
           path, b.size(), kTokenFileHeaderBytes);
  HP_CHECK(
      std::memcmp(b.data(), kTokenFileMagic, 8) == 0,
      "'{}' does not start with the HPTOKENS magic, so it is not a helixpipe token file (leave "
      "out --data-format to detect its format)",
      path);
  const uint8_t* p = b.data();
  const uint32_t version = get_u32(p + 8);
  HP_CHECK(version == kTokenFileVersion,
           "token file '{}' has format version {}; this helixpipe reads version {} (remake it with "
           "'helixpipe tokenize')",
           path, version, kTokenFileVersion);
  const uint32_t dt = get_u32(p + 12);
  HP_CHECK(
      dt >= 1 && dt <= 3,
      "token file '{}': unknown dtype code {} in the header (1 = uint8, 2 = uint16, 3 = int32)",
      path, dt);
  TokenLayout l;
  l.format = DataFormat::kHpTokens;
  l.dtype = static_cast<TokenDType>(dt);
  l.offset = kTokenFileHeaderBytes;
  const uint64_t count = get_u64(p + 16);
  l.header_vocab = get_u32(p + 24);
  HP_CHECK(get_u32(p + 28) == 0, "token file '{}': reserved header field is not zero (corrupt?)",
           path);
  const size_t w = token_dtype_bytes(l.dtype);
  const uint64_t have = b.size() - kTokenFileHeaderBytes;
  HP_CHECK(fills_exactly(count, w, have),
           "token file '{}': the header says {} tokens of {} bytes each but the file holds {} "
           "bytes after the header; the file is truncated or corrupt, remake it with 'helixpipe "
           "tokenize'",
           path, count, w, have);
  l.count = static_cast<int64_t>(count);
  return l;
}

TokenLayout parse_llmc(std::span<const uint8_t> b, const std::string& path) {
  constexpr std::string_view kAsNanoGpt =
      "(if it is in fact a raw nanoGPT file whose first tokens look like the magic, pass "
      "--data-format=nanogpt)";
  HP_CHECK(b.size() >= 4,
           "'{}' is too short ({} bytes) to hold the llm.c magic; it is not an llm.c token shard",
           path, b.size());
  const int32_t magic = static_cast<int32_t>(get_u32(b.data()));
  HP_CHECK(magic != kLlmcEvalMagic,
           "'{}' is an llm.c evaluation file (magic {}: multiple-choice examples such as "
           "HellaSwag), not training tokens; pass one of its token shards (e.g. "
           "fineweb_train_000001.bin) instead",
           path, kLlmcEvalMagic);
  HP_CHECK(magic == kLlmcMagic || magic == kLlmcMagicLlama3,
           "'{}' does not start with an llm.c magic ({} or {}; found {}), so it is not an llm.c "
           "token shard (leave out --data-format to detect its format)",
           path, kLlmcMagic, kLlmcMagicLlama3, magic);
  HP_CHECK(b.size() >= kLlmcHeaderBytes,
           "llm.c token shard '{}' is truncated: {} bytes, shorter than its {}-byte header (256 "
           "int32); copy or prepare the shard again {}",
           path, b.size(), kLlmcHeaderBytes, kAsNanoGpt);
  const int32_t version = static_cast<int32_t>(get_u32(b.data() + 4));
  TokenLayout l;
  l.format = DataFormat::kLlmc;
  l.offset = kLlmcHeaderBytes;
  if (magic == kLlmcMagic && version == 1) {
    l.dtype = TokenDType::kUint16;
  } else if ((magic == kLlmcMagic && version == 2) || (magic == kLlmcMagicLlama3 && version == 7)) {
    l.dtype = TokenDType::kUint32;
  } else {
    fail(
        "llm.c token shard '{}' has magic {} with version {}; helixpipe reads magic {} with "
        "version 1 (uint16 tokens) or 2 (uint32), and magic {} with version 7 (uint32) {}",
        path, magic, version, kLlmcMagic, kLlmcMagicLlama3, kAsNanoGpt);
  }
  const int32_t count = static_cast<int32_t>(get_u32(b.data() + 8));
  HP_CHECK(count >= 0, "llm.c token shard '{}': the token count in the header is {} (corrupt)",
           path, count);
  const size_t w = token_dtype_bytes(l.dtype);
  const uint64_t have = b.size() - kLlmcHeaderBytes;
  HP_CHECK(fills_exactly(static_cast<uint64_t>(count), w, have),
           "llm.c token shard '{}': the header says {} tokens of {} bytes each but the file holds "
           "{} bytes after the {}-byte header; the shard is truncated or corrupt, copy or prepare "
           "it again {}",
           path, count, w, have, kLlmcHeaderBytes, kAsNanoGpt);
  l.count = count;
  return l;
}

TokenLayout parse_nanogpt(std::span<const uint8_t> b, const std::string& path) {
  HP_CHECK(b.size() % 2 == 0,
           "'{}' read as nanoGPT raw uint16 tokens (a .bin file without a header) has an odd size "
           "of {} bytes, so it is not whole uint16 tokens: the file is truncated, or it is not a "
           "token file (read it as text bytes with --data-format=text)",
           path, b.size());
  TokenLayout l;
  l.format = DataFormat::kNanoGpt;
  l.dtype = TokenDType::kUint16;
  l.count = static_cast<int64_t>(b.size() / 2);
  return l;
}

}  // namespace

std::string_view data_format_name(DataFormat f) {
  switch (f) {
    case DataFormat::kAuto:
      return "auto";
    case DataFormat::kText:
      return "text";
    case DataFormat::kHpTokens:
      return "hptokens";
    case DataFormat::kLlmc:
      return "llmc";
    case DataFormat::kNanoGpt:
      return "nanogpt";
    case DataFormat::kMegatron:
      return "megatron";
  }
  return "?";
}

DataFormat parse_data_format(std::string_view name) {
  std::vector<std::string> names;
  for (DataFormat f : {DataFormat::kAuto, DataFormat::kText, DataFormat::kHpTokens,
                       DataFormat::kLlmc, DataFormat::kNanoGpt, DataFormat::kMegatron}) {
    if (name == data_format_name(f)) return f;
    names.emplace_back(data_format_name(f));
  }
  fail("unknown data format '{}'{} (use auto, text, hptokens, llmc, nanogpt or megatron)", name,
       did_you_mean(name, names));
}

std::string_view data_format_what(DataFormat f) {
  switch (f) {
    case DataFormat::kAuto:
      return "data file";
    case DataFormat::kText:
      return "text file";
    case DataFormat::kHpTokens:
      return "token file";
    case DataFormat::kLlmc:
      return "llm.c token shard";
    case DataFormat::kNanoGpt:
      return "nanoGPT token file";
    case DataFormat::kMegatron:
      return "Megatron indexed dataset";
  }
  return "data file";
}

std::string_view token_dtype_name(TokenDType d) {
  switch (d) {
    case TokenDType::kUint8:
      return "uint8";
    case TokenDType::kUint16:
      return "uint16";
    case TokenDType::kInt32:
      return "int32";
    case TokenDType::kUint32:
      return "uint32";
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
    case TokenDType::kUint32:
      return 4;
  }
  return 0;
}

int64_t read_token(const uint8_t* base, TokenDType d, int64_t i) {
  switch (d) {
    case TokenDType::kUint8:
      return base[i];
    case TokenDType::kUint16:
      return static_cast<int64_t>(base[2 * i]) | (static_cast<int64_t>(base[2 * i + 1]) << 8);
    case TokenDType::kInt32:
      return static_cast<int32_t>(get_u32(base + 4 * i));
    case TokenDType::kUint32:
      return get_u32(base + 4 * i);
  }
  return 0;
}

DataFormat detect_token_format(std::span<const uint8_t> bytes, std::string_view path) {
  const size_t prefix = std::min<size_t>(bytes.size(), 8);
  if (!bytes.empty() && std::memcmp(bytes.data(), kTokenFileMagic, prefix) == 0)
    return DataFormat::kHpTokens;
  if (bytes.size() >= 4) {
    const int32_t magic = static_cast<int32_t>(get_u32(bytes.data()));
    if (magic == kLlmcMagic || magic == kLlmcMagicLlama3 || magic == kLlmcEvalMagic)
      return DataFormat::kLlmc;
  }
  if (ends_with(path, ".bin")) return DataFormat::kNanoGpt;
  return DataFormat::kText;
}

TokenLayout parse_token_layout(std::span<const uint8_t> bytes, DataFormat format,
                               const std::string& path) {
  switch (format) {
    case DataFormat::kText: {
      TokenLayout l;
      l.format = DataFormat::kText;
      l.count = static_cast<int64_t>(bytes.size());
      return l;
    }
    case DataFormat::kHpTokens:
      return parse_hptokens(bytes, path);
    case DataFormat::kLlmc:
      return parse_llmc(bytes, path);
    case DataFormat::kNanoGpt:
      return parse_nanogpt(bytes, path);
    case DataFormat::kAuto:
    case DataFormat::kMegatron:
      break;
  }
  fail("parse_token_layout('{}'): format {} is not a one-file layout", path,
       data_format_name(format));
}

MegatronIndex parse_megatron_index(std::span<const uint8_t> idx, size_t bin_bytes,
                                   const std::string& idx_path) {
  constexpr std::string_view kRemake =
      "prepare the dataset again with Megatron-LM's tools/preprocess_data.py";
  HP_CHECK(idx.size() >= 9 && std::memcmp(idx.data(), kMegatronIndexMagic, 9) == 0,
           "'{}' does not start with the Megatron index magic \"MMIDIDX\\x00\\x00\", so it is not "
           "the .idx file of a Megatron indexed dataset ({})",
           idx_path, kRemake);
  HP_CHECK(idx.size() >= kMegatronIndexHeaderBytes,
           "Megatron index '{}' is truncated: {} bytes, shorter than its {}-byte header; {}",
           idx_path, idx.size(), kMegatronIndexHeaderBytes, kRemake);
  const uint8_t* p = idx.data();
  const uint64_t version = get_u64(p + 9);
  HP_CHECK(version == 1, "Megatron index '{}' has version {}; helixpipe reads version 1", idx_path,
           version);
  MegatronIndex m;
  switch (p[17]) {
    case 1:
      m.dtype = TokenDType::kUint8;
      break;
    case 8:
      m.dtype = TokenDType::kUint16;
      break;
    case 4:
      m.dtype = TokenDType::kInt32;
      break;
    default:
      fail(
          "Megatron index '{}' has dtype code {}; token ids must be uint8 (code 1), uint16 (8) or "
          "int32 (4) ({} with a tokenizer vocabulary that picks one of these)",
          idx_path, p[17], kRemake);
  }
  const uint64_t n = get_u64(p + 18);  // sequences
  const uint64_t d = get_u64(p + 26);  // document index entries (documents + 1)
  const uint64_t body = idx.size() - kMegatronIndexHeaderBytes;
  // Sizes (int32), pointers (int64) and the document index (int64) fill the rest exactly; a
  // multimodal index appends one int8 mode per sequence.
  const bool counts_fit = n <= body / 12 && d <= (body - 12 * n) / 8;
  HP_CHECK(counts_fit && body == 12 * n + 8 * d,
           "Megatron index '{}': the header says {} sequences and {} document entries, which need "
           "{} bytes after the {}-byte header, but the file has {}{}; it is truncated or corrupt "
           "({})",
           idx_path, n, d, counts_fit ? fmt::format("{}", 12 * n + 8 * d) : std::string("more"),
           kMegatronIndexHeaderBytes, body,
           counts_fit && body == 13 * n + 8 * d
               ? " (that size fits a multimodal index, which helixpipe does not read)"
               : "",
           kRemake);
  HP_CHECK(d >= 1, "Megatron index '{}' has an empty document index (it must start with 0); {}",
           idx_path, kRemake);
  const uint8_t* sizes = p + kMegatronIndexHeaderBytes;
  const uint8_t* pointers = sizes + 4 * n;
  const uint8_t* docs = pointers + 8 * n;
  const size_t w = token_dtype_bytes(m.dtype);
  const uint64_t max_tokens = bin_bytes / w;
  // Token offset where each sequence starts, then the total.
  std::vector<int64_t> starts(n + 1, 0);
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t len = static_cast<int32_t>(get_u32(sizes + 4 * i));
    HP_CHECK(len >= 0, "Megatron index '{}': sequence {} has length {} (corrupt); {}", idx_path, i,
             len, kRemake);
    const uint64_t ptr = get_u64(pointers + 8 * i);
    HP_CHECK(ptr == total * w,
             "Megatron index '{}': sequence {} starts at byte {} of the data file, but the "
             "sequences before it end at byte {}; helixpipe reads datasets whose sequences lie end "
             "to end, as preprocess_data.py writes them ({})",
             idx_path, i, ptr, total * w, kRemake);
    HP_CHECK(static_cast<uint64_t>(len) <= max_tokens - total,
             "Megatron index '{}': sequences 0..{} hold more than the {} tokens of {} bytes that "
             "the data file's {} bytes have room for; the .bin file is truncated or belongs to "
             "another index ({})",
             idx_path, i, max_tokens, w, bin_bytes, kRemake);
    total += static_cast<uint64_t>(len);
    starts[i + 1] = static_cast<int64_t>(total);
  }
  HP_CHECK(total * w == bin_bytes,
           "Megatron index '{}' lists {} tokens of {} bytes ({} bytes) but the data file has {} "
           "bytes; the .bin file does not belong to this index or was cut or appended to ({})",
           idx_path, total, w, total * w, bin_bytes, kRemake);
  m.document_offsets.resize(d);
  uint64_t prev = 0;
  for (uint64_t k = 0; k < d; ++k) {
    const uint64_t s = get_u64(docs + 8 * k);
    HP_CHECK((k == 0 && s == 0) || (k > 0 && s >= prev && s <= n),
             "Megatron index '{}': document index entry {} is {}; entries must start at 0 and rise "
             "to the sequence count {} (corrupt; {})",
             idx_path, k, s, n, kRemake);
    m.document_offsets[k] = starts[s];
    prev = s;
  }
  HP_CHECK(prev == n,
           "Megatron index '{}': the document index ends at sequence {} but the index has {} "
           "sequences; the last document must end at the last sequence ({})",
           idx_path, prev, n, kRemake);
  m.sequences = static_cast<int64_t>(n);
  m.tokens = static_cast<int64_t>(total);
  return m;
}

int64_t check_token_ids(const uint8_t* tokens, TokenDType d, int64_t count, int64_t bound,
                        std::string_view what, const std::string& path, std::string_view hint) {
  int64_t max_id = -1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = read_token(tokens, d, i);
    if (t < 0 || t >= bound) {
      fail("{} '{}': token {} at position {} is outside [0, {}); {}", what, path, t, i, bound,
           hint);
    }
    max_id = std::max(max_id, t);
  }
  return max_id;
}

}  // namespace hp

// The layouts a --data file may have (docs/formats/data.md and docs/formats/foreign-tokens.md):
// text (one token per byte), our HPTOKENS files, llm.c token shards, nanoGPT's raw uint16 .bin
// files and Megatron-LM indexed datasets (prefix.bin + prefix.idx). Everything here works on bytes
// already in memory, so the same code serves TokenSource (token_file.h) and the fuzz targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hp {

// Token widths. The first three are also the dtype codes of HPTOKENS files; uint32 only comes
// from foreign files (llm.c's uint32 shards) and is never written.
enum class TokenDType : uint32_t { kUint8 = 1, kUint16 = 2, kInt32 = 3, kUint32 = 4 };

enum class DataFormat { kAuto, kText, kHpTokens, kLlmc, kNanoGpt, kMegatron };

// "auto", "text", "hptokens", "llmc", "nanogpt", "megatron"; parse throws hp::Error listing them.
std::string_view data_format_name(DataFormat f);
DataFormat parse_data_format(std::string_view name);
// A phrase for messages: "llm.c token shard", "Megatron indexed dataset", ...
std::string_view data_format_what(DataFormat f);

inline constexpr char kTokenFileMagic[8] = {'H', 'P', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderBytes = 32;

// llm.c (dev/data/data_common.py): a header of 256 little-endian int32, then the tokens.
inline constexpr int32_t kLlmcMagic = 20240520;        // version 1: uint16 tokens (GPT-2)
inline constexpr int32_t kLlmcMagicLlama3 = 20240801;  // version 7: uint32 tokens (Llama 3)
inline constexpr int32_t kLlmcEvalMagic = 20240522;    // multiple-choice eval files: not tokens
inline constexpr size_t kLlmcHeaderBytes = 256 * 4;

// Megatron-LM's index file (.idx) starts with these 9 bytes.
inline constexpr char kMegatronIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr size_t kMegatronIndexHeaderBytes = 9 + 8 + 1 + 8 + 8;

// "uint8", "uint16", "int32", "uint32"; parse (the dtypes `tokenize` writes) throws hp::Error
// listing the valid names.
std::string_view token_dtype_name(TokenDType d);
TokenDType parse_token_dtype(std::string_view name);
size_t token_dtype_bytes(TokenDType d);

// Token i of `base` (little-endian, width of `d`), widened.
int64_t read_token(const uint8_t* base, TokenDType d, int64_t i);

// Where the tokens of a one-file format lie in its bytes.
struct TokenLayout {
  DataFormat format = DataFormat::kText;
  TokenDType dtype = TokenDType::kUint8;
  size_t offset = 0;         // bytes before the first token
  int64_t count = 0;         // tokens
  int64_t header_vocab = 0;  // every id is below it; 0 when the file does not say
};

// The format of a one-file source judged from its first bytes and its name: HPTOKENS by its magic
// (or a prefix of it, a truncated file), llm.c by its magic, a name ending in ".bin" without
// either magic is nanoGPT's raw uint16, anything else is text. Never kMegatron (that needs the
// companion file, see TokenSource::open).
DataFormat detect_token_format(std::span<const uint8_t> bytes, std::string_view path);

// Parses and checks the header of `bytes` as `format` (kText, kHpTokens, kLlmc or kNanoGpt):
// magic, version, dtype, and the size against the token count. Throws hp::Error naming `path`,
// the problem and what to do. Token ids are not looked at (check_token_ids).
TokenLayout parse_token_layout(std::span<const uint8_t> bytes, DataFormat format,
                               const std::string& path);

// A Megatron-LM index (.idx) checked against its data file of `bin_bytes` bytes.
struct MegatronIndex {
  TokenDType dtype = TokenDType::kUint16;
  int64_t sequences = 0;
  int64_t tokens = 0;
  // Token offset where each document starts, then the total (documents + 1 entries).
  std::vector<int64_t> document_offsets;
};

// Parses `idx` (the whole .idx file): magic, version 1, a token dtype code (uint8, uint16, int32),
// counts that match the file's size, sequence lengths >= 0, pointers that lay the sequences end to
// end from byte 0 (as preprocess_data.py writes them), document indices from 0 rising to the
// sequence count, and a total of exactly `bin_bytes`. Throws hp::Error naming `idx_path`.
MegatronIndex parse_megatron_index(std::span<const uint8_t> idx, size_t bin_bytes,
                                   const std::string& idx_path);

// Checks tokens[0..count) (width `d`) against [0, bound): the first id outside it is an hp::Error
// "<what> '<path>': token <id> at position <i> is outside [0, <bound>); <hint>". Returns the
// largest id (-1 when count is 0).
int64_t check_token_ids(const uint8_t* tokens, TokenDType d, int64_t count, int64_t bound,
                        std::string_view what, const std::string& path, std::string_view hint);

}  // namespace hp

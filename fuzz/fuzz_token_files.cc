// libFuzzer target: the token-file parsers behind --data (data/token_formats.h). The input is
// tried as every one-file layout (text, HPTOKENS, llm.c, nanoGPT) and, after an 8-byte data-file
// size, as a Megatron .idx. Whatever a parser accepts must describe tokens that lie inside the
// bytes it was given; anything else must be an hp::Error, never a crash or an out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_util.h"
#include "data/token_formats.h"
#include "util/error.h"

using hp::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hp;
  const std::span<const uint8_t> bytes(data, size);
  (void)detect_token_format(bytes, "fuzz.bin");
  (void)detect_token_format(bytes, "fuzz.txt");
  for (DataFormat f : {DataFormat::kText, DataFormat::kHpTokens, DataFormat::kLlmc,
                       DataFormat::kNanoGpt}) {
    try {
      const TokenLayout l = parse_token_layout(bytes, f, "fuzz");
      const size_t w = token_dtype_bytes(l.dtype);
      check(l.count >= 0 && l.offset <= size && static_cast<size_t>(l.count) * w == size - l.offset);
      const int64_t max_id = check_token_ids(data + l.offset, l.dtype, l.count, int64_t{1} << 31,
                                             "fuzz", "fuzz", "");
      check(max_id < (int64_t{1} << 31));
    } catch (const Error&) {
    }
  }
  if (size >= 8) {
    uint64_t bin_bytes = 0;
    for (int i = 0; i < 8; ++i) bin_bytes |= static_cast<uint64_t>(data[i]) << (8 * i);
    try {
      const MegatronIndex m = parse_megatron_index(bytes.subspan(8), bin_bytes, "fuzz.idx");
      check(m.tokens >= 0 && m.sequences >= 0);
      check(static_cast<uint64_t>(m.tokens) * token_dtype_bytes(m.dtype) == bin_bytes);
      check(!m.document_offsets.empty() && m.document_offsets.front() == 0 &&
            m.document_offsets.back() == m.tokens);
      for (size_t k = 1; k < m.document_offsets.size(); ++k)
        check(m.document_offsets[k] >= m.document_offsets[k - 1]);
    } catch (const Error&) {
    }
  }
  return 0;
}

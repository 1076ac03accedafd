// Byte-level tokenizer: token id = byte value (0..255). The model's vocab may be padded above 256;
// ids >= 256 never come out of encode() and decode() shows them as U+FFFD.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hp {

inline constexpr int64_t kByteVocab = 256;

// One token per byte of `text`.
std::vector<int32_t> byte_encode(std::string_view text);

// The bytes back; ids outside 0..255 become the replacement character (so printing never fails).
std::string byte_decode(std::span<const int32_t> tokens);

}  // namespace hp

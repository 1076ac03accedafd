// Byte-level tokenizer.
#include "data/tokenizer.h"

namespace hp {

std::vector<int32_t> byte_encode(std::string_view text) {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string byte_decode(std::span<const int32_t> tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (int32_t t : tokens) {
    if (t >= 0 && t < kByteVocab) {
      out.push_back(static_cast<char>(t));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD in UTF-8
    }
  }
  return out;
}

}  // namespace hp

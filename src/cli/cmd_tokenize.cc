// helixpipe tokenize: a text file -> an HPTOKENS token file (docs/formats/data.md), one token per
// byte. Training reads text files directly too; a token file is checked once and mapped.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/train_cli.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp::cli {

int cmd_tokenize(int argc, char** argv) {
  CLI::App app("Turn a text file into a token file (byte-level: token id = byte value).", "tokenize");
  std::string input, out, dtype_name;
  int64_t vocab = kByteVocab;
  app.add_option("--input", input, "text file to tokenize")->required();
  app.add_option("--out", out, "token file to write (HPTOKENS format)")->required();
  app.add_option("--vocab", vocab,
                 "vocabulary size recorded in the header (>= 256; a model may pad its vocab)");
  app.add_option("--dtype", dtype_name, "token width: uint8, uint16 or int32 (default: smallest "
                                        "that holds --vocab)");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  HP_CHECK(vocab >= kByteVocab, "--vocab {} is smaller than the 256 byte tokens", vocab);
  const TokenDType dtype = dtype_name.empty() ? token_dtype_for_vocab(vocab) : parse_token_dtype(dtype_name);
  const std::string text = read_file(input);
  HP_CHECK(!text.empty(), "'{}' is empty: nothing to tokenize", input);
  const std::vector<int32_t> tokens = byte_encode(text);
  write_token_file(out, tokens, dtype, vocab);
  fmt::print("wrote {}: {} tokens ({}, vocab {}) from {}\n", out, tokens.size(),
             token_dtype_name(dtype), vocab, input);
  return 0;
}

}  // namespace hp::cli

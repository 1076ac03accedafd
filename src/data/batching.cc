// SequenceReader: sequences of S+1 tokens with optional wrap-around.
#include "data/batching.h"

#include <vector>

#include "util/error.h"

namespace hp {

int64_t num_sequences(int64_t tokens, int64_t seq_len) {
  HP_CHECK(seq_len > 0, "sequence length must be positive, got {}", seq_len);
  return tokens > seq_len ? (tokens - 1) / seq_len : 0;
}

SequenceReader::SequenceReader(const TokenSource& source, int64_t seq_len, int64_t vocab)
    : source_(&source), seq_len_(seq_len), sequences_(num_sequences(source.size(), seq_len)) {
  HP_CHECK(sequences_ > 0,
           "data file '{}' has {} tokens, too few for one sequence of --seq-len={} (needs {} "
           "tokens); use a longer file or a shorter sequence",
           source.path(), source.size(), seq_len, seq_len + 1);
  HP_CHECK(source.max_token() < vocab,
           "data file '{}' contains token id {} but the model's vocab_size is {}; tokenize with the "
           "model's vocabulary or use a model with a larger vocab",
           source.path(), source.max_token(), vocab);
}

void SequenceReader::read(int64_t first, int64_t rows, bool wrap, int32_t* inputs,
                          int32_t* targets) const {
  HP_CHECK(first >= 0 && rows >= 0, "sequence range starts at {} with {} rows", first, rows);
  if (!wrap) {
    HP_CHECK(first + rows <= sequences_,
             "data file '{}' holds {} sequences of {}+1 tokens ({} tokens) but sequences {}..{} are "
             "needed; use a longer file or fewer/shorter sequences",
             source_->path(), sequences_, seq_len_, source_->size(), first, first + rows - 1);
  }
  std::vector<int32_t> buf(seq_len_ + 1);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t k = (first + r) % sequences_;
    source_->copy(k * seq_len_, seq_len_ + 1, buf.data());
    for (int64_t i = 0; i < seq_len_; ++i) {
      inputs[r * seq_len_ + i] = buf[i];
      targets[r * seq_len_ + i] = buf[i + 1];
    }
  }
}

}  // namespace hp

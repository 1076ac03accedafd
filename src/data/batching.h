// Sequences and micro-batches. Sequence k of length S covers tokens k*S .. k*S+S (S+1 tokens):
// inputs tokens[k*S .. k*S+S-1], targets tokens[k*S+1 .. k*S+S]. Row r of a micro-batch that starts
// at sequence k0 is sequence k0 + r. Training positions are global (docs/formats/data.md):
// replica d, micro-batch j of a step that starts at sequence base reads base + (d*M + j)*B + r,
// so any data-parallel/pipeline layout of the same global batch reads the same sequences.
#pragma once

#include <cstdint>

#include "data/token_file.h"

namespace hp {

// Whole sequences of S+1 tokens that fit in `tokens` tokens (consecutive ones share one token).
int64_t num_sequences(int64_t tokens, int64_t seq_len);

// First global sequence index of (replica d, micro-batch j) in a step starting at sequence `base`.
inline int64_t microbatch_first_sequence(int64_t base, int64_t d, int64_t j, int64_t microbatches,
                                         int64_t microbatch_size) {
  return base + (d * microbatches + j) * microbatch_size;
}

// Reads micro-batches of a TokenSource, checking ids against the model's vocab.
class SequenceReader {
 public:
  // Throws hp::Error when the source has fewer than S+1 tokens or an id >= vocab.
  SequenceReader(const TokenSource& source, int64_t seq_len, int64_t vocab);

  int64_t seq_len() const { return seq_len_; }
  int64_t sequences() const { return sequences_; }

  // inputs, targets: [rows, S] row-major. Row r is sequence first + r; with wrap, index k reads
  // sequence k mod sequences() (training cycles through the file); without wrap every sequence must
  // exist (hp::Error saying how many are needed and how many the file has).
  void read(int64_t first, int64_t rows, bool wrap, int32_t* inputs, int32_t* targets) const;

 private:
  const TokenSource* source_;
  int64_t seq_len_;
  int64_t sequences_;
};

}  // namespace hp

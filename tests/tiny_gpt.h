// A GPT-style model config small enough to count by hand (docs/simulator.md "Model kinds"): h=8,
// 2 heads (q = 3h = 24), ffn 4h = 32, vocab 16, L=2, 16 learned positions, tied embeddings. Shared
// by the config tests (tests/util) and the cost-model tests (tests/sim).
#pragma once

#include "util/model_config.h"

namespace hp::test {

inline ModelConfig tiny_gpt() {
  ModelConfig c;
  c.name = "tiny-gpt";
  c.kind = ModelKind::kGpt;
  c.hidden = 8;
  c.heads = 2;
  c.kv_heads = 2;
  c.intermediate = 32;
  c.layers = 2;
  c.vocab = 16;
  c.max_positions = 16;
  c.tie_embeddings = true;
  return c;
}

}  // namespace hp::test

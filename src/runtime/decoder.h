// Incremental decoding for `helixpipe generate`: one token at a time with a key/value cache, so
// each new token costs one pass over the weights plus attention over the cached positions instead
// of a forward pass over the whole context. Plain loops (single token: matrix-vector products),
// written independently of the training parts in src/model, with dot products accumulated in
// double, over a host copy of the weights taken at construction; a test checks it against Model's
// forward_logits. Inference only, whole model in one process.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/params.h"
#include "util/model_config.h"

namespace hp {

class IncrementalDecoder {
 public:
  // `params` must hold the whole model (f32 master weights, copied to the host here). The cache
  // holds at most `max_context` positions (<= max_position_embeddings).
  IncrementalDecoder(const Params& params, int64_t max_context);

  int64_t length() const { return length_; }  // positions in the cache
  int64_t max_context() const { return max_context_; }
  void reset() { length_ = 0; }

  // Appends `token` at position length() and returns the logits (vocab) that predict the next
  // token. Throws hp::Error when the cache is full (reset and re-feed a shorter context).
  std::span<const float> push(int32_t token);

 private:
  void matvec(const float* w, const float* x, int64_t rows, int64_t cols, float* y) const;
  void rmsnorm(const float* x, const float* g, float* y) const;
  const float* weight(const std::string& name) const;

  ModelConfig cfg_;
  std::vector<float> weights_;       // the master weights, arena layout
  std::vector<ParamTensor> names_;  // where each tensor lies in weights_
  int64_t max_context_;
  int64_t length_ = 0;
  // Per layer: keys and values, [max_context, kv_dim] each, rotary already applied to keys.
  std::vector<std::vector<float>> k_cache_, v_cache_;
  std::vector<float> x_, a_, qkv_, o_, y_, gate_, up_, logits_, scores_;
};

// The precision `generate` samples in for a --precision value. The key/value-cache decoder computes
// in f32 only: with `kv_cache`, auto means fp32 and bf16 is refused with a message asking for
// --no-cache. Without it, the model's own forward pass runs in what resolve_precision
// (runtime/train_setup.h) picks on `be`.
Precision resolve_sampling_precision(const std::string& value, bool kv_cache, Backend& be);

// The logits after the last token of a growing text, for `helixpipe generate`. With the cache: an
// IncrementalDecoder of `context` positions, filled from the end of the text when it is empty
// (all of the text, or the last `context` tokens) or full (the last half of the window), and
// otherwise fed only the newest token. Without it: a forward pass of Model over the last
// `context` tokens for every call.
class TextContinuation {
 public:
  TextContinuation(Params& params, int64_t context, bool use_cache);
  // The logits (vocab) predicting the token after `tokens`, the whole text so far (not empty;
  // one token longer than at the previous call, or the first call).
  std::span<const float> next_logits(const std::vector<int32_t>& tokens);

 private:
  Params* params_;
  Model model_;
  IncrementalDecoder decoder_;
  TokenBuffer window_;
  std::vector<float> logits_;
  int64_t context_;
  bool use_cache_;
};

// Samples `n` byte tokens after `prompt` from `text` (temperature and top-k as sample_token in
// runtime/sampling.h, ids limited to bytes and the vocabulary), handing each to `on_token` as it
// is drawn. Throws hp::Error when the prompt holds a byte outside the model's vocabulary.
void continue_text(TextContinuation& text, const std::string& prompt, int64_t vocab, int64_t n,
                   double temperature, int64_t top_k, uint64_t seed,
                   const std::function<void(char)>& on_token);

}  // namespace hp

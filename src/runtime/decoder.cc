// One-token decoder step with a key/value cache (Llama: RMSNorm, rotary, GQA, SwiGLU).
#include "runtime/decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "data/tokenizer.h"
#include "kernels/rope_angles.h"
#include "runtime/sampling.h"
#include "runtime/train_setup.h"
#include "util/error.h"
#include "util/rng.h"

namespace hp {

IncrementalDecoder::IncrementalDecoder(const Params& params, int64_t max_context)
    : cfg_(params.config()), max_context_(max_context) {
  HP_CHECK(max_context >= 1 && max_context <= cfg_.max_positions,
           "decoder context {} must lie in [1, max_position_embeddings {}]", max_context,
           cfg_.max_positions);
  for (Part p : Params::all_parts(cfg_)) {
    HP_CHECK(params.owns(p), "the decoder needs the whole model; part {} is missing", p.str());
  }
  HP_CHECK(params.precision().master == DType::kF32, "the decoder reads f32 weights, not {}",
           dtype_name(params.precision().master));
  weights_ = params.host_values<float>();
  names_ = params.tensors();
  k_cache_.assign(cfg_.layers, std::vector<float>(max_context * cfg_.kv_dim()));
  v_cache_.assign(cfg_.layers, std::vector<float>(max_context * cfg_.kv_dim()));
  x_.resize(cfg_.hidden);
  a_.resize(cfg_.hidden);
  qkv_.resize(cfg_.qkv_dim());
  o_.resize(cfg_.hidden);
  y_.resize(cfg_.hidden);
  gate_.resize(cfg_.intermediate);
  up_.resize(cfg_.intermediate);
  logits_.resize(cfg_.vocab);
  scores_.resize(max_context);
}

const float* IncrementalDecoder::weight(const std::string& name) const {
  for (const ParamTensor& t : names_)
    if (t.name == name) return weights_.data() + t.offset;
  fail("decoder: no tensor '{}'", name);
}

// y = W x for a row-major (rows, cols) W.
void IncrementalDecoder::matvec(const float* w, const float* x, int64_t rows, int64_t cols,
                                float* y) const {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(row[c]) * x[c];
    y[r] = static_cast<float>(s);
  }
}

void IncrementalDecoder::rmsnorm(const float* x, const float* g, float* y) const {
  double ss = 0;
  for (int64_t i = 0; i < cfg_.hidden; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(cfg_.hidden) + cfg_.rms_eps);
  for (int64_t i = 0; i < cfg_.hidden; ++i) y[i] = static_cast<float>(x[i] * rstd * g[i]);
}

std::span<const float> IncrementalDecoder::push(int32_t token) {
  HP_CHECK(length_ < max_context_, "decoder cache is full ({} positions); reset it", max_context_);
  HP_CHECK(token >= 0 && token < cfg_.vocab, "token {} outside the vocab of {}", token, cfg_.vocab);
  const int64_t h = cfg_.hidden, d = cfg_.head_dim(), kvd = cfg_.kv_dim(), f = cfg_.intermediate;
  const int64_t heads = cfg_.heads, group = cfg_.heads / cfg_.kv_heads, pos = length_;
  const float* embed = weight("model.embed_tokens.weight");
  std::copy(embed + token * h, embed + (token + 1) * h, x_.begin());
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    rmsnorm(x_.data(), weight(p + "input_layernorm.weight"), a_.data());
    // q_proj, k_proj, v_proj lie back to back: one (h + 2 kv, h) matrix.
    matvec(weight(p + "self_attn.q_proj.weight"), a_.data(), h + 2 * kvd, h, qkv_.data());
    float* q = qkv_.data();
    float* k = q + h;
    const float* v = k + kvd;
    auto rotate = [&](float* vec, int64_t n_heads) {
      for (int64_t hd = 0; hd < n_heads; ++hd) {
        float* u = vec + hd * d;
        for (int64_t j = 0; j < d / 2; ++j) {
          float c, s;
          rope_cos_sin(pos, j, d, cfg_.rope_theta, &c, &s);
          const float x1 = u[j], x2 = u[j + d / 2];
          u[j] = x1 * c - x2 * s;
          u[j + d / 2] = x2 * c + x1 * s;
        }
      }
    };
    rotate(q, heads);
    rotate(k, cfg_.kv_heads);
    std::copy(k, k + kvd, k_cache_[l].begin() + pos * kvd);
    std::copy(v, v + kvd, v_cache_[l].begin() + pos * kvd);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (int64_t hq = 0; hq < heads; ++hq) {
      const int64_t kh = hq / group;  // grouped-query: consecutive query heads share a kv head
      const float* qh = q + hq * d;
      double mx = -INFINITY;
      for (int64_t t = 0; t <= pos; ++t) {
        const float* kt = k_cache_[l].data() + t * kvd + kh * d;
        double s = 0;
        for (int64_t i = 0; i < d; ++i) s += static_cast<double>(qh[i]) * kt[i];
        scores_[t] = static_cast<float>(s * scale);
        mx = std::max(mx, static_cast<double>(scores_[t]));
      }
      double denom = 0;
      std::vector<double> acc(d, 0.0);
      for (int64_t t = 0; t <= pos; ++t) {
        const double e = std::exp(scores_[t] - mx);
        denom += e;
        const float* vt = v_cache_[l].data() + t * kvd + kh * d;
        for (int64_t i = 0; i < d; ++i) acc[i] += e * vt[i];
      }
      for (int64_t i = 0; i < d; ++i) o_[hq * d + i] = static_cast<float>(acc[i] / denom);
    }
    matvec(weight(p + "self_attn.o_proj.weight"), o_.data(), h, h, y_.data());
    for (int64_t i = 0; i < h; ++i) x_[i] += y_[i];
    rmsnorm(x_.data(), weight(p + "post_attention_layernorm.weight"), a_.data());
    matvec(weight(p + "mlp.gate_proj.weight"), a_.data(), f, h, gate_.data());
    matvec(weight(p + "mlp.up_proj.weight"), a_.data(), f, h, up_.data());
    for (int64_t i = 0; i < f; ++i) {
      const double g = gate_[i];
      gate_[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up_[i]);
    }
    matvec(weight(p + "mlp.down_proj.weight"), gate_.data(), h, f, y_.data());
    for (int64_t i = 0; i < h; ++i) x_[i] += y_[i];
  }
  rmsnorm(x_.data(), weight("model.norm.weight"), a_.data());
  const float* head = cfg_.tie_embeddings ? embed : weight("lm_head.weight");
  matvec(head, a_.data(), cfg_.vocab, h, logits_.data());
  ++length_;
  return logits_;
}

TextContinuation::TextContinuation(Params& params, int64_t context, bool use_cache)
    : params_(&params),
      model_(params),
      decoder_(params, context),
      logits_(params.config().vocab),
      context_(context),
      use_cache_(use_cache) {}

std::span<const float> TextContinuation::next_logits(const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (!use_cache_) {
    const int64_t len = std::min<int64_t>(context_, n);
    window_.upload(params_->backend(), {tokens.data() + n - len, static_cast<size_t>(len)},
                   params_->config().vocab, "token");
    forward_logits(model_, window_.data(), 1, len, logits_.data(), /*last_only=*/true);
    return logits_;
  }
  if (decoder_.length() == 0 || decoder_.length() == context_) {
    // (Re)fill the cache from the end of the text: all of it, or half the window when full.
    const int64_t len = decoder_.length() == 0 ? std::min<int64_t>(context_, n)
                                               : std::max<int64_t>(1, context_ / 2);
    decoder_.reset();
    std::span<const float> out;
    for (int64_t i = n - len; i < n; ++i) out = decoder_.push(tokens[i]);
    return out;
  }
  return decoder_.push(tokens.back());
}

Precision resolve_sampling_precision(const std::string& value, bool kv_cache, Backend& be) {
  const Precision p = resolve_precision(value == "auto" && kv_cache ? "fp32" : value, be);
  HP_CHECK(p == Precision::fp32() || !kv_cache,
           "--precision={} needs --no-cache: the key/value-cache decoder computes in f32 only "
           "(src/runtime/decoder.h); add --no-cache to sample with the model's {} forward pass, or "
           "use --precision=fp32",
           p.name(), p.name());
  return p;
}

void continue_text(TextContinuation& text, const std::string& prompt, int64_t vocab, int64_t n,
                   double temperature, int64_t top_k, uint64_t seed,
                   const std::function<void(char)>& on_token) {
  std::vector<int32_t> tokens = byte_encode(prompt);
  for (int32_t t : tokens)
    HP_CHECK(t < vocab, "the prompt has byte {} but the model's vocab_size is {}", t, vocab);
  // Byte tokens only: ids above 255 (a padded vocab) cannot be printed, so they are never sampled.
  const int64_t limit = std::min<int64_t>(vocab, kByteVocab);
  Rng rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t next = sample_token(text.next_logits(tokens), limit, temperature, top_k, rng);
    tokens.push_back(next);
    on_token(static_cast<char>(next));
  }
}

}  // namespace hp

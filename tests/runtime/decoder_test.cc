// The incremental decoder (KV cache) against the model's forward_logits over the whole sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "model/model.h"
#include "runtime/decoder.h"
#include "util/error.h"
#include "util/rng.h"

namespace hp {
namespace {

void check_against_model(ModelConfig cfg, int64_t seq) {
  auto be = make_cpu_backend(1);
  Params params(cfg, Params::all_parts(cfg), *be);
  params.init(21);
  // Non-trivial norm gains, so a gain applied to the wrong thing shows.
  Rng rng(5);
  std::vector<float> values = params.host_values<float>();
  for (const ParamTensor& t : params.tensors()) {
    if (t.shape.size() == 1) {
      for (int64_t i = 0; i < t.numel; ++i)
        values[t.offset + i] = 0.5f + static_cast<float>(rng.uniform());
    }
  }
  params.set_values(values);
  std::vector<int32_t> tokens(seq);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.uniform() * static_cast<double>(cfg.vocab));
  Model model(params);
  TokenBuffer tok;
  tok.upload(*be, tokens, cfg.vocab, "token");
  std::vector<float> want(seq * cfg.vocab);
  forward_logits(model, tok.data(), 1, seq, want.data(), /*last_only=*/false);
  IncrementalDecoder dec(params, seq);
  for (int64_t p = 0; p < seq; ++p) {
    const auto got = dec.push(tokens[p]);
    ASSERT_EQ(static_cast<int64_t>(got.size()), cfg.vocab);
    double err = 0, norm = 0;
    for (int64_t v = 0; v < cfg.vocab; ++v) {
      const double w = want[p * cfg.vocab + v];
      err += (got[v] - w) * (got[v] - w);
      norm += w * w;
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "position " << p;
  }
  EXPECT_EQ(dec.length(), seq);
  EXPECT_THROW(dec.push(0), Error);  // full
  dec.reset();
  const auto again = dec.push(tokens[0]);
  for (int64_t v = 0; v < cfg.vocab; ++v) {
    EXPECT_NEAR(again[v], want[v], 1e-5 * (1 + std::fabs(want[v])));
  }
}

// Grouped-query attention (4 heads over 2 key/value heads), untied, small enough for exact checks.
ModelConfig gqa_untied_config() {
  ModelConfig c;
  c.hidden = 32;
  c.intermediate = 40;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.vocab = 50;
  return c;
}

TEST(IncrementalDecoder, MatchesForwardLogitsGqaUntied) {
  check_against_model(gqa_untied_config(), 37);
}

TEST(IncrementalDecoder, MatchesForwardLogitsTiedMqa) {
  ModelConfig c;
  c.hidden = 64;
  c.intermediate = 72;
  c.heads = 4;
  c.kv_heads = 1;
  c.layers = 3;
  c.vocab = 40;
  c.tie_embeddings = true;
  c.rope_theta = 500.0;
  check_against_model(c, 20);
}

}  // namespace
}  // namespace hp

namespace hp {
namespace {

// TextContinuation over a text growing one token per call, window 8: without the cache each call
// is the forward pass over the last (up to) 8 tokens; with it, the cache holds the last L tokens,
// L starting at the prompt (up to 8), growing by one per call, and restarting at 4 (half the
// window) once it reached 8. Each call's logits match Model's forward pass over that window.
TEST(TextContinuation, WindowsOfTheCacheAndOfTheForwardPass) {
  const ModelConfig cfg = gqa_untied_config();
  auto be = make_cpu_backend(1);
  Params params(cfg, Params::all_parts(cfg), *be);
  params.init(3);
  Model model(params);
  Rng rng(9);
  std::vector<int32_t> text = {1, 2, 3};
  const int64_t window = 8;
  TextContinuation cached(params, window, true), plain(params, window, false);
  int64_t held = 0;  // the tokens the cache holds after the call
  for (int call = 0; call < 14; ++call) {
    const int64_t n = static_cast<int64_t>(text.size());
    held = held == 0 ? std::min<int64_t>(window, n) : held == window ? window / 2 : held + 1;
    for (const bool use_cache : {true, false}) {
      const int64_t len = use_cache ? held : std::min<int64_t>(window, n);
      TokenBuffer tok;
      tok.upload(*be, {text.data() + n - len, static_cast<size_t>(len)}, cfg.vocab, "token");
      std::vector<float> want(cfg.vocab);
      forward_logits(model, tok.data(), 1, len, want.data(), /*last_only=*/true);
      const auto got = (use_cache ? cached : plain).next_logits(text);
      ASSERT_EQ(static_cast<int64_t>(got.size()), cfg.vocab);
      for (int64_t v = 0; v < cfg.vocab; ++v)
        ASSERT_NEAR(got[v], want[v], 1e-4 * (1 + std::fabs(want[v])))
            << "call " << call << (use_cache ? " cached" : " plain") << " logit " << v;
    }
    text.push_back(static_cast<int32_t>(rng.uniform() * static_cast<double>(cfg.vocab)));
  }
}

}  // namespace
}  // namespace hp

// helixpipe generate: samples text from a checkpoint, one byte token at a time. The logits come
// from runtime/decoder.h's TextContinuation: by default an incremental decoder with a key/value
// cache costs one pass over the weights per token; when the cache fills up (--context) it restarts
// from the last half of the context. --no-cache instead re-runs the model's forward pass over the
// last --context tokens per token. --precision applies to that forward pass: the cache decoder
// computes in f32 (double accumulation) only, so bf16 needs --no-cache, and auto means bf16 only
// with --no-cache on a CPU that has bf16 kernels.
#include <fmt/format.h>

#include <cstdio>

#include "cli/commands.h"
#include "cli/train_cli.h"
#include "data/tokenizer.h"
#include "runtime/decoder.h"
#include "runtime/sampling.h"
#include "runtime/train_setup.h"
#include "runtime/trainer.h"
#include "util/error.h"
#include "util/rng.h"

namespace hp::cli {

int cmd_generate(int argc, char** argv) {
  CLI::App app("Sample text from a checkpoint (byte tokens; temperature and top-k).", "generate");
  std::string checkpoint, prompt, precision = "fp32";
  int64_t n_tokens = 200, top_k = 0, context = 512;
  double temperature = 0.8;
  uint64_t seed = 1;
  int threads = 0;
  bool no_cache = false;
  app.add_option("--checkpoint", checkpoint, "model folder (config.json + model.safetensors)")
      ->required();
  app.add_option("--prompt", prompt, "text to continue")->required();
  app.add_option("--tokens", n_tokens, "tokens (bytes) to generate (default 200)");
  app.add_option("--temperature", temperature, "softmax temperature; 0 = greedy (default 0.8)");
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (default 0: all)");
  app.add_option("--seed", seed, "sampling seed (default 1)");
  app.add_option("--context", context,
                 "the model sees at most the last N tokens (default 512, capped by "
                 "max_position_embeddings)");
  app.add_option("--threads", threads, "compute threads (default 0: OMP_NUM_THREADS or all cores)");
  app.add_flag("--no-cache", no_cache,
               "re-run the forward pass over the context for every token instead of the KV cache");
  add_precision_flag(app, precision)
      ->description("fp32 (default), bf16 (the model's bf16 forward pass; needs --no-cache and "
                    "AVX512-BF16) or auto (bf16 where it can run, else fp32)");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  HP_CHECK(!prompt.empty(), "--prompt is empty; give at least one character to continue");
  HP_CHECK(n_tokens >= 0, "--tokens must be >= 0, got {}", n_tokens);
  HP_CHECK(top_k >= 0, "--top-k must be >= 0 (0: all), got {}", top_k);
  HP_CHECK(temperature >= 0, "--temperature must be >= 0 (0: greedy), got {}", temperature);
  HP_CHECK(context >= 1, "--context must be >= 1, got {}", context);
  HP_CHECK(threads >= 0, "--threads must be >= 0, got {}", threads);

  const CheckpointInfo info = open_checkpoint(checkpoint);
  const ModelConfig cfg = checkpoint_model_config(info);
  auto be = make_cpu_backend(threads);
  // The key/value-cache decoder has an f32 path only: auto falls back to fp32 with it, and bf16
  // (once the backend is known to have bf16 kernels) asks for --no-cache.
  const Precision prec =
      resolve_precision(precision == "auto" && !no_cache ? "fp32" : precision, *be);
  HP_CHECK(prec == Precision::fp32() || no_cache,
           "--precision={} needs --no-cache: the key/value-cache decoder computes in f32 only "
           "(src/runtime/decoder.h); add --no-cache to sample with the model's {} forward pass, or "
           "use --precision=fp32",
           prec.name(), prec.name());
  Params params(cfg, Params::all_parts(cfg), *be, prec);
  load_checkpoint_params(info, params);
  context = std::min(context, cfg.max_positions);
  // Byte tokens only: ids above 255 (a padded vocab) cannot be printed, so they are never sampled.
  const int64_t limit = std::min<int64_t>(cfg.vocab, kByteVocab);
  std::vector<int32_t> tokens = byte_encode(prompt);
  for (int32_t t : tokens) {
    HP_CHECK(t < cfg.vocab, "the prompt has byte {} but the model's vocab_size is {}", t, cfg.vocab);
  }
  TextContinuation text(params, context, !no_cache);
  Rng rng(seed);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  for (int64_t i = 0; i < n_tokens; ++i) {
    const int32_t next = sample_token(text.next_logits(tokens), limit, temperature, top_k, rng);
    tokens.push_back(next);
    const char c = static_cast<char>(next);
    std::fwrite(&c, 1, 1, stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace hp::cli

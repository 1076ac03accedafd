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
#include "runtime/decoder.h"
#include "runtime/train_setup.h"
#include "runtime/trainer.h"
#include "util/error.h"

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
  app.add_option("--tokens", n_tokens, "tokens (bytes) to generate (default 200)")->check(at_least(0));
  app.add_option("--temperature", temperature, "softmax temperature; 0 = greedy (default 0.8)")
      ->check(at_least(0));
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (default 0: all)")
      ->check(at_least(0));
  app.add_option("--seed", seed, "sampling seed (default 1)");
  app.add_option("--context", context,
                 "the model sees at most the last N tokens (default 512, capped by "
                 "max_position_embeddings)")
      ->check(positive());
  app.add_option("--threads", threads, "compute threads (default 0: OMP_NUM_THREADS or all cores)")
      ->check(at_least(0));
  app.add_flag("--no-cache", no_cache,
               "re-run the forward pass over the context for every token instead of the KV cache");
  add_precision_flag(app, precision)
      ->description("fp32 (default), bf16 (the model's bf16 forward pass; needs --no-cache and "
                    "AVX512-BF16) or auto (bf16 where it can run, else fp32)");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  HP_CHECK(!prompt.empty(), "--prompt is empty; give at least one character to continue");

  const CheckpointInfo info = open_checkpoint(checkpoint);
  const ModelConfig cfg = checkpoint_model_config(info);
  auto be = make_cpu_backend(threads);
  const Precision prec = resolve_sampling_precision(precision, !no_cache, *be);
  Params params(cfg, Params::all_parts(cfg), *be, prec);
  load_checkpoint_params(info, params);
  TextContinuation text(params, std::min(context, cfg.max_positions), !no_cache);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  continue_text(text, prompt, cfg.vocab, n_tokens, temperature, top_k, seed, [](char c) {
    std::fputc(c, stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace hp::cli

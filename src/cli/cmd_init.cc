// helixpipe init: a freshly initialized model as a checkpoint folder (config.json in the Hugging
// Face LlamaConfig form + model.safetensors with Hugging Face tensor names + our marker).
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/train_cli.h"
#include "model/params.h"
#include "runtime/trainer.h"
#include "util/error.h"

namespace hp::cli {

int cmd_init(int argc, char** argv) {
  std::string presets;
  for (const auto& [name, cfg] : model_presets()) presets += (presets.empty() ? "" : ", ") + name;
  CLI::App app("Write a freshly initialized model: DIR/config.json (Hugging Face LlamaConfig) and "
               "DIR/model.safetensors (Hugging Face Llama tensor names), loadable by transformers.",
               "init");
  std::string model, out;
  uint64_t seed = 1234;
  app.add_option("--model", model, "a preset (" + presets + ") or a config JSON")->required();
  app.add_option("--seed", seed, "initialization seed (default 1234)");
  app.add_option("--out", out, "output folder (created; an existing checkpoint there is replaced)")
      ->required();
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  const ModelConfig cfg = ModelConfig::load_for_runtime(model);
  auto be = make_reference_backend();  // nothing is computed: memory only
  Params params(cfg, Params::all_parts(cfg), *be);
  params.init(seed);
  save_training_checkpoint(out, params, nullptr, nullptr);
  fmt::print("wrote {}: {} layers, hidden {}, heads {} (kv {}), vocab {}, {} parameters, seed {}\n",
             out, cfg.layers, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.vocab, cfg.params_total(),
             seed);
  return 0;
}

}  // namespace hp::cli

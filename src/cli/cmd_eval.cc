// helixpipe eval: mean token loss and perplexity of a checkpoint over a data file, read as
// consecutive sequences from its start (forward only; runtime/train_run.h mean_token_loss).
// Prints {"loss": ..., "ppl": ...} last.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "cli/commands.h"
#include "cli/train_cli.h"
#include "data/token_file.h"
#include "runtime/train_run.h"
#include "runtime/trainer.h"
#include "util/error.h"

namespace hp::cli {

int cmd_eval(int argc, char** argv) {
  CLI::App app("Loss and perplexity of a checkpoint on a data file.", "eval");
  std::string checkpoint, data, data_format = "auto", precision = "fp32";
  int64_t seq_len = 0, batch = 4, max_sequences = 0, skip = 0;
  int threads = 0;
  app.add_option("--checkpoint", checkpoint, "model folder (config.json + model.safetensors)")
      ->required();
  app.add_option("--data", data, "text, token file, llm.c shard, nanoGPT .bin or Megatron prefix")
      ->required();
  add_data_format_flag(app, data_format);
  app.add_option("--seq-len", seq_len, "S: tokens per sequence")->required();
  app.add_option("--batch-size", batch, "sequences per forward pass (default 4)");
  app.add_option("--max-sequences", max_sequences,
                 "evaluate only the first N sequences (default 0: all in the file)");
  app.add_option("--skip-sequences", skip,
                 "start at this sequence (e.g. past the part of the file used for training)");
  app.add_option("--threads", threads, "compute threads (default 0: OMP_NUM_THREADS or all cores)");
  add_precision_flag(app, precision);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  HP_CHECK(seq_len >= 1, "--seq-len must be >= 1, got {}", seq_len);
  HP_CHECK(batch >= 1, "--batch-size must be >= 1, got {}", batch);
  HP_CHECK(max_sequences >= 0, "--max-sequences must be >= 0, got {}", max_sequences);
  HP_CHECK(threads >= 0, "--threads must be >= 0, got {}", threads);
  HP_CHECK(skip >= 0, "--skip-sequences must be >= 0, got {}", skip);

  const CheckpointInfo info = open_checkpoint(checkpoint);
  const ModelConfig cfg = checkpoint_model_config(info);
  HP_CHECK(seq_len <= cfg.max_positions, "--seq-len {} exceeds the model's max_position_embeddings {}",
           seq_len, cfg.max_positions);
  auto be = make_cpu_backend(threads);
  Params params(cfg, Params::all_parts(cfg), *be, resolve_precision(precision, *be));
  load_checkpoint_params(info, params);
  const TokenSource source = open_data(data, data_format, cfg.vocab);
  const SequenceReader reader(source, seq_len, cfg.vocab);
  HP_CHECK(skip < reader.sequences(),
           "--skip-sequences {} leaves nothing: '{}' holds {} sequences of {} tokens", skip, data,
           reader.sequences(), seq_len);
  const int64_t avail = reader.sequences() - skip;
  const int64_t n = max_sequences > 0 ? std::min(max_sequences, avail) : avail;
  const double loss = mean_token_loss(params, reader, skip, n, batch);
  fmt::print("evaluated sequences {}..{} of {} tokens ({} target tokens) from {} in {}\n", skip,
             skip + n - 1, seq_len, n * seq_len, data, params.precision().name());
  fmt::print("{}\n", nlohmann::json{{"loss", loss}, {"ppl", std::exp(loss)}}.dump());
  return 0;
}

}  // namespace hp::cli

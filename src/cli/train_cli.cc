// Shared train/grad flags (the requests they fill: runtime/train_setup.h).
#include "cli/train_cli.h"

#include <cstdio>

namespace hp::cli {

std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "helixpipe %s: error: %s\n(see 'helixpipe %s --help')\n",
                 app.get_name().c_str(), e.what(), app.get_name().c_str());
    return 2;
  }
  return std::nullopt;
}

std::set<std::string> given_flags(const CLI::App& app) {
  std::set<std::string> out;
  for (const CLI::Option* o : app.get_options())
    if (o->count() > 0) out.insert(o->get_name());
  return out;
}

void add_train_flags(CLI::App& app, TrainRequest& f) {
  app.add_option("--model", f.model, "model to train from scratch: a preset (tiny, small, ...) or a "
                                     "config JSON (our keys or Hugging Face config.json)");
  app.add_option("--checkpoint", f.checkpoint,
                 "start from the weights of this checkpoint folder (fresh optimizer and data position)");
  app.add_option("--resume", f.resume,
                 "continue the run saved in this checkpoint folder exactly (weights, optimizer, data "
                 "position, LR schedule)");
  app.add_option("--data", f.data, "training data: a text file (one token per byte), a token "
                                   "file from 'helixpipe tokenize', an llm.c shard, a nanoGPT "
                                   ".bin or a Megatron dataset prefix")
      ->required();
  add_data_format_flag(app, f.data_format);
  app.add_option("--seq-len", f.seq_len, "S: tokens per sequence (default 256; resume: saved)");
  app.add_option("--microbatch-size", f.microbatch_size,
                 "B: sequences per micro-batch (default 1; resume: saved)");
  app.add_option("--microbatches", f.microbatches,
                 "M: micro-batches per step, gradients accumulated (default 1; resume: saved)");
  app.add_option("--steps", f.steps, "total optimizer steps of the run (default 100; resume: saved)");
  app.add_option("--stop-after", f.stop_after,
                 "end this process after this step (saving if --save); the LR schedule still spans "
                 "--steps, so --resume continues it");
  app.add_option("--lr", f.lr, "peak learning rate (default 3e-3)");
  app.add_option("--warmup", f.warmup, "linear warmup steps (default 0)");
  app.add_option("--min-lr", f.min_lr, "learning rate at the end of the cosine decay (default lr/10)");
  app.add_option("--weight-decay", f.weight_decay, "AdamW decoupled weight decay on matrices (default 0.1)");
  app.add_option("--clip", f.clip, "max global gradient norm; 0 disables clipping (default 1.0)");
  app.add_option("--seed", f.seed, "initialization seed for --model (default 1234)");
  app.add_option("--threads", f.threads, "compute threads (default 0: OMP_NUM_THREADS or all cores)");
  app.add_option("--mlp-chunk", f.mlp_chunk, "run the MLP over chunks of this many tokens (0: whole)");
  app.add_option("--recompute", f.recompute, "activation recomputation: none, full or no-attn");
  add_precision_flag(app, f.precision);
  app.add_option("--save", f.save, "checkpoint folder to write (at the end and every --save-every)");
  app.add_option("--save-every", f.save_every, "also save every N steps (needs --save)");
  app.add_option("--log", f.log, "JSONL metrics file, one line per step (appended on --resume)");
  app.add_option("--loss-svg", f.loss_svg, "write the loss curve as an SVG file at the end");
  app.add_option("--progress", f.progress,
                 "auto (a line rewritten in place on an interactive terminal of one process; "
                 "plain lines under mpirun, in files, with CI set or TERM=dumb), tty or lines")
      ->check(CLI::IsMember({"auto", "tty", "lines"}));
  app.add_option("--log-interval", f.log_interval,
                 "plain progress lines every N steps (e.g. 20) or every N seconds (e.g. 30s); "
                 "default: about every 5% of the run");
  app.add_option("--peak-gflops", f.peak_gflops,
                 "peak GFLOP/s of the machine; when given, the progress line shows MFU");
}

void add_data_format_flag(CLI::App& app, std::string& value) {
  app.add_option("--data-format", value,
                 "how to read --data: auto (default: by magic number, .bin name and .idx "
                 "companion), text, hptokens, llmc, nanogpt or megatron")
      ->check(CLI::IsMember({"auto", "text", "hptokens", "llmc", "nanogpt", "megatron"}));
}

void add_precision_flag(CLI::App& app, std::string& value) {
  app.add_option("--precision", value,
                 "fp32, bf16 (bf16 GEMMs and attention over f32 master weights, gradients and "
                 "AdamW state; needs AVX512-BF16) or auto (bf16 where the CPU has it); default "
                 "fp32")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
}

void add_grad_flags(CLI::App& app, GradRequest& f) {
  app.add_option("--checkpoint", f.checkpoint, "model folder (config.json + model.safetensors)")
      ->required();
  app.add_option("--data", f.data, "text, token file, llm.c shard, nanoGPT .bin or Megatron "
                                   "prefix; sequences are read from its start")
      ->required();
  add_data_format_flag(app, f.data_format);
  app.add_option("--seq-len", f.seq_len, "S: tokens per sequence")->required();
  app.add_option("--microbatch-size", f.microbatch_size, "B: sequences per micro-batch (default 1)");
  app.add_option("--microbatches", f.microbatches, "M: micro-batches (default 1)");
  app.add_option("--out", f.out, "gradients file (safetensors, parameter names)")->required();
  app.add_option("--threads", f.threads, "compute threads (default 0: OMP_NUM_THREADS or all cores)");
  app.add_option("--mlp-chunk", f.mlp_chunk, "run the MLP over chunks of this many tokens (0: whole)");
  app.add_option("--recompute", f.recompute, "activation recomputation: none, full or no-attn");
  add_precision_flag(app, f.precision);
}

}  // namespace hp::cli

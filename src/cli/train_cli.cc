// Shared train/grad flags (the requests they fill: runtime/train_setup.h).
#include "cli/train_cli.h"

namespace hp::cli {

namespace {

CLI::Option* add_threads_flag(CLI::App& app, int& threads) {
  return app.add_option("--threads", threads,
                        "compute threads per rank (default 0: OMP_NUM_THREADS or the cores, shared "
                        "among in-process ranks)")
      ->check(at_least(0));
}

// --recompute and --mlp-chunk, in `group`.
void add_compute_flags(CLI::App& app, std::string& recompute, int64_t& mlp_chunk,
                       const std::string& group) {
  app.add_option("--recompute", recompute,
                 "activation recomputation: none, full, no-attn or selective")
      ->check(one_of(recompute_policy_names()))
      ->group(group);
  app.add_option("--mlp-chunk", mlp_chunk, "run the MLP over chunks of this many tokens (0: whole)")
      ->check(at_least(0))
      ->group(group);
}

}  // namespace

std::set<std::string> given_flags(const CLI::App& app) {
  std::set<std::string> out;
  for (const CLI::Option* o : app.get_options())
    if (o->count() > 0) out.insert(o->get_name());
  return out;
}

void add_train_flags(CLI::App& app, TrainRequest& f) {
  // The help lists the flags in these groups, in this order (docs/training.md).
  const std::string model = "Model", data = "Data", opt = "Optimisation", par = "Parallelism",
                    out = "Output";
  app.add_option("--model", f.model, "model to train from scratch: a preset (tiny, small, ...) or a "
                                     "config JSON (our keys or Hugging Face config.json)")
      ->group(model);
  app.add_option("--checkpoint", f.checkpoint,
                 "start from the weights of this checkpoint folder (fresh optimizer and data position)")
      ->group(model);
  app.add_option("--resume", f.resume,
                 "continue the run saved in this checkpoint folder exactly (weights, optimizer, data "
                 "position, LR schedule)")
      ->group(model);
  app.add_option("--seed", f.seed, "initialization seed for --model (default 1234)")->group(model);
  add_precision_flag(app, f.precision)->group(model);
  add_compute_flags(app, f.recompute, f.mlp_chunk, model);

  app.add_option("--data", f.data, "training data: a text file (one token per byte), a token "
                                   "file from 'helixpipe tokenize', an llm.c shard, a nanoGPT "
                                   ".bin or a Megatron dataset prefix")
      ->required()
      ->group(data);
  add_data_format_flag(app, f.data_format)->group(data);
  app.add_option("--seq-len", f.seq_len, "S: tokens per sequence (default 256; resume: saved)")
      ->check(positive())
      ->group(data);
  app.add_option("--microbatch-size", f.microbatch_size,
                 "B: sequences per micro-batch (default 1; resume: saved)")
      ->check(positive())
      ->group(data);
  app.add_option("--microbatches", f.microbatches,
                 "M: micro-batches per step, gradients accumulated (default 1; resume: saved)")
      ->check(positive())
      ->group(data);

  app.add_option("--steps", f.steps, "total optimizer steps of the run (default 100; resume: saved)")
      ->check(positive())
      ->group(opt);
  app.add_option("--stop-after", f.stop_after,
                 "end this process after this step (saving if --save); the LR schedule still spans "
                 "--steps, so --resume continues it")
      ->check(positive())
      ->group(opt);
  app.add_option("--lr", f.lr, "peak learning rate (default 3e-3)")->check(positive())->group(opt);
  app.add_option("--warmup", f.warmup, "linear warmup steps (default 0)")
      ->check(at_least(0))
      ->group(opt);
  app.add_option("--min-lr", f.min_lr, "learning rate at the end of the cosine decay (default lr/10)")
      ->check(at_least(0))
      ->group(opt);
  app.add_option("--weight-decay", f.weight_decay,
                 "AdamW decoupled weight decay on matrices (default 0.1)")
      ->check(at_least(0))
      ->group(opt);
  app.add_option("--clip", f.clip, "max global gradient norm; 0 disables clipping (default 1.0)")
      ->check(at_least(0))
      ->group(opt);

  add_threads_flag(app, f.threads)->group(par);

  app.add_option("--save", f.save, "checkpoint folder to write (at the end and every --save-every)")
      ->group(out);
  app.add_option("--save-every", f.save_every, "also save every N steps (needs --save)")
      ->check(positive())
      ->group(out);
  app.add_option("--save-dtype", f.save_dtype,
                 "how checkpoints store the model: fp32 (default; resumable) or bf16 (half the "
                 "size, for inference and other tools; no optimizer state, so --resume refuses "
                 "it)")
      ->check(one_of({"fp32", "bf16"}))
      ->group(out);
  app.add_option("--log", f.log, "JSONL metrics file, one line per step (appended on --resume)")
      ->group(out);
  app.add_option("--loss-svg", f.loss_svg, "write the loss curve as an SVG file at the end")
      ->group(out);
  app.add_option("--progress", f.progress,
                 "auto (a line rewritten in place on an interactive terminal of one process; "
                 "plain lines under mpirun, in files, with CI set or TERM=dumb), tty or lines")
      ->check(one_of({"auto", "tty", "lines"}))
      ->group(out);
  app.add_option("--log-interval", f.log_interval,
                 "plain progress lines every N steps (e.g. 20) or every N seconds (e.g. 30s); "
                 "default: about every 5% of the run")
      ->group(out);
  app.add_option("--peak-gflops", f.peak_gflops,
                 "peak GFLOP/s of the machine; when given, the progress line shows MFU")
      ->check(positive())
      ->group(out);
}

CLI::Option* add_data_format_flag(CLI::App& app, std::string& value) {
  return app.add_option("--data-format", value,
                 "how to read --data: auto (default: by magic number, .bin name and .idx "
                 "companion), text, hptokens, llmc, nanogpt or megatron")
      ->check(one_of({"auto", "text", "hptokens", "llmc", "nanogpt", "megatron"}));
}

CLI::Option* add_precision_flag(CLI::App& app, std::string& value) {
  return app.add_option("--precision", value,
                 "fp32, bf16 (bf16 GEMMs and attention over f32 master weights, gradients and "
                 "AdamW state; needs AVX512-BF16) or auto (bf16 where the CPU has it); default "
                 "fp32")
      ->check(one_of({"fp32", "bf16", "auto"}));
}

void add_grad_flags(CLI::App& app, GradRequest& f) {
  const std::string model = "Model", data = "Data", par = "Parallelism", out = "Output";
  app.add_option("--checkpoint", f.checkpoint, "model folder (config.json + model.safetensors)")
      ->required()
      ->group(model);
  add_precision_flag(app, f.precision)->group(model);
  add_compute_flags(app, f.recompute, f.mlp_chunk, model);
  app.add_option("--data", f.data, "text, token file, llm.c shard, nanoGPT .bin or Megatron "
                                   "prefix; sequences are read from its start")
      ->required()
      ->group(data);
  add_data_format_flag(app, f.data_format)->group(data);
  app.add_option("--seq-len", f.seq_len, "S: tokens per sequence")
      ->required()
      ->check(positive())
      ->group(data);
  app.add_option("--microbatch-size", f.microbatch_size, "B: sequences per micro-batch (default 1)")
      ->check(positive())
      ->group(data);
  app.add_option("--microbatches", f.microbatches, "M: micro-batches (default 1)")
      ->check(positive())
      ->group(data);
  add_threads_flag(app, f.threads)->group(par);
  app.add_option("--out", f.out, "gradients file (safetensors, parameter names)")
      ->required()
      ->group(out);
}

}  // namespace hp::cli

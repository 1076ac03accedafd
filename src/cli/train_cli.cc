// Shared train/grad flags and their resolution into a plan.
#include "cli/train_cli.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kernels/cpu_kernels.h"
#include "runtime/progress.h"
#include "sim/device.h"
#include "util/error.h"

namespace hp::cli {

MfuPeak resolve_mfu_peak(const TrainFlags& f) {
  if (f.peak_gflops > 0) return {f.peak_gflops, fmt::format("{:.0f} GFLOP/s (--peak-gflops)", f.peak_gflops)};
  // The thread count the CPU kernels resolve (--threads, OMP_NUM_THREADS or the usable cores).
  const int threads = cpu_threads(f.threads);
  const double per_core = device_profile("cpu").peak_flops / 1e9;
  return {per_core * threads,
          fmt::format("{:.0f} GFLOP/s = cpu profile {:.0f} x {} thread{}", per_core * threads,
                      per_core, threads, threads == 1 ? "" : "s")};
}

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

void add_train_flags(CLI::App& app, TrainFlags& f) {
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

TokenSource open_data(const std::string& path, const std::string& format, int64_t vocab) {
  TokenOpenOptions o;
  o.format = parse_data_format(format);
  o.vocab = vocab;
  return TokenSource::open(path, o);
}

void add_precision_flag(CLI::App& app, std::string& value) {
  app.add_option("--precision", value,
                 "fp32, bf16 (bf16 GEMMs and attention over f32 master weights, gradients and "
                 "AdamW state; needs AVX512-BF16) or auto (bf16 where the CPU has it); default "
                 "fp32")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
}

Precision resolve_precision(const std::string& value, Backend& be) {
  const bool has_bf16 = be.kernels().supports(Precision::bf16());
  if (value == "auto") return has_bf16 ? Precision::bf16() : Precision::fp32();
  const Precision p = Precision::parse(value);
  HP_CHECK(p != Precision::fp64(), "--precision={} is for gradient checks only; use fp32 or bf16",
           value);
  HP_CHECK(p != Precision::bf16() || has_bf16,
           "--precision=bf16 needs bf16 kernels, which the {} backend does not have here (on the "
           "CPU: AVX512-BF16 and oneDNN; HP_CPU_ISA may have forced another path); use "
           "--precision=fp32, or auto to take bf16 only where it is available",
           be.name());
  return p;
}

namespace {

bool given(const CLI::App& app, const char* name) { return app.get_option(name)->count() > 0; }

// On --resume: the saved state `st` continues unchanged except where a flag was given explicitly;
// each such change is noted in plan.notes.
void apply_resume_overrides(const TrainFlags& f, const CLI::App& app, TrainPlan& plan) {
  TrainState& st = plan.state;
  // Flags given explicitly override the saved run; the rest continue it unchanged.
  std::string changed;
  auto note = [&](const char* flag) { changed += (changed.empty() ? "" : ", ") + std::string(flag); };
  if (!given(app, "--seq-len")) plan.shape.seq_len = st.seq_len;
  if (!given(app, "--precision")) plan.precision = st.precision;
  if (!given(app, "--microbatch-size") && st.microbatch_size > 0) {
    plan.shape.microbatch_size = st.microbatch_size;
  }
  if (!given(app, "--microbatches") && st.microbatches > 0) plan.shape.microbatches = st.microbatches;
  if (given(app, "--lr") && f.lr != st.lr.peak) {
    const double min_lr = st.lr.peak * st.lr.min_ratio;
    st.lr.peak = f.lr;
    st.lr.min_ratio = std::min(1.0, min_lr / f.lr);
    note("--lr");
  }
  if (given(app, "--min-lr")) {
    st.lr.min_ratio = f.min_lr / st.lr.peak;
    note("--min-lr");
  }
  if (given(app, "--warmup") && f.warmup != st.lr.warmup) {
    st.lr.warmup = f.warmup;
    note("--warmup");
  }
  if (given(app, "--steps") && f.steps != st.lr.total) {
    st.lr.total = f.steps;
    note("--steps");
  }
  if (given(app, "--weight-decay") && f.weight_decay != st.adamw.weight_decay) {
    st.adamw.weight_decay = f.weight_decay;
    note("--weight-decay");
  }
  if (given(app, "--clip") && f.clip != st.clip) {
    st.clip = f.clip;
    note("--clip");
  }
  if (plan.shape.seq_len != st.seq_len) {
    const int64_t next = st.next_sequence_for(plan.shape.seq_len);
    plan.notes += fmt::format(
        "note: --seq-len {} differs from the saved {}; the data position {} x {} tokens "
        "becomes sequence {} of the new length\n",
        plan.shape.seq_len, st.seq_len, st.next_sequence, st.seq_len, next);
    st.next_sequence = next;
    st.seq_len = plan.shape.seq_len;
    note("--seq-len");
  }
  if (!changed.empty()) {
    plan.notes += fmt::format(
        "note: resuming with changed {}: the run continues, but not as the saved run would "
        "have\n",
        changed);
  }
}

}  // namespace

TrainPlan resolve_train_flags(const TrainFlags& f, const CLI::App& app) {
  const int sources = !f.model.empty() + !f.checkpoint.empty() + !f.resume.empty();
  HP_CHECK(sources == 1,
           "give exactly one of --model (train from scratch), --checkpoint (start from weights) or "
           "--resume (continue a saved run); got {}",
           sources);
  TrainPlan plan;
  plan.precision = f.precision;
  plan.shape.seq_len = f.seq_len;
  plan.shape.microbatch_size = f.microbatch_size;
  plan.shape.microbatches = f.microbatches;
  plan.shape.recompute = parse_recompute(f.recompute);
  HP_CHECK(f.mlp_chunk >= 0, "--mlp-chunk must be >= 0 (0: no chunking), got {}", f.mlp_chunk);
  plan.model_options.mlp_chunk = f.mlp_chunk;
  HP_CHECK(f.threads >= 0, "--threads must be >= 0 (0: all cores), got {}", f.threads);
  HP_CHECK(f.save_every >= 0, "--save-every must be >= 0, got {}", f.save_every);
  HP_CHECK(f.save_every == 0 || !f.save.empty(), "--save-every needs --save DIR");
  HP_CHECK(f.stop_after >= 0, "--stop-after must be >= 0, got {}", f.stop_after);
  HP_CHECK(f.peak_gflops >= 0, "--peak-gflops must be >= 0, got {}", f.peak_gflops);
  if (!f.log_interval.empty()) plan.log_interval = parse_log_interval(f.log_interval);
  plan.progress = parse_progress_mode(f.progress);
  HP_CHECK(std::isfinite(f.weight_decay) && f.weight_decay >= 0,
           "--weight-decay must be >= 0, got {}", f.weight_decay);
  HP_CHECK(std::isfinite(f.clip) && f.clip >= 0, "--clip must be >= 0 (0: no clipping), got {}",
           f.clip);
  HP_CHECK(f.lr > 0 && std::isfinite(f.lr), "--lr must be a positive number, got {}", f.lr);
  HP_CHECK(f.min_lr < 0 || f.min_lr <= f.lr, "--min-lr {} must not exceed --lr {}", f.min_lr, f.lr);

  TrainState& st = plan.state;
  auto fresh_state = [&] {
    st.seed = f.seed;
    st.lr.peak = f.lr;
    st.lr.min_ratio = f.min_lr < 0 ? 0.1 : f.min_lr / f.lr;
    st.lr.warmup = f.warmup;
    st.lr.total = f.steps;
    st.adamw.weight_decay = f.weight_decay;
    st.clip = f.clip;
  };
  if (!f.model.empty()) {
    plan.cfg = ModelConfig::load(f.model);
    fresh_state();
  } else {
    const std::string& dir = f.checkpoint.empty() ? f.resume : f.checkpoint;
    plan.source = open_checkpoint(dir);
    plan.cfg = checkpoint_model_config(*plan.source);
    if (!f.checkpoint.empty()) {
      fresh_state();
    } else {
      plan.resumed = true;
      HP_CHECK(plan.source->trainer_state.has_value() && plan.source->optimizer_path.has_value(),
               "--resume '{}': the folder holds a model but no training state ({} and {}); start "
               "from its weights with --checkpoint instead",
               dir, kTrainerStateFile, kOptimizerFile);
      st = TrainState::from_json(*plan.source->trainer_state, dir + "/" + kTrainerStateFile);
      apply_resume_overrides(f, app, plan);
      HP_CHECK(st.step < st.lr.total,
               "--resume '{}': the saved run already did {} of its {} steps; raise --steps to train "
               "further",
               dir, st.step, st.lr.total);
    }
  }
  plan.shape.validate();
  st.seq_len = plan.shape.seq_len;
  st.microbatch_size = plan.shape.microbatch_size;
  st.microbatches = plan.shape.microbatches;
  st.lr.validate();
  HP_CHECK(plan.shape.seq_len <= plan.cfg.max_positions,
           "--seq-len {} exceeds the model's max_position_embeddings {}", plan.shape.seq_len,
           plan.cfg.max_positions);
  HP_CHECK(f.stop_after == 0 || f.stop_after > st.step,
           "--stop-after {} is not after the current step {}", f.stop_after, st.step);
  return plan;
}

int64_t last_step(const TrainFlags& f, const TrainState& state) {
  const int64_t total = state.lr.total;
  return f.stop_after > 0 ? std::min(f.stop_after, total) : total;
}

Precision apply_precision(TrainPlan& plan, Backend& be) {
  const Precision p = resolve_precision(plan.precision, be);
  if (plan.resumed && !plan.state.precision.empty() && plan.state.precision != p.name()) {
    plan.notes += fmt::format(
        "note: resuming a run trained in {} in {}: the weights and optimizer state carry over "
        "(both f32), but the steps round differently from the saved run's\n",
        plan.state.precision, p.name());
  }
  plan.state.precision = p.name();
  return p;
}

void add_grad_flags(CLI::App& app, GradFlags& f) {
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

void check_grad_flags(const GradFlags& f) {
  HP_CHECK(f.seq_len >= 1, "--seq-len must be >= 1, got {}", f.seq_len);
  HP_CHECK(f.microbatch_size >= 1, "--microbatch-size must be >= 1, got {}", f.microbatch_size);
  HP_CHECK(f.microbatches >= 1, "--microbatches must be >= 1, got {}", f.microbatches);
  HP_CHECK(f.threads >= 0, "--threads must be >= 0, got {}", f.threads);
  HP_CHECK(f.mlp_chunk >= 0, "--mlp-chunk must be >= 0, got {}", f.mlp_chunk);
  parse_recompute(f.recompute);
}

}  // namespace hp::cli

#include "runtime/train_setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu_kernels.h"
#include "model/params.h"
#include "sim/device.h"
#include "util/error.h"

namespace hp {

MfuPeak resolve_mfu_peak(const TrainRequest& f, const std::string& precision) {
  if (f.peak_gflops > 0) return {f.peak_gflops, fmt::format("{:.0f} GFLOP/s (--peak-gflops)", f.peak_gflops)};
  // The thread count the CPU kernels resolve (--threads, OMP_NUM_THREADS or the usable cores).
  const int threads = cpu_threads(f.threads);
  const DeviceProfile& cpu = device_profile("cpu");
  // A profile quoted in fp32 (one FMA per lane) counts double for bf16: vdpbf16ps does two
  // products per lane in one instruction (oneDNN's bf16 GEMMs run at 2.0-2.1x OpenBLAS's sgemm
  // here, docs/model.md); against the fp32 figure a bf16 run would read above 100%.
  const bool twice = precision == "bf16" && cpu.dtype == "fp32";
  const double per_core = cpu.peak_flops / 1e9 * (twice ? 2 : 1);
  return {per_core * threads,
          fmt::format("{:.0f} GFLOP/s = cpu profile {:.0f}{} x {} thread{}", per_core * threads,
                      cpu.peak_flops / 1e9, twice ? " x 2 for bf16" : "", threads,
                      threads == 1 ? "" : "s")};
}

TokenSource open_data(const std::string& path, const std::string& format, int64_t vocab) {
  TokenOpenOptions o;
  o.format = parse_data_format(format);
  o.vocab = vocab;
  return TokenSource::open(path, o);
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

bool given(const TrainRequest& f, const char* name) { return f.given.count(name) > 0; }


// On --resume: the saved state `st` continues unchanged except where a flag was given explicitly;
// each such change is noted in plan.notes.
void apply_resume_overrides(const TrainRequest& f, TrainPlan& plan) {
  TrainState& st = plan.state;
  // Flags given explicitly override the saved run; the rest continue it unchanged.
  std::string changed;
  auto note = [&](const char* flag) { changed += (changed.empty() ? "" : ", ") + std::string(flag); };
  if (!given(f, "--seq-len")) plan.shape.seq_len = st.seq_len;
  if (!given(f, "--precision")) plan.precision = st.precision;
  if (!given(f, "--microbatch-size") && st.microbatch_size > 0) {
    plan.shape.microbatch_size = st.microbatch_size;
  }
  if (!given(f, "--microbatches") && st.microbatches > 0) plan.shape.microbatches = st.microbatches;
  if (given(f, "--lr") && f.lr != st.lr.peak) {
    const double min_lr = st.lr.peak * st.lr.min_ratio;
    st.lr.peak = f.lr;
    st.lr.min_ratio = std::min(1.0, min_lr / f.lr);
    note("--lr");
  }
  if (given(f, "--min-lr")) {
    st.lr.min_ratio = f.min_lr / st.lr.peak;
    note("--min-lr");
  }
  if (given(f, "--warmup") && f.warmup != st.lr.warmup) {
    st.lr.warmup = f.warmup;
    note("--warmup");
  }
  if (given(f, "--steps") && f.steps != st.lr.total) {
    st.lr.total = f.steps;
    note("--steps");
  }
  if (given(f, "--weight-decay") && f.weight_decay != st.adamw.weight_decay) {
    st.adamw.weight_decay = f.weight_decay;
    note("--weight-decay");
  }
  if (given(f, "--clip") && f.clip != st.clip) {
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

TrainPlan resolve_train_request(const TrainRequest& f) {
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
  HP_CHECK(f.save_dtype == "fp32" || f.save_dtype == "bf16",
           "--save-dtype must be fp32 or bf16, got '{}'", f.save_dtype);
  HP_CHECK(f.save_dtype == "fp32" || !f.save.empty(), "--save-dtype={} needs --save DIR",
           f.save_dtype);
  plan.save_dtype = f.save_dtype == "bf16" ? StDType::kBF16 : StDType::kF32;
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
    plan.cfg = ModelConfig::load_for_runtime(f.model);
    fresh_state();
  } else {
    const std::string& dir = f.checkpoint.empty() ? f.resume : f.checkpoint;
    plan.source = open_checkpoint(dir);
    plan.cfg = checkpoint_model_config(*plan.source);
    if (!f.checkpoint.empty()) {
      fresh_state();
    } else {
      plan.resumed = true;
      HP_CHECK(plan.source->resumable,
               "--resume '{}': this checkpoint stores the model in {} (saved with --save-dtype=bf16 "
               "for inference and interoperation): its weights were rounded and it holds no "
               "optimizer state, so the run cannot continue exactly from it; start a new run from "
               "its weights with --checkpoint {}, or resume from a checkpoint saved with "
               "--save-dtype=fp32 (the default)",
               dir, st_dtype_name(plan.source->model_dtype), dir);
      HP_CHECK(plan.source->trainer_state.has_value() && plan.source->optimizer_path.has_value(),
               "--resume '{}': the folder holds a model but no training state ({} and {}); start "
               "from its weights with --checkpoint instead",
               dir, kTrainerStateFile, kOptimizerFile);
      st = TrainState::from_json(*plan.source->trainer_state, dir + "/" + kTrainerStateFile);
      apply_resume_overrides(f, plan);
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
  plan.notes += update_size_warnings(st, plan.cfg.params_total());
  return plan;
}

std::string update_size_warnings(const TrainState& st, int64_t params) {
  std::string w;
  const double lr = st.lr.peak;
  if (lr > 5 * kInitStd) {
    w += fmt::format(
        "warning: --lr {:g}: AdamW moves every weight by about the learning rate each step, more "
        "than 5x the {:g} scale the weights start at, so the loss will most likely diverge; "
        "language models train with 1e-4 to 3e-3\n",
        lr, kInitStd);
  } else if (lr < kInitStd * std::ldexp(1.0, -24)) {
    w += fmt::format(
        "warning: --lr {:g} is below the f32 rounding of weights of size {:g}: every update "
        "vanishes and the model will not change\n",
        lr, kInitStd);
  } else if (const int64_t left = st.lr.total - st.step; left > 0 && lr * left < 0.01 * kInitStd) {
    w += fmt::format(
        "warning: --lr {:g} over the {} remaining step{} moves each weight by at most {:.2g} in "
        "all, under 1% of their {:g} scale: the run will barely change the model; raise --lr or "
        "--steps\n",
        lr, left, left == 1 ? "" : "s", lr * static_cast<double>(left), kInitStd);
  }
  const double per_element = st.clip / std::sqrt(static_cast<double>(std::max<int64_t>(params, 1)));
  if (st.clip > 0 && per_element < 10 * st.adamw.eps) {
    w += fmt::format(
        "warning: --clip {:g} over {} parameters leaves gradients of about {:.2g} per element, "
        "close to AdamW's eps {:g}, so clipped updates shrink toward zero; use a larger --clip "
        "(1.0 is usual) or --clip=0 to turn clipping off\n",
        st.clip, params, per_element, st.adamw.eps);
  }
  return w;
}

int64_t last_step(const TrainRequest& f, const TrainState& state) {
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

void check_grad_request(const GradRequest& f) {
  HP_CHECK(f.seq_len >= 1, "--seq-len must be >= 1, got {}", f.seq_len);
  HP_CHECK(f.microbatch_size >= 1, "--microbatch-size must be >= 1, got {}", f.microbatch_size);
  HP_CHECK(f.microbatches >= 1, "--microbatches must be >= 1, got {}", f.microbatches);
  HP_CHECK(f.threads >= 0, "--threads must be >= 0, got {}", f.threads);
  HP_CHECK(f.mlp_chunk >= 0, "--mlp-chunk must be >= 0, got {}", f.mlp_chunk);
  parse_recompute(f.recompute);
}

}  // namespace hp

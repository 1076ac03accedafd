// What `helixpipe train` and `grad` are asked to do, as plain data (their flags are
// cli/train_cli.h; docs/training.md lists them), and how a request resolves into a model config,
// a step shape and a trainer state: fresh, from a checkpoint, or resumed with the flags given
// explicitly overriding the saved run. Error texts name the flags, which is what a user changes.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "checkpoint/checkpoint.h"
#include "data/token_file.h"
#include "kernels/backend.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"
#include "runtime/train_state.h"
#include "util/model_config.h"

namespace hp {

struct TrainRequest {
  // Where the model comes from: exactly one of these.
  std::string model;       // --model: a preset name or a config JSON (fresh init with --seed)
  std::string checkpoint;  // --checkpoint: start from these weights (fresh optimizer and state)
  std::string resume;      // --resume: continue a saved run exactly (weights, optimizer, data, LR)
  std::string data;        // --data: text, token file, llm.c shard, nanoGPT .bin, Megatron prefix
  std::string data_format = "auto";  // --data-format
  int64_t seq_len = 256;
  int64_t microbatch_size = 1;
  int64_t microbatches = 1;
  int64_t steps = 100;      // total updates of the run (a resumed run counts the saved ones)
  int64_t stop_after = 0;   // end this process after this step (0: run to --steps)
  double lr = 3e-3;
  int64_t warmup = 0;
  double min_lr = -1;       // < 0: lr / 10
  double weight_decay = 0.1;
  double clip = 1.0;
  uint64_t seed = 1234;
  int threads = 0;          // 0: all cores (OMP_NUM_THREADS if set)
  int64_t mlp_chunk = 0;
  std::string recompute = "none";
  std::string precision = "fp32";  // --precision: fp32, bf16 or auto (resume: saved)
  std::string save;
  int64_t save_every = 0;   // 0: save only at the end
  std::string save_dtype = "fp32";  // --save-dtype: fp32 (resumable) or bf16 (model only)
  std::string log;          // JSONL metrics
  std::string loss_svg;
  std::string progress = "auto";  // --progress: auto, tty or lines
  std::string log_interval;       // --log-interval: N steps or Ns seconds ("": about 5% of the run)
  double peak_gflops = 0;   // > 0: report MFU against this peak
  // The flags given explicitly ("--lr", ...): on --resume only these override the saved run.
  std::set<std::string> given;
};

// Opens --data in the --data-format `format`, checking its ids against the model's `vocab`
// (data/token_file.h: TokenSource::open).
TokenSource open_data(const std::string& path, const std::string& format, int64_t vocab);

// The policy a --precision value names on backend `be`: fp32 or bf16 as given (bf16 where the
// backend has no bf16 kernels is an hp::Error saying what is missing and what to use instead), and
// auto = bf16 where the backend supports it, else fp32 (docs/precision.md).
Precision resolve_precision(const std::string& value, Backend& be);

// What the flags resolve to.
struct TrainPlan {
  ModelConfig cfg;
  std::optional<CheckpointInfo> source;  // weights to load (--checkpoint or --resume)
  bool resumed = false;                  // --resume: load the optimizer too
  StepShape shape;
  TrainState state;                      // fresh, or the saved one with flag overrides applied
  ModelOptions model_options;
  std::string precision;                 // the --precision value (resume: the saved one unless given)
  StDType save_dtype = StDType::kF32;    // --save-dtype: how checkpoints store the model
  ProgressMode progress = ProgressMode::kAuto;  // --progress
  std::optional<LogInterval> log_interval;      // --log-interval (none: about 5% of the run)
  std::string notes;                     // lines to print (e.g. a resumed run that changed its LR)
};

// The peak MFU is reported against, per process: --peak-gflops when given, else the `cpu` device
// profile's peak (configs/devices/cpu.json: per core, fp32) times the compute threads of the
// process, doubled when `precision` (the resolved one: fp32 or bf16) is bf16. `what` says which,
// for the header line.
struct MfuPeak {
  double gflops = 0;
  std::string what;
};
MfuPeak resolve_mfu_peak(const TrainRequest& f, const std::string& precision);

// Checks the request (a clear hp::Error for each bad combination) and resolves it. On --resume,
// only the flags in f.given override the saved settings.
TrainPlan resolve_train_request(const TrainRequest& f);

// Warnings for optimizer settings that make every update vanish or explode, one line each ("" when
// there is none). AdamW moves each weight by about the learning rate per step whatever the
// gradient's scale, and the weights start at a scale of kInitStd (model/params.h), so:
//   lr > 5 x kInitStd                  every step moves weights several times their size: divergence
//   lr < kInitStd x 2^-24              a step is below the f32 rounding of a typical weight
//   peak lr x remaining steps < 1% of kInitStd: the whole run barely moves the weights
//   0 < clip / sqrt(params) < 10 x eps: clipped gradients drop to AdamW's eps, updates shrink to 0
std::string update_size_warnings(const TrainState& state, int64_t params);

// The step a run ends at: --stop-after when given (and not past --steps), else the schedule's last.
int64_t last_step(const TrainRequest& f, const TrainState& state);

// Resolves plan.precision on `be` (resolve_precision), records the result in plan.state (so a
// resumed run continues in it) and, when a resumed run changes precision, adds a note.
Precision apply_precision(TrainPlan& plan, Backend& be);

// One `grad` request (single process or pipelined).
struct GradRequest {
  std::string checkpoint, data, out;
  std::string data_format = "auto";
  int64_t seq_len = 0, microbatch_size = 1, microbatches = 1;
  int threads = 0;
  int64_t mlp_chunk = 0;
  std::string recompute = "none";
  std::string precision = "fp32";
};

// Checks a grad request (sizes positive, the recomputation policy known).
void check_grad_request(const GradRequest& f);

}  // namespace hp

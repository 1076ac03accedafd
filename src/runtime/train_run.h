// One launch of `helixpipe train` or `grad` from its request (runtime/train_setup.h): the
// training loop's output shared by the single process and the pipelined run under mpirun (header,
// progress line, JSONL metrics, loss curve, summary), the pipelined run itself (DistTrainer over a
// D x P x T world) and the pipelined gradient file. docs/executor.md describes the runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/comm.h"
#include "runtime/train_setup.h"

namespace hp {

// How a launch of `train` differs from the single process: how many ranks share the step, which
// rank prints, one more header line, and what each step adds to the progress line and the JSONL
// log. The defaults are the single process.
struct TrainLaunch {
  int ranks = 1;
  bool root = true;     // this rank prints and writes the log and the loss curve
  std::string header;   // an extra header line ("" for none)
  // Called on every rank after each step; `line` (the JSONL record) and `extra` (the progress
  // line's tail) are only used on the root.
  std::function<void(const StepRecord&, nlohmann::json& line, std::string& extra)> after_step;
  std::function<void(int64_t step)> before_step;  // every rank, before step `step` starts
  std::function<void()> after_loop;  // every rank, after the last step and the final save
  // More files the root writes at the end (flag, path), checked before the first step and listed
  // in the summary.
  std::vector<std::pair<std::string, std::string>> outputs;
};

// Runs the training loop of `engine` (runtime/trainer.h: run_train_loop) to --stop-after or
// --steps with --save/--save-every, and prints and writes what `train` promises: the header, the
// progress line, the --log JSONL lines, the --loss-svg curve and the summary line.
void run_training(TrainEngine& engine, const TrainRequest& f, const TrainPlan& plan,
                  const TokenSource& source, const SequenceReader& reader, const StepShape& global,
                  const std::string& compute, const TrainLaunch& launch);

// `helixpipe train` in one process: resolves `f`, builds the Trainer on the CPU backend (weights
// fresh, from --checkpoint or --resume with its optimizer) and runs it through run_training.
void run_local_training(const TrainRequest& f);

// `helixpipe grad` in one process: the mean loss of `f.checkpoint` over the first B*M sequences
// of the data and its gradient of every parameter, written to f.out (safetensors, parameter
// names); prints what it wrote and {"loss": ...} last.
void run_local_grad(const GradRequest& f);

// The mean token loss (forward only) of the model in `params` over sequences skip .. skip+n-1 of
// `reader`, `batch` sequences per forward pass.
double mean_token_loss(Params& params, const SequenceReader& reader, int64_t skip, int64_t n,
                       int64_t batch);

// The schedule flags of a pipelined run (--schedule, --schedule-file, --stages, --folds, --virtual,
// --transfer) and its grid (--data-parallel, --tensor-parallel).
struct DistLaunchRequest {
  std::string schedule = "helix", schedule_file, transfer = "weights";
  int stages = 1, folds = 1, virtual_stages = 1, dp = 1, tp = 1;
  std::string trace, timeline;  // train only: the last step's Chrome trace and SVG timeline
};

// The schedule a pipelined run executes: --schedule-file loaded and checked, else the generator's
// (validated, then lowered), for micro-batches of `tokens_per_mb` tokens; `recompute` only when
// `recompute_given` (else the schedule's own). hp::Error when its micro-batch count is not
// `microbatches`.
Schedule dist_schedule(const DistLaunchRequest& d, const ModelConfig& cfg, int64_t tokens_per_mb,
                       int microbatches, Recompute recompute, bool recompute_given);

// Every rank of `world` (D x P x T ranks): resolves `f`, builds the DistTrainer (loading or
// initializing its weights and, on --resume, the optimizer) and runs it through run_training, with
// the bubble (and tensor-parallel time) per step, HP_TEST_KILL_RANK's fault injection
// (docs/executor.md) and the last step's --trace / --timeline gathered on stage 0.
void run_dist_training(Comm& world, const TrainRequest& f, const DistLaunchRequest& d);

// Every rank of `world`: the loss and gradients of `f.checkpoint` on the first sequences of the
// data, computed by the pipelined runtime; world rank 0 writes the same gradient file as the
// single process and prints the loss. `recompute_given`: --recompute was given (else the
// schedule's own policy).
void run_dist_grad(Comm& world, const GradRequest& f, const DistLaunchRequest& d,
                   bool recompute_given);

}  // namespace hp

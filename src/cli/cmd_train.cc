// helixpipe train (single process): builds the run from the flags (cli/train_cli.h) and runs the
// Trainer (runtime/trainer.h) through the shared loop and output (runtime/train_run.h). The pipelined
// run under mpirun is cli/train_dist.*.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/train_cli.h"
#include "cli/train_dist.h"
#include "comm/mpi_comm.h"
#include "data/token_file.h"
#include "kernels/kernels.h"
#include "runtime/train_run.h"
#include "runtime/trainer.h"

namespace hp::cli {

int cmd_train(int argc, char** argv) {
  // Under mpirun the ranks run the pipelined (D x P) path; cli/train_dist.h.
  if (MpiComm::launched_by_mpirun()) return train_dist_main(argc, argv);
  CLI::App app("Train a model in one process: AdamW, warmup + cosine LR, gradient accumulation "
               "over micro-batches, global-norm clipping, resumable checkpoints.",
               "train");
  TrainRequest f;
  add_train_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  f.given = given_flags(app);
  TrainPlan plan = resolve_train_request(f);
  auto be = make_cpu_backend(f.threads);
  const Precision prec = apply_precision(plan, *be);
  if (!plan.notes.empty()) std::fputs(plan.notes.c_str(), stderr);

  const ModelConfig& cfg = plan.cfg;
  const TokenSource source = open_data(f.data, f.data_format, cfg.vocab);
  const SequenceReader reader(source, plan.shape.seq_len, cfg.vocab);
  Params params(cfg, Params::all_parts(cfg), *be, prec);
  if (plan.source) {
    load_checkpoint_params(*plan.source, params);
  } else {
    params.init(plan.state.seed);
  }
  Trainer trainer(cfg, params, plan.model_options, plan.shape, plan.state);
  if (plan.resumed) trainer.load_optimizer(*plan.source->optimizer_path);
  run_training(trainer, f, plan, source, reader, plan.shape,
               fmt::format("{} on {}", prec.name(), be->name()), TrainLaunch{});
  return 0;
}

}  // namespace hp::cli

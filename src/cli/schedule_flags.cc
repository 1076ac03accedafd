// Schedule-shape flags (schedule_flags.h).
#include "cli/schedule_flags.h"

#include "cli/flags.h"

namespace hp::cli {

void add_schedule_flags(CLI::App& app, ScheduleFlags& f) {
  app.add_option("--schedule", f.name, "pipeline schedule")
      ->required()
      ->check(one_of(schedule_names()));
  app.add_option("--stages", f.stages, "pipeline stages p")->required()->check(in_range(1, 4096));
  app.add_option("--microbatches", f.microbatches, "micro-batches per iteration m")
      ->required()
      ->check(in_range(1, 1 << 20));
  app.add_option("--layers", f.layers, "transformer layers L")
      ->required()
      ->check(in_range(1, 1 << 16));
  app.add_option("--folds", f.folds, "HelixPipe folds F (helix only)")
      ->capture_default_str()
      ->check(in_range(1, 1024));
  app.add_option("--virtual", f.virtual_stages, "model chunks per stage V (interleaved only)")
      ->capture_default_str()
      ->check(in_range(1, 1 << 16));
  app.add_option("--recompute", f.recompute,
                 "activation recomputation (default: no-attn for helix, none otherwise)")
      ->check(one_of(recompute_policy_names()));
  app.add_option("--transfer", f.transfer,
                 "how attention away from pre:l gets W_qkv: ship the weights or the activations")
      ->capture_default_str()
      ->check(one_of({"weights", "activations"}));
}

ScheduleSpec schedule_spec(const ScheduleFlags& f) {
  ScheduleSpec spec;
  spec.name = f.name;
  spec.stages = f.stages;
  spec.microbatches = f.microbatches;
  spec.layers = f.layers;
  spec.folds = f.folds;
  spec.virtual_stages = f.virtual_stages;
  if (!f.recompute.empty()) spec.recompute = parse_recompute(f.recompute);
  spec.transfer = parse_transfer(f.transfer);
  return spec;
}

}  // namespace hp::cli

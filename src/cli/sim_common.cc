// Shared flags of the simulator commands.
#include "cli/sim_common.h"

namespace hp::cli {

void add_shape_flags(CLI::App& app, ShapeFlags& f, bool with_schedule) {
  if (with_schedule) {
    app.add_option("--schedule", f.schedule, "schedule generator: gpipe, 1f1b, interleaved, zb1p, helix")
        ->required()
        ->check(one_of(schedule_names()));
  }
  app.add_option("--stages", f.stages, "pipeline stages p (>= 1)")->required()->check(positive());
  app.add_option("--microbatches", f.microbatches, "micro-batches per iteration m (>= 1)")
      ->required()
      ->check(positive());
  app.add_option("--layers", f.layers, "transformer layers L (default: the model's)")
      ->check(positive());
  app.add_option("--folds", f.folds, "HelixPipe folds F (helix only; default 1)")->check(positive());
  app.add_option("--virtual", f.virtual_stages, "model chunks per stage V (interleaved only)")
      ->check(positive());
}

void add_cost_flags(CLI::App& app, CostSpec& f) {
  app.add_option("--part-costs", f.part_costs,
                 "JSON file of seconds per part and direction + link (docs/formats/sim.md)");
  app.add_option("--model", f.model,
                 "model config: a preset (tiny, small, 1.3b, 3b, 7b, ...) or a JSON file");
  app.add_option("--seq-len", f.seq_len, "sequence length s in tokens")->check(positive());
  app.add_option("--device", f.device,
                 "device profile: h20, a800, a800-2nic, h100, h200, cpu, or a JSON file "
                 "(docs/formats/sim.md)");
  app.add_option("--microbatch-size", f.microbatch_size, "sequences per micro-batch b (default 1)")
      ->check(positive());
  app.add_option("--recompute", f.recompute,
                 "recomputation: none, full, no-attn, selective (default: the schedule's own: "
                 "helix no-attn, others none)")
      ->check(one_of(recompute_policy_names()));
  app.add_option("--transfer", f.transfer, "helix W_qkv transfer mode: weights or activations")
      ->check(one_of({"weights", "activations"}));
  app.add_flag("--eager", f.eager, "messages leave at the send (default: when both sides posted)");
  app.add_flag("--head-in-backward", f.head_in_backward,
               "run the LM head's forward (logits, loss) inside its backward, as the reference "
               "code does: one logits pass for both (default: in the forward, as helixpipe does)");
  app.add_flag("--shared-nic", f.shared_nic,
               "a stage's inter-node messages share one network port (default: one wire per pair)");
}

void add_tp_flag(CLI::App& app, CostSpec& f) {
  app.add_option("--tp", f.tp,
                 "tensor-parallel GPUs per stage, with sequence parallelism (a power of two, at "
                 "most the device's GPUs per node; needs --device, or --part-costs written by\n"
                 "profile --tensor-parallel with the same T; default 1)")
      ->check(positive());
}

void add_layout_flags(CLI::App& app, CostSpec& f) {
  add_tp_flag(app, f);
  app.add_option("--data-parallel", f.dp,
                 "data-parallel pipelines: tokens/s counts all of them, and each iteration ends "
                 "with the gradient all-reduce (needs --device; default 1)")
      ->check(positive());
}

void add_format_flag(CLI::App& app, std::string& format) {
  app.add_option("--format", format, "output: text or json")->check(one_of({"text", "json"}));
}

}  // namespace hp::cli

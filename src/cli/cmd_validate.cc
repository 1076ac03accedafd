// helixpipe validate: check a schedule file (text or JSON) — every part once on its stage, inputs
// before use, I before W, sends and receives matched per stage pair, no deadlock — and report the
// peak activation stash per stage. Exit 0 when valid, 1 when not (with every problem printed).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "schedule/text_io.h"
#include "schedule/validate.h"
#include "util/error.h"
#include "util/model_config.h"

namespace hp::cli {

int cmd_validate(int argc, char** argv) {
  CLI::App app{"Check a schedule file and report its peak activation stash per stage.",
               "helixpipe validate"};
  std::string file, model, format = "text";
  int64_t seq_len = 4096, mbs = 1;
  int tp = 1;
  app.add_option("file", file, "schedule file, text or JSON (docs/formats/schedule.md)")
      ->required();
  app.add_option("--model", model,
                 "model config (JSON file or preset name) to size messages and the stash in bytes");
  app.add_option("--seq-len", seq_len, "sequence length s (with --model)")
      ->capture_default_str()
      ->check(in_range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--microbatch-size", mbs, "sequences per micro-batch b (with --model)")
      ->capture_default_str()
      ->check(in_range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--tensor-parallel", tp,
                 "tensor-parallel ranks T per stage (with --model): also give the stash and "
                 "message bytes of one rank of a group (docs/tensor-parallel.md)")
      ->check(in_range(1, 1 << 16));
  app.add_option("--format", format, "report as text or json")
      ->capture_default_str()
      ->check(one_of({"text", "json"}));
  app.footer(
      "Examples:\n"
      "  helixpipe schedule --schedule=helix --stages=4 --microbatches=8 --layers=4 --folds=2 "
      "--out=h.txt\n"
      "  helixpipe validate h.txt\n"
      "  helixpipe validate h.txt --model=tiny --seq-len=2048      (stash in bytes)\n"
      "  helixpipe validate my_schedule.json --format=json\n"
      "Exit status: 0 valid, 1 invalid or unreadable, 2 bad flags.\n");
  // Help: exit 0; a bad flag: what is wrong and the valid values, exit 2.
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  const Schedule s = load_schedule(file);
  ModelConfig cfg;
  ValidateOptions opt;
  if (!model.empty()) {
    cfg = ModelConfig::load(model);
    opt.model = &cfg;
    opt.tokens_per_mb = seq_len * mbs;
    opt.tensor_parallel = tp;
  }
  const ValidationReport r = validate(s, opt);
  if (format == "json") {
    nlohmann::json j;
    j["valid"] = r.ok();
    j["schedule"] = s.name;
    j["errors"] = r.errors;
    if (!r.deadlock_grid.empty()) j["deadlock_grid"] = r.deadlock_grid;
    if (r.ok()) {
      j["compute_ops"] = r.compute_ops;
      j["messages"] = r.messages;
      j["message_bytes"] = r.message_bytes;
      j["tensor_parallel"] = opt.tensor_parallel;
      j["message_bytes_per_rank"] = r.message_bytes_per_rank;
      nlohmann::json stages = nlohmann::json::array();
      for (size_t st = 0; st < r.peak_stash_items.size(); ++st)
        stages.push_back({{"stage", st},
                          {"peak_stash_bytes", r.peak_stash_bytes[st]},
                          {"peak_stash_bytes_per_rank", r.peak_stash_bytes_per_rank[st]},
                          {"peak_stash_values", r.peak_stash_items[st]},
                          {"peak_after_op", r.peak_after_op[st]}});
      j["stages"] = stages;
    }
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("%s", r.text(s).c_str());
  }
  return r.ok() ? 0 : 1;
}

}  // namespace hp::cli

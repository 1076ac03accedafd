// The distributed executor on in-process ranks (LocalWorld threads, one kernel thread per rank):
// per schedule, tokens/s of a small model over a few steps, the measured bubble, communication
// wait, and each stage's measured peak stash next to the validator's prediction.
// Usage: bench_executor [P=2] [steps=3]
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

#include "comm/local_comm.h"
#include "kernels/kernels.h"
#include "runtime/dist_step.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "schedule/validate.h"
#include "util/rng.h"
#include "util/timer.h"

using namespace hp;

int main(int argc, char** argv) {
  const int P = argc > 1 ? std::atoi(argv[1]) : 2;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 3;
  ModelConfig cfg;
  cfg.name = "bench";
  cfg.hidden = 128;
  cfg.intermediate = 352;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.layers = 4;
  cfg.vocab = 256;
  const int64_t B = 1, S = 256;
  const int M = 2 * P;
  struct Spec { const char* name; int folds, virt; Recompute r; TransferMode t; };
  const Spec specs[] = {{"gpipe", 1, 1, Recompute::kNone, TransferMode::kWeights},
                        {"1f1b", 1, 1, Recompute::kNone, TransferMode::kWeights},
                        {"zb1p", 1, 1, Recompute::kNone, TransferMode::kWeights},
                        {"interleaved", 1, 2, Recompute::kNone, TransferMode::kWeights},
                        {"helix", 1, 1, Recompute::kNoAttn, TransferMode::kWeights},
                        {"helix", 2, 1, Recompute::kNoAttn, TransferMode::kWeights},
                        {"helix", 2, 1, Recompute::kNoAttn, TransferMode::kActivations}};
  Rng rng(3);
  std::vector<int32_t> tokens(static_cast<size_t>(B * S * M));
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next_u64() % 256);
  fmt::print("P={} M={} B={} S={} L={} h={} steps={} (LocalWorld threads, 1 kernel thread each)\n",
             P, M, B, S, cfg.layers, cfg.hidden, steps);
  fmt::print("{:<26} {:>9} {:>8} {:>9}  peak stash KiB per stage measured/predicted\n", "schedule",
             "tok/s", "bubble%", "wait ms");
  for (const Spec& sp : specs) {
    ModelConfig c = cfg;
    if (sp.folds == 2 || sp.virt == 2) c.layers = 2 * P;
    Schedule sch;
    try {
      sch = generate(ScheduleSpec{sp.name, P, M, static_cast<int>(c.layers), sp.folds, sp.virt, sp.r, sp.t});
    } catch (const std::exception& e) {
      fmt::print("{:<26} skipped: {}\n", sp.name, e.what());
      continue;
    }
    ValidationReport rep = validate(sch, ValidateOptions{&c, B * S});
    lower(sch, &c, B * S);
    LocalWorld world(P);
    std::mutex mu;
    std::vector<StageStats> last(static_cast<size_t>(P));
    double seconds = 0;
    world.run([&](Comm& comm) {
      GridComms grid = split_grid(comm, 1, P);
      auto be = make_cpu_backend(1);
      DistStage stage(sch, grid, c, *be, B, S);
      stage.params().init(1);
      AdamW opt(*be);
      DistStepResult r = stage.loss_and_grads(tokens.data(), tokens.data());  // warm-up
      comm.barrier();
      const double t0 = now_seconds();
      for (int s = 0; s < steps; ++s) {
        r = stage.loss_and_grads(tokens.data(), tokens.data());
        stage.optimizer_step(opt, 1e-3, 1.0);
      }
      comm.barrier();
      std::lock_guard<std::mutex> lock(mu);
      last[static_cast<size_t>(grid.p)] = r.stats;
      if (grid.p == 0) seconds = now_seconds() - t0;
    });
    double busy = 0, total = 0, wait = 0;
    std::string stash;
    for (int p = 0; p < P; ++p) {
      busy += last[p].busy_s;
      total += last[p].total_s;
      wait += last[p].comm_wait_s;
      stash += fmt::format(" {}/{}", last[p].peak_stash_bytes / 1024, rep.peak_stash_bytes[p] / 1024);
    }
    std::string label = fmt::format("{} F{} {} L{}", sp.name, sp.folds, transfer_str(sp.t), c.layers);
    fmt::print("{:<26} {:>9.0f} {:>8.1f} {:>9.2f} {}\n", label,
               static_cast<double>(B * S * M * steps) / seconds, 100.0 * (1 - busy / total),
               1e3 * wait / P, stash);
  }
  return 0;
}

// helixpipe grad: the mean loss of a checkpoint over fixed data and its gradient with respect to
// every parameter, saved under the parameter names. Sequence k = j*B + r (micro-batch j, row r)
// reads inputs tokens[k*S .. k*S+S-1] and targets tokens[k*S+1 .. k*S+S] from the start of the
// file. The last line printed is {"loss": ...}. The computation is runtime/train_run.h: in one
// process (run_local_grad) or pipelined over ranks (run_dist_grad; cli/train_dist.h says where the
// ranks run).
#include "cli/commands.h"
#include "cli/train_cli.h"
#include "cli/train_dist.h"
#include "runtime/launch.h"
#include "runtime/train_run.h"

namespace hp::cli {

int cmd_grad(int argc, char** argv) {
  CLI::App app("Loss and gradients of a checkpoint on the first B*M sequences of a data file; in "
               "one process or pipelined over ranks.",
               "grad");
  GradRequest f;
  add_grad_flags(app, f);
  PipelineFlags p;
  add_pipeline_flags(app, p, /*train=*/false);
  app.footer("Flag rules and exit codes: docs/cli.md.");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  if (!wants_ranks(p)) {
    run_local_grad(f);
    return 0;
  }
  const bool recompute_given = app.get_option("--recompute")->count() > 0;
  return run_on_ranks("grad", p.d, p.progress_thread, f.threads, &argc, &argv,
                      [&](Comm& world) { run_dist_grad(world, f, p.d, recompute_given); });
}

}  // namespace hp::cli

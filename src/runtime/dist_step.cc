#include "runtime/dist_step.h"

#include <set>

#include "runtime/trainer.h"
#include "util/error.h"

namespace hp {

std::vector<Part> stage_parts(const Schedule& sch, int stage) {
  std::set<Part> parts;
  for (const ComputeOp& op : sch.stages.at(static_cast<size_t>(stage)).ops)
    parts.insert(op.parts.begin(), op.parts.end());
  return {parts.begin(), parts.end()};
}

DistStage::DistStage(const Schedule& sch, GridComms& grid, const ModelConfig& cfg,
                     Kernels<float>& kernels, int64_t microbatch_size, int64_t seq_len,
                     ModelOptions model_opt)
    : sch_(sch), grid_(grid), cfg_(cfg), b_(microbatch_size), s_(seq_len) {
  if (!grid.pipeline || !grid.data) throw Error("DistStage: the grid comms are not set up");
  params_ = std::make_unique<Params>(cfg, stage_parts(sch, grid.p));
  model_ = std::make_unique<Model>(cfg, kernels, *params_, model_opt);
  exec_ = std::make_unique<StageExecutor>(sch, grid.p, *grid.pipeline, cfg, b_ * s_);
}

DistStepResult DistStage::loss_and_grads(const int32_t* tokens, const int32_t* targets,
                                         const ExecutorOptions& opt) {
  const int M = sch_.microbatches;
  const int D = grid_.data->size();
  // Each op's loss share is sum(CE) * scale: the replicas' sums add up to the global mean.
  const double scale = 1.0 / static_cast<double>(b_ * s_ * M * D);
  ModelBackend backend(*model_, [&](int mb) {
    return Batch{tokens + mb * b_ * s_, targets + mb * b_ * s_, b_, s_, scale};
  });
  params_->zero_grad();
  Request grad_req;
  auto start_allreduce = [&] {
    if (D > 1 && params_->size() > 0)
      grad_req = grid_.data->iallreduce_sum(params_->grads(), params_->size());
  };
  DistStepResult r;
  r.stats = exec_->run(backend, store_, opt, start_allreduce);
  if (grad_req.active())
    grid_.data->wait(grad_req, "gradient all-reduce of stage " + std::to_string(grid_.p) +
                                   " over " + std::to_string(D) + " replicas");
  double loss = r.stats.loss_share;
  grid_.pipeline->allreduce_sum(&loss, 1);
  grid_.data->allreduce_sum(&loss, 1);
  r.loss = loss;
  return r;
}

double DistStage::global_grad_norm() {
  std::vector<double> partials = grad_square_partials(*params_);
  double sum = 0;
  for (double x : partials) sum += x;
  grid_.pipeline->allreduce_sum(&sum, 1);
  const double parts[1] = {sum};
  return global_norm_from_partials(parts);
}

}  // namespace hp

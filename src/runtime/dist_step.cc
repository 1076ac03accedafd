#include "runtime/dist_step.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "runtime/tp_group.h"
#include "runtime/trainer.h"
#include "schedule/lower.h"
#include "schedule/text_io.h"
#include "schedule/validate.h"
#include "util/error.h"

namespace hp {

namespace {
int64_t whole_numel(const ParamTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.full_shape) n *= d;
  return n;
}
}  // namespace

Schedule load_checked_schedule(const std::string& path, const ModelConfig& cfg,
                               int64_t tokens_per_mb) {
  Schedule sch = load_schedule(path);
  if (sch.layers != cfg.layers)
    throw Error("schedule " + path + " is written for " + std::to_string(sch.layers) +
                " layers but the model has " + std::to_string(cfg.layers) +
                "; write it for the model's layer count");
  ValidationReport rep = validate(sch, ValidateOptions{&cfg, tokens_per_mb});
  if (!rep.ok())
    throw Error("schedule " + path + " refused before any rank computes: " + rep.text(sch) +
                "fix the file (helixpipe validate " + path + " shows the same report)");
  lower(sch, &cfg, tokens_per_mb);
  return sch;
}

std::vector<Part> stage_parts(const Schedule& sch, int stage) {
  std::set<Part> parts;
  for (const ComputeOp& op : sch.stages.at(static_cast<size_t>(stage)).ops)
    parts.insert(op.parts.begin(), op.parts.end());
  return {parts.begin(), parts.end()};
}

DistStage::DistStage(const Schedule& sch, GridComms& grid, const ModelConfig& cfg, Backend& be,
                     int64_t microbatch_size, int64_t seq_len, ModelOptions model_opt,
                     Precision prec)
    : sch_(sch), grid_(grid), cfg_(cfg), b_(microbatch_size), s_(seq_len), be_(be),
      store_(be, prec) {
  if (!grid.pipeline || !grid.data) throw Error("DistStage: the grid comms are not set up");
  const int T = grid.tensor ? grid.tensor->size() : 1;
  if (T > 1) tp_ = std::make_unique<CommTpGroup>(*grid.tensor, be);
  params_ = std::make_unique<Params>(cfg, stage_parts(sch, grid.p), be, prec,
                                     tp_ ? tp_->shard() : TpShard{});
  model_ = std::make_unique<Model>(*params_, model_opt, tp_.get());
  exec_ = std::make_unique<StageExecutor>(sch, grid.p, *grid.pipeline, cfg, b_ * s_, T);
}

DistStepResult DistStage::loss_and_grads(const int32_t* tokens, const int32_t* targets,
                                         const ExecutorOptions& opt) {
  const int M = sch_.microbatches;
  const int D = grid_.data->size();
  // Each op's loss share is sum(CE) * scale: the replicas' sums add up to the global mean.
  const double scale = 1.0 / static_cast<double>(b_ * s_ * M * D);
  const size_t n = static_cast<size_t>(M * b_ * s_);
  tokens_.upload(be_, {tokens, n}, cfg_.vocab, "token");
  targets_.upload(be_, {targets, n}, cfg_.vocab, "target");
  ModelBackend backend(*model_, [&](int mb) {
    return Batch{tokens_.data() + mb * b_ * s_, targets_.data() + mb * b_ * s_, b_, s_, scale};
  });
  params_->zero_grad();
  model_->take_loss();
  if (tp_) tp_->reset_stats();
  Request grad_req;
  bool reduced = false;
  auto start_allreduce = [&] {
    // The group's replicated gradients first: the data-parallel sum needs them whole.
    if (tp_ && !reduced) reduce_replicated_grads(*params_, *tp_);
    reduced = true;
    if (D <= 1 || params_->size() == 0) return;
    be_.synchronize();  // the gradients are complete before the transport reads them
    const DataPtr g = params_->grads();
    grad_req = g.dtype == DType::kF64 ? grid_.data->iallreduce_sum(g.as<double>(), params_->size())
                                      : grid_.data->iallreduce_sum(g.as<float>(), params_->size());
  };
  DistStepResult r;
  r.stats = exec_->run(backend, store_, opt, start_allreduce);
  if (!reduced) start_allreduce();  // a stage without compute ops still takes part
  if (grad_req.active())
    grid_.data->wait(grad_req, "gradient all-reduce of stage " + std::to_string(grid_.p) +
                                   " over " + std::to_string(D) + " replicas");
  r.stats.loss_share = model_->take_loss();  // the stage's head F ops, read once
  if (tp_) r.tp = tp_->stats();
  double loss = r.stats.loss_share;
  grid_.pipeline->allreduce_sum(&loss, 1);
  grid_.data->allreduce_sum(&loss, 1);
  r.loss = loss;
  return r;
}

double DistStage::global_grad_norm() {
  std::vector<double> partials = grad_square_partials(*params_);
  double sum = 0;
  // Each block of a split tensor counts on its rank; a replicated tensor (the same on every rank
  // of the group) on tensor rank 0 only.
  for (size_t i = 0; i < partials.size(); ++i)
    if (grid_.t == 0 || params_->tensors()[i].split_dim >= 0) sum += partials[i];
  if (tp_) sum = tp_->all_reduce(sum, "sum of squared gradients");
  grid_.pipeline->allreduce_sum(&sum, 1);
  const double parts[1] = {sum};
  return global_norm_from_partials(parts);
}

double DistStage::optimizer_step(AdamW& opt, double lr, double max_norm) {
  const double norm = global_grad_norm();
  if (!std::isfinite(norm))
    throw Error("the gradient norm is not finite (" + std::to_string(norm) +
                "); lower the learning rate or check the data");
  std::vector<ParamRef> refs = param_refs(*params_);
  opt.step(refs, lr, clip_factor(norm, max_norm));
  return norm;
}

std::unique_ptr<Params> DistStage::assemble_stage(bool grads) {
  Comm& group = *grid_.tensor;
  const int T = group.size();
  const Params& mine = *params_;
  auto arena = [&](const Params& p) { return grads ? p.grads() : p.data(); };
  const int64_t bytes = mine.size() * dtype_bytes(arena(mine).dtype);
  if (grid_.t != 0) {
    be_.synchronize();
    Request r = group.isend(arena(mine).data, bytes, 0, 0);
    group.wait(r, fmt::format("sending tensor rank {}'s block of stage {}'s {} to tensor rank 0",
                              grid_.t, grid_.p, grads ? "gradients" : "parameters"));
    return nullptr;
  }
  auto whole = std::make_unique<Params>(cfg_, mine.parts(), be_, mine.precision());
  std::vector<double> out(static_cast<size_t>(whole->size()));
  for (int r = 0; r < T; ++r) {
    std::unique_ptr<Params> other;
    const Params* block = &mine;
    if (r > 0) {
      other = std::make_unique<Params>(cfg_, mine.parts(), be_, mine.precision(), TpShard{r, T});
      Request q = group.irecv(arena(*other).data, bytes, r, 0);
      group.wait(q, fmt::format("tensor rank {}'s block of stage {}'s {}", r, grid_.p,
                                grads ? "gradients" : "parameters"));
      block = other.get();
    }
    const std::vector<double> in = grads ? block->host_grads<double>() : block->host_values<double>();
    for (const ParamTensor& t : block->tensors())
      if (r == 0 || t.split_dim >= 0)  // replicated tensors are equal on every rank
        place_shard(t, TpShard{r, T}, in.data() + t.offset,
                    out.data() + whole->tensor(t.name).offset);
  }
  if (grads)
    whole->set_grads(out);
  else
    whole->set_values(out);
  return whole;
}

void DistStage::gather_params(Params* full) {
  if (!tp_) return pipeline_gather_params(*params_, full);
  const std::unique_ptr<Params> whole = assemble_stage(/*grads=*/false);
  if (whole) pipeline_gather_params(*whole, full);
}

void DistStage::pipeline_gather_params(const Params& mine, Params* full) {
  Comm& pipe = *grid_.pipeline;
  const int P = pipe.size();
  if (pipe.rank() == 0) {
    if (!full) throw Error("gather_params: stage 0 needs a whole-model Params to fill");
    full->copy_from(mine);
    for (int q = 1; q < P; ++q) {
      Params other(cfg_, stage_parts(sch_, q), be_, mine.precision());
      Request r = pipe.irecv(other.data().data, other.size() * dtype_bytes(other.data().dtype), q,
                             0);
      pipe.wait(r, "parameters of stage " + std::to_string(q) + " for the checkpoint");
      full->copy_from(other);
    }
  } else {
    be_.synchronize();
    Request r = pipe.isend(mine.data().data, mine.size() * dtype_bytes(mine.data().dtype), 0, 0);
    pipe.wait(r, "sending stage " + std::to_string(grid_.p) + "'s parameters to stage 0");
  }
}

std::vector<StWriteTensor> DistStage::gather_optimizer_state(
    AdamW& opt, std::vector<std::vector<float>>& storage) {
  Comm& pipe = *grid_.pipeline;
  std::vector<StWriteTensor> mine = opt.state_tensors(param_refs(*params_));
  storage.clear();
  if (tp_) {  // whole moments on tensor rank 0 first
    Comm& group = *grid_.tensor;
    const int T = group.size();
    if (grid_.t != 0) {
      for (size_t k = 0; k < mine.size(); ++k) {
        const ParamTensor& t = params_->tensors()[k / 2];
        if (t.split_dim < 0) continue;  // rank 0 has the same
        Request r = group.isend(mine[k].data, t.numel * 4, 0, 0);
        group.wait(r, fmt::format("sending tensor rank {}'s optimizer state of '{}' to tensor "
                                  "rank 0", grid_.t, t.name));
      }
      return {};
    }
    std::vector<float> block;
    for (size_t k = 0; k < mine.size(); ++k) {
      const ParamTensor& t = params_->tensors()[k / 2];
      if (t.split_dim < 0) continue;
      std::vector<float>& whole = storage.emplace_back(static_cast<size_t>(whole_numel(t)));
      place_shard(t, TpShard{0, T}, static_cast<const float*>(mine[k].data), whole.data());
      block.resize(static_cast<size_t>(t.numel));
      for (int r = 1; r < T; ++r) {
        Request q = group.irecv(block.data(), t.numel * 4, r, 0);
        group.wait(q, fmt::format("tensor rank {}'s optimizer state of '{}'", r, t.name));
        place_shard(t, TpShard{r, T}, block.data(), whole.data());
      }
      mine[k].shape = t.full_shape;
      mine[k].data = whole.data();  // inner buffers keep their address when storage grows
    }
  }
  if (pipe.rank() != 0) {
    for (const StWriteTensor& t : mine) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      Request r = pipe.isend(t.data, n * 4, 0, 0);
      pipe.wait(r, "sending stage " + std::to_string(grid_.p) + "'s optimizer state to stage 0");
    }
    return {};
  }
  // Stage q sends its tensors in the order state_tensors lists them for its parameters.
  std::vector<StWriteTensor> out = std::move(mine);
  const size_t first_received = storage.size();
  std::vector<StWriteTensor> received;
  for (int q = 1; q < pipe.size(); ++q) {
    Params other(cfg_, stage_parts(sch_, q), be_, params_->precision());
    for (const ParamRef& p : param_refs(other)) {
      for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
        storage.emplace_back(static_cast<size_t>(p.numel()));
        Request r = pipe.irecv(storage.back().data(), p.numel() * 4, q, 0);
        pipe.wait(r, "optimizer state of stage " + std::to_string(q) + " for the checkpoint");
        received.push_back({kind + p.name, StDType::kF32, p.shape, nullptr});
      }
    }
  }
  // Pointers last: `storage` no longer grows.
  for (size_t k = 0; k < received.size(); ++k) received[k].data = storage[first_received + k].data();
  out.insert(out.end(), received.begin(), received.end());
  return out;
}

void DistStage::gather_grads(Params* full) {
  if (!tp_) return pipeline_gather_grads(*params_, full);
  const std::unique_ptr<Params> whole = assemble_stage(/*grads=*/true);
  if (whole) pipeline_gather_grads(*whole, full);
}

void DistStage::pipeline_gather_grads(const Params& mine, Params* full) {
  Comm& pipe = *grid_.pipeline;
  if (pipe.rank() == 0) {
    if (!full) throw Error("gather_grads: stage 0 needs a whole-model Params to fill");
    std::vector<double> all = full->host_grads<double>();
    auto copy_grads = [&](const Params& from) {
      const std::vector<double> g = from.host_grads<double>();
      for (const ParamTensor& t : from.tensors())
        std::copy(g.begin() + t.offset, g.begin() + t.offset + t.numel,
                  all.begin() + full->tensor(t.name).offset);
    };
    copy_grads(mine);
    for (int q = 1; q < pipe.size(); ++q) {
      Params other(cfg_, stage_parts(sch_, q), be_, mine.precision());
      Request r = pipe.irecv(other.grads().data, other.size() * dtype_bytes(other.grads().dtype),
                             q, 0);
      pipe.wait(r, "gradients of stage " + std::to_string(q));
      copy_grads(other);
    }
    full->set_grads(all);
  } else {
    be_.synchronize();
    Request r = pipe.isend(mine.grads().data, mine.size() * dtype_bytes(mine.grads().dtype), 0, 0);
    pipe.wait(r, "sending stage " + std::to_string(grid_.p) + "'s gradients to stage 0");
  }
}

}  // namespace hp

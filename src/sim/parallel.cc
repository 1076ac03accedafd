// TP x PP x DP costs, memory per GPU and the evaluation of one configuration (see parallel.h).
#include "sim/parallel.h"

#include <fmt/format.h>

#include <algorithm>

#include "schedule/lower.h"
#include "sim/adapipe.h"
#include "sim/memory.h"
#include "sim/weipipe.h"
#include "util/error.h"

namespace hp {

std::string Layout::str() const { return fmt::format("TP{} x PP{} x DP{}", tp, pp, dp); }

std::string PlanCase::label() const {
  if (layout.pp == 1) return std::string("no pipeline (TP x DP) ") + recompute_str(recompute);
  std::string s = schedule;
  if (schedule == "helix") s += fmt::format(" F={}", folds);
  if (schedule == "interleaved") s += fmt::format(" V={}", virtual_stages);
  if (schedule != "adapipe") s += std::string(" ") + recompute_str(recompute);
  else if (!stage_layers.empty()) s += " " + adapipe_plan_str(stage_layers, stage_recompute);
  if (schedule == "helix") s += std::string(" ") + transfer_str(transfer);
  if (mlp_chunk > 0) s += fmt::format(" mlp-chunk={}", mlp_chunk);
  if (rounds > 1) s += fmt::format(" x{} calls", rounds);
  return s;
}

double tp_collective_time(double bytes, int t, const LinkProfile& link) {
  return tp_group_time(1, bytes * (t - 1) / t, t, link);
}


double tp_group_time(int64_t collectives, double bytes_sent, int t, const LinkProfile& link) {
  if (t <= 1) return 0;
  const double wire = link.bandwidth_Bps > 0 ? bytes_sent / link.bandwidth_Bps : 0;
  return static_cast<double>(collectives) * (t - 1) * link.latency_s + wire;
}

double dp_allreduce_time(double bytes, int d, const LinkProfile& link) {
  if (d <= 1) return 0;
  double per = link.bandwidth_Bps > 0 ? 2 * bytes * (d - 1) / d / link.bandwidth_Bps : 0;
  return per + 2 * (d - 1) * link.latency_s;
}

CostModel shard_costs(CostModel c, int t, double act_bytes, const LinkProfile& link) {
  HP_CHECK(t >= 1 && act_bytes >= 0, "shard_costs: t = {} and act_bytes = {} must be >= 1 and >= 0",
           t, act_bytes);
  if (t == 1) return c;
  HP_CHECK(c.tensor_parallel() == 1,
           "shard_costs: these costs are already one rank's of a tensor-parallel group of {}",
           c.tensor_parallel());
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) c.set_part_time(k, d, c.part_time(k, d) / t);
  c.set_attn_recompute_time(c.attn_recompute_time() / t);
  c.set_post_recompute_times(c.post_gate_up_time() / t, c.post_down_time() / t);
  c.add_tp_collectives(t, tp_collective_time(act_bytes, t, link));
  c.scale_flops(1.0 / t);
  return c;
}

CostModel parallel_costs(const ModelConfig& cfg, int64_t seq_len, int64_t microbatch_size,
                         const DeviceProfile& dev, TransferMode transfer, const Layout& layout) {
  HP_CHECK(layout.tp >= 1 && layout.pp >= 1 && layout.dp >= 1, "layout {}: every degree must be >= 1",
           layout.str());
  HP_CHECK(layout.tp <= dev.gpus_per_node,
           "layout {}: tensor parallelism of {} does not fit in a node of {} GPUs ({}); use TP <= {}",
           layout.str(), layout.tp, dev.gpus_per_node, dev.name, dev.gpus_per_node);
  CostModel c = CostModel::from_model(cfg, seq_len, microbatch_size, dev, transfer);
  if (layout.tp > 1) {
    const double act_bytes =
        static_cast<double>(seq_len * microbatch_size * cfg.hidden) * dev.bytes_per_elem();
    c = shard_costs(std::move(c), layout.tp, act_bytes, dev.intra);
  }
  const int group = layout.tp * layout.dp;
  c.set_links(dev.intra, dev.inter, std::max(1, dev.gpus_per_node / group));
  return c;
}

std::vector<Layout> layouts(int gpus, int layers, int gpus_per_node, int min_pp) {
  std::vector<Layout> out;
  for (int t = 1; t <= gpus_per_node && t <= gpus; t *= 2) {
    if (gpus % t) continue;
    for (int p = std::max(1, min_pp); p <= gpus / t; ++p) {
      if ((gpus / t) % p || layers % p) continue;
      out.push_back({t, p, gpus / t / p});
    }
  }
  return out;
}

double stage_params_per_gpu(const ModelConfig& cfg, int64_t layers, bool embed, bool head,
                            int tp) {
  const double t = tp;
  const double pos = static_cast<double>(cfg.position_rows() * cfg.hidden);  // whole on each rank
  double split = static_cast<double>(layers * cfg.params_per_layer());
  if (embed) split += static_cast<double>(cfg.embed_params()) - pos;
  if (head) split += static_cast<double>(cfg.head_params());
  // A tied LM head on a stage without the embedding keeps a copy of the token table.
  if (head && !embed && cfg.tie_embeddings) split += static_cast<double>(cfg.vocab * cfg.hidden);
  return split / t + (embed ? pos : 0.0);
}

double stage_params_per_gpu(const ModelConfig& cfg, const std::string& schedule, int pp, int tp) {
  const int64_t layers = (cfg.layers + pp - 1) / pp;
  if (pp == 1 || schedule == "helix") return stage_params_per_gpu(cfg, layers, true, true, tp);
  return std::max(stage_params_per_gpu(cfg, layers, true, false, tp),
                  stage_params_per_gpu(cfg, layers, false, true, tp));
}

int64_t max_stage_params(const ModelConfig& cfg, const std::string& schedule, int pp) {
  return static_cast<int64_t>(stage_params_per_gpu(cfg, schedule, pp, 1));
}

GpuMemory gpu_memory(const ModelConfig& cfg, const std::string& schedule, const Layout& lay,
                     int64_t tokens, double peak_stash_bytes, int64_t mlp_chunk, int e) {
  return stage_gpu_memory(cfg, lay, tokens, stage_params_per_gpu(cfg, schedule, lay.pp, lay.tp),
                          peak_stash_bytes, mlp_chunk, e);
}

GpuMemory stage_gpu_memory(const ModelConfig& cfg, const Layout& lay, int64_t tokens,
                           double params, double peak_stash_bytes, int64_t mlp_chunk, int e) {
  const double t = lay.tp, d = lay.dp;
  GpuMemory m;
  m.model_states = params * (2 + 4 + 12.0 / d);
  m.activations = peak_stash_bytes / t;
  const double h = static_cast<double>(cfg.hidden), q = static_cast<double>(cfg.qkv_dim());
  const double f = static_cast<double>(cfg.intermediate), T = static_cast<double>(tokens);
  const double f_share = mlp_chunk > 0 ? std::min(1.0, static_cast<double>(mlp_chunk) / T) : 1.0;
  // The MLP's T x ffn temporaries of a backward: G, U, H, dH (LLaMA); G, H, dH (GPT's GeLU).
  const double mlp_temps = cfg.is_gpt() ? 3 : 4;
  m.working =
      T * (7 * h + q + mlp_temps * f * f_share + 2 + static_cast<double>(cfg.heads)) * e / t;
  return m;
}

OverlapCheck overlap_check(const PlanCase& pc, const ModelConfig& cfg, int64_t seq_len,
                           const DeviceProfile& dev) {
  const Layout& lay = pc.layout;
  OverlapCheck o;
  const CostModel cost = parallel_costs(cfg, seq_len, 1, dev, pc.transfer, lay);
  o.t_attn = cost.part_time(PartKind::kAttn, Dir::kF);
  const double T = static_cast<double>(seq_len), h = static_cast<double>(cfg.hidden);
  const double q = static_cast<double>(cfg.qkv_dim()), p = lay.pp;
  const double e = dev.bytes_per_elem(), t = lay.tp;
  if (lay.pp > 1) {
    if (pc.schedule == "helix") {
      const double qkvr = pc.transfer == TransferMode::kWeights ? 2 * T * h + h * q : T * q + T * h;
      o.bytes = (p - 1) / p * (qkvr + 2 * T * h) * e / t;
    } else {
      const double per_stage_layers = static_cast<double>(cfg.layers) / p;
      o.bytes = T * h * e / t * pc.virtual_stages / per_stage_layers;
    }
  }
  const int stages_per_node = std::max(1, dev.gpus_per_node / (lay.tp * lay.dp));
  o.inter_node = lay.pp > stages_per_node;
  const LinkProfile& link = o.inter_node ? cost.link(0, stages_per_node) : cost.link(0, 0);
  o.t_comm = link.bandwidth_Bps > 0 ? o.bytes / link.bandwidth_Bps : 0;
  return o;
}

std::string OverlapCheck::describe() const {
  auto ms = [](double s) { return fmt::format("{:.1f} ms", s * 1e3); };
  const char* link = inter_node ? "inter-node" : "intra-node";
  if (holds())
    return fmt::format("attention {} >= transfer {} on the {} link: HelixPipe can hide its traffic",
                       ms(t_attn), ms(t_comm), link);
  return fmt::format(
      "attention {} < transfer {} on the {} link: HelixPipe cannot hide its traffic here",
      ms(t_attn), ms(t_comm), link);
}

PlanResult evaluate(const PlanCase& pc, const ModelConfig& cfg_in, int64_t seq_len,
                    const DeviceProfile& dev, double memory_bytes, bool simulate_all) {
  const ModelConfig cfg = cfg_in.for_sequence(seq_len);  // a learned table covers the sequence
  PlanResult r;
  r.c = pc;
  const Layout& lay = pc.layout;
  const int t = lay.tp;
  ScheduleSpec spec;
  spec.name = pc.schedule == "adapipe" ? "1f1b" : pc.schedule;
  spec.stages = lay.pp;
  spec.microbatches = pc.microbatches;
  spec.layers = static_cast<int>(cfg.layers);
  spec.folds = pc.folds;
  spec.virtual_stages = pc.virtual_stages;
  spec.recompute = pc.recompute;
  spec.transfer = pc.transfer;
  const int e = dev.bytes_per_elem();
  const int64_t tokens = seq_len;  // micro-batch size 1
  CostModel cost = parallel_costs(cfg, seq_len, 1, dev, pc.transfer, lay);
  if (pc.schedule == "weipipe")
    return weipipe_evaluate(pc, cfg, seq_len, dev, cost, memory_bytes, simulate_all);
  if (pc.schedule == "adapipe" && pc.stage_layers.empty() && lay.pp <= cfg.layers) {
    const AdaPipePlan plan = adapipe_search(adapipe_table(cost, &cfg, tokens, e, lay, pc.transfer,
                                                          lay.pp, pc.microbatches,
                                                          static_cast<int>(cfg.layers),
                                                          memory_bytes, pc.mlp_chunk));
    if (!plan.found) return r;  // nothing fits: too big, not an error
    r.c.stage_layers = plan.layers;
    r.c.stage_recompute = plan.recompute;
  }
  spec.stage_layers = r.c.stage_layers;
  spec.stage_recompute = r.c.stage_recompute;
  Schedule s;
  try {
    s = generate(spec);
  } catch (const Error& err) {
    r.error = err.what();
    return r;
  }
  auto peaks = rank_stash_peaks(s, cfg, tokens, e, lay.tp);
  for (int64_t& q : peaks) q *= lay.tp;  // the whole TP group's, as gpu_memory takes it
  const double stash = static_cast<double>(*std::max_element(peaks.begin(), peaks.end()));
  const bool uneven = !r.c.stage_layers.empty();
  const double params = uneven ? plan_max_params(cfg, r.c.stage_layers, lay.tp)
                               : stage_params_per_gpu(cfg, pc.schedule, lay.pp, lay.tp);
  r.memory = gpu_memory(cfg, pc.schedule, lay, tokens, stash, pc.mlp_chunk, e);
  if (uneven)
    r.memory = plan_gpu_memory(cfg, lay, tokens, r.c.stage_layers,
                               std::vector<double>(peaks.begin(), peaks.end()), pc.mlp_chunk, e);
  r.fits = r.memory.total() <= memory_bytes;
  if (!r.fits && !simulate_all) return r;

  lower(s, &cfg, tokens);
  SimOptions opt;
  opt.record_timeline = false;
  opt.comm_compute_share = dev.comm_compute_share;
  opt.shared_nic = true;  // one NIC per GPU: a stage's inter-node messages share it
  opt.message_bytes_scale = e / 4.0 / t;
  opt.tokens_per_microbatch = tokens;
  fill_iteration(r, simulate(s, cost, opt), params, dev, tokens);
  return r;
}

void fill_iteration(PlanResult& r, const SimResult& sim, double params_per_gpu,
                    const DeviceProfile& dev, int64_t tokens) {
  const PlanCase& pc = r.c;
  const int d = pc.layout.dp;
  const LinkProfile& dp_link = pc.layout.tp * d <= dev.gpus_per_node ? dev.intra : dev.inter;
  r.makespan = sim.makespan;
  r.allreduce = dp_allreduce_time(params_per_gpu * 2, d, dp_link);
  r.iteration = pc.rounds * r.makespan + r.allreduce;
  r.bubble_fraction = pc.rounds * sim.bubble / r.iteration;
  double wait = 0;
  for (const auto& st : sim.stages) wait = std::max(wait, st.wait);
  r.comm_exposed = pc.rounds * wait / r.iteration;
  r.tokens_per_s = static_cast<double>(tokens) * pc.microbatches * pc.rounds * d / r.iteration;
  r.mfu = sim.mfu * pc.rounds * sim.makespan / r.iteration;
}

PlanResult evaluate_fitting(PlanCase c, const ModelConfig& cfg, int64_t seq_len,
                            const DeviceProfile& dev, double memory_bytes) {
  const int total = c.microbatches * c.rounds;
  const bool filo = c.schedule == "helix" || c.schedule == "gpipe";
  PlanResult last;
  for (int rounds = 1; rounds <= total; rounds *= 2) {
    if (total % rounds || (rounds > 1 && !filo)) break;
    c.rounds = rounds;
    c.microbatches = total / rounds;
    for (int64_t chunk : {int64_t{0}, int64_t{8192}}) {
      if (chunk > 0 && seq_len <= chunk) continue;
      c.mlp_chunk = chunk;
      last = evaluate(c, cfg, seq_len, dev, memory_bytes);
      if (last.fits || !last.error.empty()) return last;
    }
  }
  return last;
}

}  // namespace hp

// Tensor, pipeline and data parallelism together, for the sweep and the planner.
//
// A layout is TP x PP x DP = t x p x d GPUs, ranks ordered as Megatron-LM does (TP innermost, then
// DP, then PP), so a TP group always sits inside one node. The model of each:
//  - TP with sequence parallelism: every part's compute and FLOPs are divided by t, activations
//    (stash and messages) too; each layer adds the SP collectives on the intra-node link, a ring
//    all-gather or reduce-scatter of the T x h activation each costing
//    (t-1)/t * T*h*bytes / bandwidth + (t-1) * latency:
//      attn F 1 (gather A before QKV), post F 3 (scatter after W_o, gather before the MLP,
//      scatter after W_down); attn I 1 (scatter dA), post I 4 (gather dX', gather Z, scatter dZ,
//      gather dR); W gathers its inputs again, attn 1 (A), post 3 (dX', Z, dR); the
//      vocabulary-parallel embedding F 1 (scatter of the slices' lookups) and W 1 (gather of
//      dX); the head F 1 (gather Zf; the loss statistics' gathers are 2/h of that and not
//      counted), I 2 (gather Zf, scatter dZf) and W 1 (Zf again); attention's own QKV recompute
//      under no-attn 1; a recomputed post that skips its down projection skips its scatter too
//      (post_down_F: 1), the second gate/up none. These are the runtime's counts for I and W run
//      as separate passes (src/model/parts.cc; `profile --tensor-parallel` prints them); a fused
//      backward B keeps the gathered inputs for its W half and makes tp_fused_saving fewer (post
//      3, head 1): attn 2, post 4, head 2, embed 1 (docs/tensor-parallel.md).
//  - PP: the schedule, simulated as usual, with message bytes / t (each TP rank sends its shard
//  over
//    its own link at the same time) and the stages of a node = gpus_per_node / (t*d); inter-node
//    messages of a stage share its network port (SimOptions::shared_nic).
//  - DP: the gradient all-reduce of each GPU's parameters (bf16, ring: 2 (d-1)/d * bytes / bw),
//  after
//    the pipeline flush and not overlapped with it (an upper bound; Megatron overlaps part of it).
//    Intra-node when t*d <= gpus_per_node, else inter-node.
// Memory per GPU = weights, gradients and optimizer state of the busiest stage's parameters / t
// (bf16 weight 2 B + fp32 gradient 4 B + fp32 master, Adam m and v 12 B sharded over d: Megatron's
// distributed optimizer) + the stage's peak activation stash / t + the working memory of one
// layer's backward (its recomputed activations and gradients / t; with a chunked MLP the T x ffn
// temporaries shrink to chunk x ffn).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/generate.h"
#include "schedule/ir.h"
#include "sim/cost_model.h"
#include "sim/device.h"
#include "sim/simulator.h"
#include "util/model_config.h"

namespace hp {

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  int gpus() const { return tp * pp * dp; }
  std::string str() const;  // "TP2 x PP8 x DP4"
};

// Seconds of one ring all-gather or reduce-scatter of `bytes` (the full, gathered size) over t.
double tp_collective_time(double bytes, int t, const LinkProfile& link);
// Seconds of `collectives` collectives of a group of t in which this rank sent `bytes_sent` bytes
// in all: each costs t - 1 messages' latency, and the bytes cross the link once. The same charge
// as tp_collective_time (a ring sends (t-1)/t of the gathered bytes per rank), for collectives
// counted in a run (helixpipe bench --tensor-parallel).
double tp_group_time(int64_t collectives, double bytes_sent, int t, const LinkProfile& link);
// Seconds of one ring all-reduce of `bytes` over d.
double dp_allreduce_time(double bytes, int d, const LinkProfile& link);

// One rank's cost model in a TP group of t, from the whole stage's `whole`: every part time and
// recompute charge divided by t, plus tp_collectives(k, d) collectives (sim/cost_model.h, counts
// above) of `act_bytes` (the gathered N x h activation) on `link` each (tp_collective_time),
// through CostModel::add_tp_collectives. Attention's QKV rebuild under no-attn gathers A once; a
// recomputed post that skips its down projection skips the reduce-scatter after it. Model FLOPs
// are divided by t; the pipeline links are left as they are.
CostModel shard_costs(CostModel whole, int t, double act_bytes, const LinkProfile& link);

// The cost model of one pipeline stage's TP group: from_model() through shard_costs on the
// device's intra-node link; stages_per_node = gpus_per_node / (t*d) (at least 1).
CostModel parallel_costs(const ModelConfig& cfg, int64_t seq_len, int64_t microbatch_size,
                         const DeviceProfile& dev, TransferMode transfer, const Layout& layout);

// One configuration to evaluate.
struct PlanCase {
  std::string schedule;  // gpipe, 1f1b, interleaved, zb1p, helix
  int folds = 1;
  int virtual_stages = 1;
  Recompute recompute = Recompute::kNone;
  TransferMode transfer = TransferMode::kWeights;
  Layout layout;
  int microbatches = 1;      // per pipeline
  int64_t mlp_chunk = 0;     // tokens per MLP chunk; 0 = not chunked
  // Pipeline calls per iteration, each running `microbatches` and flushing (gradient accumulation
  // across calls): FILO schedules keep every micro-batch of a call, so memory falls with it.
  int rounds = 1;
  // schedule "adapipe" (1F1B with AdaPipe's plan, sim/adapipe.h): the layers and the recompute
  // policy of each stage; evaluate() searches them when empty.
  std::vector<int> stage_layers = {};
  std::vector<Recompute> stage_recompute = {};
  std::string label() const; // "helix F=2 no-attn weights"
};

struct GpuMemory {
  double model_states = 0;  // weights + gradients + optimizer
  double activations = 0;   // peak stash of the busiest stage / t
  double working = 0;       // one layer's backward
  double total() const { return model_states + activations + working; }
};

struct PlanResult {
  PlanCase c;
  bool fits = false;
  GpuMemory memory;
  double makespan = 0;       // one pipeline call (rounds of them per iteration)
  double allreduce = 0;      // DP gradient all-reduce
  double iteration = 0;      // rounds * makespan + allreduce
  double bubble_fraction = 0;
  double comm_exposed = 0;   // largest per-stage communication wait / iteration
  double tokens_per_s = 0;   // whole cluster
  double mfu = 0;
  std::string error;         // the schedule cannot run this shape (then fits = false)
};

// Memory per GPU of the busiest stage (see the top of this file): `peak_stash_bytes` is the stage's
// whole peak stash (all of its TP group), `tokens` = b*s of one micro-batch, `mlp_chunk` 0 = none.
GpuMemory gpu_memory(const ModelConfig& cfg, const std::string& schedule, const Layout& layout,
                     int64_t tokens, double peak_stash_bytes, int64_t mlp_chunk, int bytes_per_elem);

// Parameters (elements) per GPU of a pipeline stage holding `layers` layers, plus the embedding
// when `embed` and the final norm and LM head when `head`, in a TP group of `tp`: everything splits
// 1/tp except a learned position table, which every rank of the group holds whole (Megatron does
// not split it). A tied LM head on a stage without the embedding is a copy of the token table (as
// Megatron keeps it, its gradient summed with the first stage's).
double stage_params_per_gpu(const ModelConfig& cfg, int64_t layers, bool embed, bool head, int tp);
// gpu_memory() for one stage whose parameters are `params` elements per GPU.
GpuMemory stage_gpu_memory(const ModelConfig& cfg, const Layout& layout, int64_t tokens,
                           double params, double peak_stash_bytes, int64_t mlp_chunk,
                           int bytes_per_elem);

// Memory first (cheap: generate + stash); simulates only when it fits within `memory_bytes` (or
// always when `simulate_all`).
PlanResult evaluate(const PlanCase& c, const ModelConfig& cfg, int64_t seq_len,
                    const DeviceProfile& dev, double memory_bytes, bool simulate_all = false);

// The iteration figures of r (makespan, DP all-reduce of `params_per_gpu` two-byte gradients,
// bubble, exposed communication, tokens/s, MFU) from one pipeline call's simulation `sim` of
// micro-batches of `tokens` tokens, for r.c's layout and pipeline calls.
void fill_iteration(PlanResult& r, const SimResult& sim, double params_per_gpu,
                    const DeviceProfile& dev, int64_t tokens);

// The cheapest way to make `c` fit, trying in order: as given; with an MLP chunked at 8192 tokens
// (when s is longer); then, for schedules whose memory grows with m (helix, gpipe), 2, 4, ... pipeline
// calls of microbatches / rounds each. Returns the first result that fits, else the last tried.
PlanResult evaluate_fitting(PlanCase c, const ModelConfig& cfg, int64_t seq_len,
                            const DeviceProfile& dev, double memory_bytes);

// The overlap condition (docs/design.md section 6): HelixPipe hides its transfers only when one
// layer's attention lasts at least as long as that layer's traffic takes on the slowest link a
// stage sends over. Per layer and micro-batch, forward, on one GPU of the TP group:
//  - t_attn: the attention part's forward time (parallel_costs: compute / t plus its collective);
//  - bytes: what the schedule moves per layer. helix: (p-1)/p of the qkvr bundle (weights mode
//    2Th + h*q, activations mode Tq + Th elements) and of the ro bundle (2Th), / t; the other
//    schedules: one T x h activation per stage boundary, V boundaries per stage of L/p layers
//    (interleaved V = virtual_stages), / t; nothing without a pipeline;
//  - the link: inter-node when the pipeline spans more than one node (pp > stages per node), else
//    intra-node; t_comm = bytes / its bandwidth (latency left out: microseconds against
//    milliseconds).
struct OverlapCheck {
  double t_attn = 0, t_comm = 0;
  double bytes = 0;
  bool inter_node = false;
  bool holds() const { return t_attn >= t_comm; }
  // "attention 31.0 ms < transfer 43.0 ms on the inter-node link: HelixPipe cannot hide its
  // traffic here" (or ">= ...: HelixPipe can hide its traffic").
  std::string describe() const;
};
OverlapCheck overlap_check(const PlanCase& c, const ModelConfig& cfg, int64_t seq_len,
                           const DeviceProfile& dev);

// Every TP x PP x DP layout of `gpus` GPUs with TP a power of two <= gpus_per_node, PP >= min_pp
// dividing the layer count, DP the rest.
std::vector<Layout> layouts(int gpus, int layers, int gpus_per_node, int min_pp = 2);

// Parameters (elements) of the stage holding the most under `schedule` (helix: stage 0 holds the
// embedding and the head; others: the first holds the embedding, the last the head). Tied
// embeddings save the LM head only where one stage holds both; otherwise the head's stage keeps a
// copy of the token table (as Megatron does, its gradient summed with the first stage's).
int64_t max_stage_params(const ModelConfig& cfg, const std::string& schedule, int pp);
// The same per GPU of a TP group of `tp`: everything splits 1/tp except a learned position table,
// which every rank of the group holds whole (Megatron does not split it).
double stage_params_per_gpu(const ModelConfig& cfg, const std::string& schedule, int pp, int tp);

}  // namespace hp

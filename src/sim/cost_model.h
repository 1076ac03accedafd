// The cost model: how long each (part, direction) takes on one stage, and how long a message takes
// between two stages. Built from a part-cost JSON (measured or hand-written) or from FLOPs, bytes and
// a device profile. It knows nothing of schedules beyond ir.h; the simulator asks it for times.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>

#include "schedule/ir.h"
#include "sim/device.h"
#include "util/model_config.h"

namespace hp {

class CostModel {
 public:
  // Largest per-part time a part-cost file may give (11.6 days per micro-batch): above it a
  // makespan summed over parts, micro-batches and stages could leave the finite doubles.
  static constexpr double kMaxPartSeconds = 1e6;

  CostModel() = default;

  // Part costs in the shape of docs/formats/sim.md:
  //   {"embed":{"F":s,"I":s,"W":s}, "pre":{..}, "attn":{..}, "post":{..}, "head":{..},
  //    "link":{"latency_s":s,"bandwidth_Bps":B}}
  // Seconds per micro-batch per part. A missing part or direction costs 0; bandwidth 0 = no
  // per-byte cost. Optional: "inter" (a second link for stages on different nodes),
  // "stages_per_node", "attn_recompute_F", "post_gate_up_F", "post_down_F", "version", and
  // "tensor_parallel":{"size":t,"collective_s":s} (one rank of a tensor-parallel group of t, as
  // `profile --tensor-parallel` writes it: the part times are that rank's compute alone, and
  // add_tp_collectives(t, s) charges the group's collectives on top). Unknown keys are rejected.
  static CostModel from_part_costs(const nlohmann::json& j, const std::string& where = "part costs");
  // From FLOPs (QKV, O, MLP and LM-head GEMMs at gemm_efficiency; causal core attention ~2*s^2*h
  // forward, 2.5x that backward, at attn_efficiency) and bytes moved by the memory-bound parts
  // (norms, rotary, residuals, SwiGLU gating, embedding, cross-entropy) at mem_bandwidth_Bps.
  static CostModel from_model(const ModelConfig& cfg, int64_t seq_len, int64_t microbatch_size,
                              const DeviceProfile& dev,
                              TransferMode transfer = TransferMode::kWeights);

  // Seconds for one part of one micro-batch: F, I, W; B = I + W. No recomputation included.
  double part_time(Part part, Dir dir) const { return part_time(part.kind, dir); }
  double part_time(PartKind kind, Dir dir) const;
  // Seconds for a compute op: its parts in `op.dir`, plus the forward of op.recompute, plus
  // attention's internal QKV(+rotary) recompute when `policy` is no-attn (docs/memory.md); no
  // head forward under set_head_in_backward. Recomputed posts are charged as Model::run runs them
  // (post_recompute_extra). With `scale`, each part's time in each direction is multiplied by
  // scale->at(kind, dir) (a stage whose core runs the parts at other speeds than the profile;
  // attention's QKV recompute and recomputed forwards take the F factor); the seconds a part
  // spends in tensor-parallel collectives (set_collective_times) are not scaled.
  double op_time(const ComputeOp& op, Recompute policy, const PartTable* scale = nullptr) const;
  // The extra time of recomputed post number `i` of op.recompute (0 for other parts), over the
  // post F that op_time charges for it, as recompute_run (schedule/ir.h) says Model::run replays
  // it: the post that keeps G and U costs nothing extra; one whose output nothing reads stops after
  // G and U (-post_down_F); every other one leaves G and U unkept, so its backward multiplies them
  // out again (+post_gate_up_F).
  double post_recompute_extra(const ComputeOp& op, size_t i) const;
  // Model FLOPs of an op (no recomputation), for MFU; 0 when the model is not FLOP-based.
  double op_flops(const ComputeOp& op) const;

  // Link between two stages: intra-node when both sit on the same node (stage / stages_per_node).
  const LinkProfile& link(int src, int dst) const;
  double transfer_time(int src, int dst, int64_t bytes) const;  // bytes / bandwidth (0 if free)
  double latency(int src, int dst) const { return link(src, dst).latency_s; }
  // Time of a message alone on an idle link: latency + bytes / bandwidth.
  double message_time(int src, int dst, int64_t bytes) const {
    return latency(src, dst) + transfer_time(src, dst, bytes);
  }

  double peak_flops() const { return peak_flops_; }  // per stage; 0 when unknown
  int64_t tokens_per_microbatch() const { return tokens_; }  // 0 when unknown
  void set_tokens_per_microbatch(int64_t t) { tokens_ = t; }
  int stages_per_node() const { return stages_per_node_; }
  const std::string& source() const { return source_; }

  // Setters for tests and for calibration (calibration fills these from measurements).
  void set_part_time(PartKind kind, Dir dir, double seconds);
  void set_links(LinkProfile intra, LinkProfile inter, int stages_per_node);
  void set_attn_recompute_time(double seconds) { attn_recompute_f_ = seconds; }
  double attn_recompute_time() const { return attn_recompute_f_; }
  // A post's gate and up GEMMs (what its backward repeats when G and U were not kept) and its
  // down projection with the gating before it (what a recompute whose output is unread skips).
  void set_post_recompute_times(double gate_up, double down);
  double post_gate_up_time() const { return post_gate_up_f_; }
  double post_down_time() const { return post_down_f_; }
  // Tensor parallelism splits each op's FLOPs over t devices: scales the model FLOPs by `factor`.
  void scale_flops(double factor);
  // Of each part time, and of the attention-QKV and post-down recompute charges, the seconds inside
  // the tensor-parallel group's collectives (sim/parallel.h shard_costs). They are part of the
  // times above; op_time's per-core `scale` leaves them alone, since a slower core does not slow
  // the link. Each must be >= 0 and at most the time it is part of.
  void set_collective_times(const PartTable& parts, double attn_recompute, double post_down);
  double collective_time(PartKind kind, Dir dir) const { return comm_.at(kind, dir); }
  // Makes these costs one rank's of a tensor-parallel group of t (t >= 2) whose every
  // all-gather or reduce-scatter of an activation takes `collective_s`: each part gets
  // tp_collectives(kind, dir) of them on top of its time (which is its compute alone until now),
  // attention's QKV rebuild under no-attn and a recomputed post's down projection one each (a
  // post's repeated gate and up reuse the gathered input), all recorded as collective times; a
  // fused backward (op_time of a B op) is charged tp_fused_saving(kind) fewer.
  // Once only: a model that is already a TP rank's is refused.
  void add_tp_collectives(int t, double collective_s);
  int tensor_parallel() const { return tp_; }  // 1, or the group these costs are a rank of
  double tp_collective_s() const { return tp_coll_s_; }  // what add_tp_collectives was given
  // Where the LM head's forward (final norm, logits, loss) runs. false (helixpipe's runtime): in
  // the F op that holds the head, which keeps the log-sum-exp; its backward recomputes the logits
  // block by block. true (the reference code): in the head's backward, whose logits pass then
  // serves both the loss and the gradient, so the head's F costs nothing and its backward what
  // it costs here (docs/simulator.md "LM head placement").
  void set_head_in_backward(bool on) { head_in_backward_ = on; }
  bool head_in_backward() const { return head_in_backward_; }

  // The part-cost JSON shape (so a derived model can be saved, edited and fed back).
  nlohmann::json to_json() const;

 private:
  PartTable time_;   // seconds per part kind and direction
  PartTable flops_;  // model FLOPs, likewise
  PartTable comm_;   // of time_, the seconds inside TP collectives (set_collective_times)
  std::array<double, 5> fused_saving_{};  // per part kind: tp_fused_saving * the collective
  int tp_ = 1;
  double tp_coll_s_ = 0;
  double attn_recompute_comm_ = 0, post_down_comm_ = 0;
  double attn_recompute_f_ = 0;  // attention's own QKV/rotary recompute under no-attn
  double post_gate_up_f_ = 0;    // see set_post_recompute_times
  double post_down_f_ = 0;
  bool head_in_backward_ = false;
  LinkProfile intra_, inter_;
  int stages_per_node_ = 1 << 30;  // all stages on one node unless told
  double peak_flops_ = 0;
  int64_t tokens_ = 0;
  std::string source_ = "default";
};

// The sequence-parallel collectives (all-gathers and reduce-scatters of a micro-batch's N x h
// activation) a part of kind `k` makes in direction `d` (F, I or W, each run alone, as
// src/model/parts.cc runs them) on one tensor-parallel rank: embed 1/0/1, pre 0/0/0, attn 1/1/1,
// post 3/4/3, head 1/2/1 (sim/parallel.h says which).
int tp_collectives(PartKind k, Dir d);
// Of a part's I + W collectives, those a fused backward (B) does not make: the inputs a split W
// pass gathers again (post 3: Z, dX', dR; head 1: Zf; others 0). B makes post 4, head 2.
int tp_fused_saving(PartKind k);

// Shares of a post's forward GEMM FLOPs (W_o, then gate and up, or GPT's fc1, then down or fc2):
// in the gate and up GEMMs, and in the down projection. `profile` splits its measured post F by
// them into post_gate_up_F and post_down_F (docs/simulator.md).
struct PostGemmShares {
  double gate_up = 0, down = 0;
};
PostGemmShares post_gemm_shares(const ModelConfig& cfg);

}  // namespace hp

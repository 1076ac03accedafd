// Cost model construction: part-cost JSON reader/writer and the FLOP/byte model.
#include "sim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "util/error.h"

namespace hp {

namespace {


// A time in seconds: a number in [0, kMaxPartSeconds] (NaN fails both comparisons).
double seconds(const nlohmann::json& j, const std::string& where) {
  HP_CHECK(j.is_number(), "{}: expected a number of seconds, got {}", where, j.dump());
  const double v = j.get<double>();
  HP_CHECK(v >= 0 && v <= CostModel::kMaxPartSeconds,
           "{}: expected a number >= 0 and at most {} seconds, got {}; fix the part-cost file "
           "(are the units seconds?)",
           where, CostModel::kMaxPartSeconds, j.dump());
  return v;
}

// A number >= 0 (link figures; their own ranges are checked by LinkProfile::validate).
double nonneg(const nlohmann::json& j, const std::string& where) {
  HP_CHECK(j.is_number() && j.get<double>() >= 0, "{}: expected a number >= 0, got {}", where,
           j.dump());
  return j.get<double>();
}

LinkProfile parse_link(const nlohmann::json& j, const std::string& where) {
  HP_CHECK(j.is_object(), "{}: expected {{\"latency_s\":..,\"bandwidth_Bps\":..}}, got {}", where,
           j.dump());
  LinkProfile l;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "latency_s") {
      l.latency_s = nonneg(it.value(), where + ".latency_s");
    } else if (it.key() == "bandwidth_Bps") {
      l.bandwidth_Bps = nonneg(it.value(), where + ".bandwidth_Bps");
    } else {
      fail("{}: unknown key '{}' (known: latency_s, bandwidth_Bps; bandwidth 0 = free)", where,
           it.key());
    }
  }
  l.validate(where);
  return l;
}

}  // namespace

double CostModel::part_time(PartKind kind, Dir dir) const {
  return time_.at(kind, dir);
}

void CostModel::set_part_time(PartKind kind, Dir dir, double seconds) {
  HP_CHECK(dir != Dir::kB, "set_part_time: set I and W separately (B = I + W)");
  HP_CHECK(seconds >= 0, "set_part_time: negative time {}", seconds);
  time_.at(kind, dir) = seconds;
}

void CostModel::scale_flops(double factor) {
  HP_CHECK(factor > 0, "scale_flops: factor must be > 0, got {}", factor);
  flops_ *= factor;
}

void CostModel::set_collective_times(const PartTable& parts, double attn_recompute,
                                     double post_down) {
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs)
      HP_CHECK(parts.at(k, d) >= 0 && parts.at(k, d) <= time_.at(k, d) * (1 + 1e-12),
               "set_collective_times: {} {}: {} s of collectives in a part of {} s",
               part_kind_str(k), dir_str(d), parts.at(k, d), time_.at(k, d));
  HP_CHECK(attn_recompute >= 0 && attn_recompute <= attn_recompute_f_ * (1 + 1e-12) &&
               post_down >= 0 && post_down <= post_down_f_ * (1 + 1e-12),
           "set_collective_times: recompute collectives ({} s, {} s) outside the charges ({} s, "
           "{} s)",
           attn_recompute, post_down, attn_recompute_f_, post_down_f_);
  comm_ = parts;
  attn_recompute_comm_ = attn_recompute;
  post_down_comm_ = post_down;
}

int tp_collectives(PartKind k, Dir d) {
  static constexpr int kCounts[5][3] = {{1, 0, 1}, {0, 0, 0}, {1, 1, 1}, {3, 4, 3}, {1, 2, 1}};
  HP_CHECK(d != Dir::kB, "tp_collectives: ask for I and W (B = I + W - tp_fused_saving)");
  return kCounts[static_cast<int>(k)][d == Dir::kF ? 0 : d == Dir::kI ? 1 : 2];
}

int tp_fused_saving(PartKind k) {
  if (k == PartKind::kPost) return 3;  // Z, dX' and dR gathered once for I and W together
  if (k == PartKind::kHead) return 1;  // Zf likewise
  return 0;
}

void CostModel::add_tp_collectives(int t, double collective_s) {
  HP_CHECK(t >= 2 && t <= (1 << 20), "add_tp_collectives: a group of {} ranks (expected 2 .. 2^20)",
           t);
  HP_CHECK(std::isfinite(collective_s) && collective_s >= 0 && collective_s <= kMaxPartSeconds,
           "add_tp_collectives: {} s per collective (expected 0 .. {} s)", collective_s,
           kMaxPartSeconds);
  HP_CHECK(tp_ == 1, "add_tp_collectives: these costs are already one rank's of a group of {}",
           tp_);
  PartTable comm;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) {
      comm.at(k, d) = tp_collectives(k, d) * collective_s;
      time_.at(k, d) += comm.at(k, d);
    }
  attn_recompute_f_ += collective_s;
  post_down_f_ += collective_s;
  for (PartKind k : kPartKinds)
    fused_saving_[static_cast<size_t>(k)] = tp_fused_saving(k) * collective_s;
  set_collective_times(comm, collective_s, collective_s);
  tp_ = t;
  tp_coll_s_ = collective_s;
}

void CostModel::set_links(LinkProfile intra, LinkProfile inter, int stages_per_node) {
  HP_CHECK(stages_per_node >= 1, "stages_per_node must be >= 1, got {}", stages_per_node);
  intra_ = intra;
  inter_ = inter;
  stages_per_node_ = stages_per_node;
}

double CostModel::op_time(const ComputeOp& op, Recompute policy, const PartTable* scale) const {
  // A core's factor scales the compute; the seconds inside collectives stay as they are.
  auto scaled = [&](double seconds, double comm, PartKind k, Dir d) {
    return scale ? (seconds - comm) * scale->at(k, d) + comm : seconds;
  };
  auto part = [&](const Part& p, Dir d) {
    return scaled(part_time(p, d), comm_.at(p.kind, d), p.kind, d);
  };
  double t = 0;
  for (const Part& p : op.parts) {
    if (!(head_in_backward_ && p.kind == PartKind::kHead && op.dir == Dir::kF))
      // A fused backward does not repeat the gathers a split W pass makes again.
      t += op.dir == Dir::kB
               ? part(p, Dir::kI) + part(p, Dir::kW) - fused_saving_[static_cast<size_t>(p.kind)]
               : part(p, op.dir);
    if (policy == Recompute::kNoAttn && p.kind == PartKind::kAttn &&
        (op.dir == Dir::kB || op.dir == Dir::kI))
      t += scaled(attn_recompute_f_, attn_recompute_comm_, PartKind::kAttn, Dir::kF);
  }
  for (size_t i = 0; i < op.recompute.size(); ++i) {
    const Part& p = op.recompute[i];
    // A recomputed post whose output nothing reads skips its down projection and the collective
    // after it (post_recompute_extra < 0 by post_down_F).
    const double extra = post_recompute_extra(op, i);
    const double extra_comm = extra < 0 ? -post_down_comm_ : 0.0;
    t += scaled(part_time(p, Dir::kF) + extra, comm_.at(p.kind, Dir::kF) + extra_comm, p.kind,
                Dir::kF);
  }
  return t;
}

double CostModel::post_recompute_extra(const ComputeOp& op, size_t i) const {
  const Part& p = op.recompute.at(i);
  if (p.kind != PartKind::kPost) return 0;
  const RecomputeRun how = recompute_run(op, i);
  if (!how.read_later) return -post_down_f_;
  return how.keep_gu ? 0.0 : post_gate_up_f_;
}

void CostModel::set_post_recompute_times(double gate_up, double down) {
  HP_CHECK(gate_up >= 0 && down >= 0, "set_post_recompute_times: negative time ({}, {})", gate_up,
           down);
  post_gate_up_f_ = gate_up;
  post_down_f_ = down;
}

PostGemmShares post_gemm_shares(const ModelConfig& cfg) {
  const double h = static_cast<double>(cfg.hidden), f = static_cast<double>(cfg.intermediate);
  const bool gpt = cfg.is_gpt();
  const double gate_up = (gpt ? 1 : 2) * h * f, down = f * h, total = h * h + gate_up + down;
  return {gate_up / total, down / total};
}

double CostModel::op_flops(const ComputeOp& op) const {
  double f = 0;
  for (const Part& p : op.parts) {
    const bool moved = head_in_backward_ && p.kind == PartKind::kHead;
    if (!(moved && op.dir == Dir::kF)) f += flops_.at(p.kind, op.dir);
    // Model FLOPs stay the model's: the moved head's forward counts in its backward.
    if (moved && (op.dir == Dir::kB || op.dir == Dir::kI)) f += flops_.at(p.kind, Dir::kF);
  }
  return f;
}

const LinkProfile& CostModel::link(int src, int dst) const {
  return src / stages_per_node_ == dst / stages_per_node_ ? intra_ : inter_;
}

double CostModel::transfer_time(int src, int dst, int64_t bytes) const {
  const LinkProfile& l = link(src, dst);
  return l.bandwidth_Bps > 0 ? static_cast<double>(bytes) / l.bandwidth_Bps : 0.0;
}

CostModel CostModel::from_part_costs(const nlohmann::json& j, const std::string& where) {
  HP_CHECK(j.is_object(), "{}: part costs must be a JSON object like {{\"attn\":{{\"F\":..,\"I\":..,"
                          "\"W\":..}},...,\"link\":{{\"latency_s\":..,\"bandwidth_Bps\":..}}}}",
           where);
  CostModel c;
  c.source_ = where;
  bool have_inter = false;
  int tp_size = 1;
  double tp_coll = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    bool is_part = false;
    for (PartKind k : kPartKinds) {
      if (key != part_kind_str(k)) continue;
      is_part = true;
      HP_CHECK(it->is_object(), "{}: '{}' must be an object {{\"F\":s,\"I\":s,\"W\":s}}, got {}",
               where, key, it->dump());
      for (auto d = it->begin(); d != it->end(); ++d) {
        const Dir* dir = std::find_if(std::begin(kPartDirs), std::end(kPartDirs),
                                      [&](Dir x) { return d.key() == dir_str(x); });
        HP_CHECK(dir != std::end(kPartDirs),
                 "{}: '{}' has unknown key '{}' (known: F, I, W; a full backward B costs I + W)",
                 where, key, d.key());
        c.time_.at(k, *dir) = seconds(d.value(), where + "." + key + "." + d.key());
      }
    }
    if (is_part) continue;
    if (key == "link") {
      c.intra_ = parse_link(it.value(), where + ".link");
      if (!have_inter) c.inter_ = c.intra_;
    } else if (key == "inter") {
      c.inter_ = parse_link(it.value(), where + ".inter");
      have_inter = true;
    } else if (key == "stages_per_node") {
      HP_CHECK(it->is_number_integer() && it->get<int64_t>() >= 1 &&
                   it->get<int64_t>() <= (int64_t{1} << 30),
               "{}: stages_per_node must be an integer in [1, 2^30], got {}", where, it->dump());
      c.stages_per_node_ = it->get<int>();
    } else if (key == "attn_recompute_F") {
      c.attn_recompute_f_ = seconds(it.value(), where + ".attn_recompute_F");
    } else if (key == "post_gate_up_F") {
      c.post_gate_up_f_ = seconds(it.value(), where + ".post_gate_up_F");
    } else if (key == "post_down_F") {
      c.post_down_f_ = seconds(it.value(), where + ".post_down_F");
    } else if (key == "tensor_parallel") {
      const std::string w = where + ".tensor_parallel";
      HP_CHECK(it->is_object() && it->size() == 2 && it->contains("size") &&
                   it->contains("collective_s"),
               "{}: expected {{\"size\": t, \"collective_s\": seconds}} (one rank of a group of t, "
               "as profile --tensor-parallel writes it), got {}",
               w, it->dump());
      const nlohmann::json& size = (*it)["size"];
      HP_CHECK(size.is_number_integer() && size.get<int64_t>() >= 2 &&
                   size.get<int64_t>() <= (int64_t{1} << 20),
               "{}.size: a group of 2 .. 2^20 ranks, got {} (a whole-stage profile has no "
               "tensor_parallel key)",
               w, size.dump());
      tp_size = size.get<int>();
      tp_coll = seconds((*it)["collective_s"], w + ".collective_s");
    } else if (key == "version") {
      HP_CHECK(it.value() == 1, "{}: part-cost version {} is not supported (expected 1)", where,
               it->dump());
    } else {
      fail(
          "{}: unknown key '{}' (known: embed, pre, attn, post, head, link, inter, "
          "stages_per_node, attn_recompute_F, post_gate_up_F, post_down_F, tensor_parallel, "
          "version)",
          where, key);
    }
  }
  // The file's part times are one rank's compute; its group's collectives go on top.
  if (tp_size > 1) c.add_tp_collectives(tp_size, tp_coll);
  return c;
}

nlohmann::json CostModel::to_json() const {
  nlohmann::json j;
  j["version"] = 1;
  // A tensor-parallel rank's costs are written as from_part_costs reads them: compute alone, and
  // the collectives as the group's size and the seconds of one.
  const bool tp = tp_ > 1;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs)
      j[part_kind_str(k)][dir_str(d)] = time_.at(k, d) - (tp ? comm_.at(k, d) : 0.0);
  if (tp) j["tensor_parallel"] = {{"size", tp_}, {"collective_s", tp_coll_s_}};
  j["link"] = {{"latency_s", intra_.latency_s}, {"bandwidth_Bps", intra_.bandwidth_Bps}};
  j["inter"] = {{"latency_s", inter_.latency_s}, {"bandwidth_Bps", inter_.bandwidth_Bps}};
  if (stages_per_node_ < (1 << 30)) j["stages_per_node"] = stages_per_node_;
  j["attn_recompute_F"] = attn_recompute_f_ - (tp ? attn_recompute_comm_ : 0.0);
  j["post_gate_up_F"] = post_gate_up_f_;
  j["post_down_F"] = post_down_f_ - (tp ? post_down_comm_ : 0.0);
  return j;
}

CostModel CostModel::from_model(const ModelConfig& cfg, int64_t seq_len, int64_t microbatch_size,
                                const DeviceProfile& dev, TransferMode transfer) {
  cfg.validate();
  HP_CHECK(seq_len >= 1, "cost model: sequence length must be >= 1, got {}", seq_len);
  HP_CHECK(microbatch_size >= 1, "cost model: micro-batch size must be >= 1, got {}",
           microbatch_size);
  CostModel c;
  c.source_ = "model " + cfg.name + " s=" + std::to_string(seq_len) +
              " b=" + std::to_string(microbatch_size) + " on " + dev.name;
  const double b = static_cast<double>(microbatch_size), s = static_cast<double>(seq_len);
  const double T = b * s, h = static_cast<double>(cfg.hidden),
               q = static_cast<double>(cfg.qkv_dim()), f = static_cast<double>(cfg.intermediate),
               V = static_cast<double>(cfg.vocab);
  const double gemm_rate = dev.peak_flops * dev.gemm_efficiency;
  const double attn_rate = dev.peak_flops * dev.attn_efficiency;
  const double byte_rate = dev.mem_bandwidth_Bps;
  const double e = dev.bytes_per_elem();
  // Work of one (part, direction): GEMM FLOPs, core-attention FLOPs, elements moved through memory.
  struct Work {
    double gemm = 0, attn = 0, elems = 0;
  };
  auto seconds = [&](const Work& w) {
    return w.gemm / gemm_rate + w.attn / attn_rate + w.elems * e / byte_rate;
  };
  const bool weights_mode = transfer == TransferMode::kWeights;
  const bool gpt = cfg.is_gpt();  // docs/simulator.md "Model kinds"
  const double qkv_gemm = 2 * T * h * q;
  // GPT's biases: added in the GEMMs' epilogues (no traffic of their own); their gradients are
  // column sums of the output gradient, one read of it in the W pass that owns the weight.
  const double qkv_bias_grad = gpt ? T * q : 0;
  const double core_f = 2 * b * s * s * h;  // causal: QK^T and PV each s*s*h/2 MACs per sequence
  std::array<std::array<Work, 3>, 5> w{};
  auto& embed = w[static_cast<int>(PartKind::kEmbed)];
  embed[0] = {0, 0, (gpt ? 3 : 2) * T * h};  // gather rows (GPT: + position rows, added)
  embed[2] = {0, 0, (gpt ? 4 : 2) * T * h};  // scatter-add the gradient rows (GPT: both tables)
  auto& pre = w[static_cast<int>(PartKind::kPre)];
  pre[0] = {weights_mode ? 0 : qkv_gemm, 0, 2 * T * h};  // RMSNorm or LayerNorm: read X, write A
  pre[1] = {weights_mode ? 0 : qkv_gemm, 0, 4 * T * h};  // read dA, X, dR; write dX
  pre[2] = {weights_mode ? 0 : qkv_gemm, 0, weights_mode ? 0 : qkv_bias_grad};
  auto& attn = w[static_cast<int>(PartKind::kAttn)];
  const double rotary = gpt ? 0 : 2 * T * q;  // GPT: learned positions, added in embed
  attn[0] = {weights_mode ? qkv_gemm : 0, core_f, rotary + 2 * T * h};
  attn[1] = {weights_mode ? qkv_gemm : 0, 2.5 * core_f, 2 * rotary + 3 * T * h};
  attn[2] = {weights_mode ? qkv_gemm : 0, 0, weights_mode ? qkv_bias_grad : 0};
  auto& post = w[static_cast<int>(PartKind::kPost)];
  // W_o, then gate, up, down (LLaMA) or fc1, fc2 (GPT)
  const double post_gemm = 2 * T * h * h + (gpt ? 2 : 3) * 2 * T * h * f;
  // residuals, norm 2, then silu(G)*U: read G, U, write H; or gelu(G): read G, write H
  post[0] = {post_gemm, 0, 7 * T * h + (gpt ? 2 : 3) * T * f};
  // GeLU backward: read dH and G, write dG
  post[1] = {post_gemm, 0, 14 * T * h + (gpt ? 3 : 6) * T * f};
  post[2] = {post_gemm, 0, gpt ? 2 * T * h + T * f : 0};  // GPT: b_o, b_fc2, b_fc1 gradients
  auto& head = w[static_cast<int>(PartKind::kHead)];
  const double lm = 2 * T * h * V;
  head[0] = {lm, 0, 2 * T * h + 2 * T * V};  // final norm, logits through softmax block by block
  head[1] = {2 * lm, 0, 4 * T * h + 2 * T * V};  // recompute the logits, then dX
  head[2] = {lm, 0, 0};
  for (PartKind k : kPartKinds) {
    for (size_t i = 0; i < 3; ++i) {
      const Dir d = kPartDirs[i];
      const Work& x = w[static_cast<size_t>(k)][i];
      c.time_.at(k, d) = seconds(x);
      // Model FLOPs leave out the head's internal logit recompute.
      const double model_gemm = (k == PartKind::kHead && d == Dir::kI) ? lm : x.gemm;
      c.flops_.at(k, d) = model_gemm + x.attn;
    }
  }
  c.attn_recompute_f_ = seconds({weights_mode ? qkv_gemm : 0, 0, rotary});
  // The gate and up GEMMs (GPT: fc1); the gating (GPT: GeLU), the residual copy and the down GEMM.
  c.post_gate_up_f_ = seconds({(gpt ? 1 : 2) * 2 * T * h * f, 0, 0});
  c.post_down_f_ = seconds({2 * T * f * h, 0, (gpt ? 2 : 3) * T * f + 2 * T * h});
  c.intra_ = dev.intra;
  c.inter_ = dev.inter;
  c.stages_per_node_ = dev.gpus_per_node;
  c.peak_flops_ = dev.peak_flops;
  c.tokens_ = microbatch_size * seq_len;
  return c;
}

}  // namespace hp

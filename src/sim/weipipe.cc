#include "sim/weipipe.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "sim/memory.h"
#include "util/error.h"

namespace hp {

namespace {

// The ring's step structure. Rank r runs ceil(m/p) = G rounds; its micro-batch of round g is
// g*p + r (absent when that is >= m: the rank then only relays). At step k its phase is
// j = k - r: forward of chunk j mod p while j < G*p, backward of chunk p-1 - (j-p) mod p while
// p <= j < G*p + p. All ranks run S = (G+2)*p - 1 steps, passing weights even when idle.
struct Ring {
  int p = 1, m = 1, rounds = 1, steps = 1;
  bool f_slot(int r, int k) const { return k - r >= 0 && k - r < rounds * p; }
  bool b_slot(int r, int k) const { return k - r >= p && k - r < rounds * p + p; }
  bool real(int r, int round) const { return round * p + r < m; }
  // The chunk this rank computes at step k in each direction, or -1 (no slot or no micro-batch).
  int f_chunk(int r, int k) const {
    return f_slot(r, k) && real(r, (k - r) / p) ? (k - r) % p : -1;
  }
  int b_chunk(int r, int k) const {
    return b_slot(r, k) && real(r, (k - r - p) / p) ? p - 1 - (k - r - p) % p : -1;
  }
};

// One chunk's forward and backward op (embed on chunk 0, head on chunk p-1) with their times and
// model FLOPs under the recomputation policy.
struct ChunkCost {
  double f = 0, b = 0, f_flops = 0, b_flops = 0;
};

std::vector<ChunkCost> chunk_costs(const CostModel& cost, int p, int layers, Recompute policy) {
  std::vector<ChunkCost> out;
  const auto split = split_layers(layers, p);
  for (int c = 0; c < p; ++c) {
    ComputeOp fwd;
    if (c == 0) fwd.parts.push_back(Part::embed());
    for (int l = split[c].first; l <= split[c].second; ++l)
      for (Part part : {Part::pre(l), Part::attn(l), Part::post(l)}) fwd.parts.push_back(part);
    if (c == p - 1) fwd.parts.push_back(Part::head());
    ComputeOp bwd = fwd;
    bwd.dir = Dir::kB;
    std::reverse(bwd.parts.begin(), bwd.parts.end());
    bwd.recompute = recompute_parts(bwd, policy);
    out.push_back({cost.op_time(fwd, policy), cost.op_time(bwd, policy), cost.op_flops(fwd),
                   cost.op_flops(bwd)});
  }
  return out;
}

// Directed links and, with a shared NIC, each rank's port each way; FIFO in placement order.
class RingLinks {
 public:
  RingLinks(const CostModel& cost, const WeiPipeOptions& opt, int p, SimResult& res)
      : cost_(cost), opt_(opt), p_(p), res_(res), link_(p * p, 0.0), out_(p, 0.0), in_(p, 0.0) {}

  // Places a transfer of `bytes` from src to dst posted at `post`; returns when it has arrived.
  double place(int src, int dst, double post, int64_t bytes) {
    double start = std::max(post, link_[src * p_ + dst]);
    const int spn = std::max(1, cost_.stages_per_node());
    const bool shared = opt_.shared_nic && src / spn != dst / spn;
    if (shared) start = std::max({start, out_[src], in_[dst]});
    const double end = start + cost_.message_time(src, dst, bytes);
    link_[src * p_ + dst] = end;
    if (shared) out_[src] = in_[dst] = end;
    erosion_ = opt_.comm_compute_share * cost_.transfer_time(src, dst, bytes);
    res_.stages[src].sent_bytes += bytes;
    res_.stages[src].messages_sent += 1;
    res_.stages[dst].recv_bytes += bytes;
    res_.pair_bytes[{src, dst}] += bytes;
    return end;
  }
  // The compute time the last placed transfer takes from its sender and from its receiver.
  double erosion() const { return erosion_; }

 private:
  const CostModel& cost_;
  const WeiPipeOptions& opt_;
  int p_;
  SimResult& res_;
  std::vector<double> link_, out_, in_;
  double erosion_ = 0;
};

// Per rank, what step k is waiting for from the transfers of step k-1: the backward weights
// (before its backward), the gradient partial sum (before it adds its own and sends it on) and
// the forward weights (before its forward). Each is the later of the arrival and of the rank's own
// send of that flow completing (its buffer is reused).
struct Ready {
  std::vector<double> w1, grad, w0;
  explicit Ready(int p) : w1(p, 0.0), grad(p, 0.0), w0(p, 0.0) {}
};

}  // namespace

SimResult simulate_weipipe(const CostModel& cost, int p, int m, int layers,
                           const WeiPipeOptions& opt) {
  HP_CHECK(p >= 1 && m >= 1, "weipipe: needs at least one rank and one micro-batch (p={}, m={})",
           p, m);
  HP_CHECK(p <= layers, "weipipe: {} ranks need at least {} layers (each holds one chunk), not {}",
           p, p, layers);
  Ring ring{p, m, (m + p - 1) / p, 0};
  ring.steps = (ring.rounds + 2) * p - 1;
  const std::vector<ChunkCost> cc = chunk_costs(cost, p, layers, opt.recompute);
  SimResult res;
  res.stages.resize(p);
  for (int r = 0; r < p; ++r) res.stages[r].stage = r;
  RingLinks links(cost, opt, p, res);
  std::vector<double> e_prev(p, 0.0), s(p), g(p), f(p), tb(p), tf(p), ero(p);
  Ready ready(p);
  double flops = 0;
  for (int k = 0; k < ring.steps; ++k) {
    for (int r = 0; r < p; ++r) {
      const int bc = ring.b_chunk(r, k), fc = ring.f_chunk(r, k);
      tb[r] = bc >= 0 ? cc[bc].b : 0;
      tf[r] = fc >= 0 ? cc[fc].f : 0;
      flops += (bc >= 0 ? cc[bc].b_flops : 0) + (fc >= 0 ? cc[fc].f_flops : 0);
      s[r] = std::max(e_prev[r], ready.w1[r]);
      g[r] = std::max(s[r] + tb[r], ready.grad[r]);
      f[r] = std::max(g[r], ready.w0[r]);
      res.stages[r].wait += (s[r] - e_prev[r]) + (g[r] - s[r] - tb[r]) + (f[r] - g[r]);
      ero[r] = 0;
    }
    // The flows launched in step k (none after the last step, none without a ring), in the order
    // they are posted: backward weights to r-1 at the step's start, the partial sum to r+1 after
    // the backward, forward weights to r+1 before the forward.
    struct Flow {
      double post;
      int src, dst, kind;  // kind 0 backward weights, 1 gradient, 2 forward weights
    };
    std::vector<Flow> flows;
    for (int r = 0; p > 1 && k + 1 < ring.steps && r < p; ++r) {
      const int nx = (r + 1) % p, pv = (r + p - 1) % p;
      auto post = [&](double mine, double theirs) {
        return opt.rendezvous ? std::max(mine, theirs) : mine;
      };
      if (ring.b_slot(pv, k + 1)) flows.push_back({post(s[r], s[pv]), r, pv, 0});
      if (k - r >= p) flows.push_back({post(g[r], g[nx]), r, nx, 1});
      if (ring.f_slot(nx, k + 1)) flows.push_back({post(f[r], f[nx]), r, nx, 2});
    }
    std::stable_sort(flows.begin(), flows.end(),
                     [](const Flow& a, const Flow& b) { return a.post < b.post; });
    Ready next(p);
    for (const Flow& fl : flows) {
      const double end = links.place(fl.src, fl.dst, fl.post, opt.chunk_bytes);
      std::vector<double>& v = fl.kind == 0 ? next.w1 : fl.kind == 1 ? next.grad : next.w0;
      v[fl.src] = std::max(v[fl.src], end);
      v[fl.dst] = std::max(v[fl.dst], end);
      ero[fl.src] += links.erosion();
      ero[fl.dst] += links.erosion();
    }
    for (int r = 0; r < p; ++r) {
      e_prev[r] = f[r] + tf[r] + ero[r];
      res.stages[r].busy += tb[r] + tf[r] + ero[r];
    }
    ready = std::move(next);
  }
  double ring_end = 0;
  for (int r = 0; r < p; ++r) {
    res.stages[r].end = e_prev[r];
    ring_end = std::max(ring_end, e_prev[r]);
  }
  // Closing: each finished gradient chunk goes to its owner (rank i swaps with (p+1-i) mod p, as
  // the partial sums end one rank past where they should), then the replicated parameters'
  // gradients are all-reduced over the ring.
  double swap = 0;
  for (int i = 0; p > 1 && i < p; ++i) {
    const int partner = (p + 1 - i) % p;
    if (partner != i)
      swap = std::max(swap, links.place(i, partner, ring_end, opt.chunk_bytes) - ring_end);
  }
  const double allreduce =
      dp_allreduce_time(static_cast<double>(opt.replicated_bytes), p, cost.link(0, p - 1));
  res.makespan = ring_end + swap + allreduce;
  double max_busy = 0;
  for (StageResult& st : res.stages) {
    st.idle = res.makespan - st.busy;
    max_busy = std::max(max_busy, st.busy);
  }
  res.bubble = res.makespan - max_busy;
  res.bubble_fraction = res.makespan > 0 ? res.bubble / res.makespan : 0;
  const int64_t tokens =
      opt.tokens_per_microbatch > 0 ? opt.tokens_per_microbatch : cost.tokens_per_microbatch();
  if (tokens > 0 && res.makespan > 0)
    res.tokens_per_s = static_cast<double>(tokens) * m / res.makespan;
  if (cost.peak_flops() > 0 && res.makespan > 0)
    res.mfu = flops / (res.makespan * p * cost.peak_flops());
  return res;
}

int64_t weipipe_rank_params(const ModelConfig& cfg, int pp) {
  // Its chunk plus the embedding and the head, which every rank runs for its own micro-batches.
  return static_cast<int64_t>(
      stage_params_per_gpu(cfg, (cfg.layers + pp - 1) / pp, true, true, 1));
}

namespace {

// What each ring flow carries per step on one GPU (the largest layer chunk, in the device dtype,
// 1/tp of it) and the replicated parameters' bytes all-reduced at the end.
void set_ring_bytes(WeiPipeOptions& opt, const ModelConfig& cfg, int p, int tp, int64_t e) {
  const int64_t chunk = (cfg.layers + p - 1) / p * cfg.params_per_layer();
  opt.chunk_bytes = chunk * e / tp;
  opt.replicated_bytes = (weipipe_rank_params(cfg, p) - chunk) * e / tp;
}

}  // namespace

GpuMemory weipipe_memory(const ModelConfig& cfg, const Layout& lay, int64_t tokens,
                         double peak_stash_bytes, int e) {
  const double t = lay.tp, d = lay.dp;
  const double chunk = static_cast<double>((cfg.layers + lay.pp - 1) / lay.pp) *
                       static_cast<double>(cfg.params_per_layer());
  const double replicated = static_cast<double>(weipipe_rank_params(cfg, lay.pp)) - chunk;
  GpuMemory mem;
  mem.model_states =
      (chunk * (4 + 12.0 / d) + replicated * (2 + 4 + 12.0 / d) + 6 * chunk * e) / t;
  mem.activations = peak_stash_bytes / t;
  mem.working = gpu_memory(cfg, "1f1b", lay, tokens, 0, 0, e).working;
  return mem;
}

PlanResult weipipe_evaluate(const PlanCase& pc, const ModelConfig& cfg, int64_t seq_len,
                            const DeviceProfile& dev, const CostModel& cost, double memory_bytes,
                            bool simulate_all) {
  PlanResult r;
  r.c = pc;
  const Layout& lay = pc.layout;
  const int p = lay.pp, m = pc.microbatches, L = static_cast<int>(cfg.layers);
  if (p > L) {
    r.error = fmt::format("weipipe: {} ranks cannot share {} layers (a chunk per rank)", p, L);
    return r;
  }
  const int e = dev.bytes_per_elem();
  const int64_t tokens = seq_len;  // micro-batch size 1
  ScheduleSpec one{};  // one micro-batch through the whole model: every rank's peak stash
  one.name = "1f1b";
  one.stages = 1;
  one.microbatches = 1;
  one.layers = L;
  one.recompute = pc.recompute;
  one.transfer = pc.transfer;
  const auto peaks = rank_stash_peaks(generate(one), cfg, tokens, e, lay.tp);
  r.memory = weipipe_memory(cfg, lay, tokens, static_cast<double>(peaks[0] * lay.tp), e);
  r.fits = r.memory.total() <= memory_bytes;
  if (!r.fits && !simulate_all) return r;
  WeiPipeOptions opt;
  opt.recompute = pc.recompute;
  set_ring_bytes(opt, cfg, p, lay.tp, e);
  opt.shared_nic = true;  // one NIC per GPU, as the planner's other schedules
  opt.comm_compute_share = dev.comm_compute_share;
  opt.tokens_per_microbatch = tokens;
  fill_iteration(r, simulate_weipipe(cost, p, m, L, opt),
                 static_cast<double>(weipipe_rank_params(cfg, p)) / lay.tp, dev, tokens);
  return r;
}

SimRun simulate_weipipe_spec(const ScheduleSpec& spec, const CostSetup& c) {
  SimRun run;
  run.spec = spec;
  if (c.recompute) run.spec.recompute = c.recompute;
  const Recompute policy = run.spec.recompute.value_or(Recompute::kNone);
  const int p = spec.stages, m = spec.microbatches, L = spec.layers;
  WeiPipeOptions opt;
  opt.recompute = policy;
  opt.rendezvous = c.rendezvous;
  opt.shared_nic = c.shared_nic;
  if (c.device) opt.comm_compute_share = c.device->comm_compute_share;
  opt.tokens_per_microbatch = c.tokens_per_mb;
  if (c.model) set_ring_bytes(opt, *c.model, p, c.layout.tp, c.elem_bytes.compute);
  run.result = simulate_weipipe(c.cost, p, m, L, opt);
  run.schedule.name = "weipipe";
  run.schedule.num_stages = p;
  run.schedule.microbatches = m;
  run.schedule.layers = L;
  run.schedule.recompute = policy;
  run.schedule.stages.resize(p);
  if (c.model) {
    // One micro-batch's whole-model stash: what a one-stage pipeline keeps at its peak.
    ScheduleSpec one{};
    one.name = "1f1b";
    one.layers = L;
    one.recompute = policy;
    const SimRun whole = simulate_spec(one, c, false);
    const int64_t peak = whole.result.stages[0].peak_activation_bytes;
    for (int r = 0; r < p && r < m; ++r) run.result.stages[r].peak_activation_bytes = peak;
  }
  return run;
}

}  // namespace hp

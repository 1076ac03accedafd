// Part-cost profiling: see profile.h. Each timed pass runs every part of a small model as its own
// op (F in model order, then I and W of each part in reverse order), so each measured time
// is exactly one (part, direction) as the simulator charges it. What attention's I adds under
// no-attn (rebuilding its QKV and rotary) is timed on its own: as the difference of two whole
// attention backwards it drowned in their noise at long sequences.
#include "runtime/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "comm/pingpong.h"
#include "kernels/cpu_kernels.h"
#include "model/model.h"
#include "model/params.h"
#include "model/parts.h"
#include "model/value_store.h"
#include "sim/cost_model.h"
#include "util/error.h"
#include "util/timer.h"

namespace hp {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}


// The clock a profile reads: at one thread the calling thread's CPU time (robust to other
// processes and threads on a shared machine: what a dedicated core would take; the kernels run
// on the caller at one thread), with more threads wall time.
using Clock = double (*)();
Clock profile_clock(int threads) { return threads == 1 ? thread_cpu_seconds : now_seconds; }

// Times one op; returns seconds.
double timed_run(Model& model, const ComputeOp& op, Recompute policy, TransferMode transfer,
                 ValueStore& store, const Batch& b, Clock clock) {
  const auto ctx = local_contexts(op, policy, transfer);
  model.backend().synchronize();
  const double t0 = clock();
  model.run(op, ctx, store, b);
  model.backend().synchronize();  // a device backend only queues the op's kernels
  return clock() - t0;
}

ComputeOp single(Dir dir, Part p, Recompute policy) {
  ComputeOp op;
  op.dir = dir;
  op.mb = 0;
  op.parts = {p};
  op.recompute = recompute_parts(op, policy);
  return op;
}

// One pass: F, I, W of every part on its own. `acc` becomes the per-kind sums.
void one_pass(Model& model, const std::vector<Part>& parts, Recompute policy, TransferMode transfer,
              ValueStore& store, const Batch& b, Clock clock, PartTable& acc) {
  acc = PartTable{};
  store.clear();
  auto run = [&](Dir d, const Part& p) {
    acc.at(p.kind, d) += timed_run(model, single(d, p, policy), policy, transfer, store, b, clock);
  };
  for (const Part& p : parts) run(Dir::kF, p);
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    run(Dir::kI, *it);
    run(Dir::kW, *it);
  }
  HP_CHECK(store.size() == 0, "profile: values left over after a full pass: {}", store.describe());
  model.take_loss();  // the head's losses of this pass are not needed
}

// Seconds to copy `bytes` from one buffer to another (median of a few).
double memcpy_seconds(int64_t bytes, int repeats) {
  std::vector<char> a(static_cast<size_t>(std::max<int64_t>(bytes, 1)), 1), c(a.size(), 0);
  std::vector<double> t;
  for (int r = 0; r < repeats + 1; ++r) {
    a[0] = static_cast<char>(r);
    Timer tm;
    std::memcpy(c.data(), a.data(), a.size());
    const double s = tm.seconds();
    if (c[0] != a[0]) throw Error("profile: memcpy check failed");
    if (r > 0) t.push_back(s);
  }
  return median(t);
}

}  // namespace

nlohmann::json PartProfile::to_json() const {
  nlohmann::json j;
  j["version"] = 1;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) j[part_kind_str(k)][dir_str(d)] = time.at(k, d);
  j["attn_recompute_F"] = attn_recompute_f;
  j["post_gate_up_F"] = post_gate_up_f;
  j["post_down_F"] = post_down_f;
  j["link"] = {{"latency_s", link_latency_s}, {"bandwidth_Bps", link_bandwidth_Bps}};
  return j;
}

struct PartTimer::State {
  ProfileOptions opt;
  ModelConfig cfg;
  std::unique_ptr<Backend> be;
  std::optional<Params> params;
  std::optional<Model> model;
  TokenBuffer tok, tgt;
  Batch batch;
  std::vector<Part> parts;
  std::optional<ValueStore> store;
};

PartTimer::PartTimer(const ModelConfig& cfg_in, const ProfileOptions& opt)
    : s_(std::make_unique<State>()) {
  HP_CHECK(opt.seq_len >= 1, "profile: --seq-len must be >= 1 (got {})", opt.seq_len);
  HP_CHECK(opt.microbatch_size >= 1, "profile: --microbatch-size must be >= 1 (got {})",
           opt.microbatch_size);
  HP_CHECK(opt.layers >= 1, "profile: --profile-layers must be >= 1 (got {})", opt.layers);
  HP_CHECK(opt.threads >= 1, "profile: --threads must be >= 1 (got {})", opt.threads);
  HP_CHECK(opt.seq_len <= cfg_in.max_positions,
           "profile: --seq-len {} exceeds the model's max_positions {}", opt.seq_len,
           cfg_in.max_positions);
  State& st = *s_;
  st.opt = opt;
  st.cfg = cfg_in;
  st.cfg.layers = opt.layers;
  st.cfg.validate();
  const ModelConfig& cfg = st.cfg;

  st.be = make_cpu_backend(opt.threads);
  st.params.emplace(cfg, Params::all_parts(cfg), *st.be, opt.precision);
  st.params->init(opt.seed);
  st.model.emplace(*st.params);

  const int64_t n = opt.seq_len * opt.microbatch_size;
  std::vector<int32_t> tokens(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
  uint64_t x = opt.seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(cfg.vocab));
  }
  for (int64_t i = 0; i < n; ++i)
    targets[static_cast<size_t>(i)] = tokens[static_cast<size_t>((i + 1) % n)];
  st.tok.upload(*st.be, tokens, cfg.vocab, "token");
  st.tgt.upload(*st.be, targets, cfg.vocab, "target");
  st.batch = Batch{st.tok.data(), st.tgt.data(), opt.microbatch_size, opt.seq_len,
                   1.0 / static_cast<double>(n)};
  for (int i = 0; i <= 3 * opt.layers + 1; ++i) st.parts.push_back(Part::from_index(i, opt.layers));
  st.store.emplace(*st.be, opt.precision);
}

PartTimer::~PartTimer() = default;

PartTable PartTimer::pass(Recompute policy) {
  State& st = *s_;
  PartTable acc;
  one_pass(*st.model, st.parts, policy, st.opt.transfer, *st.store, st.batch,
           profile_clock(st.opt.threads), acc);
  PartTable per;
  for (PartKind k : kPartKinds) {
    const bool per_layer = k != PartKind::kEmbed && k != PartKind::kHead;
    const double count = per_layer ? static_cast<double>(st.opt.layers) : 1.0;
    for (Dir d : kPartDirs) per.at(k, d) = acc.at(k, d) / count;
  }
  return per;
}

double PartTimer::qkv_recompute(int repeats) {
  HP_CHECK(repeats >= 1, "PartTimer::qkv_recompute: repeats must be >= 1 (got {})", repeats);
  State& st = *s_;
  Backend& be = *st.be;
  const PartDims d = part_dims(st.cfg, st.opt.microbatch_size, st.opt.seq_len, 0, 0);
  const DType c = st.opt.precision.compute;
  const bool weights = st.opt.transfer == TransferMode::kWeights;
  // The input's values do not change the work; zeros keep the GEMM and the rotary finite.
  Buffer in(be, c, d.tokens * (weights ? d.hidden : d.qkv)), qkvr(be, c, d.tokens * d.qkv);
  be.zero(in.data(), in.bytes());
  const ConstDataPtr w = st.params->at(Slot::kWqkv, 1);
  const Clock clock = profile_clock(st.opt.threads);
  std::vector<double> t;
  for (int r = 0; r <= repeats; ++r) {
    be.synchronize();
    const double t0 = clock();
    if (weights)
      attn_qkv(be, d, in.ptr(), w, {}, qkvr.ptr());
    else
      attn_qkv(be, d, {}, {}, in.ptr(), qkvr.ptr());
    be.synchronize();
    if (r > 0) t.push_back(clock() - t0);
  }
  return median(t);
}

PartProfile profile_parts(const ModelConfig& cfg, const ProfileOptions& opt) {
  HP_CHECK(opt.repeats >= 1, "profile: --repeats must be >= 1 (got {})", opt.repeats);
  HP_CHECK(opt.warmup >= 0, "profile: --warmup must be >= 0 (got {})", opt.warmup);
  PartTimer timer(cfg, opt);
  std::map<std::pair<PartKind, Dir>, std::vector<double>> samples;
  std::vector<double> attn_extra;
  for (int r = 0; r < opt.warmup + opt.repeats; ++r) {
    const PartTable none = timer.pass(Recompute::kNone);
    if (r >= opt.warmup)
      for (PartKind k : kPartKinds)
        for (Dir d : kPartDirs) samples[{k, d}].push_back(none.at(k, d));
    if (opt.measure_attn_recompute && r >= opt.warmup) attn_extra.push_back(timer.qkv_recompute());
  }

  PartProfile out;
  for (const auto& [key, s] : samples) {
    const auto [k, d] = key;
    out.time.at(k, d) = median(s);
    const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
    out.spread.at(k, d) = out.time.at(k, d) > 0 ? (*hi - *lo) / out.time.at(k, d) : 0;
  }
  out.attn_recompute_f = attn_extra.empty() ? 0.0 : median(attn_extra);
  const PostGemmShares shares = post_gemm_shares(cfg);
  out.post_gate_up_f = shares.gate_up * out.time.at(PartKind::kPost, Dir::kF);
  out.post_down_f = shares.down * out.time.at(PartKind::kPost, Dir::kF);

  out.message_bytes =
      opt.seq_len * opt.microbatch_size * cfg.hidden * dtype_bytes(opt.precision.compute);
  if (opt.link_latency_s >= 0 && opt.link_bandwidth_Bps > 0) {
    out.link_latency_s = opt.link_latency_s;
    out.link_bandwidth_Bps = opt.link_bandwidth_Bps;
    out.link_source = "given";
  } else {
    HP_CHECK(opt.link_latency_s < 0 && opt.link_bandwidth_Bps < 0,
             "profile: give both --link-latency and --link-bandwidth, or neither");
    out.link_latency_s = memcpy_seconds(64, 50);
    const double t = memcpy_seconds(out.message_bytes, 10);
    out.link_bandwidth_Bps = static_cast<double>(out.message_bytes) / std::max(t, 1e-9);
    out.link_source = "memcpy (in-process fallback)";
  }
  out.blas_core = blas_core_name();
  out.threads = opt.threads;
  return out;
}

StepCheck check_step(const ModelConfig& cfg, const ProfileOptions& opt, const PartProfile& parts,
                     int microbatches) {
  HP_CHECK(microbatches >= 1, "profile: --step-microbatches must be >= 1 (got {})", microbatches);
  cfg.validate();
  auto be = make_cpu_backend(opt.threads);
  Params params(cfg, Params::all_parts(cfg), *be, opt.precision);
  params.init(opt.seed);
  Model model(params);
  const int64_t n = opt.seq_len * opt.microbatch_size * microbatches;
  std::vector<int32_t> tokens(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % cfg.vocab);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 5) % cfg.vocab);
  }
  StepOptions so;
  so.recompute = Recompute::kNone;
  so.transfer = opt.transfer;
  TokenBuffer tok, tgt;
  tok.upload(*be, tokens, cfg.vocab, "token");
  tgt.upload(*be, targets, cfg.vocab, "target");
  std::vector<double> t;
  ValueStore store(*be, opt.precision);
  for (int r = 0; r < 1 + opt.repeats; ++r) {
    store.clear();
    store.reset_peaks();
    const Clock clock = profile_clock(opt.threads);
    const double t0 = clock();
    const double loss = loss_and_grads(model, tok.data(), tgt.data(), opt.microbatch_size,
                                       opt.seq_len, microbatches, so, &store);
    const double s = clock() - t0;
    HP_CHECK(loss > 0, "profile: step loss {} is not positive", loss);
    if (r > 0) t.push_back(s);
  }
  StepCheck out;
  out.microbatches = microbatches;
  out.layers = static_cast<int>(cfg.layers);
  out.measured_s = median(t);
  out.peak_store_bytes = store.peak_bytes();
  double per_mb = 0;
  for (PartKind k : kPartKinds) {
    const bool per_layer = k != PartKind::kEmbed && k != PartKind::kHead;
    per_mb += (per_layer ? static_cast<double>(cfg.layers) : 1.0) * parts.time.total(k);
  }
  out.predicted_s = microbatches * per_mb;
  return out;
}

std::optional<PartProfile> profile_launch(Comm* world, const ModelConfig& cfg, ProfileOptions opt) {
  std::optional<LinkEstimate> link;
  if (world != nullptr && world->size() >= 2 && opt.link_latency_s < 0 &&
      opt.link_bandwidth_Bps < 0) {
    const int64_t message =
        opt.microbatch_size * opt.seq_len * cfg.hidden * dtype_bytes(opt.precision.compute);
    link = measure_link(*world, message, 20);
    opt.link_latency_s = link->latency_s;
    opt.link_bandwidth_Bps = link->bandwidth_Bps;
  }
  PartProfile p = profile_parts(cfg, opt);
  if (world != nullptr && world->rank() != 0) return std::nullopt;
  if (link)
    p.link_source = fmt::format("MPI ping-pong, ranks 0 and 1 of {}, median of {}", world->size(),
                                link->repeats);
  return p;
}

nlohmann::json profile_report_json(const ModelConfig& cfg, const ProfileOptions& opt,
                                   const PartProfile& p, const std::optional<StepCheck>& step) {
  nlohmann::json meta = {{"model", cfg.name},         {"hidden", cfg.hidden},
                         {"layers_timed", opt.layers}, {"seq_len", opt.seq_len},
                         {"microbatch_size", opt.microbatch_size},
                         {"threads", p.threads},      {"blas_core", p.blas_core},
                         {"repeats", opt.repeats},    {"link_source", p.link_source},
                         {"transfer", transfer_str(opt.transfer)},
                         {"precision", opt.precision.name()}};
  if (step)
    meta["step"] = {{"microbatches", step->microbatches}, {"layers", step->layers},
                    {"measured_s", step->measured_s}, {"predicted_s", step->predicted_s},
                    {"peak_store_bytes", step->peak_store_bytes}};
  return {{"part_costs", p.to_json()}, {"info", meta}};
}

}  // namespace hp

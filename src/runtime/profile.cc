// Part-cost profiling: see profile.h. Each timed pass runs every part of a small model as its own
// op (F in model order, then I and W of each part in reverse order), so each measured time
// is exactly one (part, direction) as the simulator charges it. What attention's I adds under
// no-attn (rebuilding its QKV and rotary) is timed on its own: as the difference of two whole
// attention backwards it drowned in their noise at long sequences.
#include "runtime/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iterator>
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
#include "runtime/tp_group.h"
#include "sim/cost_model.h"
#include "sim/parallel.h"
#include "util/error.h"
#include "util/human_units.h"
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

// Times one op; returns seconds. With a group, adds the op's collectives to `coll` (cell k, d).
double timed_run(Model& model, const ComputeOp& op, Recompute policy, TransferMode transfer,
                 ValueStore& store, const Batch& b, Clock clock, TpGroup* tp,
                 PartTimer::Collectives& coll, PartKind k, Dir d) {
  const auto ctx = local_contexts(op, policy, transfer);
  const size_t seen = tp ? tp->stats().each.size() : 0;
  model.backend().synchronize();
  const double t0 = clock();
  model.run(op, ctx, store, b);
  model.backend().synchronize();  // a device backend only queues the op's kernels
  const double t = clock() - t0;
  if (tp)
    for (size_t i = seen; i < tp->stats().each.size(); ++i) {
      const double c = tp->stats().each[i];
      coll.seconds.at(k, d) += c;
      coll.count.at(k, d) += 1;
      coll.each.push_back(c);
      coll.each_bytes.push_back(tp->stats().each_bytes[i]);
    }
  return t;
}

ComputeOp single(Dir dir, Part p, Recompute policy) {
  ComputeOp op;
  op.dir = dir;
  op.mb = 0;
  op.parts = {p};
  op.recompute = recompute_parts(op, policy);
  return op;
}

// One pass: F, I, W of every part on its own. `acc` becomes the per-kind sums, `coll` what the
// group's collectives took in them.
void one_pass(Model& model, const std::vector<Part>& parts, Recompute policy, TransferMode transfer,
              ValueStore& store, const Batch& b, Clock clock, TpGroup* tp, PartTable& acc,
              PartTimer::Collectives& coll) {
  acc = PartTable{};
  coll = PartTimer::Collectives{};
  store.clear();
  auto run = [&](Dir d, const Part& p) {
    acc.at(p.kind, d) += timed_run(model, single(d, p, policy), policy, transfer, store, b, clock,
                                   tp, coll, p.kind, d);
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
  if (tensor_parallel > 1)
    j["tensor_parallel"] = {{"size", tensor_parallel}, {"collective_s", collective_s}};
  return j;
}

struct PartTimer::State {
  ProfileOptions opt;
  ModelConfig cfg;
  std::unique_ptr<Backend> be;
  std::unique_ptr<CommTpGroup> tp;  // before the model that calls it
  std::optional<Params> params;
  std::optional<Model> model;
  TokenBuffer tok, tgt;
  Batch batch;
  std::vector<Part> parts;
  std::optional<ValueStore> store;
  Collectives coll;  // of the last pass
  Clock clock = nullptr;
};

PartTimer::PartTimer(const ModelConfig& cfg_in, const ProfileOptions& opt, Comm* tensor)
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
  if (tensor && tensor->size() > 1) st.tp = std::make_unique<CommTpGroup>(*tensor, *st.be);
  st.clock = st.tp ? now_seconds : profile_clock(opt.threads);
  st.params.emplace(cfg, Params::all_parts(cfg), *st.be, opt.precision,
                    st.tp ? st.tp->shard() : TpShard{});
  st.params->init(opt.seed);
  st.model.emplace(*st.params, ModelOptions{}, st.tp.get());

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
  one_pass(*st.model, st.parts, policy, st.opt.transfer, *st.store, st.batch, st.clock, st.tp.get(),
           acc, st.coll);
  PartTable per;
  for (PartKind k : kPartKinds) {
    const bool per_layer = k != PartKind::kEmbed && k != PartKind::kHead;
    const double count = per_layer ? static_cast<double>(st.opt.layers) : 1.0;
    for (Dir d : kPartDirs) {
      per.at(k, d) = acc.at(k, d) / count;
      st.coll.seconds.at(k, d) /= count;
      st.coll.count.at(k, d) /= count;
    }
  }
  return per;
}

const PartTimer::Collectives& PartTimer::last_collectives() const { return s_->coll; }

double PartTimer::qkv_recompute(int repeats) {
  HP_CHECK(repeats >= 1, "PartTimer::qkv_recompute: repeats must be >= 1 (got {})", repeats);
  State& st = *s_;
  Backend& be = *st.be;
  const PartDims d = part_dims(st.cfg, st.opt.microbatch_size, st.opt.seq_len, 0, 0, st.tp.get());
  const DType c = st.opt.precision.compute;
  const bool weights = st.opt.transfer == TransferMode::kWeights;
  // The input's values do not change the work; zeros keep the GEMM and the rotary finite. With a
  // group, A is this rank's rows (gathered inside attn_qkv) and QKV all rows of its heads.
  Buffer in(be, c, weights ? d.rows * d.hidden : d.tokens * d.qkv), qkvr(be, c, d.tokens * d.qkv);
  be.zero(in.data(), in.bytes());
  const ConstDataPtr w = st.params->at(Slot::kWqkv, 1);
  std::vector<double> t;
  for (int r = 0; r <= repeats; ++r) {
    const double coll0 = st.tp ? st.tp->stats().seconds : 0.0;
    be.synchronize();
    const double t0 = st.clock();
    if (weights)
      attn_qkv(be, d, in.ptr(), w, {}, qkvr.ptr());
    else
      attn_qkv(be, d, {}, {}, in.ptr(), qkvr.ptr());
    be.synchronize();
    const double coll = st.tp ? st.tp->stats().seconds - coll0 : 0.0;
    if (r > 0) t.push_back(std::max(0.0, st.clock() - t0 - coll));
  }
  return median(t);
}

PartProfile profile_parts(const ModelConfig& cfg, const ProfileOptions& opt, Comm* tensor) {
  HP_CHECK(opt.repeats >= 1, "profile: --repeats must be >= 1 (got {})", opt.repeats);
  HP_CHECK(opt.warmup >= 0, "profile: --warmup must be >= 0 (got {})", opt.warmup);
  const int T = opt.tensor_parallel;
  HP_CHECK(T >= 1, "profile: --tensor-parallel must be >= 1 (got {})", T);
  HP_CHECK(T == 1 || (tensor != nullptr && tensor->size() == T),
           "profile: --tensor-parallel={} needs a group of {} ranks (got {})", T, T,
           tensor ? tensor->size() : 1);
  PartTimer timer(cfg, opt, T > 1 ? tensor : nullptr);
  std::map<std::pair<PartKind, Dir>, std::vector<double>> samples;
  std::vector<double> attn_extra, each;
  std::vector<int64_t> each_bytes;
  PartTable counts;
  for (int r = 0; r < opt.warmup + opt.repeats; ++r) {
    const PartTable none = timer.pass(Recompute::kNone);
    const PartTimer::Collectives& coll = timer.last_collectives();
    if (r >= opt.warmup) {
      // A part's compute: its time less the seconds inside its collectives.
      for (PartKind k : kPartKinds)
        for (Dir d : kPartDirs)
          samples[{k, d}].push_back(std::max(0.0, none.at(k, d) - coll.seconds.at(k, d)));
      each.insert(each.end(), coll.each.begin(), coll.each.end());
      each_bytes.insert(each_bytes.end(), coll.each_bytes.begin(), coll.each_bytes.end());
      counts = coll.count;
    }
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
  if (T > 1) {
    // The group runs at its slowest rank: each cell (and the QKV rebuild) is the largest of the
    // ranks' medians. Each collective's transfer is the shortest of the ranks' times for it.
    const size_t cells = 2 * std::size(kPartKinds) * std::size(kPartDirs) + 1;
    const size_t n = each.size(), me = static_cast<size_t>(tensor->rank());
    std::vector<double> all(static_cast<size_t>(T) * (cells + n) + 1, 0.0);
    all.back() = static_cast<double>(n);
    tensor->allreduce_sum(&all.back(), 1);
    HP_CHECK(all.back() == static_cast<double>(n) * T,
             "profile: the ranks of the group ran different numbers of collectives");
    double* mine = &all[me * (cells + n)];
    size_t i = 0;
    for (PartKind k : kPartKinds)
      for (Dir d : kPartDirs) {
        mine[i++] = out.time.at(k, d);
        mine[i++] = out.spread.at(k, d);
      }
    mine[i++] = out.attn_recompute_f;
    std::copy(each.begin(), each.end(), mine + cells);
    tensor->allreduce_sum(all.data(), static_cast<int64_t>(all.size() - 1));
    for (int q = 0; q < T; ++q) {
      const double* theirs = &all[static_cast<size_t>(q) * (cells + n)];
      size_t j = 0;
      for (PartKind k : kPartKinds)
        for (Dir d : kPartDirs) {
          if (theirs[j] > out.time.at(k, d)) {
            out.time.at(k, d) = theirs[j];
            out.spread.at(k, d) = theirs[j + 1];
          }
          j += 2;
        }
      out.attn_recompute_f = std::max(out.attn_recompute_f, theirs[j]);
      for (size_t c = 0; c < n; ++c) each[c] = std::min(each[c], theirs[cells + c]);
    }
    // The collectives of one N x h activation: a rank sends (T-1)/T of it.
    const int64_t full = opt.seq_len * opt.microbatch_size / T * cfg.hidden * (T - 1) *
                         dtype_bytes(opt.precision.compute);
    std::vector<double> activation;
    for (size_t c = 0; c < n; ++c)
      if (each_bytes[c] == full) activation.push_back(each[c]);
    HP_CHECK(!activation.empty(),
             "profile: a group of {} ran no all-gather or reduce-scatter of "
             "the {} x {} activation",
             T, opt.seq_len * opt.microbatch_size, cfg.hidden);
    out.tensor_parallel = T;
    out.collective_s = median(activation);
    out.collectives = counts;
  }
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
  const int T = opt.tensor_parallel;
  std::optional<GridComms> grid;
  if (T > 1) {
    HP_CHECK(world != nullptr && world->size() % T == 0,
             "profile: --tensor-parallel={} times each rank's shard of the parts with the group's "
             "collectives, so it runs under mpirun with a multiple of {} ranks (started: {}); use "
             "mpirun -np {} helixpipe profile ...",
             T, T, world ? world->size() : 1, T);
    grid.emplace(split_grid(*world, world->size() / T, 1, T));
  }
  PartProfile p = profile_parts(cfg, opt, grid ? grid->tensor.get() : nullptr);
  if (world != nullptr && world->rank() != 0) return std::nullopt;
  if (link)
    p.link_source = fmt::format("MPI ping-pong, ranks 0 and 1 of {}, median of {}", world->size(),
                                link->repeats);
  return p;
}

nlohmann::json profile_report_json(const ModelConfig& cfg, const ProfileOptions& opt,
                                   const PartProfile& p, const std::optional<StepCheck>& step) {
  nlohmann::json meta = {{"model", cfg.name},
                         {"hidden", cfg.hidden},
                         {"layers_timed", opt.layers},
                         {"seq_len", opt.seq_len},
                         {"microbatch_size", opt.microbatch_size},
                         {"threads", p.threads},
                         {"blas_core", p.blas_core},
                         {"repeats", opt.repeats},
                         {"link_source", p.link_source},
                         {"transfer", transfer_str(opt.transfer)},
                         {"precision", opt.precision.name()},
                         {"tensor_parallel", p.tensor_parallel}};
  if (p.tensor_parallel > 1) {
    nlohmann::json counts;
    for (PartKind k : kPartKinds)
      for (Dir d : kPartDirs) counts[part_kind_str(k)][dir_str(d)] = p.collectives.at(k, d);
    meta["collectives_per_part"] = counts;
  }
  if (step)
    meta["step"] = {{"microbatches", step->microbatches}, {"layers", step->layers},
                    {"measured_s", step->measured_s}, {"predicted_s", step->predicted_s},
                    {"peak_store_bytes", step->peak_store_bytes}};
  return {{"part_costs", p.to_json()}, {"info", meta}};
}

std::string profile_report_text(const ModelConfig& cfg, const ProfileOptions& opt,
                                const PartProfile& p, const std::optional<StepCheck>& step) {
  std::string text;
  auto out = std::back_inserter(text);
  fmt::format_to(out,
                 "profile   model={} h={} heads={} s={} b={} threads={} BLAS core={} transfer={} "
                 "precision={}\n",
                 cfg.name, cfg.hidden, cfg.heads, opt.seq_len, opt.microbatch_size, p.threads,
                 p.blas_core, transfer_str(opt.transfer), opt.precision.name());
  fmt::format_to(out, "          median of {} passes after {} warm-up, {} layer(s) timed\n",
                 opt.repeats, opt.warmup, opt.layers);
  if (p.tensor_parallel > 1)
    fmt::format_to(
        out,
        "          one rank of a tensor-parallel group of {}: compute per part below (the\n"
        "          slowest rank's), the group's collectives apart\n",
        p.tensor_parallel);
  fmt::format_to(out, "\n");
  fmt::format_to(out, "{:>6} {:>12} {:>12} {:>12}   spread F/I/W (max-min)/median\n", "part", "F",
                 "I", "W");
  for (PartKind k : kPartKinds) {
    auto t = [&](Dir d) { return human_seconds(p.time.at(k, d)); };
    auto sp = [&](Dir d) { return 100 * p.spread.at(k, d); };
    fmt::format_to(out, "{:>6} {:>12} {:>12} {:>12}   {:.0f}% / {:.0f}% / {:.0f}%\n",
                   part_kind_str(k), t(Dir::kF), t(Dir::kI), t(Dir::kW), sp(Dir::kF), sp(Dir::kI),
                   sp(Dir::kW));
  }
  fmt::format_to(out, "\nattn recompute F (no-attn) {}\n", human_seconds(p.attn_recompute_f));
  fmt::format_to(out,
                 "post gate+up F {}, down F {} (post F by GEMM FLOPs: a recomputed post's backward "
                 "redoes the first when G and U were not kept; a recompute nothing reads skips the "
                 "second)\n",
                 human_seconds(p.post_gate_up_f), human_seconds(p.post_down_f));
  fmt::format_to(out, "link      latency {} bandwidth {:.2f} GB/s  ({}; message {})\n",
                 human_seconds(p.link_latency_s), p.link_bandwidth_Bps / 1e9, p.link_source,
                 human_bytes(static_cast<double>(p.message_bytes)));
  if (p.tensor_parallel > 1) {
    // Beside the measured collective, what the simulator's link model would charge for it on the
    // link above (tp_collective_time: what plan and bench charge without a measured group).
    const double act = static_cast<double>(opt.seq_len * opt.microbatch_size * cfg.hidden) *
                       dtype_bytes(opt.precision.compute);
    const double modelled = tp_collective_time(act, p.tensor_parallel,
                                               LinkProfile{p.link_latency_s, p.link_bandwidth_Bps});
    fmt::format_to(
        out,
        "collective {} per all-gather or reduce-scatter of {} (the group's shortest time, "
        "median of the profile's of that size); the link model on the link above: {} ({:+.1f}%)\n",
        human_seconds(p.collective_s), human_bytes(act), human_seconds(modelled),
        100 * (modelled - p.collective_s) / p.collective_s);
    fmt::format_to(out, "          per micro-batch and part, F/I/W:");
    for (PartKind k : kPartKinds)
      fmt::format_to(out, " {} {:g}/{:g}/{:g}", part_kind_str(k), p.collectives.at(k, Dir::kF),
                     p.collectives.at(k, Dir::kI), p.collectives.at(k, Dir::kW));
    fmt::format_to(out, " (the simulator charges F/I/W: ");
    for (PartKind k : kPartKinds)
      fmt::format_to(out, "{}{} {}/{}/{}", k == PartKind::kEmbed ? "" : " ", part_kind_str(k),
                     tp_collectives(k, Dir::kF), tp_collectives(k, Dir::kI),
                     tp_collectives(k, Dir::kW));
    fmt::format_to(out, ")\n");
  }
  if (step)
    fmt::format_to(
        out,
        "step      P=1, {} layers, {} micro-batches: measured {}, predicted from parts {} "
        "({:+.1f}%), peak store {}\n",
        step->layers, step->microbatches, human_seconds(step->measured_s),
        human_seconds(step->predicted_s),
        100 * (step->predicted_s - step->measured_s) / step->measured_s,
        human_bytes(static_cast<double>(step->peak_store_bytes)));
  return text;
}

}  // namespace hp

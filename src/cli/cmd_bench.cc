// helixpipe bench: measured pipeline steps of several schedules on P ranks, with tokens/s, ratio to
// 1F1B, bubble fraction, communication wait and peak memory per stage, and next to each row the
// simulator's prediction from a part-cost file (helixpipe profile): iteration time, bubble and
// peak stash, predicted beside measured.
//
// Under mpirun the ranks are MPI processes (MpiComm, one per stage, each bound to its core by
// mpirun); otherwise they are threads of this process (LocalWorld, in-memory messages). Either way
// every rank runs the same StageExecutor the trainer uses.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "cli/train_cli.h"
#include "comm/local_comm.h"
#include "comm/mpi_comm.h"
#include "kernels/cpu_kernels.h"
#include "runtime/pipeline_bench.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "sim/timeline.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp::cli {

namespace {

struct Variant {
  std::string key, label, name;
  int folds;
};

// In table order; --schedules picks by key.
const std::vector<Variant> kVariants = {{"1f1b", "1f1b", "1f1b", 1},
                                        {"gpipe", "gpipe", "gpipe", 1},
                                        {"zb1p", "zb1p", "zb1p", 1},
                                        {"interleaved", "interleaved", "interleaved", 1},
                                        {"helix1", "helix F=1", "helix", 1},
                                        {"helix2", "helix F=2", "helix", 2}};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string per_stage_mib(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i)
    out += fmt::format("{}{:.1f}", i ? "/" : "", static_cast<double>(v[i]) / 1048576.0);
  return out;
}

// bench's flags (see add_bench_flags).
struct BenchFlags {
  std::string model, part_costs, recompute = "natural", out_path, timeline_path,
      precision = "fp32", timeline_label = "helix F=2", schedules = "1f1b,gpipe,zb1p,helix1,helix2",
      trace_dir;
  int64_t seq_len = 0;
  int stages = 2, microbatches = 4, threads = 1, steps = 1, virtual_stages = 2;
  int data_parallel = 1, tensor_parallel = 1;
  int grid() const { return data_parallel * tensor_parallel; }  // ranks per stage
  bool calibrate = true;
};

// hp::Error for flags that cannot run; `ranks` is mpirun's world size (0 without mpirun).
void check_bench_flags(const BenchFlags& f, int ranks) {
  HP_CHECK(f.stages >= 1 && f.microbatches >= 1 && f.steps >= 1 && f.threads >= 1 && f.seq_len >= 1 &&
               f.data_parallel >= 1 && f.tensor_parallel >= 1,
           "bench: --stages, --microbatches, --steps, --threads, --seq-len, --data-parallel and "
           "--tensor-parallel must be >= 1");
  const int want = f.stages * f.grid();
  HP_CHECK(ranks == 0 || ranks == want,
           "bench: mpirun started {} ranks but --data-parallel x --stages x --tensor-parallel is "
           "{} x {} x {} = {}; run mpirun -np {} or leave --stages out",
           ranks, f.data_parallel, f.stages, f.tensor_parallel, want, want);
  HP_CHECK(f.timeline_path.empty() || !f.part_costs.empty(),
           "bench: --timeline needs --part-costs (the simulated half of the picture)");
  HP_CHECK(f.timeline_path.empty() || f.grid() == 1,
           "bench: --timeline sets the simulator's pipeline beside the measured one, which needs "
           "one rank per stage; leave out --data-parallel and --tensor-parallel or --timeline");
}

// Deterministic tokens and targets for n positions of a vocabulary of `vocab`.
void bench_tokens(int64_t n, int64_t vocab, std::vector<int32_t>& tokens,
                  std::vector<int32_t>& targets) {
  tokens.resize(static_cast<size_t>(n));
  targets.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 3) % vocab);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 11) % vocab);
  }
}

void print_header(const BenchFlags& f, int layers, const Precision& prec,
                  const std::string& transport) {
  fmt::print("bench  D={} P={} T={} M={} L={} s={} threads/rank={} precision={} BLAS core={} "
             "ranks: {}\n",
             f.data_parallel, f.stages, f.tensor_parallel, f.microbatches, layers, f.seq_len,
             f.threads, prec.name(), blas_core_name(), transport);
  fmt::print("{:<11} {:>7} {:>9} {:>7} {:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>9} {:>7} {:>17} "
             "{:>17} {:>17}\n",
             "schedule", "policy", "tokens/s", "vs 1f1b", "bubble", "pred", "comm wait", "step",
             "predicted", "error", "core", "replay", "stash MiB meas", "stash MiB pred",
             "store MiB meas");
}

void print_prediction_legend() {
  fmt::print("predicted: the simulator on the part costs, each stage's compute scaled by 'core'\n"
             "  (its core's part time just before and after the run / the profile's); replay: the "
             "simulator\n"
             "  given each stage's measured compute time, so its error is the schedule, bubble\n"
             "  and communication model alone. stash pred '=': equal to the measured bytes.\n");
}

// The part costs for the predictions, with the stash and messages sized in `prec`.
CostSetup bench_cost(const BenchFlags& f, const Precision& prec) {
  CostSpec cf;
  cf.part_costs = f.part_costs;
  cf.model = f.model;
  cf.seq_len = f.seq_len;
  CostSetup cost = build_cost(cf);
  cost.elem_bytes = elem_bytes(prec);
  return cost;
}

std::vector<const Variant*> pick_variants(const std::string& schedules) {
  std::vector<const Variant*> variants;
  for (const std::string& key : split_list(schedules)) {
    auto it = std::find_if(kVariants.begin(), kVariants.end(),
                           [&](const Variant& v) { return v.key == key; });
    HP_CHECK(it != kVariants.end(),
             "bench: unknown schedule '{}' in --schedules; use 1f1b, gpipe, zb1p, interleaved, "
             "helix1 or helix2",
             key);
    variants.push_back(&*it);
  }
  HP_CHECK(!variants.empty(), "bench: --schedules is empty");
  return variants;
}

// --recompute's list: "natural" is each schedule's own policy (nullopt).
std::vector<std::optional<Recompute>> pick_policies(const std::string& recompute) {
  std::vector<std::optional<Recompute>> policies;
  for (const std::string& r : split_list(recompute))
    policies.push_back(r == "natural" ? std::nullopt : std::optional<Recompute>(parse_recompute(r)));
  HP_CHECK(!policies.empty(), "bench: --recompute is empty");
  return policies;
}

// The worst stage's bubble and communication wait, and every stage's peaks.
struct MeasuredSummary {
  double bubble = 0, wait = 0;
  std::vector<int64_t> stash, store;
};
MeasuredSummary summarize(const Measured& m) {
  MeasuredSummary x;
  for (const auto& s : m.stages) {
    x.bubble = std::max(x.bubble, s.bubble_fraction());
    x.wait = std::max(x.wait, s.comm_wait_s);
    x.stash.push_back(s.peak_stash_bytes);
    x.store.push_back(s.peak_bytes);
  }
  return x;
}

// The JSON row of one measured run (--out), before the predictions are added.
nlohmann::json measured_row(const Variant& v, const Schedule& sch, bool natural,
                            const BenchFlags& f, const Measured& m,
                            const MeasuredSummary& ms, double t, double tps, double base) {
  nlohmann::json row = {{"label", v.label},
                        {"schedule", v.name},
                        {"folds", v.folds},
                        {"recompute", recompute_str(sch.recompute)},
                        {"natural_policy", natural},
                        {"seq_len", f.seq_len},
                        {"stages", f.stages},
                        {"data_parallel", f.data_parallel},
                        {"tensor_parallel", f.tensor_parallel},
                        {"microbatches", f.microbatches},
                        {"step_s", t},
                        {"steps_s", m.step_s},
                        {"tokens_per_s", tps},
                        {"vs_1f1b", base > 0 ? tps / base : 0.0},
                        {"bubble_fraction", ms.bubble},
                        {"comm_wait_s", ms.wait},
                        {"peak_stash_bytes", ms.stash},
                        {"peak_store_bytes", ms.store}};
  nlohmann::json st_json = nlohmann::json::array();
  for (const auto& s : m.stages)
    st_json.push_back({{"total_s", s.total_s},
                       {"busy_s", s.busy_s},
                       {"comm_wait_s", s.comm_wait_s},
                       {"peak_stash_bytes", s.peak_stash_bytes},
                       {"peak_bytes", s.peak_bytes}});
  row["stages_measured"] = st_json;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMeasured& r : m.ranks)
    ranks.push_back({{"tp_collectives", r.tp_collectives},
                     {"tp_bytes_sent", r.tp_bytes_sent},
                     {"tp_comm_s", r.tp_seconds},
                     {"tp_transfer_s", r.tp_transfer_s},
                     {"tp_skew_s", r.tp_skew_s},
                     {"peak_store_bytes", r.peak_store_bytes},
                     {"param_bytes", r.param_bytes}});
  row["ranks_measured"] = ranks;
  return row;
}

// Memory per rank (weights, gradients and the peak of the value store) and, with tensor
// parallelism, the group's collectives: the slowest rank's measured time inside them beside the
// simulator's link model for the same collectives and bytes (sim/parallel.h tp_group_time).
void print_rank_lines(nlohmann::json& row, const BenchFlags& f, const Measured& m,
                      const std::optional<CostSetup>& cost) {
  int64_t mem = 0;
  const RankMeasured* busiest = &m.ranks.front();
  for (const RankMeasured& r : m.ranks) {
    mem = std::max(mem, r.param_bytes + r.peak_store_bytes);
    if (r.tp_seconds > busiest->tp_seconds) busiest = &r;
  }
  row["peak_rank_bytes"] = mem;
  std::string line = fmt::format("  per rank: weights+grads+store up to {:.1f} MiB",
                                 static_cast<double>(mem) / 1048576.0);
  if (f.tensor_parallel > 1) {
    line += fmt::format("\n  tensor-parallel: {} collectives, {:.1f} MiB sent, {} inside them = "
                        "{} transfer + {} waiting for the group",
                        busiest->tp_collectives,
                        static_cast<double>(busiest->tp_bytes_sent) / 1048576.0,
                        human_seconds(busiest->tp_seconds), human_seconds(busiest->tp_transfer_s),
                        human_seconds(busiest->tp_skew_s));
    // The simulator's charge for the counted collectives, on the link the group's own
    // collectives showed when timed alone, and on the profile's ping-pong link.
    const double pred = tp_group_time(busiest->tp_collectives, busiest->tp_bytes_sent,
                                      f.tensor_parallel, m.tp_link);
    row["tp_comm_s"] = busiest->tp_seconds;
    row["tp_transfer_s"] = busiest->tp_transfer_s;
    row["tp_comm_pred_s"] = pred;
    row["tp_link"] = {{"latency_s", m.tp_link.latency_s}, {"bandwidth_Bps", m.tp_link.bandwidth_Bps}};
    line += fmt::format("\n  link model {} ({:+.1f}% of the transfer; group link {} + {:.2f} GB/s",
                        human_seconds(pred),
                        100 * (pred - busiest->tp_transfer_s) / busiest->tp_transfer_s,
                        human_seconds(m.tp_link.latency_s), m.tp_link.bandwidth_Bps / 1e9);
    if (cost) {
      const double pp = tp_group_time(busiest->tp_collectives, busiest->tp_bytes_sent,
                                      f.tensor_parallel, cost->cost.link(0, 0));
      row["tp_comm_pred_pingpong_s"] = pp;
      line += fmt::format("; on the profile's ping-pong link {}", human_seconds(pp));
    }
    line += ")";
  }
  fmt::print("{}\n", line);
}

// The printed prediction columns of one row ("-" without part costs).
struct RowText {
  std::string pred = "-", err = "-", pmem = "-", pbub = "-", rerr = "-", cal = "-";
};

// The simulator's prediction for one measured run (step `t` seconds, per-stage stash `stash`),
// added to `row`: each stage's compute scaled by its cores' calibration, and a replay given each
// stage's measured busy time, so that what is left of the error is the schedule, bubble and
// communication model alone. With `measured_tl`, writes the side-by-side timeline.
RowText add_prediction(nlohmann::json& row, const ScheduleSpec& spec, const CostSetup& cost,
                       const Measured& m, double t, const std::vector<double>& scale,
                       const std::vector<double>& before, const std::vector<double>& after,
                       const std::vector<int64_t>& stash, const std::string& label,
                       const Timeline* measured_tl, const std::string& timeline_path) {
  RowText x;
  SimRun sr = simulate_spec(spec, cost, measured_tl != nullptr, scale);
  std::vector<int64_t> pm;
  std::vector<double> pbusy;
  for (const auto& s : sr.result.stages) {
    pm.push_back(s.peak_activation_bytes);
    pbusy.push_back(s.busy);
  }
  row["predicted_busy_s"] = pbusy;
  row["stage_time_scale"] = scale;
  row["core_before"] = before;
  row["core_after"] = after;
  std::vector<double> replay_scale;
  for (size_t q = 0; q < m.stages.size(); ++q) {
    const double unscaled = pbusy[q] / (scale.empty() ? 1.0 : scale[q]);
    replay_scale.push_back(unscaled > 0 ? m.stages[q].busy_s / unscaled : 1.0);
  }
  const double replay = simulate_spec(spec, cost, false, replay_scale).result.makespan;
  row["replay_step_s"] = replay;
  x.rerr = fmt::format("{:+.1f}%", 100 * (replay - t) / t);
  if (!scale.empty()) {
    x.cal.clear();
    for (size_t q = 0; q < scale.size(); ++q) x.cal += fmt::format("{}{:.2f}", q ? "/" : "", scale[q]);
  }
  row["predicted_step_s"] = sr.result.makespan;
  row["predicted_bubble_fraction"] = sr.result.bubble_fraction;
  row["predicted_peak_stash_bytes"] = pm;
  row["stash_exact"] = pm == stash;
  x.pred = human_seconds(sr.result.makespan);
  x.err = fmt::format("{:+.1f}%", 100 * (sr.result.makespan - t) / t);
  x.pbub = fmt::format("{:.1f}%", 100 * sr.result.bubble_fraction);
  x.pmem = per_stage_mib(pm) + (pm == stash ? " =" : " !");
  if (measured_tl) {
    sr.result.timeline.title = "simulated: " + label;
    write_file_atomic(timeline_path, render_side_by_side(sr.result.timeline, *measured_tl));
  }
  return x;
}

}  // namespace


// Adds bench's flags to `app`; returns --stages (under mpirun it defaults to the ranks).
CLI::Option* add_bench_flags(CLI::App& app, BenchFlags& f) {
  app.footer(
      "Under mpirun (-np P) every stage is its own MPI process; mpirun binds each to a core.\n"
      "Without mpirun the P ranks are threads of this process (in-memory messages); give the\n"
      "machine P free cores. Each kernel set runs --threads threads. Times are the median of\n"
      "--steps steps after one warm-up step (per step: the slowest stage's wall time).\n"
      "Memory: the stash (values kept for a backward) is predicted exactly by the validator and\n"
      "shown predicted beside measured; 'store' adds the in-flight values (inputs and outputs\n"
      "of the running op, message buffers), measured only.\n"
      "Benchmark machines are noisy: unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, keep the\n"
      "cores otherwise idle, and compare ratios measured in one run.\n\n"
      "example:\n"
      "  mpirun -np 2 helixpipe profile --model=m.json --seq-len=4096 --out=c.json\n"
      "  mpirun -np 2 helixpipe bench --model=m.json --seq-len=4096 --microbatches=4 \\\n"
      "      --recompute=natural,no-attn --part-costs=c.json --timeline=helix.svg --out=b.json");
  app.add_option("--model", f.model, "model preset or JSON file")->required();
  app.add_option("--seq-len", f.seq_len, "tokens per sequence (micro-batch = 1 sequence)")->required();
  CLI::Option* stages_opt = app.add_option("--stages", f.stages, "pipeline ranks P (under mpirun: -np)")
                         ->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "micro-batches per step M")->capture_default_str();
  app.add_option("--threads", f.threads, "kernel threads per rank")->capture_default_str();
  app.add_option("--steps", f.steps, "timed steps (after one warm-up)")->capture_default_str();
  app.add_option("--schedules", f.schedules,
                 "comma list of 1f1b, gpipe, zb1p, interleaved, helix1, helix2 (helix F=1, F=2)")
      ->capture_default_str();
  app.add_option("--virtual", f.virtual_stages, "virtual stages V of interleaved")->capture_default_str();
  app.add_option("--data-parallel", f.data_parallel,
                 "replicas D, each running the schedule on its own M micro-batches")
      ->capture_default_str();
  app.add_option("--tensor-parallel", f.tensor_parallel,
                 "tensor-parallel ranks T per stage (with sequence parallelism; "
                 "docs/tensor-parallel.md); the job has D x P x T ranks")
      ->capture_default_str();
  add_precision_flag(app, f.precision);
  app.add_option("--recompute", f.recompute,
                 "comma list of policies, each run for every schedule: natural (each schedule's\n"
                 "own: helix no-attn, the others none), none, full, no-attn. A run equal to an\n"
                 "earlier one is skipped")
      ->capture_default_str();
  app.add_option("--part-costs", f.part_costs, "part-cost JSON for the predictions (helixpipe profile)");
  app.add_option("--timeline", f.timeline_path,
                 "SVG: simulated (top) and measured (bottom) timeline of --timeline-label "
                 "(its first policy)");
  app.add_option("--timeline-label", f.timeline_label, "which schedule the timeline shows")
      ->capture_default_str();
  app.add_flag("--calibrate,!--no-calibrate", f.calibrate,
               "with --part-costs: time the parts once on every rank before and after each run\n"
               "and scale each stage's predicted compute by its core's mean speed then against\n"
               "the profile")
      ->capture_default_str();
  app.add_option("--trace-dir", f.trace_dir,
                 "write each run's measured timeline here as a Chrome trace (Perfetto):\n"
                 "trace_<schedule>[_<policy>].json, e.g. trace_helix2.json, trace_1f1b_no-attn.json");
  app.add_option("--out", f.out_path, "write the results as JSON here");
  return stages_opt;
}

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Measure training steps of several schedules on P pipeline ranks and set each beside\n"
               "the simulator's prediction from a measured part-cost file.",
               "helixpipe bench"};
  BenchFlags f;
  CLI::Option* stages_opt = add_bench_flags(app, f);
  if (auto rc = parse_or_exit(app, argc, argv)) return *rc;

  std::unique_ptr<MpiComm> world;
  if (MpiComm::launched_by_mpirun()) {
    world = MpiComm::init_world(&argc, &argv);
    if (stages_opt->count() == 0) f.stages = std::max(1, world->size() / f.grid());
  }
  const bool root = !world || world->rank() == 0;
  try {
    check_bench_flags(f, world ? world->size() : 0);
    if (root) {
      if (!f.out_path.empty()) check_output_file("--out", f.out_path);
      if (!f.timeline_path.empty()) check_output_file("--timeline", f.timeline_path);
      if (!f.trace_dir.empty()) check_output_folder("--trace-dir", f.trace_dir);
    }
    const ModelConfig cfg = ModelConfig::load(f.model);
    check_tensor_parallel(cfg, f.tensor_parallel, f.seq_len);
    const int L = static_cast<int>(cfg.layers);

    const std::vector<const Variant*> variants = pick_variants(f.schedules);
    const std::vector<std::optional<Recompute>> policies = pick_policies(f.recompute);

    const Precision setup_precision = resolve_precision(f.precision, *make_cpu_backend(1));
    std::optional<CostSetup> cost;
    if (!f.part_costs.empty()) cost = bench_cost(f, setup_precision);

    const int64_t n = f.seq_len * f.microbatches;
    std::vector<int32_t> tokens, targets;
    bench_tokens(n, cfg.vocab, tokens, targets);
    BenchSetup setup{cfg, f.seq_len, f.threads, f.steps, setup_precision, &tokens, &targets};
    setup.data_parallel = f.data_parallel;
    setup.tensor_parallel = f.tensor_parallel;
    const std::string transport =
        world ? fmt::format("MPI (mpirun, {} ranks)", world->size())
              : fmt::format("LocalWorld ({} threads of one process)", f.stages * f.grid());
    // The simulator's step prediction and the core calibration model one rank per stage.
    const bool predict_steps = cost && f.grid() == 1;

    nlohmann::json rows = nlohmann::json::array();
    if (root) print_header(f, L, setup.precision, transport);
    std::set<std::pair<std::string, int>> done;  // (schedule label, policy) already measured
    std::map<size_t, double> base_tps;           // --recompute entry -> its 1f1b tokens/s
    bool timeline_written = false;
    for (size_t pi = 0; pi < policies.size(); ++pi) {
      const std::optional<Recompute>& policy = policies[pi];
      for (const Variant* v : variants) {
        ScheduleSpec spec{v->name,   f.stages, f.microbatches, L, v->folds,
                          v->name == "interleaved" ? f.virtual_stages : 1, policy,
                          TransferMode::kWeights};
        Schedule sch;
        try {
          sch = generate(spec);
        } catch (const Error& e) {
          if (root) fmt::print("{:<11} skipped: {}\n", v->label, e.what());
          continue;
        }
        const int pol = static_cast<int>(sch.recompute);
        if (!done.insert({v->label, pol}).second) continue;
        lower(sch, &cfg, f.seq_len);
        const bool want_tl = !f.timeline_path.empty() && !timeline_written && v->label == f.timeline_label;
        const bool record = want_tl || !f.trace_dir.empty();
        CalibratedRun run = measure_calibrated(
            world.get(), sch, setup, predict_steps && f.calibrate ? &cost->cost : nullptr, record);
        if (!root) continue;
        Measured& m = run.m;
        if (!f.trace_dir.empty()) {
          Timeline tl = m.timeline;
          tl.num_stages = f.stages;
          tl.title = fmt::format("measured: {} ({}, {})", v->label, recompute_str(sch.recompute),
                                 transport);
          write_file_atomic(fmt::format("{}/trace_{}{}.json", f.trace_dir, v->key,
                                        policy ? "_" + std::string(recompute_str(*policy)) : ""),
                            render_chrome_trace(tl));
        }

        const double t = median(m.step_s);
        const double tps = static_cast<double>(n * f.data_parallel) / t;
        if (v->name == "1f1b") base_tps[pi] = tps;
        const double base = base_tps.count(pi) ? base_tps[pi] : 0.0;
        const MeasuredSummary ms = summarize(m);
        nlohmann::json row = measured_row(*v, sch, !policy.has_value(), f, m, ms, t, tps, base);
        const std::vector<int64_t>& stash = ms.stash;
        RowText txt;
        if (predict_steps) {
          std::optional<Timeline> measured_tl;
          if (want_tl) {
            measured_tl = std::move(m.timeline);
            measured_tl->num_stages = f.stages;
            measured_tl->title = "measured: " + v->label + " (" + transport + ")";
          }
          txt = add_prediction(row, spec, *cost, m, t, run.scale, run.before, run.after, stash,
                               v->label,
                               measured_tl ? &*measured_tl : nullptr, f.timeline_path);
          timeline_written = timeline_written || want_tl;
        }
        fmt::print("{:<11} {:>7} {:>9.0f} {:>7} {:>5.1f}% {:>6} {:>9} {:>9} {:>9} {:>7} {:>9} {:>7} {:>17} {:>17} {:>17}\n",
                   v->label, recompute_str(sch.recompute), tps,
                   base > 0 ? fmt::format("{:.3f}", tps / base) : std::string("-"), 100 * ms.bubble,
                   txt.pbub, human_seconds(ms.wait), human_seconds(t), txt.pred, txt.err, txt.cal,
                   txt.rerr, per_stage_mib(stash), txt.pmem, per_stage_mib(ms.store));
        print_rank_lines(row, f, m, cost);
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
    if (root && predict_steps) print_prediction_legend();
    if (root && cost && !predict_steps)
      fmt::print("predicted: the step is not predicted with --data-parallel or --tensor-parallel "
                 "(the\n  part costs are one rank's).\n");
    if (root && f.tensor_parallel > 1)
      fmt::print("tensor-parallel: the slowest rank's time inside the group's collectives (waits "
                 "included),\n  split into the transfer (per collective, the group's shortest time) and waiting for "
                 "the\n  other ranks to arrive; link model: the simulator's charge for them (sim/parallel.h "
                 "tp_group_time) on the\n  link the group's own all-gather + reduce-scatter showed "
                 "when timed alone after the run.\n");
    if (root && !f.out_path.empty()) {
      const nlohmann::json j = {{"version", 2},        {"blas_core", blas_core_name()},
                                {"threads", f.threads}, {"transport", transport},
                                {"precision", setup.precision.name()},
                                {"steps", f.steps},     {"model", cfg.name},
                                {"seq_len", f.seq_len}, {"stages", f.stages},
                                {"data_parallel", f.data_parallel},
                                {"tensor_parallel", f.tensor_parallel},
                                {"microbatches", f.microbatches}, {"rows", rows}};
      write_file_atomic(f.out_path, j.dump(2) + "\n");
    }
    if (world) world->barrier();
  } catch (const std::exception& e) {
    if (world) world->abort(fmt::format("rank {}: error: {}", world->rank(), e.what()));
    throw;
  }
  return 0;
}

}  // namespace hp::cli

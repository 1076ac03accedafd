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
#include "runtime/dist_step.h"
#include "runtime/profile.h"
#include "runtime/timeline_gather.h"
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

// What one variant measured, identical on every rank after the exchange.
struct Measured {
  std::vector<double> step_s;       // per timed step: the slowest stage's wall time
  std::vector<StageStats> stages;   // the last timed step, per stage
  Timeline timeline;                // rank 0 only, when asked: every stage's events
};

struct BenchSetup {
  ModelConfig cfg;
  int64_t seq_len = 0;
  int threads = 1, steps = 1;
  Precision precision = Precision::fp32();
  const std::vector<int32_t>* tokens = nullptr;
  const std::vector<int32_t>* targets = nullptr;
};

// Collective over `world` (P ranks, one stage each): one warm-up step, then `steps` timed steps.
Measured measure(Comm& world, const Schedule& sch, const BenchSetup& b, bool want_timeline) {
  const int P = sch.num_stages;
  GridComms grid = split_grid(world, 1, P);
  auto be = make_cpu_backend(b.threads);
  DistStage st(sch, grid, b.cfg, *be, 1, b.seq_len, ModelOptions{}, b.precision);
  st.params().init(1);
  // Slots: [steps x P] step totals, then [P x 5] the last step's stats; all-reduced as a gather.
  constexpr int kStats = 5;
  std::vector<double> buf(static_cast<size_t>(b.steps * P + kStats * P), 0.0);
  Timeline tl;
  tl.num_stages = P;
  StageStats last;
  for (int r = 0; r <= b.steps; ++r) {
    ExecutorOptions eo;
    if (want_timeline && r == b.steps) eo.timeline = &tl;
    grid.pipeline->barrier();
    eo.time_origin = now_s();
    DistStepResult res = st.loss_and_grads(b.tokens->data(), b.targets->data(), eo);
    if (r > 0) buf[static_cast<size_t>((r - 1) * P + grid.p)] = res.stats.total_s;
    last = res.stats;
  }
  double* s = &buf[static_cast<size_t>(b.steps * P + kStats * grid.p)];
  s[0] = last.total_s;
  s[1] = last.busy_s;
  s[2] = last.comm_wait_s;
  s[3] = static_cast<double>(last.peak_stash_bytes);
  s[4] = static_cast<double>(last.peak_bytes);
  grid.pipeline->allreduce_sum(buf.data(), static_cast<int64_t>(buf.size()));
  if (want_timeline) gather_timeline(*grid.pipeline, tl);

  Measured m;
  for (int r = 0; r < b.steps; ++r) {
    double t = 0;
    for (int q = 0; q < P; ++q) t = std::max(t, buf[static_cast<size_t>(r * P + q)]);
    m.step_s.push_back(t);
  }
  for (int q = 0; q < P; ++q) {
    const double* x = &buf[static_cast<size_t>(b.steps * P + kStats * q)];
    StageStats ss;
    ss.total_s = x[0];
    ss.busy_s = x[1];
    ss.comm_wait_s = x[2];
    ss.peak_stash_bytes = static_cast<int64_t>(x[3]);
    ss.peak_bytes = static_cast<int64_t>(x[4]);
    m.stages.push_back(ss);
  }
  if (want_timeline && grid.p == 0) m.timeline = std::move(tl);
  return m;
}

// Collective over `world`: every rank times one pass of the per-layer parts (pre, attn, post; F, I
// and W) on its own core at once, as the pipeline will load them, and divides by the same sum
// from the part-cost file. Returns every rank's factor (> 1: this core runs slower now than the
// profile measured), which the predictions use as per-stage compute scales.
std::vector<double> calibrate(Comm& world, const BenchSetup& b, const CostModel& cost) {
  ProfileOptions po;
  po.seq_len = b.seq_len;
  po.threads = b.threads;
  po.precision = b.precision;
  po.warmup = 1;
  po.repeats = 1;
  po.layers = 1;
  po.measure_attn_recompute = false;  // only F, I and W enter the factor
  po.link_latency_s = 0;  // not measured here
  po.link_bandwidth_Bps = 1;
  const PartProfile pp = profile_parts(b.cfg, po);
  double mine = 0, ref = 0;
  for (PartKind k : {PartKind::kPre, PartKind::kAttn, PartKind::kPost})
    for (Dir d : {Dir::kF, Dir::kI, Dir::kW}) {
      mine += pp.time[static_cast<int>(k)][d == Dir::kF ? 0 : d == Dir::kI ? 1 : 2];
      ref += cost.part_time(k, d);
    }
  HP_CHECK(ref > 0, "bench: the part-cost file gives zero time for pre, attn and post");
  std::vector<double> f(static_cast<size_t>(world.size()), 0.0);
  f[static_cast<size_t>(world.rank())] = mine / ref;
  world.allreduce_sum(f.data(), static_cast<int64_t>(f.size()));
  return f;
}

std::string per_stage_mib(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i)
    out += fmt::format("{}{:.1f}", i ? "/" : "", static_cast<double>(v[i]) / 1048576.0);
  return out;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Measure training steps of several schedules on P pipeline ranks and set each beside\n"
               "the simulator's prediction from a measured part-cost file.",
               "helixpipe bench"};
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
  std::string model, part_costs, recompute = "natural", out_path, timeline_path, precision = "fp32",
                                 timeline_label = "helix F=2",
                                 schedules = "1f1b,gpipe,zb1p,helix1,helix2";
  int64_t seq_len = 0;
  int stages = 2, microbatches = 4, threads = 1, steps = 1, virtual_stages = 2;
  app.add_option("--model", model, "model preset or JSON file")->required();
  app.add_option("--seq-len", seq_len, "tokens per sequence (micro-batch = 1 sequence)")->required();
  auto* stages_opt = app.add_option("--stages", stages, "pipeline ranks P (under mpirun: -np)")
                         ->capture_default_str();
  app.add_option("--microbatches", microbatches, "micro-batches per step M")->capture_default_str();
  app.add_option("--threads", threads, "kernel threads per rank")->capture_default_str();
  app.add_option("--steps", steps, "timed steps (after one warm-up)")->capture_default_str();
  app.add_option("--schedules", schedules,
                 "comma list of 1f1b, gpipe, zb1p, interleaved, helix1, helix2 (helix F=1, F=2)")
      ->capture_default_str();
  app.add_option("--virtual", virtual_stages, "virtual stages V of interleaved")->capture_default_str();
  add_precision_flag(app, precision);
  app.add_option("--recompute", recompute,
                 "comma list of policies, each run for every schedule: natural (each schedule's\n"
                 "own: helix no-attn, the others none), none, full, no-attn. A run equal to an\n"
                 "earlier one is skipped")
      ->capture_default_str();
  app.add_option("--part-costs", part_costs, "part-cost JSON for the predictions (helixpipe profile)");
  app.add_option("--timeline", timeline_path,
                 "SVG: simulated (top) and measured (bottom) timeline of --timeline-label "
                 "(its first policy)");
  app.add_option("--timeline-label", timeline_label, "which schedule the timeline shows")
      ->capture_default_str();
  std::string trace_dir;
  bool calibrate_cores = true;
  app.add_flag("--calibrate,!--no-calibrate", calibrate_cores,
               "with --part-costs: time the parts once on every rank before and after each run\n"
               "and scale each stage's predicted compute by its core's mean speed then against\n"
               "the profile")
      ->capture_default_str();
  app.add_option("--trace-dir", trace_dir,
                 "write each run's measured timeline here as a Chrome trace (Perfetto):\n"
                 "trace_<schedule>[_<policy>].json, e.g. trace_helix2.json, trace_1f1b_no-attn.json");
  app.add_option("--out", out_path, "write the results as JSON here");
  if (auto rc = parse_or_exit(app, argc, argv)) return *rc;

  std::unique_ptr<MpiComm> world;
  if (MpiComm::launched_by_mpirun()) {
    world = MpiComm::init_world(&argc, &argv);
    if (stages_opt->count() == 0) stages = world->size();
  }
  const bool root = !world || world->rank() == 0;
  try {
    HP_CHECK(stages >= 1 && microbatches >= 1 && steps >= 1 && threads >= 1 && seq_len >= 1,
             "bench: --stages, --microbatches, --steps, --threads and --seq-len must be >= 1");
    HP_CHECK(!world || world->size() == stages,
             "bench: mpirun started {} ranks but --stages is {}; run mpirun -np {} (one rank per "
             "stage) or leave --stages out",
             world ? world->size() : 0, stages, stages);
    HP_CHECK(timeline_path.empty() || !part_costs.empty(),
             "bench: --timeline needs --part-costs (the simulated half of the picture)");
    const ModelConfig cfg = ModelConfig::load(model);
    const int L = static_cast<int>(cfg.layers);

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
    std::vector<std::optional<Recompute>> policies;
    for (const std::string& r : split_list(recompute))
      policies.push_back(r == "natural" ? std::nullopt : std::optional<Recompute>(parse_recompute(r)));
    HP_CHECK(!policies.empty(), "bench: --recompute is empty");

    const Precision setup_precision = resolve_precision(precision, *make_cpu_backend(1));
    std::optional<CostSetup> cost;
    if (!part_costs.empty()) {
      CostFlags cf;
      cf.part_costs = part_costs;
      cf.model = model;
      cf.seq_len = seq_len;
      cost = build_cost(cf);
      cost->elem_bytes = elem_bytes(setup_precision);
    }

    const int64_t n = seq_len * microbatches;
    std::vector<int32_t> tokens(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 3) % cfg.vocab);
      targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 11) % cfg.vocab);
    }
    const BenchSetup setup{cfg,     seq_len,
                           threads, steps,
                           setup_precision,
                           &tokens, &targets};
    const std::string transport =
        world ? fmt::format("MPI (mpirun, {} ranks)", world->size())
              : fmt::format("LocalWorld ({} threads of one process)", stages);

    nlohmann::json rows = nlohmann::json::array();
    if (root) {
      fmt::print("bench  P={} M={} L={} s={} threads/rank={} precision={} BLAS core={} ranks: {}\n",
                 stages, microbatches, L, seq_len, threads, setup.precision.name(),
                 blas_core_name(), transport);
      fmt::print("{:<11} {:>7} {:>9} {:>7} {:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>9} {:>7} {:>17} {:>17} {:>17}\n",
                 "schedule", "policy", "tokens/s", "vs 1f1b", "bubble", "pred", "comm wait",
                 "step", "predicted", "error", "core", "replay", "stash MiB meas", "stash MiB pred",
                 "store MiB meas");
    }
    std::set<std::pair<std::string, int>> done;  // (schedule label, policy) already measured
    std::map<size_t, double> base_tps;           // --recompute entry -> its 1f1b tokens/s
    bool timeline_written = false;
    for (size_t pi = 0; pi < policies.size(); ++pi) {
      const std::optional<Recompute>& policy = policies[pi];
      for (const Variant* v : variants) {
        ScheduleSpec spec{v->name,   stages, microbatches, L, v->folds,
                          v->name == "interleaved" ? virtual_stages : 1, policy,
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
        lower(sch, &cfg, seq_len);
        const bool want_tl = !timeline_path.empty() && !timeline_written && v->label == timeline_label;
        const bool record = want_tl || !trace_dir.empty();
        // Right before and right after the run: each rank's core speed against the profile (the
        // cores of a shared machine change speed within minutes); their mean, per stage, scales
        // the prediction.
        std::vector<double> before, after;
        Measured m;
        auto run_on = [&](Comm& c) {
          std::vector<double> f0, f1;
          if (cost && calibrate_cores) f0 = calibrate(c, setup, cost->cost);
          Measured mine = measure(c, sch, setup, record);
          if (cost && calibrate_cores) f1 = calibrate(c, setup, cost->cost);
          if (c.rank() == 0) {
            m = std::move(mine);
            before = std::move(f0);
            after = std::move(f1);
          }
        };
        if (world) {
          run_on(*world);
        } else {
          LocalWorld lw(stages, CommOptions{600, false});
          lw.run(run_on);
        }
        std::vector<double> scale;
        for (size_t q = 0; q < before.size(); ++q) scale.push_back(0.5 * (before[q] + after[q]));
        if (!root) continue;
        if (!trace_dir.empty()) {
          Timeline tl = m.timeline;
          tl.num_stages = stages;
          tl.title = fmt::format("measured: {} ({}, {})", v->label, recompute_str(sch.recompute),
                                 transport);
          const std::string file =
              fmt::format("{}/trace_{}{}.json", trace_dir, v->key,
                          policy ? std::string("_") + recompute_str(*policy) : std::string());
          write_file_atomic(file, render_chrome_trace(tl));
        }

        const double t = median(m.step_s);
        const double tps = static_cast<double>(n) / t;
        if (v->name == "1f1b") base_tps[pi] = tps;
        const double base = base_tps.count(pi) ? base_tps[pi] : 0.0;
        double bubble = 0, wait = 0;
        std::vector<int64_t> stash, store;
        for (const auto& s : m.stages) {
          bubble = std::max(bubble, s.bubble_fraction());
          wait = std::max(wait, s.comm_wait_s);
          stash.push_back(s.peak_stash_bytes);
          store.push_back(s.peak_bytes);
        }
        nlohmann::json row = {{"label", v->label},
                              {"schedule", v->name},
                              {"folds", v->folds},
                              {"recompute", recompute_str(sch.recompute)},
                              {"natural_policy", !policy.has_value()},
                              {"seq_len", seq_len},
                              {"stages", stages},
                              {"microbatches", microbatches},
                              {"step_s", t},
                              {"steps_s", m.step_s},
                              {"tokens_per_s", tps},
                              {"vs_1f1b", base > 0 ? tps / base : 0.0},
                              {"bubble_fraction", bubble},
                              {"comm_wait_s", wait},
                              {"peak_stash_bytes", stash},
                              {"peak_store_bytes", store}};
        nlohmann::json st_json = nlohmann::json::array();
        for (const auto& s : m.stages)
          st_json.push_back({{"total_s", s.total_s}, {"busy_s", s.busy_s},
                             {"comm_wait_s", s.comm_wait_s},
                             {"peak_stash_bytes", s.peak_stash_bytes},
                             {"peak_bytes", s.peak_bytes}});
        row["stages_measured"] = st_json;
        std::string pred = "-", err = "-", pmem = "-", pbub = "-", rerr = "-", cal = "-";
        if (cost) {
          SimRun sr = run_one(spec, *cost, want_tl, scale);
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
          // Replay: the simulator given each stage's measured compute time (busy), so that what
          // is left of the error is the schedule, bubble and communication model alone.
          std::vector<double> replay_scale;
          for (size_t q = 0; q < m.stages.size(); ++q) {
            const double unscaled = pbusy[q] / (scale.empty() ? 1.0 : scale[q]);
            replay_scale.push_back(unscaled > 0 ? m.stages[q].busy_s / unscaled : 1.0);
          }
          const double replay = run_one(spec, *cost, false, replay_scale).result.makespan;
          row["replay_step_s"] = replay;
          rerr = fmt::format("{:+.1f}%", 100 * (replay - t) / t);
          if (!scale.empty()) {
            cal.clear();
            for (size_t q = 0; q < scale.size(); ++q) cal += fmt::format("{}{:.2f}", q ? "/" : "", scale[q]);
          }
          row["predicted_step_s"] = sr.result.makespan;
          row["predicted_bubble_fraction"] = sr.result.bubble_fraction;
          row["predicted_peak_stash_bytes"] = pm;
          row["stash_exact"] = pm == stash;
          pred = human_seconds(sr.result.makespan);
          err = fmt::format("{:+.1f}%", 100 * (sr.result.makespan - t) / t);
          pbub = fmt::format("{:.1f}%", 100 * sr.result.bubble_fraction);
          pmem = per_stage_mib(pm) + (pm == stash ? " =" : " !");
          if (want_tl) {
            Timeline measured = std::move(m.timeline);
            measured.num_stages = stages;
            measured.title = "measured: " + v->label + " (" + transport + ")";
            sr.result.timeline.title = "simulated: " + v->label;
            write_file_atomic(timeline_path, render_side_by_side(sr.result.timeline, measured));
            timeline_written = true;
          }
        }
        fmt::print("{:<11} {:>7} {:>9.0f} {:>7} {:>5.1f}% {:>6} {:>9} {:>9} {:>9} {:>7} {:>9} {:>7} {:>17} {:>17} {:>17}\n",
                   v->label, recompute_str(sch.recompute), tps,
                   base > 0 ? fmt::format("{:.3f}", tps / base) : std::string("-"), 100 * bubble,
                   pbub, human_seconds(wait), human_seconds(t), pred, err, cal, rerr,
                   per_stage_mib(stash), pmem, per_stage_mib(store));
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
    if (root && cost)
      fmt::print("predicted: the simulator on the part costs, each stage's compute scaled by 'core'\n"
                 "  (its core's part time just before and after the run / the profile's); replay: the simulator\n"
                 "  given each stage's measured compute time, so its error is the schedule, bubble\n"
                 "  and communication model alone. stash pred '=': equal to the measured bytes.\n");
    if (root && !out_path.empty()) {
      nlohmann::json j = {{"version", 2},           {"blas_core", blas_core_name()},
                          {"threads", threads},     {"transport", transport},
                          {"precision", setup.precision.name()},
                          {"steps", steps},         {"model", cfg.name},
                          {"seq_len", seq_len},     {"stages", stages},
                          {"microbatches", microbatches}, {"rows", rows}};
      write_file_atomic(out_path, j.dump(2) + "\n");
    }
    if (world) world->barrier();
  } catch (const std::exception& e) {
    if (world) world->abort(fmt::format("rank {}: error: {}", world->rank(), e.what()));
    throw;
  }
  return 0;
}

}  // namespace hp::cli

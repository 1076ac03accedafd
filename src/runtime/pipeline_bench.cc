#include "runtime/pipeline_bench.h"

#include <algorithm>

#include "comm/local_comm.h"
#include "kernels/backend.h"
#include "runtime/dist_step.h"
#include "runtime/profile.h"
#include "runtime/timeline_gather.h"
#include "util/error.h"
#include "util/timer.h"

namespace hp {

Measured measure_pipeline(Comm& world, const Schedule& sch, const BenchSetup& b,
                          bool want_timeline) {
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
    eo.time_origin = now_seconds();
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

std::vector<double> calibrate_cores(Comm& world, const BenchSetup& b, const CostModel& cost) {
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

CalibratedRun measure_calibrated(Comm* world, const Schedule& sch, const BenchSetup& b,
                                 const CostModel* cost, bool want_timeline) {
  CalibratedRun out;
  auto run_on = [&](Comm& c) {
    std::vector<double> f0, f1;
    if (cost) f0 = calibrate_cores(c, b, *cost);
    Measured mine = measure_pipeline(c, sch, b, want_timeline);
    if (cost) f1 = calibrate_cores(c, b, *cost);
    if (c.rank() == 0) {
      out.m = std::move(mine);
      out.before = std::move(f0);
      out.after = std::move(f1);
    }
  };
  if (world) {
    run_on(*world);
  } else {
    LocalWorld lw(sch.num_stages, CommOptions{600, false});
    lw.run(run_on);
  }
  for (size_t q = 0; q < out.before.size(); ++q)
    out.scale.push_back(0.5 * (out.before[q] + out.after[q]));
  return out;
}

}  // namespace hp

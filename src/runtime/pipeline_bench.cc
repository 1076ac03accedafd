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

LinkProfile measure_group_link(TpGroup& group, DType t, int64_t n, int repeats) {
  HP_CHECK(group.size() >= 2 && n >= 8 && repeats >= 1,
           "internal: measure_group_link needs a group of >= 2, n >= 8, repeats >= 1");
  const TpGroup::Stats saved = group.stats();
  const int T = group.size();
  auto median_time = [&](int64_t elems) {
    const DataPtr full = group.staging(0, t, elems * T);
    const DataPtr shard = group.staging(1, t, elems);
    std::vector<double> v;
    for (int r = -1; r < repeats; ++r) {  // one untimed round
      const double t0 = now_seconds();
      group.all_gather(shard, full, elems, "link probe");
      group.reduce_scatter(full, shard, elems, "link probe");
      if (r >= 0) v.push_back(0.5 * (now_seconds() - t0));
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const int64_t small = n / 8;
  const double ts = median_time(small), tb = median_time(n);
  const double bs = static_cast<double>(small * dtype_bytes(t) * (T - 1));
  const double bb = static_cast<double>(n * dtype_bytes(t) * (T - 1));
  LinkProfile l;
  l.bandwidth_Bps = tb > ts ? (bb - bs) / (tb - ts) : bb / tb;
  l.latency_s = std::max(0.0, (ts - bs / l.bandwidth_Bps) / (T - 1));
  group.restore_stats(saved);
  return l;
}

Measured measure_pipeline(Comm& world, const Schedule& sch, const BenchSetup& b,
                          bool want_timeline) {
  const int P = sch.num_stages, D = b.data_parallel, T = b.tensor_parallel;
  HP_CHECK(world.size() == D * P * T,
           "bench: {} ranks cannot hold {} replicas x {} stages x {} tensor ranks", world.size(), D,
           P, T);
  const int W = world.size(), me = world.rank();
  GridComms grid = split_grid(world, D, P, T);
  auto be = make_cpu_backend(b.threads);
  DistStage st(sch, grid, b.cfg, *be, 1, b.seq_len, ModelOptions{}, b.precision);
  st.params().init(1);
  // Slots, summed over the world as a gather: [steps x W] step totals, then [W x kStats] the last
  // step's numbers of every rank.
  constexpr int kStats = 12;
  std::vector<double> buf(static_cast<size_t>(b.steps * W + kStats * W), 0.0);
  Timeline tl;
  tl.num_stages = P;
  DistStepResult last;
  for (int r = 0; r <= b.steps; ++r) {
    ExecutorOptions eo;
    if (want_timeline && r == b.steps) eo.timeline = &tl;
    world.barrier();
    eo.time_origin = now_seconds();
    DistStepResult res = st.loss_and_grads(b.tokens->data(), b.targets->data(), eo);
    if (r > 0) buf[static_cast<size_t>((r - 1) * W + me)] = res.stats.total_s;
    last = res;
  }
  const Precision& prec = st.params().precision();
  const int64_t param_bytes =
      st.params().size() * (2 * dtype_bytes(prec.master) +
                            (prec.weight_copy() ? dtype_bytes(prec.compute) : 0));
  // Every collective's time on every rank of the group: index by index, the group's shortest is
  // the transfer, the rest of this rank's time is waiting for the others to arrive.
  double transfer = 0, skew = 0;
  if (T > 1) {
    const std::vector<double>& mine = last.tp.each;
    std::vector<double> all(mine.size() * static_cast<size_t>(T), 0.0);
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(mine.size() * grid.t));
    grid.tensor->allreduce_sum(all.data(), static_cast<int64_t>(all.size()));
    for (size_t i = 0; i < mine.size(); ++i) {
      double lo = mine[i];
      for (int r = 0; r < T; ++r) lo = std::min(lo, all[static_cast<size_t>(r) * mine.size() + i]);
      transfer += lo;
      skew += mine[i] - lo;
    }
  }
  double* s = &buf[static_cast<size_t>(b.steps * W + kStats * me)];
  s[0] = last.stats.total_s;
  s[1] = last.stats.busy_s;
  s[2] = last.stats.comm_wait_s;
  s[3] = static_cast<double>(last.stats.peak_stash_bytes);
  s[4] = static_cast<double>(last.stats.peak_bytes);
  s[5] = static_cast<double>(last.tp.collectives);
  s[6] = static_cast<double>(last.tp.bytes_sent);
  s[7] = last.tp.seconds;
  s[8] = static_cast<double>(param_bytes);
  s[9] = grid.p;
  s[10] = transfer;
  s[11] = skew;
  world.allreduce_sum(buf.data(), static_cast<int64_t>(buf.size()));
  if (want_timeline) gather_timeline(*grid.pipeline, tl);

  Measured m;
  for (int r = 0; r < b.steps; ++r) {
    double t = 0;
    for (int q = 0; q < W; ++q) t = std::max(t, buf[static_cast<size_t>(r * W + q)]);
    m.step_s.push_back(t);
  }
  m.stages.resize(static_cast<size_t>(P));
  for (int q = 0; q < W; ++q) {
    const double* x = &buf[static_cast<size_t>(b.steps * W + kStats * q)];
    RankMeasured rm;
    rm.peak_store_bytes = static_cast<int64_t>(x[4]);
    rm.tp_collectives = static_cast<int64_t>(x[5]);
    rm.tp_bytes_sent = static_cast<int64_t>(x[6]);
    rm.tp_seconds = x[7];
    rm.tp_transfer_s = x[10];
    rm.tp_skew_s = x[11];
    rm.param_bytes = static_cast<int64_t>(x[8]);
    m.ranks.push_back(rm);
    if (q >= P * T || q % T != 0) continue;  // a stage's row: replica 0, tensor rank 0
    StageStats& ss = m.stages[static_cast<size_t>(x[9])];
    ss.total_s = x[0];
    ss.busy_s = x[1];
    ss.comm_wait_s = x[2];
    ss.peak_stash_bytes = static_cast<int64_t>(x[3]);
    ss.peak_bytes = static_cast<int64_t>(x[4]);
  }
  if (want_timeline && me == 0) m.timeline = std::move(tl);
  if (T > 1)
    m.tp_link = measure_group_link(*st.tensor_group(), st.params().precision().compute,
                                   b.seq_len * b.cfg.hidden / T, 7);
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
    for (Dir d : kPartDirs) {
      mine += pp.time.at(k, d);
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
  HP_CHECK(!cost || b.data_parallel * b.tensor_parallel == 1,
           "bench: core calibration runs one stage per rank; use --no-calibrate with "
           "--data-parallel or --tensor-parallel");
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
    LocalWorld lw(sch.num_stages * b.data_parallel * b.tensor_parallel, CommOptions{600, false});
    lw.run(run_on);
  }
  for (size_t q = 0; q < out.before.size(); ++q)
    out.scale.push_back(0.5 * (out.before[q] + out.after[q]));
  return out;
}

}  // namespace hp

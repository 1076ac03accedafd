#include "runtime/pipeline_bench.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "comm/local_comm.h"
#include "kernels/backend.h"
#include "runtime/dist_step.h"
#include "runtime/profile.h"
#include "runtime/timeline_gather.h"
#include "util/error.h"
#include "util/timer.h"

namespace hp {

size_t median_index(const std::vector<double>& v) {
  HP_CHECK(!v.empty(), "internal: median_index of nothing");
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  return idx[(idx.size() - 1) / 2];
}

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

Measured measure_pipeline(Comm& world, const Schedule& sch, const BenchSetup& b, bool want_timeline,
                          const std::function<void()>& between) {
  const int P = sch.num_stages, D = b.data_parallel, T = b.tensor_parallel;
  HP_CHECK(world.size() == D * P * T,
           "bench: {} ranks cannot hold {} replicas x {} stages x {} tensor ranks", world.size(), D,
           P, T);
  HP_CHECK(b.steps >= 1, "bench: --steps must be >= 1 (got {})", b.steps);
  const int W = world.size(), me = world.rank();
  GridComms grid = split_grid(world, D, P, T);
  auto be = make_cpu_backend(b.threads);
  DistStage st(sch, grid, b.cfg, *be, 1, b.seq_len, ModelOptions{}, b.precision);
  st.params().init(1);
  Timeline tl;
  tl.num_stages = P;
  // Every timed step's result on this rank; its wall time, summed over the world as a gather,
  // into [steps x W].
  std::vector<DistStepResult> steps;
  std::vector<double> totals(static_cast<size_t>(b.steps * W), 0.0);
  for (int r = 0; r <= b.steps; ++r) {
    if (r > 0 && between) {
      world.barrier();
      between();
    }
    ExecutorOptions eo;
    if (want_timeline && r == b.steps) eo.timeline = &tl;
    world.barrier();
    eo.time_origin = now_seconds();
    DistStepResult res = st.loss_and_grads(b.tokens->data(), b.targets->data(), eo);
    if (r == 0) continue;  // the warm-up step
    totals[static_cast<size_t>((r - 1) * W + me)] = res.stats.total_s;
    steps.push_back(std::move(res));
  }
  if (between) {
    world.barrier();
    between();
  }
  world.allreduce_sum(totals.data(), static_cast<int64_t>(totals.size()));
  Measured m;
  for (int r = 0; r < b.steps; ++r) {
    double t = 0;
    for (int q = 0; q < W; ++q) t = std::max(t, totals[static_cast<size_t>(r * W + q)]);
    m.step_s.push_back(t);
  }
  // The per-rank numbers below are the median step's (the same step on every rank).
  m.median_step = static_cast<int>(median_index(m.step_s));
  const DistStepResult& med = steps[static_cast<size_t>(m.median_step)];
  constexpr int kStats = 13;  // [W x kStats], summed over the world as a gather
  std::vector<double> buf(static_cast<size_t>(kStats * W), 0.0);
  const Precision& prec = st.params().precision();
  const int64_t param_bytes =
      st.params().size() * (2 * dtype_bytes(prec.master) +
                            (prec.weight_copy() ? dtype_bytes(prec.compute) : 0));
  // Every collective's time on every rank of the group: index by index, the group's shortest is
  // the transfer, the rest of this rank's time is waiting for the others to arrive.
  double transfer = 0, skew = 0;
  if (T > 1) {
    const std::vector<double>& mine = med.tp.each;
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
  double* s = &buf[static_cast<size_t>(kStats * me)];
  s[0] = med.stats.total_s;
  s[1] = med.stats.busy_s;
  s[2] = med.stats.comm_wait_s;
  s[3] = static_cast<double>(med.stats.peak_stash_bytes);
  s[4] = static_cast<double>(med.stats.peak_bytes);
  s[5] = static_cast<double>(med.tp.collectives);
  s[6] = static_cast<double>(med.tp.bytes_sent);
  s[7] = med.tp.seconds;
  s[8] = static_cast<double>(param_bytes);
  s[9] = grid.p;
  s[10] = transfer;
  s[11] = skew;
  s[12] = static_cast<double>(st.params().size() * dtype_bytes(st.params().grads().dtype));
  world.allreduce_sum(buf.data(), static_cast<int64_t>(buf.size()));
  if (want_timeline) gather_timeline(*grid.pipeline, tl);

  m.stages.resize(static_cast<size_t>(P));
  for (int q = 0; q < W; ++q) {
    const double* x = &buf[static_cast<size_t>(kStats * q)];
    RankMeasured rm;
    rm.peak_store_bytes = static_cast<int64_t>(x[4]);
    rm.tp_collectives = static_cast<int64_t>(x[5]);
    rm.tp_bytes_sent = static_cast<int64_t>(x[6]);
    rm.tp_seconds = x[7];
    rm.tp_transfer_s = x[10];
    rm.tp_skew_s = x[11];
    rm.param_bytes = static_cast<int64_t>(x[8]);
    rm.grad_bytes = static_cast<int64_t>(x[12]);
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

namespace {

constexpr int kCells = 15;       // a PartTable: 5 part kinds x F, I, W
constexpr int kTimedPasses = 3;  // per calibration point

void put_cells(const PartTable& t, double* out) {
  int i = 0;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) out[i++] = t.at(k, d);
}

PartTable get_cells(const double* in) {
  PartTable t;
  int i = 0;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) t.at(k, d) = in[i++];
  return t;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One pass's times over the part costs': per cell, and for the per-layer parts together.
struct PassFactors {
  PartTable cells;
  double core = 0;
};
PassFactors pass_factors(const PartTable& measured, const CostModel& cost) {
  PassFactors f;
  double mine = 0, ref = 0;
  for (PartKind k : {PartKind::kPre, PartKind::kAttn, PartKind::kPost})
    for (Dir d : kPartDirs) {
      mine += measured.at(k, d);
      ref += cost.part_time(k, d);
    }
  HP_CHECK(ref > 0, "bench: the part-cost file gives zero time for pre, attn and post");
  f.core = mine / ref;
  // A cell the part costs (or this pass) time as zero takes the pass's per-layer factor.
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) {
      const double r = cost.part_time(k, d), x = measured.at(k, d);
      f.cells.at(k, d) = r > 0 && x > 0 ? x / r : f.core;
    }
  return f;
}

}  // namespace

Calibration calibrate(const std::vector<std::vector<PartTable>>& times, const CostModel& cost) {
  HP_CHECK(times.size() >= 2, "internal: calibration needs >= 2 passes (got {})", times.size());
  Calibration c;
  const size_t passes = times.size(), P = times[0].size();
  std::vector<std::vector<PassFactors>> f(passes);
  for (size_t k = 0; k < passes; ++k) {
    HP_CHECK(times[k].size() == P, "internal: calibration pass {} has {} stages, not {}", k,
             times[k].size(), P);
    for (const PartTable& t : times[k]) f[k].push_back(pass_factors(t, cost));
  }
  c.core.assign(P, {});
  for (size_t q = 0; q < P; ++q) {
    PartTable med;
    for (PartKind kind : kPartKinds)
      for (Dir d : kPartDirs) {
        std::vector<double> v;
        for (size_t k = 0; k < passes; ++k) v.push_back(f[k][q].cells.at(kind, d));
        med.at(kind, d) = median_of(v);
      }
    c.parts.push_back(med);
    for (size_t k = 0; k < passes; ++k) c.core[q].push_back(f[k][q].core);
    c.scale.push_back(median_of(c.core[q]));
  }
  // Step k lies between passes k and k + 1: the mean of the two, cell by cell.
  for (size_t k = 0; k + 1 < passes; ++k) {
    std::vector<PartTable> step(P);
    for (size_t q = 0; q < P; ++q)
      for (PartKind kind : kPartKinds)
        for (Dir d : kPartDirs)
          step[q].at(kind, d) = 0.5 * (f[k][q].cells.at(kind, d) + f[k + 1][q].cells.at(kind, d));
    c.steps.push_back(std::move(step));
  }
  return c;
}

std::vector<PartTable> slowest_of_groups(const std::vector<PartTable>& ranks, int t, int stages) {
  HP_CHECK(t >= 1 && !ranks.empty() && ranks.size() % static_cast<size_t>(t) == 0,
           "internal: {} ranks do not make groups of {}", ranks.size(), t);
  const size_t groups = ranks.size() / static_cast<size_t>(t);
  const size_t P = stages > 0 ? static_cast<size_t>(stages) : groups;
  HP_CHECK(groups % P == 0, "internal: {} groups of {} ranks do not make replicas of {} stages",
           groups, t, P);
  std::vector<PartTable> out(P);
  for (size_t r = 0; r < ranks.size(); ++r)
    for (PartKind k : kPartKinds)
      for (Dir d : kPartDirs) {
        double& x = out[r / static_cast<size_t>(t) % P].at(k, d);
        x = std::max(x, ranks[r].at(k, d));
      }
  return out;
}

CalibratedRun measure_calibrated(Comm* world, const Schedule& sch, const BenchSetup& b,
                                 const CostModel* cost, bool want_timeline) {
  CalibratedRun out;
  std::vector<std::vector<PartTable>> times;  // [pass][stage], rank 0's after the exchange
  auto run_on = [&](Comm& c) {
    // Each rank keeps a one-layer model of the same shape and times its parts before every timed
    // step and after the last, all ranks at once (the pipeline's load on the cores).
    std::optional<PartTimer> timer;
    std::vector<PartTable> mine;
    std::function<void()> between;
    if (cost) {
      ProfileOptions po;
      po.seq_len = b.seq_len;
      po.threads = b.threads;
      po.precision = b.precision;
      po.layers = 1;
      timer.emplace(b.cfg, po);
      // The first pass after a pipeline step runs 5-30% slower than the ones after it (measured
      // on a 2-core VM: its memory has gone cold), while the steps' own ops run warm: each
      // calibration point is an untimed pass, then the mean of kTimedPasses timed ones (one pass
      // of one layer is short enough for a scheduler tick or a neighbour's burst to move it).
      between = [&] {
        timer->pass(Recompute::kNone);
        PartTable sum;
        for (int i = 0; i < kTimedPasses; ++i) {
          const PartTable t = timer->pass(Recompute::kNone);
          for (PartKind k : kPartKinds)
            for (Dir d : kPartDirs) sum.at(k, d) += t.at(k, d) / kTimedPasses;
        }
        mine.push_back(sum);
      };
    }
    Measured m = measure_pipeline(c, sch, b, want_timeline, between);
    std::vector<double> all(mine.size() * static_cast<size_t>(c.size() * kCells), 0.0);
    for (size_t k = 0; k < mine.size(); ++k)
      put_cells(mine[k],
                &all[(k * static_cast<size_t>(c.size()) + static_cast<size_t>(c.rank())) * kCells]);
    if (cost) c.allreduce_sum(all.data(), static_cast<int64_t>(all.size()));
    if (c.rank() != 0) return;
    out.m = std::move(m);
    for (size_t k = 0; k < mine.size(); ++k) {
      std::vector<PartTable> ranks;
      for (int q = 0; q < c.size(); ++q)
        ranks.push_back(
            get_cells(&all[(k * static_cast<size_t>(c.size()) + static_cast<size_t>(q)) * kCells]));
      times.push_back(slowest_of_groups(ranks, b.tensor_parallel, sch.num_stages));
    }
  };
  if (world) {
    run_on(*world);
  } else {
    LocalWorld lw(sch.num_stages * b.data_parallel * b.tensor_parallel, CommOptions{600, false});
    lw.run(run_on);
  }
  if (cost && !times.empty()) out.cal = calibrate(times, *cost);
  return out;
}

}  // namespace hp

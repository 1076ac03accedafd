// The distributed executor on in-process ranks (LocalWorld threads): every schedule x P x M x
// recompute policy (x transfer mode for helix) gives the loss and every gradient of the one-process
// Model loss_and_grads; each stage's measured peak stash equals the validator's prediction; D=2 x
// P=2 equals one process with 2M micro-batches; message and watchdog errors name what broke; the
// walker's edge cases (blocking receives, early send.waits) run as the walker says.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

#include "comm/local_comm.h"
#include "kernels/backend.h"
#include "../model/model_test_util.h"
#include "../schedule/walker_cases.h"
#include "runtime/dist_step.h"
#include "runtime/trainer.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "schedule/validate.h"
#include "sim/timeline.h"
#include "util/error.h"
#include "util/timer.h"

namespace hp {
namespace {

struct Case {
  std::string name;
  int stages, microbatches, layers, folds = 1, virtual_stages = 1;
  Recompute recompute = Recompute::kNone;
  TransferMode transfer = TransferMode::kWeights;
  int data_parallel = 1;
};

std::string case_name(const Case& c) {
  std::string n = c.name + "_p" + std::to_string(c.stages) + "_m" + std::to_string(c.microbatches) +
                  "_L" + std::to_string(c.layers) + "_F" + std::to_string(c.folds) + "_V" +
                  std::to_string(c.virtual_stages) + "_" + recompute_str(c.recompute) + "_" +
                  transfer_str(c.transfer) + "_D" + std::to_string(c.data_parallel);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

struct RankResult {
  int d = 0, p = 0;
  double loss = 0;
  StageStats stats;
  std::vector<std::pair<std::string, std::vector<float>>> grads;
};

class ExecutorRun : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorRun, LossAndGradientsMatchOneProcessAndStashMatchesValidator) {
  const Case& c = GetParam();
  ModelConfig cfg = test::tiny_config();
  cfg.layers = c.layers;
  const int64_t B = 2, S = 5;
  ScheduleSpec spec{c.name, c.stages, c.microbatches, c.layers, c.folds, c.virtual_stages,
                    c.recompute, c.transfer};
  Schedule sch = generate(spec);
  ValidationReport rep = validate(sch, ValidateOptions{&cfg, B * S});
  ASSERT_TRUE(rep.ok()) << rep.text(sch);
  lower(sch, &cfg, B * S);
  const int P = c.stages, M = c.microbatches, D = c.data_parallel;
  // Replica d takes micro-batches d*M .. d*M+M-1 of one batch of D*M; the reference runs all D*M.
  auto tokens = test::random_tokens(B * S * M * D, cfg.vocab, 41);
  auto targets = test::random_tokens(B * S * M * D, cfg.vocab, 42);
  auto ref_be = make_reference_backend();
  Params ref(cfg, Params::all_parts(cfg), *ref_be);
  test::randomize(ref, 7);
  Model ref_model(ref);
  const TokenBuffer ref_tok = test::on_backend(*ref_be, tokens, cfg.vocab);
  const TokenBuffer ref_tgt = test::on_backend(*ref_be, targets, cfg.vocab);
  const double ref_loss = loss_and_grads(ref_model, ref_tok.data(), ref_tgt.data(), B, S, M * D);
  const std::vector<float> ref_grads = ref.host_grads<float>();

  LocalWorld world(D * P, CommOptions{20, false});
  std::mutex mu;
  std::vector<RankResult> results;
  world.run([&](Comm& comm) {
    GridComms grid = split_grid(comm, D, P);
    auto be = make_reference_backend();
    DistStage stage(sch, grid, cfg, *be, B, S);
    stage.params().copy_from(ref);
    const int64_t off = static_cast<int64_t>(grid.d) * M * B * S;
    DistStepResult r = stage.loss_and_grads(tokens.data() + off, targets.data() + off);
    RankResult rr{grid.d, grid.p, r.loss, r.stats, {}};
    const std::vector<float> g = stage.params().host_grads<float>();
    for (const ParamTensor& t : stage.params().tensors())
      rr.grads.emplace_back(t.name, std::vector<float>(g.begin() + t.offset,
                                                       g.begin() + t.offset + t.numel));
    std::lock_guard<std::mutex> lock(mu);
    results.push_back(std::move(rr));
  });
  ASSERT_EQ(results.size(), static_cast<size_t>(D * P));
  std::set<std::string> seen;
  int bitwise = 0, total = 0;
  for (const RankResult& rr : results) {
    EXPECT_NEAR(rr.loss, ref_loss, 1e-6 * std::abs(ref_loss)) << "rank d" << rr.d << " p" << rr.p;
    EXPECT_EQ(rr.loss, results[0].loss) << "every rank must hold the same reduced loss";
    EXPECT_EQ(rr.stats.peak_stash_bytes, rep.peak_stash_bytes[rr.p])
        << "stage " << rr.p << ": measured peak stash differs from the validator's prediction";
    for (const auto& [name, g] : rr.grads) {
      const ParamTensor* t = ref.find(name);
      ASSERT_TRUE(t) << name;
      ASSERT_EQ(static_cast<int64_t>(g.size()), t->numel);
      double err = 0, mx = 0;
      bool same = true;
      for (int64_t i = 0; i < t->numel; ++i) {
        const double want = ref_grads[t->offset + i];
        err = std::max(err, std::abs(double(g[i]) - want));
        mx = std::max(mx, std::abs(want));
        same = same && g[i] == ref_grads[t->offset + i];
      }
      ASSERT_GT(mx, 0) << name << " has a zero reference gradient (test too weak)";
      EXPECT_LE(err, 1e-6 * mx) << name << " on stage " << rr.p << " replica " << rr.d;
      bitwise += same;
      ++total;
      seen.insert(name);
    }
  }
  EXPECT_EQ(seen.size(), ref.tensors().size()) << "some parameters live on no stage";
  if (D == 1 && (c.name == "gpipe" || (P == 1 && c.name != "helix"))) {
    EXPECT_EQ(bitwise, total) << "same accumulation order as one process: expected bitwise equal";
  }
  RecordProperty("bitwise_tensors", std::to_string(bitwise) + "/" + std::to_string(total));
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int P : {1, 2, 3, 4}) {
    const int L = std::max(2, P);
    for (int M : {P, 2 * P + (P == 1 ? 1 : 0)}) {
      for (Recompute r : kAllRecompute) {
        v.push_back({"gpipe", P, M, L, 1, 1, r});
        v.push_back({"1f1b", P, M, L, 1, 1, r});
        v.push_back({"zb1p", P, M, L, 1, 1, r});
        if (P >= 2) v.push_back({"interleaved", P, M, 2 * P, 1, 2, r});
        for (TransferMode t : {TransferMode::kWeights, TransferMode::kActivations}) {
          v.push_back({"helix", P, M, L, 1, 1, r, t});
          if (M % (2 * P) == 0 || M > P) v.push_back({"helix", P, M, 2 * L, 2, 1, r, t});
        }
      }
    }
  }
  // Data parallel: D=2 x P=2 against one process with 2M micro-batches.
  v.push_back({"1f1b", 2, 4, 2, 1, 1, Recompute::kNone, TransferMode::kWeights, 2});
  v.push_back({"helix", 2, 4, 4, 2, 1, Recompute::kNoAttn, TransferMode::kWeights, 2});
  v.push_back({"helix", 2, 2, 2, 1, 1, Recompute::kFull, TransferMode::kActivations, 2});
  v.push_back({"gpipe", 1, 3, 2, 1, 1, Recompute::kNone, TransferMode::kWeights, 2});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Grid, ExecutorRun, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return case_name(param_info.param); });

}  // namespace
}  // namespace hp

namespace hp {
namespace {

// A stage whose peer never runs: the watchdog names the message, the op it feeds and the peer.
TEST(Executor, WatchdogNamesMessageOpAndPeer) {
  ModelConfig cfg = test::tiny_config();
  const int64_t B = 1, S = 3;
  Schedule sch = generate(ScheduleSpec{"1f1b", 2, 2, 2, 1, 1, Recompute::kNone});
  lower(sch, &cfg, B * S);
  auto tokens = test::random_tokens(B * S * 2, cfg.vocab, 3);
  LocalWorld world(2, CommOptions{0.5, false});
  try {
    world.run([&](Comm& comm) {
      GridComms grid = split_grid(comm, 1, 2);
      if (grid.p == 1) return;  // stage 1 never runs its ops
      auto be = make_reference_backend();
      DistStage stage(sch, grid, cfg, *be, B, S);
      stage.params().init(1);
      stage.loss_and_grads(tokens.data(), tokens.data());
    });
    FAIL() << "the step finished although stage 1 never ran";
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0 waits for"), std::string::npos) << msg;
    EXPECT_NE(msg.find("of stage 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stage 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("from rank 1"), std::string::npos) << msg;
  }
}

// A schedule lowered for another micro-batch size is refused up front.
TEST(Executor, RefusesScheduleSizedForAnotherMicrobatch) {
  ModelConfig cfg = test::tiny_config();
  Schedule sch = generate(ScheduleSpec{"helix", 2, 2, 2, 1, 1, Recompute::kNoAttn});
  lower(sch, &cfg, 4);
  LocalWorld world(2);
  EXPECT_THROW(world.run([&](Comm& comm) { StageExecutor ex(sch, comm.rank(), comm, cfg, 6); }),
               Error);
}

// Several optimizer steps: the pipeline (and D=2 x P=2) follows the one-process trainer's losses
// and parameters; gpipe accumulates in the same order, so it is bitwise equal.
void multi_step(const std::string& name, int D, int P, int M, int folds, bool bitwise) {
  ModelConfig cfg = test::tiny_config();
  cfg.layers = 2 * folds;
  const int64_t B = 1, S = 4;
  const int steps = 6;
  Schedule sch = generate(ScheduleSpec{name, P, M, static_cast<int>(cfg.layers), folds, 1,
                                       name == "helix" ? Recompute::kNoAttn : Recompute::kNone});
  lower(sch, &cfg, B * S);
  auto tokens = test::random_tokens(B * S * M * D * steps, cfg.vocab, 61);
  auto targets = test::random_tokens(B * S * M * D * steps, cfg.vocab, 62);
  const double lr = 1e-2, clip = 0;  // no clipping: the norm's summation order is not the point
  auto ref_be = make_reference_backend();
  Params ref(cfg, Params::all_parts(cfg), *ref_be);
  ref.init(4);
  Model ref_model(ref);
  AdamW ref_opt(*ref_be);
  std::vector<double> ref_losses;
  std::vector<ParamRef> refs = param_refs(ref);
  const TokenBuffer ref_tok = test::on_backend(*ref_be, tokens, cfg.vocab);
  const TokenBuffer ref_tgt = test::on_backend(*ref_be, targets, cfg.vocab);
  for (int s = 0; s < steps; ++s) {
    ref.zero_grad();
    const int64_t off = static_cast<int64_t>(s) * B * S * M * D;
    ref_losses.push_back(
        loss_and_grads(ref_model, ref_tok.data() + off, ref_tgt.data() + off, B, S, M * D));
    ref_opt.step(refs, lr, 1.0);
  }
  std::mutex mu;
  auto full_be = make_reference_backend();
  Params full(cfg, Params::all_parts(cfg), *full_be);
  std::vector<double> losses;
  LocalWorld world(D * P);
  world.run([&](Comm& comm) {
    GridComms grid = split_grid(comm, D, P);
    auto be = make_reference_backend();
    DistStage stage(sch, grid, cfg, *be, B, S);
    stage.params().init(4);
    AdamW opt(*be);
    for (int s = 0; s < steps; ++s) {
      const int64_t off = (static_cast<int64_t>(s) * D + grid.d) * B * S * M;
      DistStepResult r = stage.loss_and_grads(tokens.data() + off, targets.data() + off);
      stage.optimizer_step(opt, lr, clip);
      if (comm.rank() == 0) losses.push_back(r.loss);
    }
    if (grid.d == 0) stage.gather_params(grid.p == 0 ? &full : nullptr);
  });
  ASSERT_EQ(losses.size(), ref_losses.size());
  for (int s = 0; s < steps; ++s) {
    if (bitwise) {
      EXPECT_EQ(losses[s], ref_losses[s]) << "step " << s;
    }
    EXPECT_NEAR(losses[s], ref_losses[s], 1e-6 * std::abs(ref_losses[s])) << "step " << s;
  }
  double err = 0, mx = 0;
  const std::vector<float> got = full.host_values<float>(), want = ref.host_values<float>();
  for (int64_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - want[i]));
    mx = std::max(mx, std::abs(double(want[i])));
  }
  if (bitwise) {
    EXPECT_EQ(err, 0);
  }
  EXPECT_LE(err, 1e-5 * mx);
}

TEST(Executor, SixStepsGpipeBitwise) { multi_step("gpipe", 1, 2, 3, 1, true); }
TEST(Executor, SixStepsHelixTwoFolds) { multi_step("helix", 1, 2, 4, 2, false); }
TEST(Executor, SixStepsHelixDataParallel) { multi_step("helix", 2, 2, 2, 1, false); }

}  // namespace
}  // namespace hp

namespace hp {
namespace {

// The measured run as a Timeline: one event per compute op, a send and a receive per message,
// compute events in op order without overlap, and a Chrome trace that names them.
TEST(Executor, RecordsTimeline) {
  ModelConfig cfg = test::tiny_config();
  cfg.layers = 4;
  const int64_t B = 1, S = 4;
  Schedule sch = generate(ScheduleSpec{"helix", 2, 4, 4, 2, 1, Recompute::kNoAttn});
  lower(sch, &cfg, B * S);
  auto tokens = test::random_tokens(B * S * 4, cfg.vocab, 8);
  std::vector<Timeline> tls(2);
  const double origin = now_seconds();
  LocalWorld world(2);
  world.run([&](Comm& comm) {
    GridComms grid = split_grid(comm, 1, 2);
    auto be = make_reference_backend();
    DistStage stage(sch, grid, cfg, *be, B, S);
    stage.params().init(2);
    stage.loss_and_grads(tokens.data(), tokens.data(), ExecutorOptions{&tls[grid.p], origin});
  });
  Timeline all;
  all.num_stages = 2;
  size_t sends = 0, recvs = 0;
  for (int p = 0; p < 2; ++p) {
    size_t compute = 0;
    double last_end = 0;
    for (const TimelineEvent& ev : tls[p].events) {
      EXPECT_EQ(ev.stage, p);
      EXPECT_LE(ev.start, ev.end);
      if (ev.is_compute()) {
        EXPECT_EQ(ev.name, compute_event_name(sch.stages[p].ops[compute]));
        EXPECT_GE(ev.start, last_end) << "compute events overlap on stage " << p;
        last_end = ev.end;
        ++compute;
      }
      sends += ev.category == "send";
      recvs += ev.category == "recv";
      all.events.push_back(ev);
    }
    EXPECT_EQ(compute, sch.stages[p].ops.size());
  }
  EXPECT_EQ(sends, sch.messages.size());
  EXPECT_EQ(recvs, sch.messages.size());
  const std::string trace = render_chrome_trace(all);
  EXPECT_NE(trace.find(compute_event_name(sch.stages[1].ops[0])), std::string::npos);
}

}  // namespace
}  // namespace hp

namespace hp {
namespace {

// One step of a two-stage pipeline (LocalWorld, rendezvous sends) on a lowered schedule: the loss,
// every gradient by name and each stage's peak stash.
struct PipelineStep {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;
  std::vector<int64_t> peak_stash = {0, 0};
};

PipelineStep run_two_stages(const Schedule& sch, const ModelConfig& cfg, const Params& init,
                            const std::vector<int32_t>& tokens, double timeout_s) {
  PipelineStep out;
  std::mutex mu;
  LocalWorld world(2, CommOptions{timeout_s, false});
  world.run([&](Comm& comm) {
    GridComms grid = split_grid(comm, 1, 2);
    auto be = make_reference_backend();
    DistStage stage(sch, grid, cfg, *be, 2, 8);
    stage.params().copy_from(init);
    DistStepResult r = stage.loss_and_grads(tokens.data(), tokens.data() + 1);
    const std::vector<float> g = stage.params().host_grads<float>();
    std::lock_guard<std::mutex> lock(mu);
    out.loss = r.loss;
    out.peak_stash[grid.p] = r.stats.peak_stash_bytes;
    for (const ParamTensor& t : stage.params().tensors())
      out.grads[t.name].assign(g.begin() + t.offset, g.begin() + t.offset + t.numel);
  });
  return out;
}

// Programs the lowering would not write but the walker accepts run on real ranks with the same
// results: receives posted by their recv.wait and a send.wait before the next compute give gpipe's
// bitwise gradients; send.waits that deadlock under rendezvous end in the watchdog naming the
// message, and run once defer_blocking_send_waits() moved them.
TEST(Executor, RunsTheWalkersEdgeCasesAsTheWalkerSays) {
  ModelConfig cfg = test::tiny_config();
  auto tokens = test::random_tokens(2 * 8 * 3 + 1, cfg.vocab, 71);
  auto init_be = make_reference_backend();
  Params init(cfg, Params::all_parts(cfg), *init_be);
  test::randomize(init, 3);
  const PipelineStep ref = run_two_stages(test::gpipe_two_stages(&cfg), cfg, init, tokens, 20);
  const ValidationReport rep = validate(test::gpipe_two_stages(&cfg), ValidateOptions{&cfg, 16});
  for (const Schedule& sch :
       {test::blocking_receives(&cfg), test::send_wait_before_compute(&cfg)}) {
    const PipelineStep got = run_two_stages(sch, cfg, init, tokens, 20);
    EXPECT_EQ(got.loss, ref.loss);
    EXPECT_EQ(got.grads, ref.grads);
    for (int st = 0; st < 2; ++st) EXPECT_EQ(got.peak_stash[st], rep.peak_stash_bytes[st]);
  }
  Schedule held = test::early_send_waits(&cfg);
  try {
    run_two_stages(held, cfg, init, tokens, 1.0);
    FAIL() << "the rendezvous deadlock was not caught";
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.find("waits for send of msg 1 ") != std::string::npos ||
                msg.find("waits for send of msg 3 ") != std::string::npos)
        << msg;
  }
  defer_blocking_send_waits(held);
  const PipelineStep fixed = run_two_stages(held, cfg, init, tokens, 20);
  const PipelineStep lowered = run_two_stages(test::one_f_one_b(&cfg), cfg, init, tokens, 20);
  EXPECT_EQ(fixed.loss, lowered.loss);
  EXPECT_EQ(fixed.grads, lowered.grads);
}

}  // namespace
}  // namespace hp

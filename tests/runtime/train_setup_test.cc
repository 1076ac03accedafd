// Requests into plans (runtime/train_setup.h, runtime/bench_run.h): which checks fire, what a
// resumed run keeps from the saved one and what an explicitly given flag overrides.
#include "runtime/train_setup.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "kernels/backend.h"
#include "runtime/bench_run.h"
#include "../error_text.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

bool says(const std::function<void()>& f, const std::string& what) {
  const std::string e = test::error_of(f);
  return e.find(what) != std::string::npos;
}

TEST(TrainSetup, FreshRunTakesTheRequest) {
  TrainRequest f;
  f.model = "tiny";
  f.seq_len = 16;
  f.microbatches = 3;
  f.steps = 40;
  f.lr = 2e-3;
  f.stop_after = 10;
  const TrainPlan plan = resolve_train_request(f);
  EXPECT_FALSE(plan.resumed);
  EXPECT_EQ(plan.shape.seq_len, 16);
  EXPECT_EQ(plan.shape.microbatches, 3);
  EXPECT_EQ(plan.state.lr.peak, 2e-3);
  EXPECT_DOUBLE_EQ(plan.state.lr.min_ratio, 0.1);  // --min-lr defaults to lr / 10
  EXPECT_EQ(plan.state.lr.total, 40);
  EXPECT_EQ(last_step(f, plan.state), 10);
  f.stop_after = 0;
  EXPECT_EQ(last_step(f, plan.state), 40);
}

TEST(TrainSetup, BadRequestsNameTheFlag) {
  TrainRequest f;
  EXPECT_TRUE(says([&] { resolve_train_request(f); }, "give exactly one of --model"));
  f.model = "tiny";
  f.save_every = 5;
  EXPECT_TRUE(says([&] { resolve_train_request(f); }, "--save-every needs --save"));
  f.save_every = 0;
  f.min_lr = 1;
  EXPECT_TRUE(says([&] { resolve_train_request(f); }, "--min-lr 1 must not exceed --lr"));
  GradRequest g;
  EXPECT_TRUE(says([&] { check_grad_request(g); }, "--seq-len must be >= 1"));
  g.seq_len = 8;
  g.recompute = "sometimes";
  EXPECT_FALSE(test::error_of([&] { check_grad_request(g); }).empty());
}

// A saved run resumed: a flag that differs from the saved value overrides it only when it is in
// `given` (the command line named it); otherwise the saved run continues unchanged.
TEST(TrainSetup, UpdatesThatVanishOrExplodeAreWarnedAbout) {
  TrainRequest f;
  f.model = "tiny";
  f.seq_len = 16;
  f.steps = 100;
  auto notes = [&] { return resolve_train_request(f).notes; };
  EXPECT_EQ(notes(), "");  // the defaults: lr 3e-3, clip 1
  f.lr = 0.5;
  EXPECT_NE(notes().find("warning: --lr 0.5: AdamW moves every weight"), std::string::npos);
  f.lr = 1e-12;
  EXPECT_NE(notes().find("below the f32 rounding"), std::string::npos) << notes();
  f.lr = 1e-6;  // 100 steps x 1e-6 = 1e-4, under 1% of 0.02
  EXPECT_NE(notes().find("over the 100 remaining steps moves each weight by at most 0.0001"),
            std::string::npos)
      << notes();
  f.steps = 1000;  // 1e-3 in all: enough
  EXPECT_EQ(notes(), "");
  f.lr = 3e-3;
  // tiny has 39.6k parameters: a clip of 1e-6 leaves 5e-9 per element, below 10 x eps = 1e-7.
  f.clip = 1e-6;
  EXPECT_NE(notes().find("warning: --clip 1e-06 over"), std::string::npos) << notes();
  f.clip = 1e-2;
  EXPECT_EQ(notes(), "");
  f.clip = 0;  // clipping off
  EXPECT_EQ(notes(), "");
}

TEST(TrainSetup, ResumeOverridesOnlyTheGivenFlags) {
  const fs::path dir = fs::temp_directory_path() / ("hp_train_setup_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    TrainRequest f;
    f.model = "tiny";
    f.seq_len = 8;
    f.steps = 20;
    f.lr = 1e-3;
    TrainPlan plan = resolve_train_request(f);
    auto be = make_reference_backend();
    Params params(plan.cfg, Params::all_parts(plan.cfg), *be);
    params.init(1);
    Trainer trainer(plan.cfg, params, plan.model_options, plan.shape, plan.state);
    trainer.save(dir.string());
  }
  TrainRequest r;
  r.resume = dir.string();
  r.lr = 5e-3;       // differs from the saved 1e-3
  r.seq_len = 256;   // the default, differs from the saved 8
  const TrainPlan kept = resolve_train_request(r);
  EXPECT_TRUE(kept.resumed);
  EXPECT_EQ(kept.state.lr.peak, 1e-3);
  EXPECT_EQ(kept.shape.seq_len, 8);
  EXPECT_TRUE(kept.notes.empty());

  r.given = {"--lr"};
  const TrainPlan changed = resolve_train_request(r);
  EXPECT_EQ(changed.state.lr.peak, 5e-3);
  // The saved minimum (1e-4) stays the same learning rate: its ratio follows the new peak.
  EXPECT_DOUBLE_EQ(changed.state.lr.peak * changed.state.lr.min_ratio, 1e-4);
  EXPECT_EQ(changed.shape.seq_len, 8);
  EXPECT_NE(changed.notes.find("resuming with changed --lr"), std::string::npos);
  fs::remove_all(dir);
}

TEST(BenchRun, VariantsAndPoliciesFromLists) {
  const auto v = pick_bench_variants("helix2,1f1b");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0]->label, "helix F=2");
  EXPECT_EQ(v[0]->folds, 2);
  EXPECT_EQ(v[1]->name, "1f1b");
  EXPECT_TRUE(says([] { pick_bench_variants("1f1b,pipedream"); }, "unknown schedule 'pipedream'"));
  EXPECT_TRUE(says([] { pick_bench_variants(","); }, "--schedules is empty"));
  const auto p = pick_bench_policies("natural,full");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_FALSE(p[0].has_value());
  EXPECT_EQ(p[1], Recompute::kFull);
}

TEST(BenchRun, RequestChecks) {
  BenchRequest r;
  r.seq_len = 64;
  EXPECT_TRUE(test::error_of([&] { check_bench_request(r, 0); }).empty());
  EXPECT_TRUE(test::error_of([&] { check_bench_request(r, 2); }).empty());
  EXPECT_TRUE(says([&] { check_bench_request(r, 3); }, "mpirun started 3 ranks"));
  r.timeline_path = "t.svg";
  EXPECT_TRUE(says([&] { check_bench_request(r, 0); }, "--timeline needs --part-costs"));
  r.seq_len = 0;
  EXPECT_TRUE(says([&] { check_bench_request(r, 0); }, "must be >= 1"));
}

}  // namespace
}  // namespace hp

// The executor over OpenMPI: a subset of the LocalWorld grid (1x4, 2x2, 4x1 of data-parallel x
// pipeline ranks) against the one-process loss and gradients computed on every rank, plus the
// failure paths: a killed rank ends the job within the timeout naming it, and a broken schedule
// file is refused on every rank before anything is computed.
// hp_mpi_test(runtime_mpi_executor 4 120 --gtest_brief=1)
// hp_mpi_test(runtime_mpi_grid_p2 2 240 --gtest_brief=1 --gtest_filter=MpiGrid.*)
// hp_mpi_test(runtime_mpi_grid_p3 3 240 --gtest_brief=1 --gtest_filter=MpiGrid.*)
// hp_mpi_test(runtime_mpi_executor_progress_thread 4 120 --gtest_brief=1 --progress-thread)
// hp_mpi_test(runtime_mpi_killed_stage 4 60 --mode=kill EXPECT_FAIL "rank 1 .*(signal 9|Killed)")
// hp_mpi_test(runtime_mpi_broken_schedule 4 60 --mode=broken EXPECT_FAIL "broken_deadlock.txt refused before any rank computes")
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cmath>

#include "comm/mpi_comm.h"
#include "kernels/backend.h"
#include "../model/model_test_util.h"
#include "runtime/dist_step.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "schedule/validate.h"
#include "util/error.h"

namespace hp {
namespace {

Comm* g_world = nullptr;

struct Case {
  std::string name;
  int data_parallel, stages, microbatches, layers, folds = 1, virtual_stages = 1;
  Recompute recompute = Recompute::kNoAttn;
  TransferMode transfer = TransferMode::kWeights;
};

void run_case(const Case& c) {
  Comm& world = *g_world;
  ModelConfig cfg = test::tiny_config();
  cfg.layers = c.layers;
  const int64_t B = 2, S = 6;
  const int D = c.data_parallel, P = c.stages, M = c.microbatches;
  ASSERT_EQ(world.size(), D * P);
  Schedule sch = generate(ScheduleSpec{c.name, P, M, c.layers, c.folds, c.virtual_stages,
                                       c.recompute, c.transfer});
  ValidationReport rep = validate(sch, ValidateOptions{&cfg, B * S});
  ASSERT_TRUE(rep.ok());
  lower(sch, &cfg, B * S);
  auto tokens = test::random_tokens(B * S * M * D, cfg.vocab, 51);
  auto targets = test::random_tokens(B * S * M * D, cfg.vocab, 52);
  auto be = make_reference_backend();
  Params ref(cfg, Params::all_parts(cfg), *be);
  test::randomize(ref, 5);
  Model ref_model(ref);
  const TokenBuffer ref_tok = test::on_backend(*be, tokens, cfg.vocab);
  const TokenBuffer ref_tgt = test::on_backend(*be, targets, cfg.vocab);
  const double ref_loss = loss_and_grads(ref_model, ref_tok.data(), ref_tgt.data(), B, S, M * D);
  const std::vector<float> ref_grads = ref.host_grads<float>();

  GridComms grid = split_grid(world, D, P);
  DistStage stage(sch, grid, cfg, *be, B, S);
  stage.params().copy_from(ref);
  const int64_t off = static_cast<int64_t>(grid.d) * M * B * S;
  DistStepResult r = stage.loss_and_grads(tokens.data() + off, targets.data() + off);
  EXPECT_NEAR(r.loss, ref_loss, 1e-6 * std::abs(ref_loss));
  EXPECT_EQ(r.stats.peak_stash_bytes, rep.peak_stash_bytes[grid.p]) << "stage " << grid.p;
  const std::vector<float> grads = stage.params().host_grads<float>();
  for (const ParamTensor& t : stage.params().tensors()) {
    const ParamTensor* rt = ref.find(t.name);
    ASSERT_TRUE(rt);
    double err = 0, mx = 0;
    for (int64_t i = 0; i < t.numel; ++i) {
      const double want = ref_grads[rt->offset + i];
      err = std::max(err, std::abs(double(grads[t.offset + i]) - want));
      mx = std::max(mx, std::abs(want));
    }
    EXPECT_LE(err, 1e-6 * mx) << t.name << " on world rank " << world.rank();
  }
  // The global norm agrees with the one-process gradient's.
  double ss = 0;
  for (float g : ref_grads) ss += double(g) * g;
  EXPECT_NEAR(stage.global_grad_norm(), std::sqrt(ss), 1e-6 * std::sqrt(ss));
}

TEST(MpiExecutor, Helix1x4TwoFoldsWeights) { run_case({"helix", 1, 4, 8, 8, 2}); }
TEST(MpiExecutor, Helix1x4Activations) {
  run_case({"helix", 1, 4, 4, 4, 1, 1, Recompute::kFull, TransferMode::kActivations});
}
TEST(MpiExecutor, Interleaved1x4) { run_case({"interleaved", 1, 4, 4, 8, 1, 2, Recompute::kNone}); }
TEST(MpiExecutor, Zb1p1x4) { run_case({"zb1p", 1, 4, 8, 4, 1, 1, Recompute::kNone}); }
TEST(MpiExecutor, Helix2x2) { run_case({"helix", 2, 2, 4, 4, 2}); }
TEST(MpiExecutor, OneFOneB2x2) { run_case({"1f1b", 2, 2, 4, 2, 1, 1, Recompute::kNone}); }
TEST(MpiExecutor, Gpipe4x1) { run_case({"gpipe", 4, 1, 3, 2, 1, 1, Recompute::kNone}); }

// The full grid of the in-process executor test, for P = the number of ranks (D = 1): every
// schedule x recompute policy x transfer mode (helix) x two micro-batch counts. The 4-rank run
// above covers P = 4 this way too; the 2- and 3-rank runs select only these tests.
TEST(MpiGrid, EverySchedulePolicyAndTwoM) {
  const int P = g_world->size();
  const int L = std::max(2, P);
  for (int M : {P, 2 * P}) {
    for (Recompute r : kAllRecompute) {
      SCOPED_TRACE(fmt::format("P={} M={} recompute={}", P, M, recompute_str(r)));
      run_case({"gpipe", 1, P, M, L, 1, 1, r});
      run_case({"1f1b", 1, P, M, L, 1, 1, r});
      run_case({"zb1p", 1, P, M, L, 1, 1, r});
      if (P >= 2) run_case({"interleaved", 1, P, M, 2 * P, 1, 2, r});
      for (TransferMode t : {TransferMode::kWeights, TransferMode::kActivations}) {
        run_case({"helix", 1, P, M, L, 1, 1, r, t});
        if (M % (2 * P) == 0) run_case({"helix", 1, P, M, 2 * L, 2, 1, r, t});
      }
    }
  }
}

int run_failure_mode(Comm& world, const std::string& mode) {
  ModelConfig cfg = test::tiny_config();
  const int64_t B = 1, S = 4;
  if (mode == "broken") {
    // Every rank validates the file itself and refuses it: nothing is computed or sent.
    Schedule sch = load_checked_schedule(
        std::string(HP_SOURCE_DIR) + "/tests/runtime/data/broken_deadlock.txt", cfg, B * S);
    fail("the broken schedule was accepted ({} stages)", sch.num_stages);
  }
  if (mode != "kill") fail("unknown --mode={}", mode);
  world.set_timeout(20);
  cfg.layers = 4;
  Schedule sch = generate(ScheduleSpec{"helix", 4, 4, 4, 1, 1, Recompute::kNoAttn});
  lower(sch, &cfg, B * S);
  GridComms grid = split_grid(world, 1, 4);
  auto be = make_reference_backend();
  DistStage stage(sch, grid, cfg, *be, B, S);
  stage.params().init(1);
  auto tokens = test::random_tokens(B * S * 4, cfg.vocab, 1);
  world.barrier();
  if (world.rank() == 1) std::raise(SIGKILL);
  stage.loss_and_grads(tokens.data(), tokens.data());
  return 0;
}

}  // namespace
}  // namespace hp

int main(int argc, char** argv) {
  hp::CommOptions options;
  std::string mode;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--progress-thread") options.progress_thread = true;
    if (a.rfind("--mode=", 0) == 0) mode = a.substr(7);
  }
  options.timeout_s = 30;
  auto world = hp::MpiComm::init_world(&argc, &argv, options);
  int rc = 0;
  try {
    if (!mode.empty()) {
      rc = hp::run_failure_mode(*world, mode);
    } else {
      ::testing::InitGoogleTest(&argc, argv);
      hp::g_world = world.get();
      int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
      double any = failed;
      world->allreduce_sum(&any, 1);
      rc = any > 0 ? 1 : 0;
    }
  } catch (const std::exception& e) {
    world->abort(std::string("rank ") + std::to_string(world->rank()) + ": error: " + e.what());
  }
  return rc;
}

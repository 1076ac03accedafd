// `helixpipe train` and `helixpipe grad` under mpirun, end to end: the binary is launched with
// `mpirun --allow-run-as-root --oversubscribe -np N` (every run under `timeout`, so a hang fails
// the test instead of blocking ctest) and its files are compared with the single-process ones:
// gradient files, JSONL losses and checkpoints across a save/resume with a different P; a killed
// rank ends the job naming it; a broken --schedule-file is refused before any rank computes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "kernels/backend.h"
#include "util/atomic_file.h"
#include "util/rng.h"
#include "run_cli.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

using RunResult = test::CliResult;

// `ranks` == 0: one process; otherwise under mpirun -np ranks. Killed after `timeout_s` (rc 124).
RunResult run(int ranks, const std::string& args, int timeout_s = 120, const std::string& env = "") {
  test::CliOptions o;
  o.ranks = ranks;
  o.timeout_s = timeout_s;
  o.env = env;
  return test::run_helixpipe(args, o);
}

// True when one line of `text` holds "rank 1 " followed later on that line by "signal 9" or
// "Killed". (Plain string search: GCC 12's <regex> trips -Wmaybe-uninitialized under -fsanitize,
// which -Werror turns into a build failure.)
bool names_killed_rank_1(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const size_t r = line.find("rank 1 ");
    if (r != std::string::npos && (line.find("signal 9", r + 7) != std::string::npos ||
                                   line.find("Killed", r + 7) != std::string::npos))
      return true;
    start = end + 1;
  }
  return false;
}

std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t pos = t.rfind('\n');
  return pos == std::string::npos ? t : t.substr(pos + 1);
}

std::vector<float> tensor(const SafetensorsReader& f, const std::string& name) {
  const StTensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> v(t->numel());
  f.read_f32(name, t->shape, v.data());
  return v;
}

// Every tensor of `a` is in `b` with the same shape; max |a-b| / max |a| <= rel (0: bitwise).
void expect_same_tensors(const std::string& a_path, const std::string& b_path, double rel) {
  const auto a = SafetensorsReader::open(a_path);
  const auto b = SafetensorsReader::open(b_path);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  ASSERT_GT(a.tensors().size(), 0u);
  for (const StTensorInfo& t : a.tensors()) {
    const std::vector<float> x = tensor(a, t.name), y = tensor(b, t.name);
    ASSERT_EQ(x.size(), y.size()) << t.name;
    if (rel == 0) {
      EXPECT_EQ(x, y) << t.name;
      continue;
    }
    double mx = 0, diff = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      mx = std::max(mx, static_cast<double>(std::fabs(x[i])));
      diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
    }
    EXPECT_LE(diff, rel * mx) << t.name << ": max diff " << diff << ", max " << mx;
  }
}

std::vector<double> jsonl_losses(const std::string& path) {
  std::vector<double> v;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return v;
}

struct GradCase {
  int ranks;
  std::string flags;
  bool bitwise;  // else within 1e-6
};

class DistCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hp_dist_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    test::write_small_run_inputs(path("text.txt"), path("cfg.json"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  double expect_pipelined_grad(const std::string& extra, const std::string& says,
                               const std::vector<GradCase>& cases);

  fs::path dir_;
};

// `grad` of checkpoint m with `extra` flags in one process and under mpirun for each case: the
// same loss and gradient file (bitwise or within 1e-6), and, when `says` is given, the pipelined
// run prints it. Returns the single-process loss.
double DistCliTest::expect_pipelined_grad(const std::string& extra, const std::string& says,
                                          const std::vector<GradCase>& cases) {
  const std::string common = fmt::format(
      "grad --checkpoint={} --data={} --seq-len=24 --microbatch-size=2 --microbatches=4 "
      "--threads=1{}",
      path("m"), path("text.txt"), extra);
  const RunResult one = run(0, common + " --out=" + path("g1.st"));
  EXPECT_EQ(one.rc, 0) << one.out;
  if (one.rc != 0) return 0;
  const double loss1 = nlohmann::json::parse(last_line(one.out))["loss"].get<double>();
  for (const GradCase& c : cases) {
    SCOPED_TRACE(fmt::format("{} ranks {}{}", c.ranks, c.flags, extra));
    const RunResult d = run(c.ranks, common + " " + c.flags + " --out=" + path("gd.st"));
    EXPECT_EQ(d.rc, 0) << d.out;
    if (d.rc != 0) continue;
    if (!says.empty()) {
      EXPECT_NE(d.out.find(says), std::string::npos) << d.out;
    }
    const double lossd = nlohmann::json::parse(last_line(d.out))["loss"].get<double>();
    if (c.bitwise) {
      EXPECT_EQ(lossd, loss1);
    } else {
      EXPECT_NEAR(lossd, loss1, 1e-6 * loss1);
    }
    expect_same_tensors(path("g1.st"), path("gd.st"), c.bitwise ? 0.0 : 1e-6);
  }
  return loss1;
}

TEST_F(DistCliTest, GradUnderMpirunEqualsSingleProcess) {
  ASSERT_EQ(run(0, "init --model=" + path("cfg.json") + " --seed=5 --out=" + path("m")).rc, 0);
  expect_pipelined_grad("", "",
                        {{4, "--schedule=1f1b --stages=4", true},
                         {2, "--schedule=gpipe --stages=2", true},
                         {2, "--schedule=helix --stages=2 --folds=2", false},
                         {4, "--schedule=helix --stages=2 --folds=2 --data-parallel=2", false}});
}

// --tensor-parallel=T (docs/tensor-parallel.md) on an untied grouped-query model (8 heads over 4
// key/value heads): the gradient file equals the single process's within 1e-6 for HelixPipe,
// 1F1B and ZB1P with T = 2 x P = 2, T = 2 x D = 2 and T = 4 alone; a group size that does not
// divide the heads is refused by every rank before anything is written.
TEST_F(DistCliTest, GradWithTensorParallelEqualsSingleProcess) {
  write_file_atomic(path("tp.json"),
                    R"({"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 8,
                        "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 256,
                        "tie_word_embeddings": false})");
  ASSERT_EQ(run(0, "init --model=" + path("tp.json") + " --seed=5 --out=" + path("m")).rc, 0);
  expect_pipelined_grad(
      "", "x 2 ranks",
      {{4, "--schedule=helix --stages=2 --folds=2 --tensor-parallel=2", false},
       {4, "--schedule=1f1b --stages=2 --tensor-parallel=2", false},
       {4, "--schedule=zb1p --stages=2 --tensor-parallel=2", false},
       {4, "--schedule=gpipe --stages=1 --tensor-parallel=2 --data-parallel=2", false}});
  expect_pipelined_grad("", "x 4 ranks", {{4, "--schedule=gpipe --stages=1 --tensor-parallel=4",
                                           false}});
  const RunResult bad = run(3, fmt::format("grad --checkpoint={} --data={} --seq-len=24 "
                                           "--microbatch-size=2 --microbatches=4 --threads=1 "
                                           "--schedule=gpipe --stages=1 --tensor-parallel=3 "
                                           "--out={}",
                                           path("m"), path("text.txt"), path("g3.st")));
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("a tensor-parallel group of 3 must divide"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("groups that work: 1, 2, 4"), std::string::npos) << bad.out;
  EXPECT_FALSE(fs::exists(path("g3.st")));
}

// --precision=bf16 reaches every stage: the pipelined gradient in bf16 equals the single
// process's bf16 gradient (bitwise for GPipe, within f32 summation order for HelixPipe with two
// replicas) and differs from the fp32 one.
TEST_F(DistCliTest, Bf16GradUnderMpirunEqualsSingleProcessBf16) {
  if (!hp::make_cpu_backend(1)->kernels().supports(hp::Precision::bf16()))
    GTEST_SKIP() << "the CPU backend offers no bf16 here (it needs AVX512-BF16 and oneDNN)";
  ASSERT_EQ(run(0, "init --model=" + path("cfg.json") + " --seed=5 --out=" + path("m")).rc, 0);
  const double loss16 = expect_pipelined_grad(
      " --precision=bf16", "bf16)",
      {{2, "--schedule=gpipe --stages=2", true},
       {4, "--schedule=helix --stages=2 --folds=2 --data-parallel=2", false}});
  const RunResult f32 = run(0, fmt::format("grad --checkpoint={} --data={} --seq-len=24 "
                                           "--microbatch-size=2 --microbatches=4 --threads=1 "
                                           "--out={}",
                                           path("m"), path("text.txt"), path("g32.st")));
  ASSERT_EQ(f32.rc, 0) << f32.out;
  EXPECT_NE(loss16, nlohmann::json::parse(last_line(f32.out))["loss"].get<double>());
}

TEST_F(DistCliTest, SaveAndResumeWithAnotherPipelineDepth) {
  const std::string common = fmt::format(
      "train --model={} --seed=9 --data={} --seq-len=24 --microbatch-size=2 --microbatches=4 "
      "--steps=15 --lr=3e-3 --warmup=3 --threads=1",
      path("cfg.json"), path("text.txt"));
  // Fifteen steps in one run (P = 2), saved at step 10 by a second run that stops there.
  const RunResult full = run(2, common + " --schedule=1f1b --stages=2 --log=" + path("full.jsonl") +
                              " --save=" + path("full") + " --loss-svg=" + path("loss.svg"));
  ASSERT_EQ(full.rc, 0) << full.out;
  EXPECT_NE(full.out.find("MFU against"), std::string::npos) << full.out;
  // The loss curve is written by rank 0.
  std::ifstream svg(path("loss.svg"));
  std::string svg_text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg_text.find("<svg"), std::string::npos);
  EXPECT_NE(svg_text.find("</svg>"), std::string::npos);
  const RunResult first = run(2, common + " --schedule=1f1b --stages=2 --stop-after=10 --save=" +
                               path("at10") + " --log=" + path("first.jsonl"));
  ASSERT_EQ(first.rc, 0) << first.out;
  const std::vector<double> all = jsonl_losses(path("full.jsonl"));
  ASSERT_EQ(all.size(), 15u);
  const std::vector<double> ten = jsonl_losses(path("first.jsonl"));
  ASSERT_EQ(ten.size(), 10u);
  EXPECT_EQ(ten, std::vector<double>(all.begin(), all.begin() + 10));
  EXPECT_LT(all.back(), all.front());  // it learns
  // Resume the step-10 save with P = 4 under mpirun, and in one process.
  struct Case {
    int ranks;
    std::string flags;
  };
  for (const Case& c : {Case{4, "--schedule=1f1b --stages=4"}, Case{0, ""}}) {
    SCOPED_TRACE(fmt::format("resume with {} ranks {}", c.ranks, c.flags));
    fs::remove_all(path("resumed"));
    fs::remove(path("resumed.jsonl"));
    const RunResult r = run(c.ranks, "train --resume=" + path("at10") + " --data=" + path("text.txt") +
                                   " --threads=1 " + c.flags + " --save=" + path("resumed") +
                                   " --log=" + path("resumed.jsonl"));
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(jsonl_losses(path("resumed.jsonl")), std::vector<double>(all.begin() + 10, all.end()));
    expect_same_tensors(open_checkpoint(path("full")).model_path,
                        open_checkpoint(path("resumed")).model_path, 0.0);
  }
}

// Without mpirun, the pipeline flags run the ranks as threads of this one process (docs/cli.md):
// the same gradients as the single-process run, and as the MPI ranks give (above).
TEST_F(DistCliTest, GradOnInProcessRanksEqualsSingleProcess) {
  ASSERT_EQ(run(0, "init --model=" + path("cfg.json") + " --seed=5 --out=" + path("m")).rc, 0);
  expect_pipelined_grad("", "",
                        {{0, "--schedule=1f1b --stages=4", true},
                         {0, "--schedule=helix --stages=2 --folds=2 --data-parallel=2", false}});
}

// A configuration error found on every rank is printed once, in helixpipe's words, with exit code
// 1: not once per rank and without Open MPI's MPI_ABORT banner; the same with in-process ranks.
TEST_F(DistCliTest, ConfigErrorOnEveryRankIsPrintedOnce) {
  const std::string args = fmt::format(
      "train --model={} --data={} --seq-len=24 --microbatches=4 --steps=2 --threads=1 "
      "--schedule=helix",
      path("cfg.json"), path("text.txt"));
  const std::string says =
      "the model's 4 layers (num_hidden_layers) is not a multiple of --stages=3; stage counts "
      "that divide 4: 1, 2, 4";
  for (const auto& [ranks, extra] : {std::pair{3, std::string()}, std::pair{0, std::string(" --stages=3")}}) {
    SCOPED_TRACE(ranks);
    const RunResult r = run(ranks, args + extra, 90);
    EXPECT_EQ(r.rc, 1) << r.out;
    const size_t first = r.out.find(says);
    ASSERT_NE(first, std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(says, first + 1), std::string::npos) << "printed more than once:\n" << r.out;
    EXPECT_NE(r.out.find("helixpipe train: error: helix needs"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("MPI_ABORT"), std::string::npos) << r.out;
  }
  // Missing data: the error names the file once.
  const RunResult miss = run(2, fmt::format("train --model={} --data={} --seq-len=24 --steps=2 "
                                            "--threads=1",
                                            path("cfg.json"), path("nothing.txt")),
                             90);
  EXPECT_EQ(miss.rc, 1) << miss.out;
  const size_t at = miss.out.find("nothing.txt");
  ASSERT_NE(at, std::string::npos) << miss.out;
  EXPECT_EQ(miss.out.find("nothing.txt", at + 1), std::string::npos) << miss.out;
  EXPECT_EQ(miss.out.find("MPI_ABORT"), std::string::npos) << miss.out;
}

TEST_F(DistCliTest, KilledRankEndsTheJobNamingIt) {
  // HP_TEST_KILL_RANK=1:3: rank 1 raises SIGKILL when step 3 starts (test-only hook).
  const RunResult r = run(2,
                    fmt::format("train --model={} --data={} --seq-len=24 --microbatches=4 "
                                "--steps=50 --threads=1 --schedule=1f1b --stages=2",
                                path("cfg.json"), path("text.txt")),
                    90, "HP_TEST_KILL_RANK=1:3");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, 124) << "the job hung until the timeout:\n" << r.out;
  EXPECT_TRUE(names_killed_rank_1(r.out)) << r.out;
}

TEST_F(DistCliTest, BrokenScheduleFileRefusedBeforeAnyRankComputes) {
  const RunResult r = run(2,
                    fmt::format("train --model=tiny --data={} --seq-len=16 --microbatches=2 "
                                "--steps=5 --threads=1 --log={} --schedule-file={}",
                                path("text.txt"), path("log.jsonl"),
                                std::string(HP_SOURCE_DIR) +
                                    "/tests/runtime/data/broken_deadlock.txt"),
                    90);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, 124) << r.out;
  EXPECT_NE(r.out.find("broken_deadlock.txt refused before any rank computes"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("train (distributed)"), std::string::npos) << r.out;  // no step ran
  EXPECT_FALSE(fs::exists(path("log.jsonl")) && fs::file_size(path("log.jsonl")) > 0);
}

TEST_F(DistCliTest, ProfileAndBenchUnderMpirun) {
  // profile: the link comes from an MPI ping-pong between the two ranks.
  const RunResult prof = run(2, "profile --model=" + path("cfg.json") +
                                    " --seq-len=32 --repeats=1 --format=json --out=" + path("c.json"));
  ASSERT_EQ(prof.rc, 0) << prof.out;
  const auto info = nlohmann::json::parse(prof.out.substr(prof.out.find('{')))["info"];
  EXPECT_NE(info["link_source"].get<std::string>().find("MPI ping-pong"), std::string::npos)
      << info.dump();
  std::ifstream cf(path("c.json"));
  const auto costs = nlohmann::json::parse(cf);
  EXPECT_GT(costs["link"]["latency_s"].get<double>(), 0);
  EXPECT_GT(costs["link"]["bandwidth_Bps"].get<double>(), 0);

  // bench: one MPI process per stage; the stash prediction is exact, and the same bytes as the
  // in-process ranks measure; the measured timeline holds both stages' events.
  const std::string args = "bench --model=" + path("cfg.json") +
                           " --seq-len=32 --microbatches=4 --part-costs=" + path("c.json");
  const RunResult mpi = run(2, args + " --timeline=" + path("tl.svg") + " --timeline-label=1f1b" +
                                   " --trace-dir=" + path("") + " --out=" + path("b_mpi.json"));
  ASSERT_EQ(mpi.rc, 0) << mpi.out;
  const RunResult local = run(0, args + " --stages=2 --out=" + path("b_local.json"));
  ASSERT_EQ(local.rc, 0) << local.out;
  std::ifstream fm(path("b_mpi.json")), fl(path("b_local.json"));
  const auto jm = nlohmann::json::parse(fm), jl = nlohmann::json::parse(fl);
  EXPECT_NE(jm["transport"].get<std::string>().find("MPI"), std::string::npos);
  EXPECT_NE(jl["transport"].get<std::string>().find("LocalWorld"), std::string::npos);
  ASSERT_EQ(jm["rows"].size(), 5u) << mpi.out;
  ASSERT_EQ(jl["rows"].size(), 5u) << local.out;
  for (size_t i = 0; i < 5; ++i) {
    const auto& r = jm["rows"][i];
    EXPECT_EQ(r["label"], jl["rows"][i]["label"]);
    EXPECT_TRUE(r["stash_exact"].get<bool>()) << r.dump();
    EXPECT_EQ(r["peak_stash_bytes"], jl["rows"][i]["peak_stash_bytes"]) << r["label"];
    ASSERT_EQ(r["stages_measured"].size(), 2u);
    for (const auto& st : r["stages_measured"]) EXPECT_GT(st["busy_s"].get<double>(), 0);
  }
  const auto tl = nlohmann::json::parse(std::ifstream(path("trace_1f1b.json")));
  std::set<int> pids;
  for (const auto& ev : tl["traceEvents"])
    if (ev.value("ph", "") == "X") pids.insert(ev["pid"].get<int>());
  EXPECT_EQ(pids.size(), 2u) << "the measured trace should hold both stages' events";

  const RunResult wrong = run(2, args + " --stages=3");
  EXPECT_NE(wrong.rc, 0);
  EXPECT_NE(wrong.out.find("mpirun started 2 ranks but --data-parallel x --stages x "
                           "--tensor-parallel is 1 x 3 x 1 = 3"),
            std::string::npos)
      << wrong.out;
}

// bench on a D x P x T grid: two tensor-parallel ranks on one stage count the same collectives
// and bytes, hold less than the whole stage's weights, and get the link model's time for those
// collectives beside the measured one; two replicas count none. A rank count that is not
// D x P x T is refused with the product spelled out.
TEST_F(DistCliTest, BenchOnTensorAndDataParallelGrids) {
  const RunResult prof = run(2, "profile --model=" + path("cfg.json") +
                                    " --seq-len=32 --repeats=1 --out=" + path("c.json"));
  ASSERT_EQ(prof.rc, 0) << prof.out;
  const std::string args = "bench --model=" + path("cfg.json") +
                           " --seq-len=32 --microbatches=2 --schedules=1f1b --stages=1"
                           " --part-costs=" + path("c.json");
  const RunResult tp = run(2, args + " --tensor-parallel=2 --out=" + path("tp.json"));
  ASSERT_EQ(tp.rc, 0) << tp.out;
  EXPECT_NE(tp.out.find("D=1 P=1 T=2"), std::string::npos) << tp.out;
  EXPECT_NE(tp.out.find("tensor-parallel:"), std::string::npos) << tp.out;
  const RunResult dp = run(2, args + " --data-parallel=2 --out=" + path("dp.json"));
  ASSERT_EQ(dp.rc, 0) << dp.out;
  const RunResult one = run(0, args + " --out=" + path("one.json"));
  ASSERT_EQ(one.rc, 0) << one.out;
  const auto jt = nlohmann::json::parse(std::ifstream(path("tp.json")));
  const auto jd = nlohmann::json::parse(std::ifstream(path("dp.json")));
  const auto j1 = nlohmann::json::parse(std::ifstream(path("one.json")));
  EXPECT_EQ(jt["tensor_parallel"], 2);
  EXPECT_EQ(jd["data_parallel"], 2);
  const auto& rt = jt["rows"][0]["ranks_measured"];
  const auto& rd = jd["rows"][0]["ranks_measured"];
  const auto& r1 = j1["rows"][0]["ranks_measured"];
  ASSERT_EQ(rt.size(), 2u);
  ASSERT_EQ(rd.size(), 2u);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_GT(rt[0]["tp_collectives"].get<int64_t>(), 0);
  EXPECT_EQ(rt[0]["tp_collectives"], rt[1]["tp_collectives"]);
  EXPECT_EQ(rt[0]["tp_bytes_sent"], rt[1]["tp_bytes_sent"]);
  for (const auto& r : rd) EXPECT_EQ(r["tp_collectives"], 0);
  // The layers' matrices are split, the embedding, head and norms are not.
  const int64_t whole = r1[0]["param_bytes"].get<int64_t>();
  for (const auto& r : rt) {
    EXPECT_LT(r["param_bytes"].get<int64_t>(), whole);
    EXPECT_GT(r["param_bytes"].get<int64_t>(), whole / 2);
  }
  for (const auto& r : rd) EXPECT_EQ(r["param_bytes"].get<int64_t>(), whole);
  // fp32: the master weights and their gradients, no compute copy; the all-reduce sums the latter.
  for (const auto& r : rd) EXPECT_EQ(2 * r["grad_bytes"].get<int64_t>(), whole);
  EXPECT_GT(jt["rows"][0]["tp_comm_pred_s"].get<double>(), 0);
  EXPECT_GT(jt["rows"][0]["tp_comm_s"].get<double>(), 0);
  // The step is predicted for T = 2 (part costs / T plus the collectives on the group's link), with
  // each rank's stash exactly half the stage's, and for D = 2 (one replica's pipeline and its
  // gradient all-reduce).
  EXPECT_NE(tp.out.find("With T = 2"), std::string::npos) << tp.out;
  EXPECT_GT(jt["rows"][0]["predicted_step_s"].get<double>(), 0);
  EXPECT_GT(jt["rows"][0]["replay_step_s"].get<double>(), 0);
  EXPECT_EQ(jt["rows"][0]["predicted_steps_s"].size(), jt["rows"][0]["steps_s"].size());
  EXPECT_TRUE(jt["rows"][0]["stash_exact"].get<bool>()) << jt["rows"][0].dump();
  const auto& rowd = jd["rows"][0];
  EXPECT_GT(rowd["predicted_step_s"].get<double>(), 0) << rowd.dump();
  EXPECT_EQ(rowd["predicted_steps_s"].size(), rowd["steps_s"].size());
  EXPECT_TRUE(rowd["stash_exact"].get<bool>()) << rowd.dump();
  ASSERT_EQ(rowd["predicted_dp_allreduce_s"].size(), 1u);
  EXPECT_GT(rowd["predicted_dp_allreduce_s"][0].get<double>(), 0);
  EXPECT_NE(dp.out.find("With D = 2"), std::string::npos) << dp.out;
  // Two replicas move twice the tokens of one in a step.
  EXPECT_NEAR(jd["rows"][0]["tokens_per_s"].get<double>() * jd["rows"][0]["step_s"].get<double>(),
              2 * 64, 1e-9);

  const RunResult wrong = run(2, args + " --tensor-parallel=2 --data-parallel=2");
  EXPECT_NE(wrong.rc, 0);
  EXPECT_NE(wrong.out.find("--data-parallel x --stages x --tensor-parallel is 2 x 1 x 2 = 4"),
            std::string::npos)
      << wrong.out;
}

// profile --tensor-parallel: each rank times its shards with the group's collectives; the file
// says so, simulate takes it only with the same --tp, and bench uses it as measured (without the
// calibration, which needs a whole-stage profile).
TEST_F(DistCliTest, ProfileOfATensorParallelRankFeedsSimulateAndBench) {
  const RunResult prof = run(2, "profile --model=" + path("cfg.json") +
                                    " --seq-len=32 --repeats=1 --tensor-parallel=2" +
                                    " --format=json --out=" + path("tp_costs.json"));
  ASSERT_EQ(prof.rc, 0) << prof.out;
  const auto costs = nlohmann::json::parse(std::ifstream(path("tp_costs.json")));
  ASSERT_TRUE(costs.contains("tensor_parallel")) << costs.dump();
  EXPECT_EQ(costs["tensor_parallel"]["size"], 2);
  EXPECT_GT(costs["tensor_parallel"]["collective_s"].get<double>(), 0);
  // The runtime's collectives per micro-batch and pass: the simulator's counts, plus the gather of
  // the loss statistics in the head's forward.
  const auto report = nlohmann::json::parse(prof.out.substr(prof.out.find('{')));
  const auto& counts = report["info"]["collectives_per_part"];
  EXPECT_EQ(counts["embed"]["F"], 1);
  EXPECT_EQ(counts["pre"]["F"], 0);
  EXPECT_EQ(counts["attn"]["F"], 1);
  EXPECT_EQ(counts["post"]["F"], 3);
  EXPECT_EQ(counts["head"]["F"], 2);
  EXPECT_EQ(counts["post"]["I"], 4);
  EXPECT_EQ(counts["post"]["W"], 3);

  const std::string sim =
      "simulate --schedule=1f1b --stages=1 --microbatches=2 --model=" + path("cfg.json") +
      " --seq-len=32 --part-costs=" + path("tp_costs.json");
  const RunResult no_tp = run(0, sim);
  EXPECT_EQ(no_tp.rc, 1) << no_tp.out;
  EXPECT_NE(no_tp.out.find("simulate it with --tp=2"), std::string::npos) << no_tp.out;
  const RunResult with_tp = run(0, sim + " --tp=2 --format=json");
  ASSERT_EQ(with_tp.rc, 0) << with_tp.out;
  EXPECT_EQ(nlohmann::json::parse(with_tp.out)["tensor_parallel"], 2);
  const RunResult alone = run(
      0, "profile --model=" + path("cfg.json") + " --seq-len=32 --repeats=1 --tensor-parallel=2");
  EXPECT_EQ(alone.rc, 1) << alone.out;
  EXPECT_NE(alone.out.find("mpirun -np 2"), std::string::npos) << alone.out;

  const std::string bench = "bench --model=" + path("cfg.json") +
                            " --seq-len=32 --microbatches=2 --schedules=1f1b --stages=1"
                            " --tensor-parallel=2 --part-costs=" +
                            path("tp_costs.json");
  const RunResult calibrated = run(2, bench);
  EXPECT_NE(calibrated.rc, 0);
  EXPECT_NE(calibrated.out.find("add --no-calibrate"), std::string::npos) << calibrated.out;
  const RunResult b = run(2, bench + " --no-calibrate --out=" + path("tp_bench.json"));
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("from profile --tensor-parallel=2"), std::string::npos) << b.out;
  const auto row = nlohmann::json::parse(std::ifstream(path("tp_bench.json")))["rows"][0];
  EXPECT_GT(row["predicted_step_s"].get<double>(), 0);
  EXPECT_TRUE(row["stash_exact"].get<bool>()) << row.dump();
  // The step's collectives charged at the profile's measured time per N x h collective.
  EXPECT_GT(row["tp_comm_pred_profile_s"].get<double>(), 0) << row.dump();
  EXPECT_NE(b.out.find("the profile's measured collective"), std::string::npos) << b.out;
  // A whole-stage run cannot take a rank's profile.
  const RunResult whole = run(2, "bench --model=" + path("cfg.json") +
                                     " --seq-len=32 --microbatches=2 --schedules=1f1b --stages=2"
                                     " --no-calibrate --part-costs=" +
                                     path("tp_costs.json"));
  EXPECT_NE(whole.rc, 0);
  EXPECT_NE(whole.out.find("this run has --tensor-parallel=1"), std::string::npos) << whole.out;
}

}  // namespace
}  // namespace hp

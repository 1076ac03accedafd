// The simulate and compare commands, run as a user runs them: the built helixpipe binary, its exit
// code, its text/JSON output and the files it writes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "run_cli.h"
#include "../svg_test_util.h"

namespace {

using Ran = hp::test::CliResult;

Ran helixpipe(const std::string& args) { return hp::test::run_helixpipe(args); }

// stdout only (JSON commands), with the exit code.
nlohmann::json helixpipe_json(const std::string& args, int* rc) {
  const Ran r = hp::test::run_cli(args);
  *rc = r.rc;
  return nlohmann::json::parse(r.out);
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("hp_sim_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name, const std::string& content = "") const {
    std::string p = (path_ / name).string();
    if (!content.empty()) std::ofstream(p) << content;
    return p;
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Uniform layers (pre, attn, post each F=1, I=1.5, W=0.5), free links.
const char* kUniform =
    R"({"pre":{"F":1,"I":1.5,"W":0.5},"attn":{"F":1,"I":1.5,"W":0.5},)"
    R"("post":{"F":1,"I":1.5,"W":0.5},"link":{"latency_s":0,"bandwidth_Bps":0}})";

TEST(SimulateCli, PartCostsJsonMatchesTheClosedForm) {
  TempDir d;
  std::string costs = d.file("costs.json", kUniform);
  for (int m : {1, 4, 8}) {
    int rc = 0;
    auto j = helixpipe_json("simulate --schedule=1f1b --stages=4 --microbatches=" + std::to_string(m) +
                                " --layers=8 --part-costs=" + costs + " --format=json",
                            &rc);
    ASSERT_EQ(rc, 0);
    const double op = 2 * 3 * 3.0;  // two layers per stage, F + B = 3 per part, 3 parts
    EXPECT_NEAR(j["makespan"].get<double>(), (m + 3) * op, 1e-9);
    EXPECT_NEAR(j["bubble"].get<double>(), 3 * op, 1e-9);
    ASSERT_EQ(j["stages"].size(), 4u);
    for (const auto& st : j["stages"]) {
      EXPECT_NEAR(st["busy"].get<double>(), m * op, 1e-9);
      EXPECT_TRUE(st.contains("peak_activation_bytes"));
    }
    EXPECT_EQ(j["schedule"], "1f1b");
    EXPECT_TRUE(j.contains("tokens_per_s"));
  }
}

TEST(SimulateCli, ModelAndDeviceGiveThroughputMemoryAndTimelines) {
  TempDir d;
  std::string svg = d.file("t.svg"), trace = d.file("t.json");
  int rc = 0;
  auto j = helixpipe_json(
      "simulate --schedule=helix --stages=4 --microbatches=8 --folds=2 --model=1.3b "
      "--seq-len=32768 --device=h20 --format=json --timeline=" + svg + " --trace=" + trace,
      &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_LT(j["mfu"].get<double>(), 1);
  EXPECT_EQ(j["recompute"], "no-attn");
  // Balanced, but for the tail's head on stage 0: its rstdf and lsece (2 x 32768 values of 2 bytes
  // in the profile's bf16) for each of the 8 micro-batches.
  const int64_t first = j["stages"][0]["peak_activation_bytes"];
  const int64_t second = j["stages"][1]["peak_activation_bytes"];
  EXPECT_GT(second, 0);
  EXPECT_EQ(first - second, 8 * 2 * 32768 * 2);
  for (size_t i = 1; i < j["stages"].size(); ++i)
    EXPECT_EQ(j["stages"][i]["peak_activation_bytes"].get<int64_t>(), second);
  std::string s = slurp(svg);
  EXPECT_NE(s.find("<svg"), std::string::npos);
  EXPECT_NE(s.find("</svg>"), std::string::npos);
  // The time axis is in the unit the makespan calls for, with round ticks up to about it (the
  // picture ends with its last event, which may be a message after the last compute).
  const double makespan = j["makespan"].get<double>();
  const char* unit = makespan >= 1 ? "s" : makespan >= 1e-3 ? "ms" : "us";
  const double per_s = makespan >= 1 ? 1 : makespan >= 1e-3 ? 1e3 : 1e6;
  const auto nodes = hp::test::parse_svg(s);
  const auto label = hp::test::texts(nodes, "axis", "axislabel");
  ASSERT_EQ(label.size(), 1u);
  EXPECT_EQ(label[0]->text, std::string("time (") + unit + ")");
  std::vector<std::string> ticks;
  for (const auto* t : hp::test::texts(nodes, "axis", "tick")) ticks.push_back(t->text);
  std::vector<double> v;
  ASSERT_TRUE(hp::test::round_tick_labels(ticks, &v));
  EXPECT_LE(v.back(), makespan * per_s * 1.02);
  EXPECT_GT(v.back() + (v[1] - v[0]), makespan * per_s * 0.98);
  auto t = nlohmann::json::parse(slurp(trace));
  EXPECT_GT(t["traceEvents"].size(), 100u);
}

TEST(SimulateCli, TextOutputNamesTheFigures) {
  Ran r = helixpipe("simulate --schedule=zb1p --stages=2 --microbatches=4 --model=tiny "
                    "--seq-len=1024 --device=cpu");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* w : {"makespan", "bubble", "throughput", "peak stash", "s0->s1"})
    EXPECT_NE(r.out.find(w), std::string::npos) << w << "\n" << r.out;
}

TEST(CompareCli, EverySchedulesSideBySide) {
  int rc = 0;
  auto j = helixpipe_json("compare --model=1.3b --seq-len=65536 --stages=4 --microbatches=8 "
                          "--device=h20 --format=json",
                          &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(j["results"].size(), 10u);
  double one_f_one_b = 0, helix = 0;
  for (const auto& r : j["results"]) {
    ASSERT_FALSE(r.contains("error")) << r.dump();
    if (r["label"] == "1f1b") one_f_one_b = r["tokens_per_s"];
    if (r["label"] == "helix F=1") helix = r["tokens_per_s"];
    if (r["label"] != "adapipe") continue;
    // AdaPipe's plan: the 24 layers over the 4 stages, a policy per stage, on 1F1B.
    const auto layers = r["partition"].get<std::vector<int>>();
    ASSERT_EQ(layers.size(), 4u);
    EXPECT_EQ(layers[0] + layers[1] + layers[2] + layers[3], 24);
    EXPECT_EQ(r["stage_recompute"].size(), 4u);
    EXPECT_EQ(r["schedule"], "1f1b");
  }
  // Attention dominates at 64k with h=2048: HelixPipe's bubble has no attention in it.
  EXPECT_GT(helix, one_f_one_b);
  Ran text = helixpipe("compare --model=1.3b --seq-len=65536 --stages=3 --microbatches=8 --device=h20");
  ASSERT_EQ(text.rc, 0) << text.out;
  // 24 layers on 3 stages is fine for helix; interleaved V=2 needs m % p == 0.
  EXPECT_NE(text.out.find("interleaved V=2  n/a"), std::string::npos) << text.out;
}

// A GPT-style preset (docs/simulator.md "Model kinds") is simulated; the commands that run the
// real model refuse it instead of training a LLaMA of its sizes.
TEST(CompareCli, GptPresetIsSimulatedNotRun) {
  int rc = 0;
  auto j = helixpipe_json("compare --model=gpt-1.3b --seq-len=16384 --stages=4 --microbatches=8 "
                          "--device=h20 --format=json",
                          &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(j["results"].size(), 10u);
  for (const auto& r : j["results"]) EXPECT_FALSE(r.contains("error")) << r.dump();
  const std::string want =
      "model 'gpt-7b' is GPT-style; helixpipe trains LLaMA-style models only; it can be simulated "
      "with simulate/compare/plan/sweep";
  const std::string readme = std::string(HP_SOURCE_DIR) + "/README.md";
  for (const std::string& args :
       {"train --model=gpt-7b --data=" + readme + " --steps=1",
        std::string("bench --model=gpt-7b --seq-len=64 --microbatches=2"),
        std::string("profile --model=gpt-7b --seq-len=64"),
        std::string("init --model=gpt-7b --out=") + testing::TempDir() + "/gpt_init"}) {
    const Ran r = helixpipe(args);
    EXPECT_EQ(r.rc, 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
  }
}

// --tp / --data-parallel: one pipeline of a TP x PP x DP layout. Checked against the tp = dp = 1
// run of the same command: messages and stash per GPU fall by t exactly (each TP rank holds and
// sends a 1/t shard), DP multiplies the tokens and adds the gradient all-reduce to the iteration.
TEST(CompareCli, TensorAndDataParallelLayouts) {
  const std::string base = "compare --model=1.3b --seq-len=16384 --stages=4 --microbatches=8 "
                           "--device=h20 --format=json";
  int rc = 0;
  auto one = helixpipe_json(base, &rc);
  ASSERT_EQ(rc, 0);
  auto tp2 = helixpipe_json(base + " --tp=2", &rc);
  ASSERT_EQ(rc, 0);
  auto dp4 = helixpipe_json(base + " --data-parallel=4", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(tp2["tp"], 2);
  EXPECT_EQ(dp4["data_parallel"], 4);
  ASSERT_EQ(one["results"].size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    const auto &a = one["results"][i], &b = tp2["results"][i], &d = dp4["results"][i];
    ASSERT_FALSE(a.contains("error")) << a.dump();
    for (const char* k : {"label", "schedule", "folds", "recompute", "tokens_per_s",
                          "speedup_vs_1f1b", "fits", "memory_per_gpu_bytes"}) {
      EXPECT_TRUE(b.contains(k)) << k;
      EXPECT_TRUE(d.contains(k)) << k;
    }
    EXPECT_EQ(a["label"], b["label"]);
    // AdaPipe searches each layout for itself; its rows compare only when the plans agree.
    if (a.contains("partition") && (a["partition"] != b["partition"] ||
                                    a["stage_recompute"] != b["stage_recompute"] ||
                                    a["partition"] != d["partition"]))
      continue;
    // Without DP the iteration is the pipeline's makespan and tokens/s its own.
    EXPECT_DOUBLE_EQ(a["iteration_s"].get<double>(), a["makespan"].get<double>());
    EXPECT_DOUBLE_EQ(a["allreduce_s"].get<double>(), 0.0);
    // Bytes per pair: each TP rank sends 1/2 of every message (rounded per message).
    ASSERT_EQ(a["pair_bytes"].size(), b["pair_bytes"].size());
    for (size_t k = 0; k < a["pair_bytes"].size(); ++k) {
      const double full = a["pair_bytes"][k]["bytes"], half = b["pair_bytes"][k]["bytes"];
      EXPECT_NEAR(half, full / 2, 1e4) << a["label"];
    }
    // Each TP rank holds half a stage's stash, plus half of the loss's log-sum-exp (whole on every
    // rank: 16384 x 2 bytes per micro-batch, at most 8 in flight).
    for (size_t st = 0; st < a["stages"].size(); ++st) {
      const int64_t whole = a["stages"][st]["peak_activation_bytes"].get<int64_t>();
      const int64_t rank = b["stages"][st]["peak_activation_bytes"].get<int64_t>();
      EXPECT_GE(rank, whole / 2);
      EXPECT_LE(rank, whole / 2 + 8 * 16384 * 2);
    }
    // Half the compute per GPU, plus the SP collectives: faster, but not twice as fast.
    EXPECT_LT(b["makespan"].get<double>(), a["makespan"].get<double>());
    EXPECT_GT(b["makespan"].get<double>(), a["makespan"].get<double>() / 2);
    // DP changes the placement (a node holds 8 / (t*d) = 2 stages instead of 8), so a DP row is
    // checked against its own makespan.
    const double it = d["iteration_s"], ar = d["allreduce_s"], mk = d["makespan"];
    EXPECT_GT(ar, 0);
    EXPECT_DOUBLE_EQ(it, mk + ar);
    EXPECT_NEAR(d["tokens_per_s"].get<double>(), 4.0 * 8 * 16384 / it, 1e-6 * 4 * 8 * 16384 / it);
    EXPECT_EQ(d["fits"].get<bool>(),
              d["memory_per_gpu_bytes"].get<double>() <= dp4["memory_bytes"].get<double>());
  }
}

// A row over the device's memory is marked, in JSON and in the table, not listed as if it ran.
TEST(CompareCli, MarksRowsThatDoNotFit) {
  const std::string args = "compare --model=7b --seq-len=131072 --stages=8 --microbatches=16 "
                           "--device=h20";
  int rc = 0;
  auto j = helixpipe_json(args + " --format=json", &rc);
  ASSERT_EQ(rc, 0);
  const double limit = j["memory_bytes"];
  EXPECT_DOUBLE_EQ(limit, 96e9);
  int over = 0;
  for (const auto& r : j["results"]) {
    if (r.contains("error")) continue;
    const double mem = r["memory_per_gpu_bytes"];
    EXPECT_EQ(r["fits"].get<bool>(), mem <= limit) << r.dump();
    // The three parts add up, and the stash part is the busiest stage's.
    const auto& m = r["memory"];
    EXPECT_NEAR(mem, m["model_states"].get<double>() + m["activations"].get<double>() +
                         m["working"].get<double>(), 1.0);
    int64_t peak = 0;
    for (const auto& st : r["stages"]) peak = std::max(peak, st["peak_activation_bytes"].get<int64_t>());
    EXPECT_NEAR(m["activations"].get<double>(), static_cast<double>(peak), 1.0);
    over += r["fits"].get<bool>() ? 0 : 1;
  }
  // 1F1B without recomputation keeps up to 8 micro-batches of 4 layers at 128k on stage 0: far
  // over 96 GB (tens of GiB per layer and micro-batch).
  EXPECT_GT(over, 0);
  Ran text = helixpipe(args);
  ASSERT_EQ(text.rc, 0) << text.out;
  EXPECT_NE(text.out.find("DOES NOT FIT"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("mem/GPU"), std::string::npos) << text.out;
  // With TP8 the same pipeline's rows shrink by 8 and 1F1B fits.
  auto tp8 = helixpipe_json(args + " --tp=8 --format=json", &rc);
  ASSERT_EQ(rc, 0);
  for (const auto& r : tp8["results"]) {
    if (r["label"] == "1f1b") {
      EXPECT_TRUE(r["fits"].get<bool>()) << r.dump();
    }
  }
}

TEST(SimulateCli, BadInputSaysWhatIsWrong) {
  TempDir d;
  std::string costs = d.file("costs.json", kUniform);
  std::string broken = d.file("broken.json", "{\"attn\": {\"F\": -1}}");
  std::string notjson = d.file("notjson.json", "attn F 1");
  // Used to run and print "makespan inf" and "bubble -nan" with exit code 0.
  std::string huge = d.file("huge.json", "{\"attn\": {\"F\": 1e308, \"I\": 1e308}}");
  // Used to be read as {"attn": {"F": 1}}: the parser stopped at the NUL.
  std::string nul = d.file("nul.json", std::string("{\"attn\": {\"F\": 1}}\0{\"x\": 2}", 27));
  struct Case {
    std::string args, expect;
    int rc;
  };
  const Case cases[] = {
      {"simulate --schedule=zigzag --stages=2 --microbatches=2 --layers=2 --part-costs=" + costs,
       "--schedule must be one of gpipe, 1f1b, interleaved, zb1p, helix, got 'zigzag'", 2},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=2", "no cost source", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=2 --part-costs=" + costs +
           " --device=h20",
       "not both", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=2 "
       "--part-costs=/nonexistent.json",
       "/nonexistent.json", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=2 --part-costs=" + notjson,
       "not valid JSON", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=2 --part-costs=" + broken,
       "attn.F: expected a number >= 0", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=2 --part-costs=" + huge,
       "attn.F: expected a number >= 0 and at most 1000000 seconds, got 1e+308", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=2 --part-costs=" + nul,
       "NUL byte at offset 18 of 27", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --part-costs=" + costs, "--layers=L",
       1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --model=7b --seq-len=4096 "
       "--device=h20 "
       "--layers=4",
       "differs from the model's 32 layers", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --model=7b --device=h20", "--seq-len",
       1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --model=7b --seq-len=64 --device=tpu",
       "valid names are", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --model=nosuch --seq-len=64 "
       "--device=h20",
       "no such preset", 1},
      {"simulate --schedule=1f1b --stages=0 --microbatches=2 --layers=2 --part-costs=" + costs,
       "--stages", 2},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=2 --format=xml "
       "--part-costs=" +
           costs,
       "--format", 2},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=2 --recompute=some "
       "--part-costs=" +
           costs,
       "--recompute must be one of none, full, no-attn, selective, got 'some'", 2},
      {"simulate --schedule=helix --stages=3 --microbatches=3 --layers=4 --part-costs=" + costs,
       "nearest valid --layers", 1},
      {"simulate --schedule=1f1b --stages=2 --microbatches=2 --frobnicate", "--frobnicate", 2},
      {"compare --model=7b --seq-len=4096 --stages=2 --microbatches=2 --device=h20 --folds=2",
       "leave out --folds", 1},
      {"compare --model=7b --seq-len=4096 --stages=2 --microbatches=2 --device=h20 --tp=3",
       "must be a power of two", 1},
      {"compare --model=7b --seq-len=4096 --stages=2 --microbatches=2 --device=h20 --tp=16",
       "at most the 8 GPUs per node", 1},
      {"compare --stages=2 --microbatches=2 --layers=2 --part-costs=" + costs + " --tp=2",
       "holds a whole stage's costs: measure a group's with mpirun -np T helixpipe profile "
       "--tensor-parallel=T",
       1},
      {"compare --stages=2 --microbatches=2 --layers=2 --part-costs=" + costs +
           " --data-parallel=2",
       "--data-parallel needs --model, --seq-len and --device", 1},
      {"compare --stages=2 --microbatches=2 --layers=2 --part-costs=" + costs +
           " --data-parallel=0",
       "--data-parallel", 2},
  };
  for (const Case& c : cases) {
    Ran r = helixpipe(c.args);
    EXPECT_EQ(r.rc, c.rc) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST(SimulateCli, HelpHasExamples) {
  for (const char* cmd : {"simulate", "compare"}) {
    Ran r = helixpipe(std::string(cmd) + " --help");
    EXPECT_EQ(r.rc, 0);
    EXPECT_NE(r.out.find("examples:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--device"), std::string::npos);
  }
}

}  // namespace

namespace {

// plan states the overlap condition for HelixPipe: its per-layer bytes recomputed here from the
// layout it names (1.3b: h = 2048, MHA so q = 3h; T = 32768; bf16): (p-1)/p of the qkvr bundle
// (weights mode 2Th + hq, activations mode Tq + Th) and the ro bundle 2Th, / t; t_comm = bytes over
// the h20 profile's link (NVLink 450 GB/s, or 50 GB/s across nodes).
TEST(PlanCli, StatesTheOverlapCondition) {
  int rc = 0;
  auto j = helixpipe_json("plan --model=1.3b --seq-len=32768 --gpus=16 --device=h20 --format=json",
                          &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(j["overlap"].contains("helix")) << j["overlap"].dump();
  const auto& o = j["overlap"]["helix"];
  const std::string layout = o["layout"], config = o["config"];
  int t = 0, p = 0, d = 0;
  ASSERT_EQ(std::sscanf(layout.c_str(), "TP%d x PP%d x DP%d", &t, &p, &d), 3) << layout;
  ASSERT_NE(config.find("helix"), std::string::npos) << config;
  const double T = 32768, h = 2048, q = 3 * h;
  const double qkvr = config.find("weights") != std::string::npos ? 2 * T * h + h * q : T * q + T * h;
  const double bytes = (p - 1.0) / p * (qkvr + 2 * T * h) * 2 / t;
  EXPECT_NEAR(o["bytes_per_layer"].get<double>(), bytes, 1e-6 * bytes);
  const double bw = o["inter_node"].get<bool>() ? 50e9 : 450e9;
  EXPECT_NEAR(o["t_comm_s"].get<double>(), bytes / bw, 1e-9 * bytes / bw);
  const double ta = o["t_attn_s"], tc = o["t_comm_s"];
  EXPECT_GT(ta, 0);
  EXPECT_EQ(o["holds"].get<bool>(), ta >= tc);
  EXPECT_NE(o["text"].get<std::string>().find(ta >= tc ? "HelixPipe can hide its traffic"
                                                        : "HelixPipe cannot hide its traffic here"),
            std::string::npos)
      << o["text"];
  Ran text = helixpipe("plan --model=1.3b --seq-len=32768 --gpus=16 --device=h20");
  ASSERT_EQ(text.rc, 0) << text.out;
  EXPECT_NE(text.out.find("overlap per layer and micro-batch"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(o["text"].get<std::string>()), std::string::npos) << text.out;
}

TEST(PlanCli, RanksByThroughputAndRespectsTheMemoryLimit) {
  int rc = 0;
  auto roomy = helixpipe_json("plan --model=1.3b --seq-len=32768 --gpus=16 --device=h20 --memory=90 "
                              "--top=1000 --format=json",
                              &rc);
  ASSERT_EQ(rc, 0);
  auto tight = helixpipe_json("plan --model=1.3b --seq-len=32768 --gpus=16 --device=h20 --memory=20 "
                              "--top=1000 --format=json",
                              &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_GT(roomy["fit"].get<int>(), tight["fit"].get<int>());
  EXPECT_GT(tight["fit"].get<int>(), 0);
  for (const auto* j : {&roomy, &tight}) {
    const double limit = (*j)["memory_bytes"];
    double prev = 1e300;
    ASSERT_FALSE((*j)["ranked"].empty());
    for (const auto& r : (*j)["ranked"]) {
      EXPECT_LE(r["memory_per_gpu_bytes"].get<double>(), limit) << r.dump();
      EXPECT_LE(r["tokens_per_s"].get<double>(), prev);
      prev = r["tokens_per_s"];
      EXPECT_EQ(r["tp"].get<int>() * r["pp"].get<int>() * r["dp"].get<int>(), 16);
    }
    EXPECT_FALSE((*j)["why"].get<std::string>().empty());
  }
  Ran text = helixpipe("plan --model=1.3b --seq-len=32768 --gpus=16 --device=h20 --memory=90 --top=3");
  ASSERT_EQ(text.rc, 0) << text.out;
  EXPECT_NE(text.out.find("winner:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("faster than the best"), std::string::npos) << text.out;
  Ran none = helixpipe("plan --model=7b --seq-len=262144 --gpus=2 --device=h20 --memory=8");
  EXPECT_EQ(none.rc, 1);
  EXPECT_NE(none.out.find("nothing fits"), std::string::npos) << none.out;
}

TEST(SweepCli, GainRowsAndJson) {
  int rc = 0;
  auto j = helixpipe_json("sweep --model=1.3b --device=h20 --seq-lens=16k,64k --gpus=8,16 --format=json", &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(j["rows"].size(), 4u);
  int adapipe_rows = 0, weipipe_rows = 0;
  for (const auto& row : j["rows"]) {
    double best_baseline = 0;
    for (const char* s : {"helix", "1f1b", "zb1p", "adapipe", "weipipe"}) {
      ASSERT_TRUE(row.contains(s)) << s;
      const auto& r = row[s];
      if (!r["fits"]) continue;
      EXPECT_LE(r["memory_per_gpu_bytes"].get<double>(), j["memory_bytes"].get<double>());
      EXPECT_EQ(r["tp"].get<int>() * r["pp"].get<int>() * r["dp"].get<int>(), row["gpus"].get<int>());
      EXPECT_GE(r["pp"].get<int>(), 2);
      if (std::string(s) != "helix") best_baseline = std::max(best_baseline, r["tokens_per_s"].get<double>());
      adapipe_rows += std::string(s) == "adapipe";
      weipipe_rows += std::string(s) == "weipipe";
    }
    // The gain is over the fastest baseline of the four, not only 1F1B and ZB1P.
    ASSERT_TRUE(row["helix"]["fits"] && best_baseline > 0) << row.dump();
    EXPECT_NEAR(row["helix_gain"].get<double>(),
                row["helix"]["tokens_per_s"].get<double>() / best_baseline - 1, 1e-12);
  }
  EXPECT_GT(adapipe_rows, 0);
  EXPECT_GT(weipipe_rows, 0);
  Ran bad = helixpipe("sweep --seq-lens=16k,abc");
  EXPECT_EQ(bad.rc, 2);  // a usage error (docs/cli.md)
  EXPECT_NE(bad.out.find("--seq-lens takes a whole number, got '"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("abc'"), std::string::npos) << bad.out;
  Ran zero = helixpipe("sweep --seq-lens=16k,0k");
  EXPECT_EQ(zero.rc, 2);
  EXPECT_NE(zero.out.find("--seq-lens must be > 0, got 0"), std::string::npos) << zero.out;
}

}  // namespace

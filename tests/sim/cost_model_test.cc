// Cost model and device profiles: JSON shapes, errors, and FLOP arithmetic against the paper.
#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "schedule/values.h"
#include "sim/parallel.h"
#include "util/error.h"
#include "../error_text.h"
#include "../tiny_gpt.h"

namespace hp {
namespace {

using test::error_of;

TEST(DeviceProfile, BuiltinsLoadWithTheirSources) {
  auto names = device_profile_names();
  for (const char* want : {"h20", "a800", "h100", "h200", "cpu"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  const DeviceProfile& h100 = device_profile("h100");
  EXPECT_DOUBLE_EQ(h100.peak_flops, 989e12);
  EXPECT_EQ(h100.gpus_per_node, 8);
  EXPECT_GT(h100.intra.bandwidth_Bps, h100.inter.bandwidth_Bps);
  EXPECT_FALSE(h100.source.empty());
  EXPECT_EQ(device_profile("cpu").dtype, "fp32");
  EXPECT_EQ(device_profile("cpu").bytes_per_elem(), 4);
  EXPECT_EQ(&device_profile("h20"), &device_profile("h20"));
  // Round trip through JSON.
  DeviceProfile back = DeviceProfile::from_json(h100.to_json(), "rt");
  EXPECT_DOUBLE_EQ(back.mem_bandwidth_Bps, h100.mem_bandwidth_Bps);
  EXPECT_DOUBLE_EQ(back.inter.latency_s, h100.inter.latency_s);
}

TEST(DeviceProfile, UnknownNameListsValidOnes) {
  std::string msg = error_of([] { device_profile("h800"); });
  EXPECT_NE(msg.find("h800"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a800-2nic, a800, cpu, h100, h20, h200"), std::string::npos) << msg;
}

TEST(DeviceProfile, LoadsAFileAndRejectsBadKeys) {
  std::string path = testing::TempDir() + "/my_gpu.json";
  {
    std::ofstream f(path);
    f << R"({"name":"mine","peak_flops":1e12,"mem_bandwidth_Bps":1e11,
             "intra":{"latency_s":1e-6,"bandwidth_Bps":1e10},"gpus_per_node":4})";
  }
  const DeviceProfile& d = device_profile(path);
  EXPECT_EQ(d.name, "mine");
  EXPECT_EQ(d.gpus_per_node, 4);
  EXPECT_DOUBLE_EQ(d.inter.bandwidth_Bps, 1e10);  // inter defaults to intra
  std::string msg = error_of([] {
    DeviceProfile::from_json(nlohmann::json::parse(R"({"name":"x","peak_flop":1})"), "f.json");
  });
  EXPECT_NE(msg.find("unknown device profile key 'peak_flop'"), std::string::npos) << msg;
  msg = error_of([] {
    DeviceProfile::from_json(
        nlohmann::json::parse(R"({"name":"x","peak_flops":1e12,"mem_bandwidth_Bps":1e11,
          "gemm_efficiency":1.5,"intra":{"latency_s":0,"bandwidth_Bps":0}})"),
        "f.json");
  });
  EXPECT_NE(msg.find("gemm_efficiency"), std::string::npos) << msg;
  msg = error_of([] { device_profile("/nonexistent/dev.json"); });
  EXPECT_NE(msg.find("/nonexistent/dev.json"), std::string::npos) << msg;
}

TEST(CostModel, PartCostsShapeAndOpTimes) {
  auto j = nlohmann::json::parse(R"({
    "embed":{"F":0.5,"I":0,"W":0.25}, "pre":{"F":1,"I":2,"W":3}, "attn":{"F":10,"I":20,"W":0},
    "post":{"F":4,"I":5,"W":6}, "head":{"F":7,"I":8,"W":9},
    "link":{"latency_s":1e-3,"bandwidth_Bps":1e6}})");
  CostModel c = CostModel::from_part_costs(j);
  EXPECT_DOUBLE_EQ(c.part_time(Part::pre(3), Dir::kB), 5.0);  // I + W
  EXPECT_DOUBLE_EQ(c.part_time(Part::attn(1), Dir::kI), 20.0);
  ComputeOp op;
  op.dir = Dir::kB;
  op.parts = {Part::post(2), Part::attn(2), Part::pre(2)};
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNone), 11 + 20 + 5);
  op.recompute = recompute_parts(op, Recompute::kFull);
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kFull), 36 + 4 + 10 + 1);
  op.recompute = recompute_parts(op, Recompute::kNoAttn);
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNoAttn), 36 + 4 + 1);  // attn_recompute_F = 0
  op.recompute = recompute_parts(op, Recompute::kSelective);        // attention's forward only
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kSelective), 36 + 10);
  op.dir = Dir::kW;
  op.recompute.clear();
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kFull), 6 + 0 + 3);
  EXPECT_DOUBLE_EQ(c.message_time(0, 1, 2000), 1e-3 + 2e-3);
  EXPECT_DOUBLE_EQ(c.message_time(0, 5, 2000), 1e-3 + 2e-3);  // one link for every pair
  CostModel back = CostModel::from_part_costs(c.to_json());
  EXPECT_DOUBLE_EQ(back.part_time(PartKind::kHead, Dir::kW), 9);
  EXPECT_DOUBLE_EQ(back.message_time(0, 1, 2000), 3e-3);
}

// Recomputed posts as Model::run runs them (src/model/model.cc): the first post of op.recompute
// (the last in model order) keeps G and U and, when nothing after it in the op reads its output,
// skips its down projection; every other recomputed post's backward multiplies G and U out again.
TEST(CostModel, RecomputedPostsKeepOrRedoTheirGateAndUp) {
  auto j = nlohmann::json::parse(R"({
    "embed":{"F":0.5,"I":0,"W":0.25}, "pre":{"F":1,"I":2,"W":3}, "attn":{"F":10,"I":20,"W":0},
    "post":{"F":40,"I":5,"W":6}, "head":{"F":7,"I":8,"W":9}, "attn_recompute_F":2,
    "post_gate_up_F":24, "post_down_F":12, "link":{"latency_s":0,"bandwidth_Bps":0}})");
  const CostModel c = CostModel::from_part_costs(j);
  EXPECT_DOUBLE_EQ(c.post_gate_up_time(), 24);
  EXPECT_DOUBLE_EQ(c.post_down_time(), 12);
  // A baseline stage's backward over two layers, in backward order as the generators write it.
  ComputeOp op;
  op.dir = Dir::kB;
  op.parts = {Part::post(2), Part::attn(2), Part::pre(2),
              Part::post(1), Part::attn(1), Part::pre(1)};
  op.recompute = recompute_parts(op, Recompute::kNoAttn);
  ASSERT_EQ(op.recompute.size(), 4u);                    // post:2, pre:2, post:1, pre:1
  EXPECT_DOUBLE_EQ(c.post_recompute_extra(op, 0), -12);  // post:2: read by nothing, keeps G, U
  EXPECT_DOUBLE_EQ(c.post_recompute_extra(op, 1), 0);    // pre:2
  EXPECT_DOUBLE_EQ(c.post_recompute_extra(op, 2), 24);   // post:1: pre:2 reads it, G, U dropped
  // I + W: 2 x (11 + 20 + 5) = 72; QKV 2 x 2; pre F 2 x 1; post F 40 - 12 and 40 + 24.
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNoAttn), 72 + 4 + 2 + 28 + 64);
  // The same stage as the last one: the head reads post:2's output, so it runs whole.
  op.parts.insert(op.parts.begin(), Part::head());
  op.recompute = recompute_parts(op, Recompute::kNoAttn);
  EXPECT_DOUBLE_EQ(c.post_recompute_extra(op, 0), 0);
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNoAttn), 17 + 72 + 4 + 2 + 40 + 64);
  // HelixPipe's backward of one post: kept G and U, no down projection.
  ComputeOp one;
  one.dir = Dir::kI;
  one.parts = {Part::post(3)};
  one.recompute = recompute_parts(one, Recompute::kNoAttn);
  EXPECT_DOUBLE_EQ(c.op_time(one, Recompute::kNoAttn), 5 + 40 - 12);
  // Nothing recomputed: nothing extra; the scale's post F factor scales both terms.
  one.recompute.clear();
  EXPECT_DOUBLE_EQ(c.op_time(one, Recompute::kNone), 5);
  PartTable scale;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) scale.at(k, d) = 1;
  scale.at(PartKind::kPost, Dir::kF) = 2;
  op.recompute = recompute_parts(op, Recompute::kNoAttn);
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNoAttn, &scale), 17 + 72 + 4 + 2 + 2 * (40 + 64));
  // Round trip, and the shares a profile splits a post F by: W_o h^2, gate and up 2hf, down fh.
  const CostModel back = CostModel::from_part_costs(c.to_json());
  EXPECT_DOUBLE_EQ(back.post_gate_up_time(), 24);
  EXPECT_DOUBLE_EQ(back.post_down_time(), 12);
  ModelConfig cfg;
  cfg.hidden = 256;
  cfg.intermediate = 768;
  const PostGemmShares sh = post_gemm_shares(cfg);  // 65536 + 393216 + 196608
  EXPECT_DOUBLE_EQ(sh.gate_up, 0.6);
  EXPECT_DOUBLE_EQ(sh.down, 0.3);
  j["post_down_F"] = -1;
  EXPECT_THROW(CostModel::from_part_costs(j), Error);
}

// A per-part scale multiplies each part's time in each direction by its own factor; attention's
// QKV recompute under no-attn and every recomputed forward take the F factor of their kind.
TEST(CostModel, OpTimeWithPartScale) {
  auto j = nlohmann::json::parse(R"({
    "embed":{"F":0.5,"I":0,"W":0.25}, "pre":{"F":1,"I":2,"W":3}, "attn":{"F":10,"I":20,"W":0},
    "post":{"F":4,"I":5,"W":6}, "head":{"F":7,"I":8,"W":9}, "attn_recompute_F":2,
    "link":{"latency_s":1e-3,"bandwidth_Bps":1e6}})");
  const CostModel c = CostModel::from_part_costs(j);
  PartTable scale;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) scale.at(k, d) = 1;
  scale.at(PartKind::kAttn, Dir::kF) = 2;
  scale.at(PartKind::kAttn, Dir::kI) = 0.5;
  scale.at(PartKind::kPost, Dir::kW) = 3;
  scale.at(PartKind::kPre, Dir::kF) = 4;
  ComputeOp op;
  op.dir = Dir::kB;
  op.parts = {Part::post(2), Part::attn(2), Part::pre(2)};
  // post I 5 + W 6*3, attn I 20*0.5 + W 0, pre I 2 + W 3.
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNone, &scale), 5 + 18 + 10 + 0 + 2 + 3);
  op.recompute = recompute_parts(op, Recompute::kNoAttn);  // post and pre rerun, attn its QKV
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNoAttn, &scale), 38 + 4 + 1 * 4 + 2 * 2);
  op.recompute = recompute_parts(op, Recompute::kSelective);  // attention's forward, at 2x
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kSelective, &scale), 38 + 10 * 2);
  op.dir = Dir::kF;
  op.recompute.clear();
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNone, &scale), 4 + 20 + 4);
  // All factors 1: the unscaled time.
  const PartTable ones = [] {
    PartTable t;
    for (PartKind k : kPartKinds)
      for (Dir d : kPartDirs) t.at(k, d) = 1;
    return t;
  }();
  op.dir = Dir::kB;
  op.recompute = recompute_parts(op, Recompute::kFull);
  EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kFull, &ones), c.op_time(op, Recompute::kFull));
}

// The reference code computes logits and loss in the head's backward, whose logits pass serves
// both: F of an op with the head then costs the other parts only, its backward what it always
// costs. No policy reruns the head's forward (ir.h recomputes), so full recomputation adds post's
// forward only, either way. Model FLOPs move with the forward.
TEST(CostModel, HeadInBackwardDropsTheHeadsForward) {
  auto j = nlohmann::json::parse(R"({"post":{"F":4,"I":5,"W":6}, "head":{"F":7,"I":8,"W":9}})");
  CostModel c = CostModel::from_part_costs(j);
  ComputeOp op;
  op.parts = {Part::post(2), Part::head()};
  for (bool moved : {false, true}) {
    c.set_head_in_backward(moved);
    op.dir = Dir::kF;
    EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNone), moved ? 4 : 4 + 7);
    op.dir = Dir::kB;
    EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNone), 11 + 17);
    op.dir = Dir::kI;
    EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNone), 5 + 8);
    op.dir = Dir::kW;
    EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kNone), 6 + 9);
    op.dir = Dir::kB;
    op.recompute = recompute_parts(op, Recompute::kFull);
    EXPECT_EQ(op.recompute, std::vector<Part>{Part::post(2)});
    EXPECT_DOUBLE_EQ(c.op_time(op, Recompute::kFull), 11 + 17 + 4);
    op.recompute.clear();
  }
}

TEST(CostModel, FreeLinksAndNodeMapping) {
  auto j = nlohmann::json::parse(R"({"link":{"latency_s":0,"bandwidth_Bps":0},
      "inter":{"latency_s":1,"bandwidth_Bps":10}, "stages_per_node":2})");
  CostModel c = CostModel::from_part_costs(j);
  EXPECT_DOUBLE_EQ(c.message_time(0, 1, 1 << 20), 0);  // same node, free
  EXPECT_DOUBLE_EQ(c.message_time(1, 2, 100), 1 + 10);  // across nodes
  EXPECT_DOUBLE_EQ(c.message_time(3, 2, 100), 0);
}

TEST(CostModel, PartCostErrorsNameTheKey) {
  auto err = [](const char* text) {
    return error_of([&] { CostModel::from_part_costs(nlohmann::json::parse(text), "c.json"); });
  };
  EXPECT_NE(err(R"({"atn":{"F":1}})").find("unknown key 'atn'"), std::string::npos);
  EXPECT_NE(err(R"({"attn":{"B":1}})").find("unknown key 'B'"), std::string::npos);
  EXPECT_NE(err(R"({"attn":{"F":-1}})").find("c.json.attn.F"), std::string::npos);
  EXPECT_NE(err(R"({"link":{"latency_s":"fast"}})").find("c.json.link.latency_s"),
            std::string::npos);
  EXPECT_NE(err(R"([1,2])").find("JSON object"), std::string::npos);
}

TEST(CostModel, AbsurdOrNonFiniteCostsAreRefused) {
  auto err = [](const nlohmann::json& j) {
    return error_of([&] { CostModel::from_part_costs(j, "c.json"); });
  };
  const nlohmann::json good = nlohmann::json::parse(R"({"attn":{"F":1e-3,"I":2e-3,"W":0},
      "link":{"latency_s":1e-5,"bandwidth_Bps":1e10}})");
  EXPECT_EQ(err(good), "");
  const double inf = std::numeric_limits<double>::infinity();
  for (const nlohmann::json& bad : {nlohmann::json(1e308), nlohmann::json(1e7), nlohmann::json(-1),
                                    nlohmann::json(inf), nlohmann::json(std::nan(""))}) {
    nlohmann::json j = good;
    j["attn"]["I"] = bad;
    const std::string e = err(j);
    EXPECT_NE(e.find("c.json.attn.I"), std::string::npos) << bad.dump() << ": " << e;
    j = good;
    j["attn_recompute_F"] = bad;
    EXPECT_NE(err(j).find("c.json.attn_recompute_F"), std::string::npos) << err(j);
  }
  nlohmann::json j = good;
  j["attn"]["F"] = 1e308;
  EXPECT_NE(err(j).find("c.json.attn.F: expected a number >= 0 and at most 1000000 seconds, got "
                        "1e+308"),
            std::string::npos)
      << err(j);
  j = good;
  j["link"]["latency_s"] = 1e308;
  EXPECT_NE(err(j).find("c.json.link: latency_s must be in [0, 1000]"), std::string::npos)
      << err(j);
  j = good;
  j["inter"] = {{"latency_s", 0}, {"bandwidth_Bps", 1e-300}};  // every message would take forever
  EXPECT_NE(err(j).find("c.json.inter: bandwidth_Bps must be 0 (free) or in [1, "),
            std::string::npos)
      << err(j);
  j = good;
  j["stages_per_node"] = int64_t{1} << 40;  // used to be read as an int
  EXPECT_NE(err(j).find("stages_per_node must be an integer in [1, 2^30]"), std::string::npos)
      << err(j);
}

TEST(DeviceProfile, AbsurdFiguresAreRefused) {
  const nlohmann::json good = nlohmann::json::parse(R"({"name":"x","peak_flops":1e12,
      "mem_bandwidth_Bps":1e11,"intra":{"latency_s":1e-6,"bandwidth_Bps":1e10},
      "memory_bytes":8e10})");
  EXPECT_NO_THROW(DeviceProfile::from_json(good, "d.json"));
  struct Case {
    nlohmann::json::json_pointer at;
    nlohmann::json value;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {nlohmann::json::json_pointer("/peak_flops"), 1e308, "d.json: peak_flops must be in ["},
      {nlohmann::json::json_pointer("/peak_flops"), 1e-300, "d.json: peak_flops must be in ["},
      {nlohmann::json::json_pointer("/mem_bandwidth_Bps"), 1e308,
       "d.json: mem_bandwidth_Bps must be in ["},
      {nlohmann::json::json_pointer("/memory_bytes"), 1e308,
       "d.json: memory_bytes must be in [0, "},
      {nlohmann::json::json_pointer("/memory_bytes"), -1, "d.json: memory_bytes must be in [0, "},
      {nlohmann::json::json_pointer("/gpus_per_node"), int64_t{1} << 40,
       "'gpus_per_node' must be an integer in [1, "},
      {nlohmann::json::json_pointer("/intra/latency_s"), 1e308,
       "d.json intra: latency_s must be in [0, 1000]"},
      {nlohmann::json::json_pointer("/intra/bandwidth_Bps"), 0.5,
       "d.json intra: bandwidth_Bps must be 0 (free)"},
      {nlohmann::json::json_pointer("/comm_compute_share"), 1.0,
       "d.json: comm_compute_share is the fraction of compute a transfer takes, in [0, 1)"},
      {nlohmann::json::json_pointer("/comm_compute_share"), -0.1,
       "d.json: comm_compute_share is the fraction of compute a transfer takes, in [0, 1)"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    j[c.at] = c.value;
    const std::string e = error_of([&] { DeviceProfile::from_json(j, "d.json"); });
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.at.to_string() << ": " << e;
  }
}

// With memory time negligible and full efficiency, the model is pure FLOPs: check it against the
// paper's counts (docs/design.md section 8): for MHA with an MLP of 16sh^2 FLOPs, core attention over
// the rest of the layer is s/(12h).
TEST(CostModel, FromModelMatchesPaperFlopRatio) {
  ModelConfig cfg;
  cfg.hidden = 96;
  cfg.heads = 4;
  cfg.kv_heads = 4;
  cfg.intermediate = 256;  // SwiGLU 3 GEMMs: 6*h*f = 16*h^2 exactly
  cfg.layers = 4;
  DeviceProfile dev;
  dev.name = "ideal";
  dev.peak_flops = 1e12;
  dev.mem_bandwidth_Bps = 1e30;
  dev.intra = {0, 0};
  dev.inter = {0, 0};
  for (int64_t s : {512, 4096}) {
    CostModel c = CostModel::from_model(cfg, s, 1, dev);
    double h = 96;
    double qkv = 2.0 * s * h * 3 * h, core = 2.0 * s * s * h;
    double rest = 2.0 * s * h * h + 16.0 * s * h * h;
    EXPECT_NEAR(c.part_time(PartKind::kAttn, Dir::kF), (qkv + core) / 1e12, 1e-15);
    EXPECT_NEAR(c.part_time(PartKind::kPost, Dir::kF), rest / 1e12, 1e-15);
    double ratio = core / (c.part_time(PartKind::kPost, Dir::kF) * 1e12 + qkv);
    EXPECT_NEAR(ratio, s / (12 * h), 1e-12);
    // Backward: GEMMs twice the forward (I + W), core attention 2.5x.
    EXPECT_NEAR(c.part_time(PartKind::kPost, Dir::kB), 2 * rest / 1e12, 1e-15);
    EXPECT_NEAR(c.part_time(PartKind::kAttn, Dir::kI), (qkv + 2.5 * core) / 1e12, 1e-15);
    EXPECT_NEAR(c.part_time(PartKind::kAttn, Dir::kW), qkv / 1e12, 1e-15);
    EXPECT_EQ(c.tokens_per_microbatch(), s);
  }
  // Activations mode moves the QKV GEMM from attention to pre.
  CostModel a = CostModel::from_model(cfg, 512, 1, dev, TransferMode::kActivations);
  EXPECT_NEAR(a.part_time(PartKind::kPre, Dir::kF), 2.0 * 512 * 96 * 3 * 96 / 1e12, 1e-15);
  EXPECT_NEAR(a.part_time(PartKind::kAttn, Dir::kF), 2.0 * 512 * 512 * 96 / 1e12, 1e-15);
}

TEST(CostModel, FromModelUsesMemoryBandwidthAndEfficiency) {
  ModelConfig cfg = ModelConfig::load("small");
  const DeviceProfile& dev = device_profile("h100");
  CostModel c = CostModel::from_model(cfg, 1024, 1, dev);
  // pre in weights mode is only an RMSNorm: read X, write A, bf16.
  EXPECT_NEAR(c.part_time(PartKind::kPre, Dir::kF), 2.0 * 1024 * 256 * 2 / dev.mem_bandwidth_Bps,
              1e-18);
  CostModel c2 = CostModel::from_model(cfg, 2048, 1, dev);
  double ratio = c2.part_time(PartKind::kAttn, Dir::kF) / c.part_time(PartKind::kAttn, Dir::kF);
  EXPECT_GT(ratio, 2.0);  // quadratic core attention dominates as s grows
  EXPECT_LT(ratio, 4.0);
  EXPECT_NE(error_of([&] { CostModel::from_model(cfg, 0, 1, dev); }).find("sequence length"),
            std::string::npos);
}

// tiny_gpt (tests/tiny_gpt.h) on one sequence of s = T = 4 tokens.
using test::tiny_gpt;

DeviceProfile counting_device(double peak_flops, double mem_bandwidth) {
  DeviceProfile dev;
  dev.name = "counter";
  dev.dtype = "fp32";
  dev.peak_flops = peak_flops;
  dev.mem_bandwidth_Bps = mem_bandwidth;
  dev.intra = {0, 0};
  dev.inter = {0, 0};
  return dev;
}

TEST(CostModel, GptFlopsByHand) {
  // 1 FLOP per second and free memory: seconds are FLOPs.
  const DeviceProfile dev = counting_device(1, 1e30);
  const CostModel c = CostModel::from_model(tiny_gpt(), 4, 1, dev);
  auto at = [&](PartKind k, Dir d) { return c.part_time(k, d); };
  // attn: QKV 2*T*h*q = 2*4*8*24 = 1536; causal core 2*s^2*h = 256 forward, 2.5x backward.
  EXPECT_NEAR(at(PartKind::kAttn, Dir::kF), 1536 + 256, 1e-9);
  EXPECT_NEAR(at(PartKind::kAttn, Dir::kI), 1536 + 640, 1e-9);
  EXPECT_NEAR(at(PartKind::kAttn, Dir::kW), 1536, 1e-9);
  // post: W_o 2*T*h^2 = 512, then two GEMMs of 4h (fc1, fc2): 2 * 2*T*h*f = 4096 (SwiGLU's three
  // would be 6144).
  for (Dir d : {Dir::kF, Dir::kI, Dir::kW}) EXPECT_NEAR(at(PartKind::kPost, d), 4608, 1e-9);
  // head (tied LM head): 2*T*h*V = 1024; I recomputes the logits (time, not model FLOPs).
  EXPECT_NEAR(at(PartKind::kHead, Dir::kF), 1024, 1e-9);
  EXPECT_NEAR(at(PartKind::kHead, Dir::kI), 2048, 1e-9);
  ComputeOp op;
  op.dir = Dir::kF;
  op.parts = {Part::attn(1), Part::post(1)};
  EXPECT_NEAR(c.op_flops(op), 1792 + 4608, 1e-9);
  // Per layer forward, 6sh^2 + 2sh^2 + 16sh^2 + 2s^2h: HELIXPIPE.md's GPT count.
  EXPECT_NEAR(c.op_flops(op), 24.0 * 4 * 64 + 2.0 * 16 * 8, 1e-9);
  EXPECT_NEAR(c.attn_recompute_time(), 1536, 1e-9);  // QKV only: no rotary to rerun
  // A recomputed post's second fc1 (2*T*h*f = 2048) and its fc2 (2048).
  EXPECT_NEAR(c.post_gate_up_time(), 2048, 1e-9);
  EXPECT_NEAR(c.post_down_time(), 2048, 1e-9);
  const PostGemmShares sh = post_gemm_shares(tiny_gpt());  // h^2 64, fc1 256, fc2 256
  EXPECT_DOUBLE_EQ(sh.gate_up, 256.0 / 576);
  EXPECT_DOUBLE_EQ(sh.down, 256.0 / 576);
  const CostModel a = CostModel::from_model(tiny_gpt(), 4, 1, dev, TransferMode::kActivations);
  EXPECT_NEAR(a.part_time(PartKind::kPre, Dir::kF), 1536, 1e-9);
}

TEST(CostModel, GptMemoryTrafficByHand) {
  // Free FLOPs, one byte per second, 4-byte elements: seconds are 4 x elements moved.
  const DeviceProfile dev = counting_device(1e30, 1);
  const CostModel c = CostModel::from_model(tiny_gpt(), 4, 1, dev);
  auto elems = [&](PartKind k, Dir d) { return c.part_time(k, d) / 4; };
  const double tol = 1e-6;
  EXPECT_NEAR(elems(PartKind::kEmbed, Dir::kF), 3 * 32, tol);  // token row + position row -> X
  EXPECT_NEAR(elems(PartKind::kEmbed, Dir::kW), 4 * 32, tol);  // dX into both tables
  EXPECT_NEAR(elems(PartKind::kPre, Dir::kF), 2 * 32, tol);    // LayerNorm: read X, write A
  EXPECT_NEAR(elems(PartKind::kPre, Dir::kW), 0, tol);         // weights mode: attn owns dW_qkv
  EXPECT_NEAR(elems(PartKind::kAttn, Dir::kF), 2 * 32, tol);   // no rotary
  EXPECT_NEAR(elems(PartKind::kAttn, Dir::kI), 3 * 32, tol);
  EXPECT_NEAR(elems(PartKind::kAttn, Dir::kW), 4 * 24, tol);   // b_qkv gradient: read dQKV
  // post: residuals and LayerNorm 7*T*h = 224; GeLU reads G, writes H: 2*T*f = 256.
  EXPECT_NEAR(elems(PartKind::kPost, Dir::kF), 224 + 256, tol);
  EXPECT_NEAR(elems(PartKind::kPost, Dir::kI), 448 + 3 * 128, tol);  // GeLU': dH, G -> dG
  EXPECT_NEAR(elems(PartKind::kPost, Dir::kW), 2 * 32 + 128, tol);   // b_o, b_fc2, b_fc1
  // A recompute without fc2 also skips GeLU (256) and the residual copy Y -> X (2*T*h = 64).
  EXPECT_NEAR(c.post_down_time() / 4, 256 + 64, tol);
  EXPECT_NEAR(c.post_gate_up_time(), 0, tol);
  const CostModel a = CostModel::from_model(tiny_gpt(), 4, 1, dev, TransferMode::kActivations);
  EXPECT_NEAR(a.part_time(PartKind::kPre, Dir::kW) / 4, 4 * 24, tol);
  EXPECT_NEAR(a.part_time(PartKind::kAttn, Dir::kW) / 4, 0, tol);
}

TEST(CostModel, GptValuesAndStageParameters) {
  const ModelConfig c = tiny_gpt();
  auto elems = [&](ValueKind k) { return value_elems(Value{k, 1}, c, 4); };
  EXPECT_EQ(elems(ValueKind::kG), 4 * 32);  // GeLU input, kept for its backward
  EXPECT_EQ(elems(ValueKind::kU), 0);       // no up projection
  EXPECT_EQ(elems(ValueKind::kdU), 0);
  EXPECT_EQ(elems(ValueKind::kRstd2), 2 * 4);      // LayerNorm: mean and 1/std per row
  EXPECT_EQ(elems(ValueKind::kW), 24 * 8 + 24);    // weights mode ships b_qkv with W_qkv
  EXPECT_EQ(value_elems(Value{ValueKind::kW, 1}, c, 4, 2), 12 * 8 + 12);
  // Stage parameters: one layer (872) per stage of 2. The position table (128) is whole on each
  // TP rank; the tied LM head is a copy of the token table (128) on 1F1B's last stage.
  EXPECT_EQ(max_stage_params(c, "1f1b", 2), 872 + 256);
  EXPECT_DOUBLE_EQ(stage_params_per_gpu(c, "1f1b", 2, 2), (872 + 128) / 2.0 + 128);
  EXPECT_DOUBLE_EQ(stage_params_per_gpu(c, "helix", 2, 2), (872 + 128 + 16) / 2.0 + 128);
  ModelConfig last_heavy = c;
  last_heavy.max_positions = 1;  // now the last stage (token-table copy + final norm) is heavier
  EXPECT_EQ(max_stage_params(last_heavy, "1f1b", 2), 872 + 128 + 16);
}

}  // namespace
}  // namespace hp

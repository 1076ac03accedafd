// helixpipe profile and bench end to end: profile writes a part-cost file that simulate accepts;
// bench measures every schedule on 2 in-process ranks and sets the simulator's prediction from that
// file beside each row (positive step times, per-stage memory, a side-by-side timeline SVG); bad
// flag combinations fail with a message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_cli.h"

namespace hp {
namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(EvidCli, ProfileThenBench) {
  const std::string dir = ::testing::TempDir() + "hp_evid_cli/";
  std::filesystem::create_directories(dir);
  {
    std::ofstream m(dir + "m.json");
    m << R"({"hidden_size":32,"intermediate_size":64,"num_attention_heads":2,)"
         R"("num_key_value_heads":2,"num_hidden_layers":4,"vocab_size":64})";
  }
  auto p = test::run_cli("profile --model=" + dir + "m.json --seq-len=64 --repeats=1 --out=" + dir +
                         "c.json");
  ASSERT_EQ(p.rc, 0) << p.err;
  auto sim = test::run_cli("simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=4 "
                           "--part-costs=" + dir + "c.json");
  ASSERT_EQ(sim.rc, 0) << sim.err;

  auto b = test::run_cli("bench --model=" + dir + "m.json --seq-len=64 --stages=2 --microbatches=4 "
                         "--part-costs=" + dir + "c.json --timeline=" + dir + "tl.svg --out=" + dir +
                         "b.json");
  ASSERT_EQ(b.rc, 0) << b.err << b.out;
  const auto j = nlohmann::json::parse(slurp(dir + "b.json"));
  ASSERT_EQ(j["rows"].size(), 5u) << b.out;
  for (const auto& r : j["rows"]) {
    EXPECT_GT(r["step_s"].get<double>(), 0) << r["label"];
    EXPECT_GT(r["predicted_step_s"].get<double>(), 0) << r["label"];
    ASSERT_EQ(r["stages_measured"].size(), 2u);
    for (const auto& st : r["stages_measured"]) {
      EXPECT_GT(st["peak_bytes"].get<int64_t>(), 0);
      EXPECT_LE(st["busy_s"].get<double>(), st["total_s"].get<double>());
    }
    // The validator's stash prediction is exact: equal bytes on every stage.
    ASSERT_EQ(r["predicted_peak_stash_bytes"].size(), 2u);
    EXPECT_EQ(r["predicted_peak_stash_bytes"], r["peak_stash_bytes"]) << r["label"];
    EXPECT_TRUE(r["stash_exact"].get<bool>()) << r["label"];
    // Core speed calibrated on both ranks before the one timed step and after it; the reported
    // factor is the median of the two passes, and one prediction per step.
    ASSERT_EQ(r["core_passes"].size(), 2u);
    ASSERT_EQ(r["part_factors"].size(), 2u);
    for (size_t q = 0; q < 2; ++q) {
      ASSERT_EQ(r["core_passes"][q].size(), 2u);
      EXPECT_GT(r["core_passes"][q][0].get<double>(), 0);
      EXPECT_DOUBLE_EQ(
          r["stage_time_scale"][q].get<double>(),
          0.5 * (r["core_passes"][q][0].get<double>() + r["core_passes"][q][1].get<double>()));
      EXPECT_GT(r["part_factors"][q]["attn"]["F"].get<double>(), 0);
    }
    ASSERT_EQ(r["predicted_steps_s"].size(), 1u);
    EXPECT_DOUBLE_EQ(r["predicted_steps_s"][0].get<double>(), r["predicted_step_s"].get<double>());
    EXPECT_GT(r["replay_step_s"].get<double>(), 0);
  }
  EXPECT_EQ(j["rows"][0]["label"], "1f1b");
  EXPECT_DOUBLE_EQ(j["rows"][0]["vs_1f1b"].get<double>(), 1.0);
  EXPECT_NE(slurp(dir + "tl.svg").find("<svg"), std::string::npos);

  // Two policies: the natural rows, then every schedule again with no-attn, except helix (whose
  // natural policy is no-attn: not measured twice); each ratio is to the 1F1B of its own policy.
  auto b2 = test::run_cli("bench --model=" + dir + "m.json --seq-len=64 --stages=2 --microbatches=4 "
                          "--schedules=1f1b,helix2,zb1p --recompute=natural,no-attn --out=" + dir +
                          "b2.json");
  ASSERT_EQ(b2.rc, 0) << b2.err << b2.out;
  const auto j2 = nlohmann::json::parse(slurp(dir + "b2.json"));
  ASSERT_EQ(j2["rows"].size(), 5u) << b2.out;
  const char* want[][2] = {{"1f1b", "none"}, {"helix F=2", "no-attn"}, {"zb1p", "none"},
                           {"1f1b", "no-attn"}, {"zb1p", "no-attn"}};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(j2["rows"][i]["label"], want[i][0]);
    EXPECT_EQ(j2["rows"][i]["recompute"], want[i][1]);
  }
  EXPECT_DOUBLE_EQ(j2["rows"][3]["vs_1f1b"].get<double>(), 1.0);
  EXPECT_FALSE(j2.contains("predicted_step_s"));

  auto unknown = test::run_cli("bench --model=" + dir + "m.json --seq-len=64 --schedules=1f1b,pipedream");
  EXPECT_NE(unknown.rc, 0);
  EXPECT_NE(unknown.err.find("unknown schedule 'pipedream'"), std::string::npos) << unknown.err;

  auto bad = test::run_cli("bench --model=" + dir + "m.json --seq-len=64 --timeline=x.svg");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--part-costs"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace hp

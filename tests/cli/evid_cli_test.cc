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
  ASSERT_EQ(p.code, 0) << p.err;
  auto sim = test::run_cli("simulate --schedule=1f1b --stages=2 --microbatches=2 --layers=4 "
                           "--part-costs=" + dir + "c.json");
  ASSERT_EQ(sim.code, 0) << sim.err;

  auto b = test::run_cli("bench --model=" + dir + "m.json --seq-len=64 --stages=2 --microbatches=4 "
                         "--part-costs=" + dir + "c.json --timeline=" + dir + "tl.svg --out=" + dir +
                         "b.json");
  ASSERT_EQ(b.code, 0) << b.err << b.out;
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
    ASSERT_EQ(r["predicted_peak_bytes"].size(), 2u);
  }
  EXPECT_EQ(j["rows"][0]["label"], "1f1b");
  EXPECT_DOUBLE_EQ(j["rows"][0]["vs_1f1b"].get<double>(), 1.0);
  EXPECT_NE(slurp(dir + "tl.svg").find("<svg"), std::string::npos);

  auto bad = test::run_cli("bench --model=" + dir + "m.json --seq-len=64 --timeline=x.svg");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--part-costs"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace hp

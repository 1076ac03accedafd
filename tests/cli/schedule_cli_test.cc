// The `schedule` and `validate` commands as users (and external checks) run them: golden HelixPipe
// op lists of docs/design.md section 5 through --format=json, hand-broken files rejected with exact
// messages, help and flag errors, pictures.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "run_cli.h"
#include "../svg_test_util.h"

namespace hp::test {
namespace {

std::vector<SvgNode> svg_nodes_or_fail(const std::string& svg) {
  std::vector<SvgNode> nodes = parse_svg(svg);
  EXPECT_FALSE(nodes.empty());
  if (nodes.empty() || nodes[0].tag != "svg") ADD_FAILURE() << "no <svg> first";
  return nodes;
}

std::string data(const std::string& name) { return cli_source_dir() + "/tests/cli/data/" + name; }

// Golden notation: E = embed+pre:1, A<l> = attn:l, P<c> = post:c+pre:c+1, T = post:L+head;
// units of one op joined by '+', each with ".mb". Written from the JSON parts only.
std::string golden_forward(const nlohmann::json& stage, int L) {
  std::string out;
  for (const auto& op : stage["ops"]) {
    if (op["dir"] != "F") continue;
    std::vector<std::string> parts = op["parts"].get<std::vector<std::string>>();
    std::string line;
    for (size_t k = 0; k < parts.size(); ++k) {
      std::string unit;
      const std::string& p = parts[k];
      if (p == "embed") {
        unit = "E";
        ++k;  // pre:1
      } else if (p.rfind("attn:", 0) == 0) {
        unit = "A" + p.substr(5);
      } else if (p == "post:" + std::to_string(L)) {
        unit = "T";
        ++k;  // head
      } else if (p.rfind("post:", 0) == 0) {
        unit = "P" + p.substr(5);
        ++k;  // pre:c+1
      } else {
        unit = "?" + p;
      }
      line += (line.empty() ? "" : "+") + unit + "." + std::to_string(op["mb"].get<int>());
    }
    out += (out.empty() ? "" : " ") + line;
  }
  return out;
}

nlohmann::json schedule_json(const std::string& flags) {
  CliResult r = run_cli("schedule " + flags + " --format=json");
  EXPECT_EQ(r.rc, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(ScheduleCli, GoldenHelixListsOfSectionFive) {
  auto j = schedule_json("--schedule=helix --stages=4 --microbatches=4 --layers=4");
  EXPECT_EQ(j["schedule"], "helix");
  ASSERT_EQ(j["stages"].size(), 4u);
  EXPECT_EQ(golden_forward(j["stages"][0], 4), "E.0 E.1 E.2 E.3+A1.3 A2.2 A3.1 A4.0+T.0 T.1 T.2 T.3");
  EXPECT_EQ(golden_forward(j["stages"][1], 4), "A1.0+P1.0 P1.1 P1.2 P1.3+A2.3 A3.2 A4.1");
  EXPECT_EQ(golden_forward(j["stages"][2], 4), "A1.1 A2.0+P2.0 P2.1 P2.2 P2.3+A3.3 A4.2");
  EXPECT_EQ(golden_forward(j["stages"][3], 4), "A1.2 A2.1 A3.0+P3.0 P3.1 P3.2 P3.3+A4.3");

  auto j2 = schedule_json("--schedule=helix --stages=4 --microbatches=8 --layers=4 --folds=2");
  EXPECT_EQ(golden_forward(j2["stages"][0], 4),
            "E.0 E.1 E.2 E.3 E.4 E.5 E.6+A1.6 E.7+A1.7 A2.4 A2.5 A3.2 A3.3 A4.0+T.0 A4.1+T.1 T.2 "
            "T.3 T.4 T.5 T.6 T.7");
  auto j3 = schedule_json("--schedule=helix --stages=4 --microbatches=8 --layers=8 --folds=2");
  EXPECT_EQ(golden_forward(j3["stages"][1], 8),
            "A1.0+P1.0 A1.1+P1.1 P1.2 P1.3 P1.4 P1.5 P1.6+A2.6 P1.7+A2.7 A3.4 A3.5 A4.2 A4.3 "
            "A5.0+P5.0 A5.1+P5.1 P5.2 P5.3 P5.4 P5.5 P5.6+A6.6 P5.7+A6.7 A7.4 A7.5 A8.2 A8.3");
  // Backward = forward reversed, op by op.
  const auto& ops = j["stages"][1]["ops"];
  const size_t n = ops.size();
  ASSERT_EQ(n % 2, 0u);
  for (size_t i = 0; i < n / 2; ++i) {
    EXPECT_EQ(ops[n - 1 - i]["dir"], "B");
    EXPECT_EQ(ops[n - 1 - i]["mb"], ops[i]["mb"]);
  }
}

TEST(ScheduleCli, EveryFormatOfEveryScheduleValidates) {
  const std::string tmp = ::testing::TempDir();
  for (const std::string flags :
       {"--schedule=gpipe --stages=3 --microbatches=5 --layers=4",
        "--schedule=1f1b --stages=4 --microbatches=8 --layers=8",
        "--schedule=interleaved --stages=2 --microbatches=4 --layers=8 --virtual=2",
        "--schedule=zb1p --stages=4 --microbatches=8 --layers=4",
        "--schedule=helix --stages=4 --microbatches=8 --layers=8 --folds=2",
        "--schedule=helix --stages=4 --microbatches=6 --layers=4 --transfer=activations"}) {
    for (const std::string fmt : {"text", "json"}) {
      const std::string file = tmp + "hp_cli_sched." + fmt;
      CliResult g = run_cli("schedule " + flags + " --format=" + fmt + " --out=" + file);
      ASSERT_EQ(g.rc, 0) << flags << g.err;
      CliResult v = run_cli("validate " + file + " --model=tiny --seq-len=256");
      EXPECT_EQ(v.rc, 0) << flags << "\n" << v.out << v.err;
      EXPECT_EQ(v.out.rfind("ok: schedule", 0), 0u) << v.out;
    }
  }
}

TEST(ScheduleCli, PicturesAreProduced) {
  CliResult svg = run_cli("schedule --schedule=helix --stages=4 --microbatches=8 --layers=4 "
                          "--folds=2 --format=svg");
  ASSERT_EQ(svg.rc, 0) << svg.err;
  EXPECT_NE(svg.out.find("<svg"), std::string::npos);
  EXPECT_NE(svg.out.find("</svg>"), std::string::npos);
  CliResult trace = run_cli("schedule --schedule=1f1b --stages=2 --microbatches=4 --layers=2 "
                            "--format=trace");
  ASSERT_EQ(trace.rc, 0) << trace.err;
  auto j = nlohmann::json::parse(trace.out);
  EXPECT_TRUE(j.contains("traceEvents"));
  EXPECT_GT(j["traceEvents"].size(), 8u);
}

// The schedule picture counts abstract time units, and its axis says what one is; the claim is
// checked on one stage, where an F of embed..head (one pre, attn and post part) lasts 3 units and
// its B 6.
TEST(ScheduleCli, SvgAxisNamesTheTimeUnitWithRoundTicksAndALegendBelow) {
  CliResult r = run_cli("schedule --schedule=1f1b --stages=1 --microbatches=2 --layers=1 --format=svg");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto nodes = svg_nodes_or_fail(r.out);
  auto label = texts(nodes, "axis", "axislabel");
  ASSERT_EQ(label.size(), 1u);
  EXPECT_EQ(label[0]->text.rfind("time (units; 1 unit = one pre, attn or post part run once as F, "
                                 "I or W; a B of one part = 2", 0),
            0u)
      << label[0]->text;
  bool f_tip = false, b_tip = false;
  for (const SvgNode& n : nodes) {
    if (n.tag != "title") continue;
    f_tip |= n.text == "F0 embed..head  [0 .. 3]";
    b_tip |= n.text == "B0 head..embed  [3 .. 9]";  // a backward lists its parts last first
  }
  EXPECT_TRUE(f_tip);
  EXPECT_TRUE(b_tip);
  std::vector<std::string> ticks;
  for (const SvgNode* t : texts(nodes, "axis", "tick")) ticks.push_back(t->text);
  std::vector<double> v;
  ASSERT_TRUE(round_tick_labels(ticks, &v));
  EXPECT_EQ(v.back(), 18);  // 2 micro-batches x (3 + 6) units

  // The figure of docs/schedules.md: the legend's rectangles are off the lanes.
  CliResult h = run_cli("schedule --schedule=helix --stages=4 --microbatches=8 --layers=4 "
                        "--folds=2 --format=svg");
  ASSERT_EQ(h.rc, 0) << h.err;
  nodes = svg_nodes_or_fail(h.out);
  const Box lanes = rects_bbox(nodes, "lanes");
  int legend_rects = 0;
  for (const SvgNode& n : nodes) {
    if (n.tag != "rect" || !n.in("legend")) continue;
    ++legend_rects;
    EXPECT_FALSE(rect_box(n).intersects(lanes));
    EXPECT_LE(rect_box(n).y1, nodes[0].num("height"));
  }
  EXPECT_GE(legend_rects, 15);
  ticks.clear();
  for (const SvgNode* t : texts(nodes, "axis", "tick")) ticks.push_back(t->text);
  EXPECT_TRUE(round_tick_labels(ticks));
}

TEST(ScheduleCli, LoweredListingShowsMessages) {
  CliResult r = run_cli("schedule --schedule=1f1b --stages=2 --microbatches=2 --layers=2 "
                        "--format=lowered --model=tiny --seq-len=16");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("# lowered schedule '1f1b': 2 stages, 4 messages"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stage 1\n  recv.start  #0     <- s0  F0 post:1 -> pre:2  [X:2]"),
            std::string::npos)
      << r.out;
}

TEST(ScheduleCli, HelpAndBadFlags) {
  CliResult h = run_cli("schedule --help");
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.out.find("Examples:"), std::string::npos);
  EXPECT_NE(h.out.find("--folds"), std::string::npos);
  CliResult v = run_cli("validate --help");
  EXPECT_EQ(v.rc, 0);
  EXPECT_NE(v.out.find("Examples:"), std::string::npos);

  CliResult bad = run_cli("schedule --schedule=foo --stages=4 --microbatches=4 --layers=4");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--schedule must be one of gpipe, 1f1b, interleaved, zb1p, helix, got 'foo'"),
            std::string::npos)
      << bad.err;
  CliResult fmt = run_cli("schedule --schedule=1f1b --stages=2 --microbatches=2 --layers=2 "
                          "--format=png");
  EXPECT_EQ(fmt.rc, 2);
  EXPECT_NE(fmt.err.find("--format must be one of text, json, svg, trace, lowered, got 'png' (did you mean svg?)"), std::string::npos)
      << fmt.err;
  CliResult unknown = run_cli("schedule --schedule=1f1b --stages=2 --microbatches=2 --layers=2 "
                              "--foldz=2");
  EXPECT_EQ(unknown.rc, 2);
  EXPECT_NE(unknown.err.find("--foldz"), std::string::npos) << unknown.err;
  CliResult constraint = run_cli("schedule --schedule=helix --stages=4 --microbatches=4 --layers=6");
  EXPECT_EQ(constraint.rc, 1);
  EXPECT_NE(constraint.err.find("nearest valid --layers: 4 or 8"), std::string::npos)
      << constraint.err;
  CliResult missing = run_cli("validate " + data("no_such_file.txt"));
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.err.find("no_such_file.txt"), std::string::npos) << missing.err;
}

// ---- validate on hand-broken files ---------------------------------------------------------------

struct Broken {
  const char* file;
  const char* first_error;  // the first "  - " line of the report (or the error on stderr)
  int errors;               // how many errors the report lists (0: a parse error on stderr)
};

TEST(ValidateCli, RejectsHandBrokenFilesWithExactMessages) {
  const Broken cases[] = {
      {"broken_duplicate_forward.txt",
       "the forward of pre:2 for micro-batch 0 runs 2 times: stage 1 op 0 (F 0 pre:2 attn:2 "
       "post:2 head), stage 1 op 1 (F 0 pre:2 attn:2 post:2 head)",
       8},
      {"broken_missing_backward.txt",
       "the backward of embed for micro-batch 1 never runs (it needs one B, or one I and one W)", 4},
      {"broken_w_before_i.txt",
       "stage 1 op 3 (W 1 head post:2 attn:2 pre:2) runs the W of pre:2 for micro-batch 1 before "
       "its I (stage 1 op 4 (I 1 head post:2 attn:2 pre:2))",
       4},
      {"broken_two_owners.txt",
       "pre:2 holds parameters on stage 1 (its forward of micro-batch 0 runs there), but stage 0 "
       "op 1 (F 1 embed pre:1 attn:1 post:1 pre:2 attn:2 post:2 head) runs it for micro-batch 1; "
       "a part's parameters live on one stage",
       3},
      {"broken_order.json",
       "stage 0 op 0 (F 0 attn:1 post:1 head) needs the forward output of pre:1 for micro-batch "
       "0, which stage 0 op 1 (F 0 embed pre:1) produces later",
       1},
      {"broken_deadlock.txt",
       "deadlock under blocking in-order execution: 2 of 2 stages can never finish", 3},
  };
  for (const Broken& b : cases) {
    CliResult r = run_cli("validate " + data(b.file));
    EXPECT_EQ(r.rc, 1) << b.file;
    EXPECT_EQ(r.out.rfind("INVALID: schedule 'custom'", 0), 0u) << b.file << "\n" << r.out;
    EXPECT_NE(r.out.find(std::to_string(b.errors) + (b.errors == 1 ? " error\n" : " errors\n")),
              std::string::npos)
        << b.file << "\n" << r.out;
    EXPECT_NE(r.out.find(std::string("\n  - ") + b.first_error + "\n"), std::string::npos)
        << b.file << "\n" << r.out;
  }
}

TEST(ValidateCli, DeadlockReportNamesStuckOpsAndDrawsTheGrid) {
  CliResult r = run_cli("validate " + data("broken_deadlock.txt"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("  - stage 0 is stuck at lowered op 3: recv.wait of message 2 (B0 pre:2 -> "
                       "post:1, stage 1 -> 0), consumed by stage 0 op 1 (B 0 post:1 attn:1 pre:1 "
                       "embed): stage 1 has not started sending it"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("ops around the deadlock"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  stage  0 | F0[embed..post:1] send.start#0>s1 recv.start#2<s1 "
                       ">>recv.wait#2<s1 B0[post:1..embed]"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  stage  1 | recv.start#0<s0 recv.wait#0<s0 F0[pre:2..head] "
                       "recv.start#1<s0 >>recv.wait#1<s0"),
            std::string::npos)
      << r.out;
}

TEST(ValidateCli, JsonReportOfABrokenFile) {
  CliResult r = run_cli("validate " + data("broken_w_before_i.txt") + " --format=json");
  EXPECT_EQ(r.rc, 1);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["valid"], false);
  ASSERT_EQ(j["errors"].size(), 4u);
  EXPECT_EQ(j["errors"][3],
            "stage 1 op 3 (W 1 head post:2 attn:2 pre:2) runs the W of head for micro-batch 1 "
            "before its I (stage 1 op 4 (I 1 head post:2 attn:2 pre:2))");
  EXPECT_FALSE(j.contains("stages"));
}

// --tensor-parallel: each rank of a group holds and sends its block of every value (rows, heads or
// MLP columns split by T), so per rank the stash and the bytes per link are exactly the whole
// stage's over T for a model T divides; a T that does not divide it is named.
TEST(ValidateCli, TensorParallelGivesPerRankStashAndLinkBytes) {
  const std::string file = ::testing::TempDir() + "hp_validate_tp_helix.txt";
  ASSERT_EQ(run_cli("schedule --schedule=helix --stages=2 --microbatches=4 --layers=4 --folds=2 "
                    "--out=" + file).rc,
            0);
  CliResult r = run_cli("validate " + file +
                        " --model=small --seq-len=256 --tensor-parallel=2 --format=json");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensor_parallel"], 2);
  EXPECT_GT(j["message_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(2 * j["message_bytes_per_rank"].get<int64_t>(), j["message_bytes"].get<int64_t>());
  ASSERT_EQ(j["stages"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& st = j["stages"][i];
    EXPECT_GT(st["peak_stash_bytes"].get<int64_t>(), 0);
    // Stage 0 holds the head, whose lsece (256 fp32 per micro-batch, 4 in flight) every TP rank
    // keeps whole (the parallel cross-entropy's statistics); everything else splits over T.
    EXPECT_EQ(2 * st["peak_stash_bytes_per_rank"].get<int64_t>(),
              st["peak_stash_bytes"].get<int64_t>() + (i == 0 ? 4 * 256 * 4 : 0));
  }
  CliResult text = run_cli("validate " + file + " --model=small --seq-len=256 --tensor-parallel=2");
  EXPECT_EQ(text.rc, 0);
  EXPECT_NE(text.out.find("per tensor-parallel rank and link"), std::string::npos) << text.out;
  CliResult bad = run_cli("validate " + file + " --model=small --seq-len=256 --tensor-parallel=3");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE((bad.out + bad.err).find("tensor-parallel group of 3"), std::string::npos)
      << bad.out << bad.err;
}

TEST(ValidateCli, ParseErrorsNameFileAndLine) {
  CliResult r = run_cli("validate " + data("broken_bad_part.txt"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("broken_bad_part.txt:8: bad part 'atn:1': unknown kind 'atn' (expected "
                       "embed, pre, attn, post or head)"),
            std::string::npos)
      << r.err;
}

TEST(ValidateCli, ValidFileReportsStashPerStage) {
  CliResult r = run_cli("validate " + data("valid_two_stage.txt") + " --format=json");
  EXPECT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["valid"], true);
  ASSERT_EQ(j["stages"].size(), 2u);
  EXPECT_EQ(j["messages"], 4);
  // GPipe: both micro-batches stashed at the end of the forwards. Stage 0 keeps per micro-batch
  // pre X rstd1, attn A QKVr O lse, post Y rstd2 Z G U (O shared) = 11 values.
  EXPECT_EQ(j["stages"][0]["peak_stash_values"], 22);
  // Stage 1 adds the head's X:3, rstdf, lsece.
  EXPECT_EQ(j["stages"][1]["peak_stash_values"], 28);
}

}  // namespace
}  // namespace hp::test

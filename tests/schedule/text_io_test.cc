// Schedule files: round trips of every generator through text and JSON, inference of missing
// header fields, parse errors with file:line, and a fuzz test (garbage in, hp::Error out).
#include "schedule_test_util.h"
#include "schedule/text_io.h"

#include <gtest/gtest.h>

#include <random>

#include "schedule/generate.h"
#include "schedule/validate.h"
#include "util/error.h"

namespace hp {
namespace {

using test::gen;

void expect_same(const Schedule& a, const Schedule& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.num_stages, b.num_stages);
  EXPECT_EQ(a.microbatches, b.microbatches);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.folds, b.folds);
  EXPECT_EQ(a.virtual_stages, b.virtual_stages);
  EXPECT_EQ(a.recompute, b.recompute);
  EXPECT_EQ(a.transfer, b.transfer);
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (size_t st = 0; st < a.stages.size(); ++st) {
    ASSERT_EQ(a.stages[st].ops.size(), b.stages[st].ops.size());
    for (size_t i = 0; i < a.stages[st].ops.size(); ++i) {
      const ComputeOp &x = a.stages[st].ops[i], &y = b.stages[st].ops[i];
      EXPECT_EQ(x.dir, y.dir);
      EXPECT_EQ(x.mb, y.mb);
      EXPECT_EQ(x.parts, y.parts);
      EXPECT_EQ(x.recompute, y.recompute);
      EXPECT_EQ(x.fold, y.fold);
    }
  }
}

std::string error_of(const std::string& text) {
  try {
    schedule_from_text(text, "s.txt");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TextIo, EveryGeneratorRoundTripsThroughTextAndJson) {
  for (const Schedule& s : {gen("gpipe", 3, 4, 5), gen("1f1b", 4, 8, 8), gen("zb1p", 4, 6, 4),
                            gen("interleaved", 2, 4, 8, 1, 2), gen("helix", 4, 8, 4, 2),
                            gen("helix", 4, 6, 8, 1)}) {
    const std::string text = schedule_to_text(s);
    expect_same(s, schedule_from_text(text));
    expect_same(s, schedule_from_json(schedule_to_json(s)));
    // Writing what was read gives the same bytes.
    EXPECT_EQ(schedule_to_text(schedule_from_text(text)), text);
  }
}

TEST(TextIo, TextLooksLikeThis) {
  const std::string text = schedule_to_text(gen("helix", 2, 2, 2));
  EXPECT_EQ(text.substr(0, text.find("stage 1")),
            "helixpipe-schedule 1\nname helix\nstages 2\nmicrobatches 2\nlayers 2\nfolds 1\n"
            "virtual 1\nrecompute no-attn\ntransfer weights\nstage 0\n"
            "F 0 embed pre:1\nF 1 embed pre:1 attn:1\nF 0 attn:2 post:2 head\nF 1 post:2 head\n"
            "B 1 head post:2\nB 0 head post:2 attn:2\nB 1 attn:1 pre:1 embed\nB 0 pre:1 embed\n");
}

TEST(TextIo, JsonHasTheIssueShape) {
  const auto j = schedule_to_json(gen("1f1b", 2, 2, 2));
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_EQ(j["stages"][0]["stage"], 0);
  EXPECT_EQ(j["stages"][0]["ops"][0]["dir"], "F");
  EXPECT_EQ(j["stages"][0]["ops"][0]["mb"], 0);
  EXPECT_EQ(j["stages"][0]["ops"][0]["parts"],
            nlohmann::json::parse(R"(["embed","pre:1","attn:1","post:1"])"));
}

TEST(TextIo, MinimalFilesInferTheHeader) {
  Schedule s = schedule_from_text(
      "helixpipe-schedule 1\n# one stage, one layer\nstage 0\n"
      "F 0 embed pre:1 attn:1 post:1 head\nB 0 head post:1 attn:1 pre:1 embed\n",
      "x");
  EXPECT_EQ(s.name, "custom");
  EXPECT_EQ(s.num_stages, 1);
  EXPECT_EQ(s.microbatches, 1);
  EXPECT_EQ(s.layers, 1);
  EXPECT_TRUE(validate(s).ok());
  Schedule j = schedule_from_json(nlohmann::json::parse(
      R"({"schedule":"helix","stages":[{"stage":0,"ops":[
          {"dir":"F","mb":0,"parts":["embed","pre:1","attn:1","post:1","head"]},
          {"dir":"B","mb":0,"parts":["head","post:1","attn:1","pre:1","embed"]}]}]})"));
  EXPECT_EQ(j.recompute, Recompute::kNoAttn);  // helix's default
  EXPECT_EQ(j.stages[0].ops[1].recompute,
            (std::vector<Part>{Part::post(1), Part::pre(1), Part::embed()}));
  EXPECT_TRUE(validate(j).ok());
}

TEST(TextIo, ExplicitRecomputeAndFoldsSurvive) {
  Schedule s = schedule_from_text(
      "helixpipe-schedule 1\nrecompute full\nstage 0\n"
      "F 0 embed pre:1 attn:1 post:1 head fold=1\n"
      "B 0 head post:1 attn:1 pre:1 embed fold=1 recompute=-\n");
  EXPECT_EQ(s.stages[0].ops[0].fold, 1);
  EXPECT_TRUE(s.stages[0].ops[1].recompute.empty());
  const std::string again = schedule_to_text(s);
  EXPECT_NE(again.find("fold=1 recompute=-"), std::string::npos) << again;
  ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.errors[0].find("the op recomputes [] but recompute policy 'full' means"),
            std::string::npos);
}

TEST(TextIo, ParseErrorsSayWhereAndWhatWasExpected) {
  const std::string head = "helixpipe-schedule 1\n";
  EXPECT_EQ(error_of(""), "s.txt: empty schedule file: expected 'helixpipe-schedule 1' and ops");
  EXPECT_EQ(error_of("stage 0\n"),
            "s.txt:1: expected the first line to be 'helixpipe-schedule 1' (the format and its "
            "version), got 'stage 0'");
  EXPECT_EQ(error_of("helixpipe-schedule 2\n"),
            "s.txt:1: this file is schedule format version '2'; this helixpipe reads version 1");
  EXPECT_EQ(error_of(head + "F 0 embed\n"), "s.txt:2: an op line needs a 'stage N' line before it");
  EXPECT_EQ(error_of(head + "stage 1\n"),
            "s.txt:2: expected 'stage 0' (stages are listed in order from 0), got 'stage 1'");
  EXPECT_EQ(error_of(head + "stage 0\nF x embed\n"),
            "s.txt:3: expected a micro-batch number (0..1048575) after 'F', got 'x'");
  EXPECT_EQ(error_of(head + "layers 2\nstage 0\nF 0 pre:3\n"),
            "s.txt:4: bad part 'pre:3': layer 3 is beyond the model's 2 layers");
  EXPECT_EQ(error_of(head + "stage 0\nF 0 mlp:1\n"),
            "s.txt:3: bad part 'mlp:1': unknown kind 'mlp' (expected embed, pre, attn, post or "
            "head)");
  EXPECT_EQ(error_of(head + "stage 0\nX 0 embed\n"),
            "s.txt:3: unknown line 'X 0 embed': expected a header (name, stages, microbatches, "
            "layers, folds, virtual, recompute, transfer), 'stage N', or an op 'F|B|I|W MB "
            "PART...'");
  EXPECT_EQ(error_of(head + "recompute some\n"),
            "s.txt:2: bad recomputation policy 'some': expected none, full, no-attn or selective");
  EXPECT_EQ(error_of(head + "stages 0\n"), "s.txt:2: stages must be between 1 and 4096, got 0");
  EXPECT_EQ(error_of(head + "stage 0\nlayers 3\n"),
            "s.txt:3: header line 'layers' after the first 'stage' line; put it on top");
  EXPECT_EQ(error_of(head + "stages 1\nstage 0\nstage 1\n"),
            "s.txt: the header says 1 stages but the file lists stage 1");
  EXPECT_EQ(error_of(head + "stage 0\nF 0\n"),
            "s.txt:3: expected an op: DIR MB PART... (e.g. 'F 0 embed pre:1'), got 'F 0'");
}

TEST(TextIo, JsonErrorsNameThePath) {
  auto err = [](const char* text) {
    try {
      schedule_from_json(nlohmann::json::parse(text), "s.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(err("[]"), "s.json: expected a JSON object with a \"stages\" array");
  EXPECT_EQ(err(R"({"stages":[{"stage":0,"ops":[{"dir":"F","mb":0,"parts":["pre:x"]}]}]})"),
            "s.json: stages[0].ops[0]: bad part 'pre:x': the layer after ':' must be a whole "
            "number >= 1");
  EXPECT_EQ(err(R"({"stages":[{"stage":0,"ops":[{"dir":"Q","mb":0,"parts":["embed"]}]}]})"),
            "s.json: stages[0].ops[0]: bad direction 'Q': expected F (forward), B (backward), I "
            "(input grads) or W (weight grads)");
  EXPECT_EQ(err(R"({"stages":[{"stage":1,"ops":[]}]})"),
            "s.json: stages[0]: \"stage\" must be 0 (stages are listed in order from 0)");
  EXPECT_EQ(err(R"({"version":3,"stages":[]})"),
            "s.json: this file is schedule format version 3; this helixpipe reads version 1");
  // Found by fuzzing: a name the text form cannot hold ('#' starts a comment there) was accepted,
  // and writing the schedule as text lost it.
  const char* ops = R"("stages":[{"stage":0,"ops":[{"dir":"F","mb":0,"parts":["embed"]}]}]})";
  for (const std::string bad : {"#ustom", "my schedule", "", "a\\nb"}) {
    const std::string json = R"({"schedule":")" + bad + "\"," + ops;
    const std::string name = nlohmann::json::parse("\"" + bad + "\"").get<std::string>();
    EXPECT_EQ(err(json.c_str()), "s.json: schedule name '" + name +
                                     "' is not usable: use 1 to 64 letters, digits or . _ : + = - "
                                     "(no blanks or '#': the text form could not hold it)")
        << bad;
  }
  EXPECT_EQ(err((std::string(R"({"schedule":"helix-v2.1",)") + ops).c_str()), "(no error)");
}

TEST(TextIo, HeadersThatContradictTheOpsAreRefused) {
  const std::string head = "helixpipe-schedule 1\n";
  const std::string one_stage =
      "F 0 embed pre:1 attn:1 post:1 head\nB 0 head post:1 attn:1 pre:1 embed\n";
  // stages: more in the header than listed (used to add empty stages silently).
  EXPECT_EQ(error_of(head + "stages 3\nstage 0\n" + one_stage),
            "s.txt: the header says 3 stages but the file lists 1 (stage 0..0); list every stage "
            "with a 'stage N' line, or fix the header");
  // folds: an op's fold beyond the header's.
  EXPECT_EQ(error_of(head + "folds 2\nstage 0\nF 0 embed pre:1 attn:1 post:1 head fold=2\n"),
            "s.txt:4: the op has fold=2 but the header says folds 2 (folds are numbered 0..1); "
            "fix the op or the header");
  EXPECT_NE(error_of(head + "folds 1\nstage 0\nF 0 embed pre:1 attn:1 post:1 head fold=1\n")
                .find("s.txt:4: the op has fold=1 but the header says folds 1"),
            std::string::npos);
  // virtual: more chunks than layers allow, and a stage that runs a micro-batch's forward whole.
  EXPECT_EQ(error_of(head + "virtual 2\nstage 0\n" + one_stage),
            "s.txt: the header says virtual 2 over 1 stages, which needs at least 2 layers, but "
            "the schedule has 1; fix the header");
  const Schedule plain = gen("1f1b", 2, 2, 4);
  std::string text = schedule_to_text(plain);
  text.replace(text.find("virtual 1"), 9, "virtual 2");
  EXPECT_EQ(error_of(text),
            "s.txt: the header says virtual 2 (every stage runs each micro-batch's forward as 2 "
            "chunks), but stage 0 runs micro-batch 0's forward in 1 op(s); fix the header "
            "(virtual 1?) or the ops");
  // The same rules hold for JSON.
  nlohmann::json j = schedule_to_json(plain);
  j["virtual"] = 2;
  EXPECT_THROW(schedule_from_json(j, "s.json"), Error);
  j = schedule_to_json(gen("helix", 2, 4, 4, 2));
  j["folds"] = 1;
  try {
    schedule_from_json(j, "s.json");
    ADD_FAILURE() << "folds 1 with fold=1 ops accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("s.json: stages[0].ops["), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("has fold=1 but the header says folds 1"),
              std::string::npos)
        << e.what();
  }
  // Consistent headers still read, and a missing folds header is taken from the ops.
  for (const Schedule& s : {gen("interleaved", 2, 4, 8, 1, 2), gen("interleaved", 1, 2, 4, 1, 4),
                            gen("helix", 3, 6, 6, 2)}) {
    EXPECT_NO_THROW(schedule_from_text(schedule_to_text(s)));
    nlohmann::json js = schedule_to_json(s);
    js.erase("folds");
    EXPECT_EQ(schedule_from_json(js).folds, s.folds);
  }
}

// Garbage in: either a schedule or an hp::Error, never a crash or another exception. Mutates valid
// files (byte flips, deletions, duplications, splices) and feeds random bytes.
TEST(TextIo, FuzzedInputGivesCleanErrors) {
  std::mt19937 rng(1234);
  const std::string base = schedule_to_text(gen("helix", 4, 8, 4, 2)) + "# end\n";
  const std::string alphabet = "0123456789 \n\t:#=,-FBIWstagepromxdlhfizcu\xff";
  int parsed = 0, errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = base;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (t.size() + 1);
      switch (rng() % 4) {
        case 0:
          if (!t.empty()) t[std::min(at, t.size() - 1)] = alphabet[rng() % alphabet.size()];
          break;
        case 1: t.erase(std::min(at, t.size()), rng() % 20); break;
        case 2: t.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 3: {
          const size_t from = rng() % t.size();
          t.insert(at, t.substr(from, rng() % 40));
          break;
        }
      }
    }
    if (iter % 10 == 0) {  // pure noise
      t.clear();
      for (int k = 0; k < 200; ++k) t += static_cast<char>(rng() % 256);
    }
    try {
      Schedule s = schedule_from_text(t, "fuzz");
      ++parsed;
      (void)validate(s);  // the validator must cope with whatever parsed
    } catch (const Error& e) {
      ++errors;
      EXPECT_EQ(std::string(e.what()).rfind("fuzz", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(errors, 1000);
  EXPECT_GT(parsed, 10);
}

}  // namespace
}  // namespace hp

// Validator: every generator passes over a grid; hand-broken schedules fail with exact messages;
// stash predictions equal closed forms computed here from shapes (not from the value table).
#include "schedule_test_util.h"
#include "schedule/validate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "schedule/generate.h"
#include "schedule/lower.h"
#include "util/error.h"

namespace hp {
namespace {

using test::gen;

ModelConfig small_cfg() {
  ModelConfig c;
  c.hidden = 64;
  c.intermediate = 160;
  c.heads = 4;
  c.kv_heads = 2;
  c.vocab = 96;
  return c;
}

std::string all_errors(const ValidationReport& r) {
  std::string s;
  for (const auto& e : r.errors) s += e + "\n";
  return s + r.deadlock_grid;
}

TEST(Validate, EveryGeneratorPassesOverAGrid) {
  const ModelConfig cfg = small_cfg();
  ValidateOptions opt;
  opt.model = &cfg;
  opt.tokens_per_mb = 16;
  int checked = 0;
  for (int p = 1; p <= 8; ++p) {
    for (int m : {1, p, 2 * p + 1, 4 * p}) {
      for (Recompute rc : kAllRecompute) {
        for (TransferMode t : {TransferMode::kWeights, TransferMode::kActivations}) {
          std::vector<std::tuple<std::string, int, int, int>> cases = {
              {"gpipe", 1, 1, p}, {"1f1b", 1, 1, p + 1}, {"zb1p", 1, 1, 2 * p},
              {"helix", 1, 1, p}, {"helix", 2, 1, 2 * p}};
          if (m % p == 0 && p > 1) cases.push_back({"interleaved", 1, 2, 2 * p + 1});
          if (m % p == 0 && p > 1 && p <= 4) cases.push_back({"interleaved", 1, 3, 3 * p});
          for (const auto& [name, F, V, L] : cases) {
            if (name == "zb1p" && t == TransferMode::kWeights) {
              // fine: baselines keep attention with pre, so weights mode never ships W
            }
            Schedule s = gen(name, p, m, L, F, V, rc, t);
            ValidationReport r = validate(s, opt);
            EXPECT_TRUE(r.ok()) << name << " p=" << p << " m=" << m << " L=" << L << " F=" << F
                                << " V=" << V << " " << recompute_str(rc) << " "
                                << transfer_str(t) << "\n"
                                << all_errors(r);
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 700);
}

TEST(Validate, LoweredSchedulesValidateToo) {
  Schedule s = gen("helix", 4, 8, 8, 2);
  lower(s);
  ValidationReport r = validate(s);
  EXPECT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.messages, static_cast<int>(s.messages.size()));
}

// ---- Hand-broken schedules: exact messages -------------------------------------------------------

ComputeOp op(Dir d, int mb, std::vector<Part> parts, Recompute rc = Recompute::kNone) {
  ComputeOp o;
  o.dir = d;
  o.mb = mb;
  o.parts = std::move(parts);
  o.recompute = recompute_parts(o, rc);
  return o;
}

// GPipe-like two stages, one layer each, two micro-batches.
Schedule two_stage() {
  Schedule s;
  s.name = "custom";
  s.num_stages = 2;
  s.microbatches = 2;
  s.layers = 2;
  s.stages.resize(2);
  const std::vector<Part> a = {Part::embed(), Part::pre(1), Part::attn(1), Part::post(1)};
  const std::vector<Part> b = {Part::pre(2), Part::attn(2), Part::post(2), Part::head()};
  std::vector<Part> ra(a.rbegin(), a.rend()), rb(b.rbegin(), b.rend());
  s.stages[0].ops = {op(Dir::kF, 0, a), op(Dir::kF, 1, a), op(Dir::kB, 0, ra), op(Dir::kB, 1, ra)};
  s.stages[1].ops = {op(Dir::kF, 0, b), op(Dir::kF, 1, b), op(Dir::kB, 0, rb), op(Dir::kB, 1, rb)};
  return s;
}

TEST(Validate, TheHandBuiltBaseIsValid) {
  ValidationReport r = validate(two_stage());
  EXPECT_TRUE(r.ok()) << all_errors(r);
}

TEST(Validate, RejectsAForwardThatRunsTwice) {
  Schedule s = two_stage();
  s.stages[0].ops[1].mb = 0;
  ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0], "the forward of embed for micro-batch 0 runs 2 times: stage 0 op 0 (F 0 "
                         "embed pre:1 attn:1 post:1), stage 0 op 1 (F 0 embed pre:1 attn:1 post:1)");
  EXPECT_EQ(r.errors[4], "the forward of embed for micro-batch 1 never runs");
}

TEST(Validate, RejectsAMissingBackward) {
  Schedule s = two_stage();
  s.stages[1].ops.pop_back();
  ValidationReport r = validate(s);
  ASSERT_EQ(r.errors.size(), 4u) << all_errors(r);
  EXPECT_EQ(r.errors[0], "the backward of pre:2 for micro-batch 1 never runs (it needs one B, or "
                         "one I and one W)");
}

TEST(Validate, RejectsWBeforeI) {
  Schedule s = two_stage();
  // Stage 1: split B 1 into I and W, W first.
  auto& ops = s.stages[1].ops;
  ComputeOp w = ops[3], i = ops[3];
  w.dir = Dir::kW;
  i.dir = Dir::kI;
  ops.pop_back();
  ops.push_back(w);
  ops.push_back(i);
  ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 4u) << all_errors(r);
  EXPECT_EQ(r.errors[0], "stage 1 op 3 (W 1 head post:2 attn:2 pre:2) runs the W of pre:2 for "
                         "micro-batch 1 before its I (stage 1 op 4 (I 1 head post:2 attn:2 pre:2))");
}

TEST(Validate, RejectsParametersOnTwoStages) {
  Schedule s = two_stage();
  // Micro-batch 1 runs layer 1 on stage 1 and layer 2 on stage 0 (swapped chunks).
  std::swap(s.stages[0].ops[1], s.stages[1].ops[1]);
  std::swap(s.stages[0].ops[3], s.stages[1].ops[3]);
  ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0], "embed holds parameters on stage 0 (its forward of micro-batch 0 runs "
                         "there), but stage 1 op 1 (F 1 embed pre:1 attn:1 post:1) runs it for "
                         "micro-batch 1; a part's parameters live on one stage");
}

TEST(Validate, RejectsABackwardAwayFromItsForward) {
  Schedule s = gen("helix", 4, 4, 4);
  // Move the backward of the attention op "A1.0" (stage 1) to stage 0 at the same place.
  auto& ops1 = s.stages[1].ops;
  int idx = -1;
  for (int i = 0; i < static_cast<int>(ops1.size()); ++i)
    if (ops1[i].dir == Dir::kB && ops1[i].parts.size() == 1) idx = i;
  ASSERT_GE(idx, 0);
  ComputeOp moved = ops1[idx];
  ops1.erase(ops1.begin() + idx);
  s.stages[0].ops.push_back(moved);
  ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0], "stage 0 op " + std::to_string(s.stages[0].ops.size() - 1) + " (" +
                             op_str(moved) + ") runs a backward of " + moved.parts[0].str() +
                             " for micro-batch " + std::to_string(moved.mb) +
                             ", but its forward ran on stage 1: the backward must run where the "
                             "forward's stash is");
}

TEST(Validate, RejectsNonContiguousOps) {
  Schedule s = two_stage();
  s.stages[0].ops[0].parts = {Part::embed(), Part::pre(1), Part::post(1)};
  ValidationReport r = validate(s);
  ASSERT_EQ(r.errors.size(), 1u) << all_errors(r);
  EXPECT_EQ(r.errors[0], "stage 0 op 0 (F 0 embed pre:1 post:1): the parts of an op must be a "
                         "contiguous run of the model order (ascending for F), but pre:1 is "
                         "followed by post:1");
}

TEST(Validate, RejectsAWrongRecomputeList) {
  Schedule s = two_stage();
  s.recompute = Recompute::kNoAttn;
  for (auto& st : s.stages)
    for (auto& o : st.ops) o.recompute = recompute_parts(o, s.recompute);
  s.stages[1].ops[2].recompute.push_back(Part::attn(2));
  ValidationReport r = validate(s);
  ASSERT_EQ(r.errors.size(), 1u) << all_errors(r);
  EXPECT_EQ(r.errors[0],
            "stage 1 op 2 (B 0 head post:2 attn:2 pre:2): the op recomputes [post:2 "
            "pre:2 attn:2] but recompute policy 'no-attn' means [post:2 pre:2]");
}

TEST(Validate, RejectsALocalConsumerBeforeItsProducer) {
  Schedule s;
  s.num_stages = 1;
  s.microbatches = 1;
  s.layers = 1;
  s.stages.resize(1);
  s.stages[0].ops = {op(Dir::kF, 0, {Part::attn(1), Part::post(1), Part::head()}),
                     op(Dir::kF, 0, {Part::embed(), Part::pre(1)}),
                     op(Dir::kB, 0, {Part::head(), Part::post(1), Part::attn(1), Part::pre(1),
                                     Part::embed()})};
  ValidationReport r = validate(s);
  ASSERT_EQ(r.errors.size(), 1u) << all_errors(r);
  EXPECT_EQ(r.errors[0], "stage 0 op 0 (F 0 attn:1 post:1 head) needs the forward output of pre:1 "
                         "for micro-batch 0, which stage 0 op 1 (F 0 embed pre:1) produces later");
}

TEST(Validate, ReportsADeadlockWithTheGrid) {
  Schedule s = two_stage();
  // Stage 0 runs B 0 before F 1; stage 1 needs F 1 before its B 0: a cycle across stages.
  std::swap(s.stages[0].ops[1], s.stages[0].ops[2]);
  ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 3u) << all_errors(r);
  EXPECT_EQ(r.errors[0], "deadlock under blocking in-order execution: 2 of 2 stages can never "
                         "finish");
  EXPECT_EQ(r.errors[1],
            "stage 0 is stuck at lowered op 3: recv.wait of message 2 (B0 pre:2 -> post:1, stage 1 "
            "-> 0), consumed by stage 0 op 1 (B 0 post:1 attn:1 pre:1 embed): stage 1 has not "
            "started sending it (it would right after stage 1 op 2 (B 0 head post:2 attn:2 "
            "pre:2)), and stage 1 is itself stuck at lowered op 4 (recv.wait#1<s0)");
  EXPECT_EQ(r.errors[2],
            "stage 1 is stuck at lowered op 4: recv.wait of message 1 (F1 post:1 -> pre:2, stage 0 "
            "-> 1), consumed by stage 1 op 1 (F 1 pre:2 attn:2 post:2 head): stage 0 has not "
            "started sending it (it would right after stage 0 op 2 (F 1 embed pre:1 attn:1 "
            "post:1)), and stage 0 is itself stuck at lowered op 3 (recv.wait#2<s1)");
  EXPECT_NE(r.deadlock_grid.find(">>recv.wait#2<s1"), std::string::npos) << r.deadlock_grid;
  EXPECT_NE(r.deadlock_grid.find(">>recv.wait#1<s0"), std::string::npos) << r.deadlock_grid;
  EXPECT_NE(r.text(s).find("INVALID"), std::string::npos);
}

TEST(Validate, RejectsReceivesPostedOutOfSendOrder) {
  Schedule s = two_stage();
  lower(s);
  // Post the receive of message 1 (F1) before that of message 0 (F0), both up front.
  auto& prog = s.stages[1].lowered;
  auto it = std::find_if(prog.begin() + 1, prog.end(), [](const LoweredOp& o) {
    return o.kind == OpKind::kRecvStart && o.index == 1;
  });
  ASSERT_NE(it, prog.end());
  prog.erase(it);
  prog.insert(prog.begin(), LoweredOp{OpKind::kRecvStart, 1});
  ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u) << all_errors(r);
  EXPECT_EQ(r.errors[0], "link stage 0 -> 1: send number 1 is message 0 (F0 post:1 -> pre:2, "
                         "stage 0 -> 1) (0 bytes) but receive number 1 posted is message 1 (F1 "
                         "post:1 -> pre:2, stage 0 -> 1) (0 bytes); receives must be posted in "
                         "send order");
}

TEST(Validate, RejectsAMessageWithWrongContents) {
  Schedule s = two_stage();
  lower(s);
  s.messages[0].values = {"A:2"};
  ValidationReport r = validate(s);
  ASSERT_EQ(r.errors.size(), 1u) << all_errors(r);
  EXPECT_EQ(r.errors[0], "message 0 (F0 post:1 -> pre:2, stage 0 -> 1) carries [A:2] but post:1 "
                         "hands on [X:2]");
}

// ---- Stash predictions ---------------------------------------------------------------------------

// fp32 bytes one micro-batch of one layer keeps without recomputation (docs/memory.md, written out
// from shapes): X, rstd1, A, QKVr, O, lse, Y, rstd2, Z, G, U.
int64_t layer_none_bytes(const ModelConfig& c, int64_t T) {
  const int64_t h = c.hidden, q = c.hidden + 2 * c.kv_heads * (c.hidden / c.heads),
                f = c.intermediate;
  return 4 * (5 * T * h + 2 * T + T * q + c.heads * T + 2 * T * f);
}

TEST(Stash, OneFOneBStageIHoldsMinOfMAndPMinusIMicrobatches) {
  const ModelConfig cfg = small_cfg();
  const int64_t T = 16;
  ValidateOptions opt{&cfg, T};
  for (int p : {2, 4}) {
    for (int m : {2, 4, 8}) {
      const int L = 2 * p;
      ValidationReport r = validate(gen("1f1b", p, m, L), opt);
      ASSERT_TRUE(r.ok()) << all_errors(r);
      for (int i = 0; i < p; ++i) {
        int64_t per_mb = 2 * layer_none_bytes(cfg, T);
        if (i == p - 1) per_mb += 4 * (T * cfg.hidden + 2 * T);  // head: X:L+1, rstdf, lsece
        EXPECT_EQ(r.peak_stash_bytes[i], std::min(m, p - i) * per_mb)
            << "p=" << p << " m=" << m << " stage " << i;
      }
      // GPipe holds every micro-batch.
      ValidationReport g = validate(gen("gpipe", p, m, L), opt);
      EXPECT_EQ(g.peak_stash_bytes[0], m * 2 * layer_none_bytes(cfg, T));
    }
  }
}

TEST(Stash, FullRecomputationKeepsOnlyChunkInputs) {
  const ModelConfig cfg = small_cfg();
  const int64_t T = 16;
  ValidationReport r = validate(gen("1f1b", 4, 8, 8, 1, 1, Recompute::kFull), {&cfg, T});
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.peak_stash_bytes[0], 0);  // stage 0 starts at embed: tokens only
  // The last stage's head, never rerun, also keeps rstdf and lsece (2T) of its one micro-batch.
  for (int i = 1; i < 4; ++i)
    EXPECT_EQ(r.peak_stash_bytes[i], (4 - i) * 4 * T * cfg.hidden + (i == 3 ? 4 * 2 * T : 0));
}

TEST(Stash, HelixNoAttnMatchesTheDerivedFormulaOnEveryStage) {
  // m (L/p) (4 - 1/p) T h per stage, plus one lse per attention and one W:l copy per remote
  // attention (docs/design.md section 7/8, docs/memory.md); stage 0, the tail's, also the head's
  // rstdf and lsece (2T) per micro-batch.
  const ModelConfig cfg = small_cfg();
  const int64_t T = 16, h = cfg.hidden, q = cfg.qkv_dim();
  for (auto [p, m, L, F] : std::vector<std::tuple<int, int, int, int>>{
           {2, 4, 2, 1}, {4, 4, 4, 1}, {4, 8, 4, 2}, {4, 8, 8, 2}, {3, 6, 6, 1}}) {
    ValidationReport r = validate(gen("helix", p, m, L, F), {&cfg, T});
    ASSERT_TRUE(r.ok()) << all_errors(r);
    const int64_t per_stage_layers = L / p;
    const int64_t th = m * per_stage_layers * (4 * p - 1) / p * T * h;  // m L/p (4 - 1/p) T h
    const int64_t lse = m * per_stage_layers * cfg.heads * T;
    const int64_t w = (m / p) * (p - 1) * per_stage_layers * q * h;
    for (int st = 0; st < p; ++st) {
      EXPECT_EQ(r.peak_stash_bytes[st], 4 * (th + lse + w + (st == 0 ? m * 2 * T : 0)))
          << "p=" << p << " m=" << m << " L=" << L << " F=" << F << " stage " << st;
    }
  }
}

TEST(Stash, HelixActivationsModeKeepsQKVInsteadOfAAndW) {
  const ModelConfig cfg = small_cfg();
  const int64_t T = 16, h = cfg.hidden, q = cfg.qkv_dim();
  const int p = 4, m = 4, L = 4;
  ValidationReport r = validate(
      gen("helix", p, m, L, 1, 1, Recompute::kNoAttn, TransferMode::kActivations), {&cfg, T});
  ASSERT_TRUE(r.ok()) << all_errors(r);
  // Per micro-batch and layer: attention keeps QKV, O, lse; post keeps X, O (O once when d = 0,
  // where attention also keeps X for post's recomputation as the op's first part).
  // Per stage (m = p: each offset once): (L/p) * [d=0: QKV + X + O + lse] + (p-1)(L/p) *
  // [QKV + O + lse + X + O]; stage 0 also the head's rstdf and lsece for each micro-batch.
  const int64_t d0 = T * q + 2 * T * h + cfg.heads * T;
  const int64_t other = T * q + 3 * T * h + cfg.heads * T;
  for (int st = 0; st < p; ++st)
    EXPECT_EQ(r.peak_stash_bytes[st], 4 * (d0 + (p - 1) * other + (st == 0 ? m * 2 * T : 0)));
}

TEST(Stash, ZeroBubbleKeepsAtMostPMicrobatchesInFlight) {
  for (int p : {2, 4}) {
    Schedule s = gen("zb1p", p, 3 * p, p);
    ValidationReport r = validate(s);
    ASSERT_TRUE(r.ok()) << all_errors(r);
    for (int st = 0; st < p; ++st) {
      size_t most = 0;
      for (const auto& items : stash_trace(s, st)) {
        std::set<int> mbs;
        for (const auto& it : items) mbs.insert(it.mb);
        most = std::max(most, mbs.size());
      }
      EXPECT_LE(most, static_cast<size_t>(p)) << "stage " << st;
      if (st == 0) {
        EXPECT_EQ(most, static_cast<size_t>(p));
      }
    }
  }
}

TEST(Stash, TraceEndsEmptyAndCountsSharedValuesOnce) {
  Schedule s = gen("helix", 2, 2, 2);
  for (int st = 0; st < 2; ++st) {
    auto trace = stash_trace(s, st);
    ASSERT_EQ(trace.size(), s.stages[st].ops.size());
    EXPECT_TRUE(trace.back().empty());
    for (const auto& items : trace) {
      std::set<StashItem> uniq(items.begin(), items.end());
      EXPECT_EQ(uniq.size(), items.size());
    }
  }
}

}  // namespace
}  // namespace hp

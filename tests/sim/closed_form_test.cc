// The simulator against closed forms (docs/design.md section 8): 1F1B/GPipe bubble fraction
// (p-1)/(m+p-1) with uniform costs and free links; HelixPipe F=1 bubble exactly (p-1)(t_X^F+t_X^B)
// for any attention cost; F=2 inside [(2p-3), 2(p-1)] (t_X^F+t_X^B); and the per-stage activation
// stash of 1F1B and HelixPipe against their formulas, written out here from the value shapes.
#include <gtest/gtest.h>

#include <algorithm>

#include "schedule/generate.h"
#include "schedule/lower.h"
#include "schedule/validate.h"
#include "sim/memory.h"
#include "sim/simulator.h"
#include "util/error.h"

namespace hp {
namespace {

// Free links; costs only where given.
CostModel free_links() {
  CostModel c;
  c.set_links({0, 0}, {0, 0}, 1 << 20);
  return c;
}

// Free links; pre, attn and post each cost f, i, w for F, I, W.
CostModel uniform_layers(double f, double i, double w) {
  CostModel c = free_links();
  for (PartKind k : {PartKind::kPre, PartKind::kAttn, PartKind::kPost}) {
    c.set_part_time(k, Dir::kF, f);
    c.set_part_time(k, Dir::kI, i);
    c.set_part_time(k, Dir::kW, w);
  }
  return c;
}

SimResult run(const ScheduleSpec& spec, const CostModel& c) {
  Schedule s = generate(spec);
  lower(s);
  SimOptions o;
  o.record_timeline = false;
  return simulate(s, c, o);
}

ScheduleSpec spec(const char* name, int p, int m, int L, int F = 1) {
  ScheduleSpec s;
  s.name = name;
  s.stages = p;
  s.microbatches = m;
  s.layers = L;
  s.folds = F;
  return s;
}

TEST(ClosedForm, OneFOneBAndGPipeBubbleFraction) {
  // Uniform layers: every part costs something, so a stage's op costs (L/p) layers' worth.
  const CostModel c = uniform_layers(1.0, 1.5, 0.5);
  int checked = 0;
  for (const char* name : {"1f1b", "gpipe"}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 4, 7, 16}) {
        for (int per : {1, 2}) {
          const int L = p * per;
          SimResult r = run(spec(name, p, m, L), c);
          const double op = per * 3 * (1.0 + 2.0);  // one F + one B of a stage's layers
          SCOPED_TRACE(testing::Message() << name << " p=" << p << " m=" << m << " L=" << L);
          EXPECT_NEAR(r.makespan, (m + p - 1) * op, 1e-9);
          EXPECT_NEAR(r.bubble_fraction, double(p - 1) / (m + p - 1), 1e-12);
          for (const auto& st : r.stages) EXPECT_NEAR(st.busy, m * op, 1e-9);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 100);
}

// HelixPipe with free communication, E costing nothing and the tail costing one chunk: all the
// non-attention time sits in post (pre, embed and head cost 0), so a chunk P_c = post + pre and the
// tail T = post + head both cost t_X.
CostModel helix_costs(double tA) {
  CostModel c = free_links();
  c.set_part_time(PartKind::kPost, Dir::kF, 1.0);
  c.set_part_time(PartKind::kPost, Dir::kI, 1.25);
  c.set_part_time(PartKind::kPost, Dir::kW, 0.75);
  c.set_part_time(PartKind::kAttn, Dir::kF, tA);
  c.set_part_time(PartKind::kAttn, Dir::kI, 2.5 * tA);
  c.set_part_time(PartKind::kAttn, Dir::kW, 0.1 * tA);
  c.set_attn_recompute_time(0.2 * tA);
  return c;
}

struct HelixCase {
  int p, m, L;
};
const HelixCase kHelixCases[] = {{2, 2, 2}, {2, 6, 4},  {3, 3, 3},  {3, 6, 6},
                                 {4, 4, 4}, {4, 8, 8},  {4, 12, 4}, {8, 8, 8}};

TEST(ClosedForm, HelixOneFoldBubbleIsExactlyPMinusOneChunksForAnyAttentionCost) {
  for (Recompute policy : {Recompute::kNone, Recompute::kNoAttn}) {
    // t_X^B includes the chunk's forward recompute under no-attn.
    const double tXF = 1.0, tXB = 2.0 + (policy == Recompute::kNoAttn ? 1.0 : 0.0);
    for (const HelixCase& hc : kHelixCases) {
      for (double tA : {0.0, 0.3, 1.0, 4.0, 25.0}) {
        ScheduleSpec sp = spec("helix", hc.p, hc.m, hc.L, 1);
        sp.recompute = policy;
        SimResult r = run(sp, helix_costs(tA));
        SCOPED_TRACE(testing::Message() << "p=" << hc.p << " m=" << hc.m << " L=" << hc.L
                                        << " tA=" << tA << " " << recompute_str(policy));
        EXPECT_NEAR(r.bubble, (hc.p - 1) * (tXF + tXB), 1e-9);
        // Every stage does the same work: one attention and one chunk per micro-batch per loop.
        for (const auto& st : r.stages) EXPECT_NEAR(st.busy, r.stages[0].busy, 1e-9);
      }
    }
  }
}

TEST(ClosedForm, HelixTwoFoldBubbleWithinBounds) {
  const double tX = 1.0 + 3.0;  // no-attn: backward = I + W + recomputed forward
  for (const HelixCase& hc : kHelixCases) {
    const int m = 2 * hc.m;  // a multiple of p*F
    for (double tA : {0.0, 0.5, 2.0, 10.0}) {
      SimResult r = run(spec("helix", hc.p, m, hc.L, 2), helix_costs(tA));
      SCOPED_TRACE(testing::Message() << "p=" << hc.p << " m=" << m << " L=" << hc.L << " tA=" << tA);
      EXPECT_GE(r.bubble, (2 * hc.p - 3) * tX - 1e-9);
      EXPECT_LE(r.bubble, 2 * (hc.p - 1) * tX + 1e-9);
    }
  }
}

// The bubble of 1F1B grows with the attention cost; HelixPipe's does not.
TEST(ClosedForm, AttentionCostEntersOneFOneBBubbleButNotHelix) {
  SimResult h1 = run(spec("helix", 4, 8, 8), helix_costs(0.5));
  SimResult h2 = run(spec("helix", 4, 8, 8), helix_costs(8.0));
  EXPECT_NEAR(h1.bubble, h2.bubble, 1e-9);
  SimResult o1 = run(spec("1f1b", 4, 8, 8), helix_costs(0.5));
  SimResult o2 = run(spec("1f1b", 4, 8, 8), helix_costs(8.0));
  EXPECT_GT(o2.bubble, 4 * o1.bubble);
}

ModelConfig small_gqa() {
  ModelConfig c;
  c.hidden = 64;
  c.intermediate = 160;
  c.heads = 4;
  c.kv_heads = 2;  // q = 64 + 2*32 = 128
  c.layers = 8;
  c.vocab = 96;
  return c;
}

TEST(ClosedForm, OneFOneBStashPerStage) {
  const ModelConfig cfg = small_gqa();
  const int64_t T = 100, h = cfg.hidden, f = cfg.intermediate, q = cfg.qkv_dim(), H = cfg.heads;
  // recompute none, one layer: pre X rstd1; attn A QKVr O lse; post (O) Y rstd2 Z G U.
  const int64_t M = 5 * T * h + T * q + 2 * T * f + 2 * T + H * T;
  // selective (Megatron-LM): attention keeps only its input A; QKVr and lse are rebuilt.
  const int64_t M_selective = M - T * q - H * T;
  const int64_t head = T * h + 2 * T;  // X:L+1, rstdf, lsece on the last stage
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 3, 8, 12}) {
      for (Recompute pol : {Recompute::kNone, Recompute::kSelective}) {
        ScheduleSpec sp = spec("1f1b", p, m, 8);
        sp.recompute = pol;
        auto peaks = stash_peaks(generate(sp), cfg, T, 4);
        const int64_t layer = pol == Recompute::kNone ? M : M_selective;
        for (int i = 0; i < p; ++i) {
          int64_t want = std::min(m, p - i) * (8 / p) * layer + (i == p - 1 ? head : 0);
          EXPECT_EQ(peaks[i], 4 * want)
              << recompute_str(pol) << " p=" << p << " m=" << m << " stage " << i;
        }
      }
    }
  }
}

TEST(ClosedForm, HelixStashIsBalancedAndMatchesTheFormula) {
  const ModelConfig cfg = small_gqa();
  const int64_t T = 100, h = cfg.hidden, q = cfg.qkv_dim(), H = cfg.heads;
  for (int p : {2, 4, 8}) {
    for (int F : {1, 2}) {
      for (int groups : {1, 2}) {
        const int m = p * F * groups, L = 8, V = L / p;
        Schedule s = generate(spec("helix", p, m, L, F));
        auto peaks = stash_peaks(s, cfg, T, 2);
        // Per layer and micro-batch: A + O + lse at the attention stage, X + O at the post stage
        // (O once when they coincide, d = 0: 1 in p), W_qkv when attention is away from pre (d !=
        // p-1): m V ((4 - 1/p) T h + heads T + (p-1)/p q h). Stage 0 holds the tail, whose head
        // keeps rstdf and lsece (2T) per micro-batch.
        const int64_t want = m * V * (4 * T * h + H * T) - (m / p) * V * T * h +
                             (m / p) * (p - 1) * V * q * h;
        for (int r = 0; r < p; ++r)
          EXPECT_EQ(peaks[r], 2 * (want + (r == 0 ? m * 2 * T : 0)))
              << "p=" << p << " F=" << F << " m=" << m << " stage " << r;
      }
    }
  }
}

}  // namespace
}  // namespace hp

namespace hp {
namespace {

// The simulator's stash replay and the validator's stash trace are two implementations of one
// rule (docs/memory.md): they must agree on every generator, policy and transfer mode.
TEST(StashPeaks, AgreeWithTheValidatorsStashTrace) {
  const ModelConfig cfg = small_gqa();
  int checked = 0;
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb1p", "helix"}) {
    for (Recompute pol : kAllRecompute) {
      for (TransferMode tm : {TransferMode::kWeights, TransferMode::kActivations}) {
        for (int p : {2, 4}) {
          ScheduleSpec sp = spec(name, p, 2 * p, 8, std::string(name) == "helix" ? 2 : 1);
          if (std::string(name) == "interleaved") sp.virtual_stages = 2;
          sp.recompute = pol;
          sp.transfer = tm;
          Schedule s = generate(sp);
          auto mine = stash_peaks(s, cfg, 50, 4);
          for (int r = 0; r < p; ++r) {
            int64_t peak = 0;
            for (const auto& items : stash_trace(s, r))
              peak = std::max(peak, stash_bytes(items, cfg, 50, 4));
            EXPECT_EQ(mine[r], peak) << name << " " << recompute_str(pol) << " "
                                     << transfer_str(tm) << " p=" << p << " stage " << r;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 5 * 4 * 2 * 6);
}

// The reference's head placement (CostModel::set_head_in_backward): the head's forward is merged
// into its backward's logits pass, so the head's stage is m x head F less busy under every policy
// and the others are untouched. By hand, 1F1B with p=2, m=2, L=2 (layers cost 1 per part and
// direction, head F 3, I 1, W 1): stage 1 runs F 6 and B 8, makespan 37; with the head in the
// backward F 3 and B 8: F0 3-6, B0 6-14, F1 14-17, B1 17-25, stage 0's B1 25-31: 31.
TEST(ClosedForm, HeadInBackwardSavesTheHeadsForwardOnItsStage) {
  CostModel c = uniform_layers(1, 1, 1);
  c.set_part_time(PartKind::kHead, Dir::kF, 3);
  c.set_part_time(PartKind::kHead, Dir::kI, 1);
  c.set_part_time(PartKind::kHead, Dir::kW, 1);
  CostModel moved = c;
  moved.set_head_in_backward(true);
  EXPECT_DOUBLE_EQ(run(spec("1f1b", 2, 2, 2), c).makespan, 37);
  EXPECT_DOUBLE_EQ(run(spec("1f1b", 2, 2, 2), moved).makespan, 31);
  for (Recompute pol : kAllRecompute) {
    for (ScheduleSpec sp : {spec("1f1b", 4, 8, 8), spec("zb1p", 4, 8, 8), spec("helix", 4, 8, 8),
                            spec("helix", 4, 8, 8, 2)}) {
      sp.recompute = pol;
      const SimResult a = run(sp, c), b = run(sp, moved);
      ASSERT_EQ(a.stages.size(), b.stages.size());
      for (size_t i = 0; i < a.stages.size(); ++i) {
        const bool head = i == (sp.name == "helix" ? 0 : a.stages.size() - 1);
        EXPECT_DOUBLE_EQ(a.stages[i].busy - (head ? 8 * 3 : 0), b.stages[i].busy)
            << sp.name << " " << recompute_str(pol) << " stage " << i;
      }
    }
  }
}

TEST(ClosedForm, StageScalesStretchOnlyThatStagesCompute) {
  // GPipe on 2 stages, uniform costs, free links: makespan = (m + p - 1) * (t_F + t_B) per stage
  // op. With stage 1 twice as slow, its ops take 2x and it becomes the bottleneck: the makespan is
  // stage 0's first forward (1 unit) + stage 1's m forwards and m backwards (2x each) + stage 0's
  // last backward.
  const CostModel c = uniform_layers(1.0, 1.0, 1.0);
  const int m = 4, L = 2;
  Schedule s = generate(spec("gpipe", 2, m, L));
  lower(s);
  SimOptions o;
  o.record_timeline = false;
  const SimResult plain = simulate(s, c, o);
  o.stage_time_scale = {1.0, 2.0};
  const SimResult slow = simulate(s, c, o);
  // One layer (pre+attn+post) per stage: t_F = 3, t_B = I + W = 6.
  const double tF = 3, tB = 6;
  EXPECT_DOUBLE_EQ(plain.makespan, (m + 1) * (tF + tB));
  EXPECT_DOUBLE_EQ(slow.makespan, tF + m * 2 * (tF + tB) + tB);
  EXPECT_DOUBLE_EQ(slow.stages[0].busy, plain.stages[0].busy);
  EXPECT_DOUBLE_EQ(slow.stages[1].busy, 2 * plain.stages[1].busy);
  o.stage_time_scale = {1.0};
  EXPECT_THROW(simulate(s, c, o), Error);
  o.stage_time_scale = {1.0, 0.0};
  EXPECT_THROW(simulate(s, c, o), Error);

  // Per part (SimOptions::stage_part_scale): 2 on every part of stage 1 is the stage scale 2.
  // Scaling only stage 1's attention F by 3 adds 2 units to each of its forwards: t_F = 5 there,
  // and stage 1 (5 + 6 per micro-batch against stage 0's 9) is again the bottleneck.
  o.stage_time_scale.clear();
  PartTable one, two;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) {
      one.at(k, d) = 1;
      two.at(k, d) = 2;
    }
  o.stage_part_scale = {one, two};
  const SimResult by_part = simulate(s, c, o);
  EXPECT_DOUBLE_EQ(by_part.makespan, slow.makespan);
  EXPECT_DOUBLE_EQ(by_part.stages[1].busy, slow.stages[1].busy);
  PartTable attn = one;
  attn.at(PartKind::kAttn, Dir::kF) = 3;
  o.stage_part_scale = {one, attn};
  const SimResult slow_attn = simulate(s, c, o);
  const double tF1 = 5;
  EXPECT_DOUBLE_EQ(slow_attn.stages[1].busy, m * (tF1 + tB));
  EXPECT_DOUBLE_EQ(slow_attn.stages[0].busy, m * (tF + tB));
  EXPECT_DOUBLE_EQ(slow_attn.makespan, tF + m * (tF1 + tB) + tB);
  o.stage_part_scale = {one};
  EXPECT_THROW(simulate(s, c, o), Error);
  attn.at(PartKind::kEmbed, Dir::kW) = 0;
  o.stage_part_scale = {one, attn};
  EXPECT_THROW(simulate(s, c, o), Error);
}

}  // namespace
}  // namespace hp

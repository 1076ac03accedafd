// Generators: the golden HelixPipe op lists of docs/design.md section 5, the placement of section 4,
// baseline shapes (1F1B warm-up, ZB-H1 W deferral, interleaved chunk order), and constraint errors.
#include "schedule/generate.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "util/error.h"

namespace hp {
namespace {

// Golden notation of docs/design.md section 5: E = embed+pre:1, A<l> = attn:l, P<c> = post:c+pre:c+1,
// T = post:L+head; units of one op joined by '+', each suffixed with ".mb".
std::string golden_op(const ComputeOp& op, int L) {
  std::string out;
  const auto& ps = op.parts;
  for (size_t k = 0; k < ps.size(); ++k) {
    std::string unit;
    if (ps[k].kind == PartKind::kEmbed) {
      EXPECT_TRUE(k + 1 < ps.size() && ps[k + 1] == Part::pre(1));
      unit = "E";
      ++k;
    } else if (ps[k].kind == PartKind::kAttn) {
      unit = "A" + std::to_string(ps[k].layer);
    } else if (ps[k].kind == PartKind::kPost && ps[k].layer == L) {
      EXPECT_TRUE(k + 1 < ps.size() && ps[k + 1] == Part::head());
      unit = "T";
      ++k;
    } else if (ps[k].kind == PartKind::kPost) {
      EXPECT_TRUE(k + 1 < ps.size() && ps[k + 1] == Part::pre(ps[k].layer + 1));
      unit = "P" + std::to_string(ps[k].layer);
      ++k;
    } else {
      ADD_FAILURE() << "unexpected part " << ps[k].str() << " in " << op_str(op);
    }
    if (!out.empty()) out += "+";
    out += unit + "." + std::to_string(op.mb);
  }
  return out;
}

std::string forward_list(const Schedule& s, int r) {
  std::string out;
  for (const ComputeOp& op : s.stages[r].ops) {
    if (op.dir != Dir::kF) continue;
    if (!out.empty()) out += " ";
    out += golden_op(op, s.layers);
  }
  return out;
}

Schedule helix(int p, int m, int L, int F) {
  ScheduleSpec spec;
  spec.name = "helix";
  spec.stages = p;
  spec.microbatches = m;
  spec.layers = L;
  spec.folds = F;
  return generate(spec);
}

TEST(HelixGenerator, GoldenP4M4L4F1) {
  Schedule s = helix(4, 4, 4, 1);
  EXPECT_EQ(forward_list(s, 0), "E.0 E.1 E.2 E.3+A1.3 A2.2 A3.1 A4.0+T.0 T.1 T.2 T.3");
  EXPECT_EQ(forward_list(s, 1), "A1.0+P1.0 P1.1 P1.2 P1.3+A2.3 A3.2 A4.1");
  EXPECT_EQ(forward_list(s, 2), "A1.1 A2.0+P2.0 P2.1 P2.2 P2.3+A3.3 A4.2");
  EXPECT_EQ(forward_list(s, 3), "A1.2 A2.1 A3.0+P3.0 P3.1 P3.2 P3.3+A4.3");
  EXPECT_EQ(s.recompute, Recompute::kNoAttn);
}

TEST(HelixGenerator, GoldenP4M8L4F2Stage0) {
  Schedule s = helix(4, 8, 4, 2);
  EXPECT_EQ(forward_list(s, 0),
            "E.0 E.1 E.2 E.3 E.4 E.5 E.6+A1.6 E.7+A1.7 A2.4 A2.5 A3.2 A3.3 A4.0+T.0 A4.1+T.1 T.2 "
            "T.3 T.4 T.5 T.6 T.7");
}

TEST(HelixGenerator, GoldenP4M8L8F2Stage1) {
  Schedule s = helix(4, 8, 8, 2);
  EXPECT_EQ(forward_list(s, 1),
            "A1.0+P1.0 A1.1+P1.1 P1.2 P1.3 P1.4 P1.5 P1.6+A2.6 P1.7+A2.7 A3.4 A3.5 A4.2 A4.3 "
            "A5.0+P5.0 A5.1+P5.1 P5.2 P5.3 P5.4 P5.5 P5.6+A6.6 P5.7+A6.7 A7.4 A7.5 A8.2 A8.3");
}

TEST(HelixGenerator, BackwardIsForwardReversedOpByOp) {
  Schedule s = helix(4, 8, 8, 2);
  for (const Stage& st : s.stages) {
    size_t n = st.ops.size();
    ASSERT_EQ(n % 2, 0u);
    for (size_t k = 0; k < n / 2; ++k) {
      const ComputeOp& f = st.ops[k];
      const ComputeOp& b = st.ops[n - 1 - k];
      EXPECT_EQ(f.dir, Dir::kF);
      EXPECT_EQ(b.dir, Dir::kB);
      EXPECT_EQ(f.mb, b.mb);
      std::vector<Part> rev(f.parts.rbegin(), f.parts.rend());
      EXPECT_EQ(b.parts, rev);
      // no-attn: the backward recomputes every part but attention and the head.
      for (const Part& p : b.recompute) EXPECT_NE(p.kind, PartKind::kAttn);
      EXPECT_EQ(
          b.recompute.size(),
          static_cast<size_t>(std::count_if(b.parts.begin(), b.parts.end(), [](const Part& p) {
            return p.kind != PartKind::kAttn && p.kind != PartKind::kHead;
          })));
    }
  }
}

// Section 4: chunk c on stage c mod p, tail on 0, attention of layer l for micro-batch i on
// (l + d(i)) mod p with d(i) = floor((i mod pF) / F); each micro-batch's parts run once.
TEST(HelixGenerator, PlacementFollowsTheHelix) {
  for (int p : {1, 2, 3, 4, 5}) {
    for (int F : {1, 2}) {
      for (int V : {1, 2}) {
        int L = p * V, m = 2 * p * F;
        Schedule s = helix(p, m, L, F);
        std::map<std::tuple<int, int, int>, int> where;  // (part index, mb, dir) -> stage
        for (int r = 0; r < p; ++r)
          for (const ComputeOp& op : s.stages[r].ops)
            for (const Part& part : op.parts) {
              auto key = std::make_tuple(part.index(L), op.mb, static_cast<int>(op.dir));
              EXPECT_EQ(where.count(key), 0u) << part.str() << " mb " << op.mb << " twice";
              where[key] = r;
            }
        EXPECT_EQ(where.size(), static_cast<size_t>(2 * m * (3 * L + 2)));
        for (int i = 0; i < m; ++i) {
          int d = (i % (p * F)) / F;
          auto at = [&](Part part) { return where.at({part.index(L), i, 0}); };
          EXPECT_EQ(at(Part::embed()), 0);
          EXPECT_EQ(at(Part::head()), 0);
          for (int l = 1; l <= L; ++l) {
            EXPECT_EQ(at(Part::pre(l)), (l - 1) % p);
            EXPECT_EQ(at(Part::post(l)), l % p);
            EXPECT_EQ(at(Part::attn(l)), (l + d) % p) << "p=" << p << " l=" << l << " mb " << i;
          }
        }
      }
    }
  }
}

TEST(HelixGenerator, PartialLastGroupKeepsEveryMicrobatch) {
  // m = 6 with p*F = 4: groups {0..3} and a partial {4, 5}. Nothing is dropped, and the ops that
  // remain are those of the m = 8 schedule with micro-batches 6 and 7 left out.
  Schedule part = helix(2, 6, 4, 2);
  Schedule full = helix(2, 8, 4, 2);
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> expect, got;
    for (const ComputeOp& op : full.stages[r].ops)
      if (op.mb < 6) expect.push_back(op_str(op));
    for (const ComputeOp& op : part.stages[r].ops) got.push_back(op_str(op));
    EXPECT_EQ(got, expect);
  }
  std::set<int> mbs;
  for (const ComputeOp& op : part.stages[0].ops) mbs.insert(op.mb);
  EXPECT_EQ(mbs.size(), 6u);
}

TEST(HelixGenerator, RejectsLayersNotAMultipleOfStagesNamingNearest) {
  try {
    helix(4, 8, 6, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("--layers=6"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4 or 8"), std::string::npos) << msg;
  }
  try {
    helix(4, 8, 3, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nearest valid --layers: 4"), std::string::npos)
        << e.what();
  }
}

ScheduleSpec spec_of(std::string name, int p, int m, int L, int V = 1) {
  ScheduleSpec spec;
  spec.name = std::move(name);
  spec.stages = p;
  spec.microbatches = m;
  spec.layers = L;
  spec.virtual_stages = V;
  return spec;
}

std::string ops_line(const Stage& st) {
  std::string out;
  for (const ComputeOp& op : st.ops) {
    if (!out.empty()) out += " ";
    out += std::string(dir_str(op.dir)) + std::to_string(op.mb);
  }
  return out;
}

TEST(BaselineGenerators, OneFOneBShape) {
  Schedule s = generate(spec_of("1f1b", 4, 6, 4));
  EXPECT_EQ(ops_line(s.stages[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(ops_line(s.stages[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Stage ops are whole stages: stage 0 = embed + layer 1, the last stage ends with the head.
  EXPECT_EQ(op_str(s.stages[0].ops[0]), "F 0 embed pre:1 attn:1 post:1");
  EXPECT_EQ(op_str(s.stages[3].ops[0]), "F 0 pre:4 attn:4 post:4 head");
  EXPECT_EQ(op_str(s.stages[3].ops[1]), "B 0 head post:4 attn:4 pre:4");
  EXPECT_EQ(s.recompute, Recompute::kNone);
}

TEST(BaselineGenerators, GpipeAllForwardsFirst) {
  Schedule s = generate(spec_of("gpipe", 2, 3, 4));
  EXPECT_EQ(ops_line(s.stages[1]), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(op_str(s.stages[1].ops[0]), "F 0 pre:3 attn:3 post:3 pre:4 attn:4 post:4 head");
}

TEST(BaselineGenerators, Zb1pDefersWeightGradientsOnLaterStages) {
  Schedule s = generate(spec_of("zb1p", 4, 6, 4));
  EXPECT_EQ(ops_line(s.stages[0]), "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 I3 W3 I4 W4 I5 W5");
  EXPECT_EQ(ops_line(s.stages[3]), "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 W3 W4 W5");
}

TEST(BaselineGenerators, InterleavedFollowsMegatronChunkOrder) {
  Schedule s = generate(spec_of("interleaved", 2, 4, 4, 2));
  // p=2, V=2: chunks 0..3 = layers 1..4; stage 0 holds chunks 0 and 2 (layers 1 and 3).
  const Stage& st = s.stages[0];
  std::string line;
  for (const ComputeOp& op : st.ops) {
    int layer = 1 << 20;
    for (const Part& part : op.parts)
      if (part.layer > 0) layer = std::min(layer, part.layer);
    if (!line.empty()) line += " ";
    line += std::string(dir_str(op.dir)) + std::to_string(op.mb) + "c" + (layer == 1 ? "0" : "1");
  }
  // warm-up 2(p-1) + (V-1)p = 4 forwards, then F/B pairs, then the remaining backwards.
  EXPECT_EQ(line, "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0");
}

TEST(BaselineGenerators, SplitLayersUneven) {
  auto r = split_layers(10, 4);
  std::vector<std::pair<int, int>> expect = {{1, 2}, {3, 4}, {5, 7}, {8, 10}};
  EXPECT_EQ(r, expect);
  EXPECT_THROW(split_layers(3, 4), Error);
}

TEST(BaselineGenerators, ConstraintErrorsNameTheValidValues) {
  auto message = [](const ScheduleSpec& spec) {
    try {
      generate(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(spec_of("interleaved", 4, 6, 8, 2)).find("4 or 8"), std::string::npos);
  EXPECT_NE(message(spec_of("interleaved", 4, 8, 8, 1)).find("--virtual >= 2"), std::string::npos);
  EXPECT_NE(message(spec_of("1f1b", 4, 8, 2)).find("--layers >= 4"), std::string::npos);
  EXPECT_NE(message(spec_of("bogus", 4, 8, 8)).find("gpipe, 1f1b, interleaved, zb1p, helix"),
            std::string::npos);
  ScheduleSpec f = spec_of("1f1b", 2, 2, 2);
  f.folds = 2;
  EXPECT_NE(message(f).find("helix schedule only"), std::string::npos);
  EXPECT_NE(message(spec_of("gpipe", 0, 2, 2)).find("--stages"), std::string::npos);
}

}  // namespace
}  // namespace hp

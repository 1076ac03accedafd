// Lowering: message contents and sizes from the value table, placement of start/wait ops, link
// order, tags, and a walk of the programs under rendezvous FIFO matching (the walker, tested on
// its own in walker_test.cc) that must finish for every generator.
#include "schedule_test_util.h"
#include "schedule/lower.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "schedule/generate.h"
#include "schedule/walker.h"
#include "util/error.h"

namespace hp {
namespace {

using test::gen;

// The lowered programs walked under rendezvous FIFO matching (walker.h): true when every stage
// ends.
bool replays(const Schedule& s) {
  Walker walker(s, Matching::kRendezvous, "test");
  NullTransport order_only;
  return walker.run(order_only);
}

TEST(Lower, OneFOneBTwoStagesHasOneMessagePerMicrobatchEachWay) {
  Schedule s = gen("1f1b", 2, 4, 2);
  ModelConfig cfg;  // h=256
  lower(s, &cfg, 64);
  ASSERT_EQ(s.messages.size(), 8u);
  int fwd = 0, bwd = 0;
  for (const Message& m : s.messages) {
    if (m.dir == Dir::kF) {
      ++fwd;
      EXPECT_EQ(m.src, 0);
      EXPECT_EQ(m.dst, 1);
      EXPECT_EQ(m.from, Part::post(1));
      EXPECT_EQ(m.to, Part::pre(2));
      EXPECT_EQ(m.values, std::vector<std::string>{"X:2"});
      EXPECT_EQ(m.bytes, 64 * 256 * 4);
    } else {
      ++bwd;
      EXPECT_EQ(m.src, 1);
      EXPECT_EQ(m.from, Part::pre(2));
      EXPECT_EQ(m.to, Part::post(1));
      EXPECT_EQ(m.values, std::vector<std::string>{"dX:2"});
    }
  }
  EXPECT_EQ(fwd, 4);
  EXPECT_EQ(bwd, 4);
  // Tags count per link; ids are 0..N-1.
  std::map<std::pair<int, int>, int> next;
  for (size_t i = 0; i < s.messages.size(); ++i) {
    EXPECT_EQ(s.messages[i].id, static_cast<int>(i));
    const auto key = std::make_pair(s.messages[i].src, s.messages[i].dst);
    EXPECT_EQ(s.messages[i].tag, next[key]++);
  }
  EXPECT_TRUE(replays(s));
}

TEST(Lower, EveryCommOpAppearsOnceInTheRightPlace) {
  Schedule s = gen("helix", 4, 8, 8, 2);
  lower(s);
  std::map<std::pair<int, int>, int> seen;  // (kind, id) -> count
  for (int st = 0; st < 4; ++st) {
    const auto& prog = s.stages[st].lowered;
    std::map<int, size_t> compute_pos;
    std::map<std::pair<int, int>, size_t> pos;
    int expect_compute = 0;
    for (size_t j = 0; j < prog.size(); ++j) {
      const LoweredOp& op = prog[j];
      if (op.kind == OpKind::kCompute) {
        EXPECT_EQ(op.index, expect_compute++);  // compute ops in order, each once
        compute_pos[op.index] = j;
        continue;
      }
      const Message& m = s.messages.at(op.index);
      const bool send = op.kind == OpKind::kSendStart || op.kind == OpKind::kSendWait;
      EXPECT_EQ(send ? m.src : m.dst, st);
      seen[{static_cast<int>(op.kind), op.index}]++;
      pos[{static_cast<int>(op.kind), op.index}] = j;
    }
    EXPECT_EQ(expect_compute, static_cast<int>(s.stages[st].ops.size()));
    for (const Message& m : s.messages) {
      auto k = [&](OpKind kind) { return pos.at({static_cast<int>(kind), m.id}); };
      if (m.src == st) {
        EXPECT_GT(k(OpKind::kSendStart), compute_pos.at(m.producer));
        EXPECT_GT(k(OpKind::kSendWait), k(OpKind::kSendStart));
      }
      if (m.dst == st) {
        EXPECT_LT(k(OpKind::kRecvWait), compute_pos.at(m.consumer));
        EXPECT_GT(k(OpKind::kRecvWait), k(OpKind::kRecvStart));
      }
    }
  }
  for (const auto& [key, count] : seen) EXPECT_EQ(count, 1);
  EXPECT_EQ(seen.size(), 4 * s.messages.size());
}

TEST(Lower, HelixBundlesMatchSectionSix) {
  // Weights mode: qkvr = {A, X, W} from pre to a remote attention, ro = {X, O} to post.
  ModelConfig cfg;
  cfg.hidden = 64;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.intermediate = 128;
  const int64_t T = 32, h = 64, q = cfg.qkv_dim();
  Schedule s = gen("helix", 4, 4, 4);
  lower(s, &cfg, T);
  int qkvr = 0, ro = 0;
  for (const Message& m : s.messages) {
    if (m.dir != Dir::kF) continue;
    if (m.from.kind == PartKind::kPre) {
      ++qkvr;
      EXPECT_EQ(m.values, (std::vector<std::string>{"A:" + std::to_string(m.from.layer),
                                                    "X:" + std::to_string(m.from.layer),
                                                    "W:" + std::to_string(m.from.layer)}));
      EXPECT_EQ(m.bytes, (2 * T * h + q * h) * 4);
    } else if (m.from.kind == PartKind::kAttn) {
      ++ro;
      EXPECT_EQ(m.bytes, 2 * T * h * 4);
    }
  }
  // Per micro-batch per layer: qkvr is remote unless d = p-1 (attention on pre's stage), ro is
  // remote unless d = 0. With m = p each offset occurs once per layer.
  EXPECT_EQ(qkvr, 4 * 3);
  EXPECT_EQ(ro, 4 * 3);
  // Backward mirrors forward: dW:l goes back to pre's stage.
  int dw = 0;
  for (const Message& m : s.messages)
    for (const auto& v : m.values) dw += v.rfind("dW:", 0) == 0;
  EXPECT_EQ(dw, qkvr);

  Schedule a = gen("helix", 4, 4, 4, 1, 1, std::nullopt, TransferMode::kActivations);
  lower(a, &cfg, T);
  for (const Message& m : a.messages) {
    if (m.dir == Dir::kF && m.from.kind == PartKind::kPre) {
      EXPECT_EQ(m.bytes, (T * q + T * h) * 4);
    }
  }
}

TEST(Lower, HelixTalksToEveryStage) {
  Schedule s = gen("helix", 4, 8, 4, 2);
  lower(s);
  std::set<std::pair<int, int>> pairs;
  for (const Message& m : s.messages) pairs.insert({m.src, m.dst});
  EXPECT_EQ(pairs.size(), 12u);
}

TEST(Lower, HelixRecvsArePostedOneSameFoldStepAhead) {
  // F = 2: the receive for a step is posted right after the previous step of the same fold, so
  // between post and wait the other fold's step runs (the overlap two folds buy).
  Schedule s = gen("helix", 4, 8, 4, 2);
  lower(s);
  int overlapped = 0, total = 0;
  for (int st = 0; st < 4; ++st) {
    const auto& prog = s.stages[st].lowered;
    std::map<int, size_t> post;
    for (size_t j = 0; j < prog.size(); ++j) {
      if (prog[j].kind == OpKind::kRecvStart) post[prog[j].index] = j;
      if (prog[j].kind != OpKind::kRecvWait) continue;
      int computes = 0;
      for (size_t k = post.at(prog[j].index); k < j; ++k) computes += prog[k].kind == OpKind::kCompute;
      ++total;
      overlapped += computes >= 1;
    }
  }
  EXPECT_GT(total, 0);
  EXPECT_GT(overlapped * 10, total * 8) << overlapped << " of " << total;
}

TEST(Lower, EveryGeneratorReplaysWithoutDeadlock) {
  for (int p = 1; p <= 6; ++p) {
    for (int m : {p, 2 * p, 2 * p + 1}) {
      for (TransferMode t : {TransferMode::kWeights, TransferMode::kActivations}) {
        for (const auto& [name, F, V, L] :
             std::vector<std::tuple<std::string, int, int, int>>{{"gpipe", 1, 1, p + 1},
                                                                 {"1f1b", 1, 1, 2 * p},
                                                                 {"zb1p", 1, 1, p},
                                                                 {"interleaved", 1, 2, 2 * p},
                                                                 {"helix", 1, 1, p},
                                                                 {"helix", 2, 1, 2 * p}}) {
          if (name == "interleaved" && m % p) continue;
          Schedule s = gen(name, p, m, L, F, V, std::nullopt, t);
          lower(s);
          EXPECT_TRUE(replays(s)) << name << " p=" << p << " m=" << m << " L=" << L << " F=" << F;
        }
      }
    }
  }
}

TEST(Lower, PartContextFlags) {
  Schedule s = gen("helix", 4, 4, 4);
  ScheduleIndex idx(s);
  // Stage 0, first op: E.0 = embed + pre:1, micro-batch 0 (d = 0: attn:1 runs on stage 1).
  PartContext c0 = idx.context(0, 0, 0), c1 = idx.context(0, 0, 1);
  EXPECT_TRUE(c0.first_in_op);
  EXPECT_TRUE(c0.feeds_next_in_op);
  EXPECT_FALSE(c1.first_in_op);
  EXPECT_FALSE(c1.feeds_next_in_op);
  EXPECT_TRUE(c1.attn_remote);
  EXPECT_EQ(c1.policy, Recompute::kNoAttn);
  // Micro-batch 3 (d = 3 = p-1): attention of layer 1 on pre's stage 0.
  EXPECT_FALSE(idx.attn_remote(1, 3));
  EXPECT_TRUE(idx.attn_remote(1, 1));
  EXPECT_EQ(idx.forward(Part::attn(1), 3).stage, 0);
  EXPECT_EQ(idx.backward(Part::attn(1), 3).stage, 0);
  EXPECT_EQ(part_context(s, 0, 0, 1).attn_remote, true);
  // The backward op of E.0 runs [pre:1, embed]: pre:1 comes first there, but its forward context
  // (second in its F op) is what decided its stash.
  const int last = static_cast<int>(s.stages[0].ops.size()) - 1;
  ASSERT_EQ(op_str(s.stages[0].ops[last]), "B 0 pre:1 embed");
  EXPECT_TRUE(idx.context(0, last, 0).first_in_op);
  EXPECT_FALSE(idx.forward_context(Part::pre(1), 0).first_in_op);
  EXPECT_FALSE(idx.forward_context(Part::pre(1), 0).feeds_next_in_op);
  EXPECT_TRUE(idx.forward_context(Part::embed(), 0).feeds_next_in_op);
}

TEST(Lower, RefusesSplitBackwardOfRemoteAttentionInWeightsMode) {
  Schedule s = gen("helix", 2, 2, 2);
  // Turn every B into I + W (hand-made): attention away from pre in weights mode cannot split.
  for (Stage& st : s.stages) {
    std::vector<ComputeOp> ops;
    for (ComputeOp op : st.ops) {
      if (op.dir != Dir::kB) {
        ops.push_back(op);
        continue;
      }
      op.dir = Dir::kI;
      ops.push_back(op);
      op.dir = Dir::kW;
      op.recompute.clear();
      ops.push_back(op);
    }
    st.ops = ops;
  }
  try {
    lower(s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dW:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--transfer=activations"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hp

namespace hp {
namespace {

TEST(Lower, TagsStaySmallForRealisticSizes) {
  // p=8, m=64, L=64, two folds: ids run into the ten thousands, tags (per link) stay in the
  // hundreds, well below the 32767 every MPI implementation allows.
  Schedule s = gen("helix", 8, 64, 64, 2);
  lower(s);
  int max_tag = 0;
  for (const Message& m : s.messages) max_tag = std::max(max_tag, m.tag);
  EXPECT_GT(s.messages.size(), 10000u);
  EXPECT_LT(max_tag, 1000);
  EXPECT_TRUE(replays(s));
}

}  // namespace
}  // namespace hp

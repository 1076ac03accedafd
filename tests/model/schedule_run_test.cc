// The model against the schedule layer: generated schedules (gpipe, 1f1b, zb1p, interleaved, helix
// with 1 and 2 folds, both transfer modes) run stage by stage in one process, messages copied
// between per-stage value stores. After every compute op each stage's stash is exactly the
// validator's stash_trace; loss and gradients equal loss_and_grads. (The real executor, with
// threads/MPI and overlap, is runtime's; this is the model's side of the contract.)
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "kernels/kernels.h"
#include "model_test_util.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "schedule/validate.h"

namespace hp {
namespace {

struct Case {
  std::string name;
  int stages, microbatches, layers, folds = 1, virtual_stages = 1;
  std::optional<Recompute> recompute;
  TransferMode transfer = TransferMode::kWeights;
};

std::string case_name(const Case& c) {
  std::string n = c.name + "_p" + std::to_string(c.stages) + "_m" + std::to_string(c.microbatches) + "_L" +
         std::to_string(c.layers) + "_F" + std::to_string(c.folds) + "_" +
         (c.recompute ? recompute_str(*c.recompute) : "default") + "_" + transfer_str(c.transfer);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

class ScheduleRun : public ::testing::TestWithParam<Case> {};

TEST_P(ScheduleRun, StashFollowsTheValidatorAndGradientsMatchOneProcess) {
  const Case& c = GetParam();
  ModelConfig cfg = test::tiny_config();
  cfg.layers = c.layers;
  const int64_t B = 1, S = 5;
  ScheduleSpec spec{c.name, c.stages, c.microbatches, c.layers, c.folds, c.virtual_stages,
                    c.recompute, c.transfer};
  Schedule sch = generate(spec);
  ValidateOptions vo{&cfg, B * S};
  ValidationReport rep = validate(sch, vo);
  ASSERT_TRUE(rep.ok()) << rep.text(sch);
  lower(sch, &cfg, B * S);
  const int p = sch.num_stages, M = sch.microbatches;
  auto be = make_reference_backend();
  const TokenBuffer tokens =
      test::on_backend(*be, test::random_tokens(B * S * M, cfg.vocab, 31), cfg.vocab);
  const TokenBuffer targets =
      test::on_backend(*be, test::random_tokens(B * S * M, cfg.vocab, 32), cfg.vocab);

  // One process reference.
  Params ref(cfg, Params::all_parts(cfg), *be);
  test::randomize(ref, 9);
  Model ref_model(ref);
  const double ref_loss = loss_and_grads(ref_model, tokens.data(), targets.data(), B, S, M);

  // Per stage: the parts it runs, its params (copied from the reference values), its store.
  ScheduleIndex index(sch);
  std::vector<std::unique_ptr<Params>> params;
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::unique_ptr<ValueStore>> stores;
  for (int st = 0; st < p; ++st) {
    std::set<Part> parts;
    for (const ComputeOp& op : sch.stages[st].ops) parts.insert(op.parts.begin(), op.parts.end());
    params.push_back(
        std::make_unique<Params>(cfg, std::vector<Part>(parts.begin(), parts.end()), *be));
    params.back()->copy_from(ref);
    models.push_back(std::make_unique<Model>(*params.back()));
    stores.push_back(std::make_unique<ValueStore>(*be));
  }
  std::map<int, const Message*> by_id;
  for (const Message& m : sch.messages) by_id[m.id] = &m;
  std::map<int, std::vector<std::vector<float>>> mailbox;  // message id -> value payloads (host)
  std::vector<size_t> pc(static_cast<size_t>(p), 0);       // next lowered op per stage
  std::vector<int> compute_done(static_cast<size_t>(p), 0);
  std::vector<std::vector<std::vector<StashItem>>> traces;
  for (int st = 0; st < p; ++st) traces.push_back(stash_trace(sch, st));
  const double scale = 1.0 / static_cast<double>(B * S * M);
  double loss = 0;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int st = 0; st < p; ++st) {
      const auto& lowered = sch.stages[st].lowered;
      while (pc[st] < lowered.size()) {
        const LoweredOp& lo = lowered[pc[st]];
        ValueStore& store = *stores[st];
        if (lo.kind == OpKind::kCompute) {
          const ComputeOp& op = sch.stages[st].ops[lo.index];
          std::vector<PartContext> ctx;
          for (size_t k = 0; k < op.parts.size(); ++k)
            ctx.push_back(index.context(st, lo.index, static_cast<int>(k)));
          Batch b{tokens.data() + op.mb * B * S, targets.data() + op.mb * B * S, B, S, scale};
          models[st]->run(op, ctx, store, b);
          // The stash now, as a sorted set of (value, mb), against the validator's trace.
          std::vector<StashItem> have;
          for (auto [v, mb] : store.keys())
            if (store.is_stashed(v, mb)) have.push_back(StashItem{v, mb});
          std::sort(have.begin(), have.end());
          const auto& want = traces[st][static_cast<size_t>(compute_done[st])];
          ASSERT_EQ(have.size(), want.size()) << "stage " << st << " after op " << op_str(op)
                                              << ": store holds " << store.describe();
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_TRUE(have[i] == want[i]) << "stage " << st << " after " << op_str(op) << ": "
                                            << have[i].value.str() << "@" << have[i].mb << " vs "
                                            << want[i].value.str() << "@" << want[i].mb;
          ASSERT_EQ(store.stash_bytes(), stash_bytes(want, cfg, B * S));
          ++compute_done[st];
        } else {
          const Message& m = *by_id.at(lo.index);
          if (lo.kind == OpKind::kSendStart) {
            std::vector<std::vector<float>> payload;
            for (const std::string& name : m.values) {
              const Value v = Value::parse(name);
              payload.emplace_back(static_cast<size_t>(store.elems(v, m.mb)));
              be->download(payload.back().data(), store.get(v, m.mb).data,
                           store.elems(v, m.mb) * 4);
            }
            mailbox[m.id] = std::move(payload);
          } else if (lo.kind == OpKind::kSendWait) {
            for (const std::string& name : m.values) store.release(Value::parse(name), m.mb);
          } else if (lo.kind == OpKind::kRecvWait) {
            auto it = mailbox.find(m.id);
            if (it == mailbox.end()) break;  // blocked: let the other stages run
            for (size_t i = 0; i < m.values.size(); ++i) {
              const Value v = Value::parse(m.values[i]);
              const auto& data = it->second[i];
              const DataPtr dst = store.create(v, m.mb, static_cast<int64_t>(data.size()));
              be->upload(dst.data, data.data(), static_cast<int64_t>(data.size()) * 4);
            }
            mailbox.erase(it);
          }
        }
        ++pc[st];
        progress = true;
      }
    }
  }
  for (int st = 0; st < p; ++st) {
    ASSERT_EQ(pc[st], sch.stages[st].lowered.size()) << "stage " << st << " stuck";
    EXPECT_EQ(stores[st]->size(), 0u) << "stage " << st << " left " << stores[st]->describe();
    EXPECT_EQ(stores[st]->peak_stash_bytes(), rep.peak_stash_bytes[st]) << "stage " << st;
    loss += models[st]->take_loss();
  }
  EXPECT_NEAR(loss, ref_loss, 1e-6 * std::abs(ref_loss));
  // Every gradient, by name, from the stage that holds it.
  int seen = 0;
  const std::vector<float> ref_grads = ref.host_grads<float>();
  for (const auto& sp : params) {
    const std::vector<float> grads = sp->host_grads<float>();
    for (const ParamTensor& t : sp->tensors()) {
      const ParamTensor* r = ref.find(t.name);
      ASSERT_TRUE(r);
      double err = 0, mx = 0;
      for (int64_t i = 0; i < t.numel; ++i) {
        err = std::max(err, std::abs(double(grads[t.offset + i]) - ref_grads[r->offset + i]));
        mx = std::max(mx, std::abs(double(ref_grads[r->offset + i])));
      }
      EXPECT_LE(err, 1e-5 * mx) << t.name;
      ++seen;
    }
  }
  EXPECT_EQ(seen, static_cast<int>(ref.tensors().size()));
}

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({"gpipe", 2, 3, 2, 1, 1, std::nullopt});
  v.push_back({"1f1b", 2, 4, 2, 1, 1, Recompute::kFull});
  v.push_back({"zb1p", 2, 4, 2, 1, 1, std::nullopt});
  v.push_back({"interleaved", 2, 4, 4, 1, 2, std::nullopt});
  for (TransferMode t : {TransferMode::kWeights, TransferMode::kActivations})
    for (Recompute r : {Recompute::kNoAttn, Recompute::kFull, Recompute::kNone}) {
      v.push_back({"helix", 2, 4, 2, 1, 1, r, t});
      v.push_back({"helix", 4, 8, 4, 2, 1, r, t});
    }
  v.push_back({"helix", 3, 6, 3, 1, 1, Recompute::kNoAttn});
  v.push_back({"helix", 2, 5, 4, 2, 1, Recompute::kNoAttn});  // a partial last group
  return v;
}

INSTANTIATE_TEST_SUITE_P(Schedules, ScheduleRun, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return case_name(param_info.param); });

}  // namespace
}  // namespace hp

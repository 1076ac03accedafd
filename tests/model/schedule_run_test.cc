// The model against the schedule layer: generated schedules (gpipe, 1f1b, zb1p, interleaved, helix
// with 1 and 2 folds, both transfer modes) walked (schedule/walker.h) in one process, messages
// copied between per-stage value stores. After every compute op each stage's stash is exactly the
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
#include "schedule/walker.h"

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

// The in-memory configuration of the walker: every stage in one thread, compute through the
// stage's Model, messages copied between per-stage value stores (packed at send.start, unpacked at
// recv.wait, the sender's live marks dropped at send.wait).
class ModelRun : public WalkTransport {
 public:
  ModelRun(const Schedule& s, const ScheduleIndex& index,
           std::vector<std::unique_ptr<Model>>& models,
           std::vector<std::unique_ptr<ValueStore>>& stores, std::function<Batch(int)> batch_of)
      : s_(s),
        index_(index),
        models_(models),
        stores_(stores),
        batch_of_(std::move(batch_of)),
        mailbox_(s.messages.size()) {}

  OpTimes compute(int st, int i) override {
    const ComputeOp& op = s_.stages[st].ops[i];
    std::vector<PartContext> ctx;
    for (size_t k = 0; k < op.parts.size(); ++k)
      ctx.push_back(index_.context(st, i, static_cast<int>(k)));
    models_[st]->run(op, ctx, *stores_[st], batch_of_(op.mb));
    return {};
  }
  double start_send(int st, const Message& m) override {
    auto& payload = mailbox_[static_cast<size_t>(&m - s_.messages.data())];
    ValueStore& store = *stores_[st];
    for (const std::string& name : m.values) {
      const Value v = Value::parse(name);
      const ConstDataPtr src = store.get(v, m.mb);
      payload.emplace_back(static_cast<size_t>(store.elems(v, m.mb) * dtype_bytes(src.dtype)));
      store.backend().download(payload.back().data(), src.data,
                               static_cast<int64_t>(payload.back().size()));
    }
    return 0;
  }
  double start_recv(int, const Message&) override { return 0; }
  OpTimes wait_send(int st, const Message& m) override {
    for (const std::string& name : m.values) stores_[st]->release(Value::parse(name), m.mb);
    return {};
  }
  OpTimes wait_recv(int st, const Message& m) override {
    auto& payload = mailbox_[static_cast<size_t>(&m - s_.messages.data())];
    ValueStore& store = *stores_[st];
    for (size_t i = 0; i < m.values.size(); ++i) {
      const Value v = Value::parse(m.values[i]);
      const auto& data = payload[i];
      const int64_t elems =
          static_cast<int64_t>(data.size()) / dtype_bytes(value_dtype(v.kind, store.precision()));
      const DataPtr dst = store.create(v, m.mb, elems);
      store.backend().upload(dst.data, data.data(), static_cast<int64_t>(data.size()));
    }
    payload.clear();
    return {};
  }

 private:
  const Schedule& s_;
  const ScheduleIndex& index_;
  std::vector<std::unique_ptr<Model>>& models_;
  std::vector<std::unique_ptr<ValueStore>>& stores_;
  std::function<Batch(int)> batch_of_;
  std::vector<std::vector<std::vector<char>>> mailbox_;  // per message: value bytes (host)
};

// After every compute op: the stage's stash, as a sorted set of (value, mb), against the
// validator's trace, and its bytes. Records the first difference.
class StashCheck : public WalkObserver {
 public:
  StashCheck(const Schedule& s, const std::vector<std::unique_ptr<ValueStore>>& stores,
             const std::vector<std::vector<std::vector<StashItem>>>& traces, const ModelConfig& cfg,
             int64_t tokens, ElemBytes eb)
      : ops_done(static_cast<size_t>(s.num_stages), 0),
        s_(s),
        stores_(stores),
        traces_(traces),
        cfg_(cfg),
        tokens_(tokens),
        eb_(eb) {}
  std::vector<int> ops_done;
  std::string failure;

  void on_compute(int st, int i, const OpTimes&) override {
    const ValueStore& store = *stores_[st];
    std::vector<StashItem> have;
    for (auto [v, mb] : store.keys())
      if (store.is_stashed(v, mb)) have.push_back(StashItem{v, mb});
    std::sort(have.begin(), have.end());
    const auto& want = traces_[st][static_cast<size_t>(ops_done[st]++)];
    if (!failure.empty()) return;
    const std::string where =
        "stage " + std::to_string(st) + " after " + op_str(s_.stages[st].ops[i]);
    if (have.size() != want.size()) {
      failure = where + ": store holds " + store.describe();
      return;
    }
    for (size_t k = 0; k < want.size(); ++k)
      if (!(have[k] == want[k])) {
        failure = where + ": " + have[k].value.str() + "@" + std::to_string(have[k].mb) + " vs " +
                  want[k].value.str() + "@" + std::to_string(want[k].mb);
        return;
      }
    if (store.stash_bytes() != stash_bytes(want, cfg_, tokens_, eb_))
      failure = where + ": stash bytes " + std::to_string(store.stash_bytes());
  }

 private:
  const Schedule& s_;
  const std::vector<std::unique_ptr<ValueStore>>& stores_;
  const std::vector<std::vector<std::vector<StashItem>>>& traces_;
  const ModelConfig& cfg_;
  int64_t tokens_;
  ElemBytes eb_;
};

class ScheduleRun : public ::testing::TestWithParam<Case> {
 protected:
  void run_case(const Case& c, Precision prec);
};

// In fp32 and in bf16 (stats and the shipped dW in f32, the rest in bf16: the validator's byte
// counts follow elem_bytes(precision)).
TEST_P(ScheduleRun, StashFollowsTheValidatorAndGradientsMatchOneProcess) {
  for (const Precision prec : {Precision::fp32(), Precision::bf16()}) {
    SCOPED_TRACE(prec.name());
    run_case(GetParam(), prec);
  }
}

void ScheduleRun::run_case(const Case& c, const Precision prec) {
  ModelConfig cfg = test::tiny_config();
  cfg.layers = c.layers;
  const int64_t B = 1, S = 5;
  ScheduleSpec spec{c.name, c.stages, c.microbatches, c.layers, c.folds, c.virtual_stages,
                    c.recompute, c.transfer};
  Schedule sch = generate(spec);
  ValidateOptions vo{&cfg, B * S, elem_bytes(prec)};
  ValidationReport rep = validate(sch, vo);
  ASSERT_TRUE(rep.ok()) << rep.text(sch);
  lower(sch, &cfg, B * S, elem_bytes(prec));
  const int p = sch.num_stages, M = sch.microbatches;
  auto be = make_reference_backend();
  const TokenBuffer tokens =
      test::on_backend(*be, test::random_tokens(B * S * M, cfg.vocab, 31), cfg.vocab);
  const TokenBuffer targets =
      test::on_backend(*be, test::random_tokens(B * S * M, cfg.vocab, 32), cfg.vocab);

  // One process reference.
  Params ref(cfg, Params::all_parts(cfg), *be, prec);
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
        std::make_unique<Params>(cfg, std::vector<Part>(parts.begin(), parts.end()), *be, prec));
    params.back()->copy_from(ref);
    models.push_back(std::make_unique<Model>(*params.back()));
    stores.push_back(std::make_unique<ValueStore>(*be, prec));
  }
  std::vector<std::vector<std::vector<StashItem>>> traces;
  for (int st = 0; st < p; ++st) traces.push_back(stash_trace(sch, st));
  const double scale = 1.0 / static_cast<double>(B * S * M);
  ModelRun run(sch, index, models, stores, [&](int mb) {
    return Batch{tokens.data() + mb * B * S, targets.data() + mb * B * S, B, S, scale};
  });
  StashCheck stash(sch, stores, traces, cfg, B * S, elem_bytes(prec));
  WalkObserver* obs[] = {&stash};
  Walker walker(sch, Matching::kRendezvous, "test");
  const bool finished = walker.run(run, obs);
  ASSERT_TRUE(finished) << walker.deadlock_report()[0] << "\n" << walker.deadlock_grid();
  ASSERT_TRUE(stash.failure.empty()) << stash.failure;
  double loss = 0;
  for (int st = 0; st < p; ++st) {
    ASSERT_EQ(stash.ops_done[st], static_cast<int>(sch.stages[st].ops.size())) << "stage " << st;
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

// The op runner (see model.h): one compute op at a time over the parts of parts.h, with the value
// store, the workspace, recomputation and the head's loss; and the single-process step.
#include "model/model.h"

#include <algorithm>
#include <array>

#include "model/parts.h"
#include "model/tensor_parallel.h"
#include "util/error.h"

namespace hp {

std::vector<Value> part_stash(const ComputeOp& op, size_t index, const PartContext& ctx,
                              int layers) {
  const Part part = op.parts.at(index);
  // The stash is decided by the forward: judge first_in_op / feeds_next_in_op in model order, so
  // a B/I op given contexts in its own (reversed) execution order frees exactly what F kept.
  const auto [lo, hi] = std::minmax_element(op.parts.begin(), op.parts.end());
  PartContext c = ctx;
  c.first_in_op = part == *lo;
  c.feeds_next_in_op = !(part == *hi);
  std::vector<Value> s = forward_stash(part, c, layers);
  if (part.kind == PartKind::kAttn && c.first_in_op && recomputes(c.policy, PartKind::kPost)) {
    // post:l follows attn:l in this op and its recomputation needs X:l (values.h says so too
    // since feeds_next_in_op; kept here as a guard).
    const bool post_follows = std::find(op.parts.begin(), op.parts.end(),
                                        Part::post(part.layer)) != op.parts.end();
    const Value x{ValueKind::kX, part.layer};
    if (post_follows && std::find(s.begin(), s.end(), x) == s.end()) s.push_back(x);
  }
  return s;
}

std::vector<PartContext> local_contexts(const ComputeOp& op, Recompute policy,
                                        TransferMode transfer) {
  std::vector<PartContext> ctx(op.parts.size());
  for (size_t i = 0; i < op.parts.size(); ++i) {  // as lower.h's part_context: execution order
    ctx[i].policy = policy;
    ctx[i].transfer = transfer;
    ctx[i].first_in_op = i == 0;
    ctx[i].feeds_next_in_op = i + 1 < op.parts.size();
    ctx[i].attn_remote = false;
  }
  return ctx;
}

// ---- The op runner ------------------------------------------------------------------------------
// Maps each part of a compute op to its functions in parts.h: takes the inputs from the store (or
// the workspace), creates the outputs there, and decides what is kept, recomputed or shipped.

namespace {

// Grow-only backend buffers for the temporaries of the parts, one per use.
enum class Ws : uint8_t { kQkvr, kDqkv, kG, kU, kH, kDh, kDg, kDu, kDz, kZf, kLogits, kDzf, kRstd,
                          kDw, kLoss, kCount };

class Workspace {
 public:
  explicit Workspace(Backend& be) : be_(be) {}
  DataPtr get(Ws slot, DType t, int64_t elems) {
    Buffer& b = bufs_[static_cast<size_t>(slot)];
    if (b.dtype() != t || b.elems() < elems) b = Buffer(be_, t, std::max(elems, b.elems()));
    return b.ptr();
  }
  int64_t bytes() const {
    int64_t n = 0;
    for (const Buffer& b : bufs_) n += b.bytes();
    return n;
  }

 private:
  Backend& be_;
  std::array<Buffer, static_cast<size_t>(Ws::kCount)> bufs_;
};

}  // namespace

struct Model::Impl {
  const ModelConfig& cfg;
  Params& P;
  Backend& be;
  const Precision prec;
  const ModelOptions& opt;
  TpGroup* tp;  // null without tensor parallelism
  const int tp_size;
  const int L;
  Workspace ws;

  // State of the op being run.
  ValueStore* st = nullptr;
  const Batch* batch = nullptr;
  int mb = 0;
  PartDims d;
  std::vector<Value> consumed, created;

  // The head F ops' losses: one f64 per op in backend memory, and the ops' loss scales.
  Buffer loss_sums;
  std::vector<double> loss_scales;
  DataPtr logits_out;
  bool last_only = false;
  std::vector<char> logits_host;  // staging for logits whose type differs from the sink's

  Impl(const ModelConfig& c, Params& p, const ModelOptions& o, TpGroup* g)
      : cfg(c), P(p), be(p.backend()), prec(p.precision()), opt(o), tp(g),
        tp_size(g ? g->size() : 1), L(static_cast<int>(c.layers)), ws(p.backend()) {}

  // Store access for the running op.
  DataPtr in(Value v) { return st->get(v, mb); }
  DataPtr maybe(Value v) { return st->find(v, mb); }
  DataPtr out(Value v) {
    if (DataPtr p = st->find(v, mb)) return p;  // recomputation rewrites a stashed value (same bits)
    created.push_back(v);
    return st->create(v, mb, value_elems(v, cfg, d.tokens, tp_size));
  }
  static Value val(ValueKind kind, int l = 0) { return Value{kind, l}; }
  DataPtr work(Ws slot, int64_t elems) { return ws.get(slot, prec.compute, elems); }

  PreWeights pre_weights(int l) const { return {P.at(Slot::kNorm1, l), P.at(Slot::kWqkv, l)}; }
  PostWeights post_weights(int l) const {
    return {P.at(Slot::kWo, l), P.at(Slot::kNorm2, l), P.at(Slot::kGate, l), P.at(Slot::kUp, l),
            P.at(Slot::kDown, l)};
  }
  PostGrads post_grads(int l) const {
    return {P.grad_at(Slot::kWo, l), P.grad_at(Slot::kNorm2, l), P.grad_at(Slot::kGate, l),
            P.grad_at(Slot::kUp, l), P.grad_at(Slot::kDown, l)};
  }
  HeadWeights head_weights() const { return {P.at(Slot::kFinalNorm), P.at(Slot::kLmHead)}; }
  PostWorkspace post_ws() {
    const int64_t cf = d.mlp_chunk * d.ffn;
    return {work(Ws::kG, cf), work(Ws::kU, cf), work(Ws::kH, cf), work(Ws::kDh, cf),
            work(Ws::kDg, cf), work(Ws::kDu, cf), work(Ws::kDz, d.tokens * d.hidden)};
  }
  DataPtr dw_ws() { return ws.get(Ws::kDw, prec.master, d.qkv * d.hidden); }

  // W_qkv (q, h) as attention of layer l sees it: the received W:l or this stage's parameter.
  ConstDataPtr wqkv_for_attn(int l, const PartContext& c) {
    if (c.transfer == TransferMode::kWeights && c.attn_remote) return in(val(ValueKind::kW, l));
    return P.at(Slot::kWqkv, l);
  }
  // QKVr of layer l into `qkvr`: from QKV:l (activations mode) or A:l and W_qkv (weights mode).
  void make_qkvr(int l, const PartContext& c, DataPtr qkvr) {
    if (c.transfer == TransferMode::kActivations) {
      attn_qkv(be, d, {}, {}, in(val(ValueKind::kQKV, l)), qkvr);
    } else {
      attn_qkv(be, d, in(val(ValueKind::kA, l)), wqkv_for_attn(l, c), {}, qkvr);
    }
  }

  // ---- forward of each part ----
  void pre_fwd(int l, const PartContext& c) {
    const bool acts = c.transfer == TransferMode::kActivations;
    pre_forward(be, d, pre_weights(l), in(val(ValueKind::kX, l)), out(val(ValueKind::kA, l)),
                out(val(ValueKind::kRstd1, l)), acts ? out(val(ValueKind::kQKV, l)) : DataPtr(),
                !acts && c.attn_remote ? out(val(ValueKind::kW, l)) : DataPtr());
  }

  // QKVr is a value only when it is stashed (policy none) or recomputed for this op's backward;
  // otherwise it lives in the workspace.
  void attn_fwd(int l, const PartContext& c, bool recompute) {
    const bool keep_qkvr = c.policy == Recompute::kNone || recompute;
    const DataPtr qkvr =
        keep_qkvr ? out(val(ValueKind::kQKVr, l)) : work(Ws::kQkvr, d.tokens * d.qkv);
    make_qkvr(l, c, qkvr);
    attn_forward(be, d, qkvr, out(val(ValueKind::kO, l)), out(val(ValueKind::kLse, l)));
  }

  // G:l and U:l are full values when stashed (policy none) and, with `keep_gu`, in a
  // recomputation for the op's own backward, which then reads them instead of multiplying them
  // out a second time (transient: released when the op ends; the caller asks it for one post per
  // op, so the extra memory is one layer's G and U). A recomputation whose X:l+1 no later
  // recomputed part reads (`need_output` false) stops after G and U.
  void post_fwd(int l, const PartContext& c, bool recompute, bool need_output, bool keep_gu) {
    PostForward t;
    t.x = in(val(ValueKind::kX, l));
    t.o = in(val(ValueKind::kO, l));
    t.y = out(val(ValueKind::kY, l));
    t.rstd2 = out(val(ValueKind::kRstd2, l));
    t.z = out(val(ValueKind::kZ, l));
    if (need_output) t.xo = out(val(ValueKind::kX, l + 1));
    const bool full =
        !recomputes(c.policy, PartKind::kPost) || (recompute && (keep_gu || !need_output));
    if (full) {
      t.g = out(val(ValueKind::kG, l));
      t.u = out(val(ValueKind::kU, l));
    }
    post_forward(be, d, post_weights(l), t, post_ws());
  }

  // A recomputation (an op's backward) writes lsece again but its loss goes to a scratch slot:
  // only the F op's counts.
  void head_fwd(bool recompute) {
    const int64_t T = d.tokens;
    DataPtr loss;
    if (batch->targets) loss = recompute ? ws.get(Ws::kLoss, DType::kF64, 1) : next_loss_slot();
    head_forward(be, d, head_weights(), in(val(ValueKind::kX, L + 1)), out(val(ValueKind::kRstdF)),
                 work(Ws::kZf, T * d.hidden), batch->targets,
                 batch->targets ? out(val(ValueKind::kLseCE)) : DataPtr(), loss,
                 work(Ws::kLogits, d.head_chunk * d.vocab),
                 logits_out ? LogitsSink([this](ConstDataPtr lg, int64_t r0, int64_t n) {
                   sink_logits(lg, r0, n);
                 })
                            : LogitsSink());
  }
  DataPtr next_loss_slot();
  void sink_logits(ConstDataPtr logits, int64_t row0, int64_t rows);

  // Recomputation hints (post only): `need_output` false when no later recomputed part of the op
  // reads the output; `keep_gu` to keep G and U for the op's backward (see post_fwd).
  void forward(const Part& p, const PartContext& c, bool recompute, bool need_output = true,
               bool keep_gu = false) {
    switch (p.kind) {
      case PartKind::kEmbed:
        HP_CHECK(batch->tokens, "Model: embed needs the micro-batch's tokens (Batch::tokens is null)");
        embed_forward(be, d, batch->tokens, P.at(Slot::kEmbed), out(val(ValueKind::kX, 1)));
        return;
      case PartKind::kPre: pre_fwd(p.layer, c); return;
      case PartKind::kAttn: attn_fwd(p.layer, c, recompute); return;
      case PartKind::kPost: post_fwd(p.layer, c, recompute, need_output, keep_gu); return;
      case PartKind::kHead: head_fwd(recompute); return;
    }
  }

  // ---- backward of each part (split: I only, weight work left to W through the weight stash) ----
  void pre_bwd(int l, const PartContext& c, bool split) {
    const bool acts = c.transfer == TransferMode::kActivations;
    if (!acts && c.attn_remote)  // a micro-batch's dW_qkv shipped back by the attention stage
      add_wqkv_grad(be, d, in(val(ValueKind::kdW, l)), P.grad_at(Slot::kWqkv, l));
    if (acts && !split) pre_w(l, c);
    pre_backward_input(be, d, pre_weights(l), in(val(ValueKind::kX, l)),
                       in(val(ValueKind::kRstd1, l)), acts ? DataPtr() : in(val(ValueKind::kdA, l)),
                       acts ? in(val(ValueKind::kdQKV, l)) : DataPtr(),
                       work(Ws::kDz, d.tokens * d.hidden), in(val(ValueKind::kdR, l)),
                       out(val(ValueKind::kdX, l)), P.grad_at(Slot::kNorm1, l));
  }
  void pre_w(int l, const PartContext& c) {
    if (c.transfer == TransferMode::kActivations)
      wqkv_backward_weight(be, d, in(val(ValueKind::kdQKV, l)), in(val(ValueKind::kA, l)),
                           P.grad_at(Slot::kWqkv, l), dw_ws());
  }

  // Activations mode hands dQKV:l back; weights mode forms dA:l and dW_qkv (added to the
  // gradient when W_qkv is local, shipped as dW:l when remote).
  void attn_bwd(int l, const PartContext& c, bool split) {
    const bool weights = c.transfer == TransferMode::kWeights;
    HP_CHECK(!(split && weights && c.attn_remote),
             "Model: a split backward (I/W) of attn:{} away from pre:{} in weights mode is not "
             "supported (dW:{} would have no op to travel with); use B ops or activations mode",
             l, l, l);
    DataPtr qkvr = maybe(val(ValueKind::kQKVr, l));
    if (!qkvr) {  // recomputation without attention: rebuild QKV + rotary, never the attention
      qkvr = work(Ws::kQkvr, d.tokens * d.qkv);
      make_qkvr(l, c, qkvr);
    }
    const DataPtr dqkv = (weights && !split) ? work(Ws::kDqkv, d.tokens * d.qkv)
                                             : out(val(ValueKind::kdQKV, l));
    attn_backward_input(be, d, qkvr, in(val(ValueKind::kO, l)), in(val(ValueKind::kdO, l)),
                        in(val(ValueKind::kLse, l)), dqkv,
                        weights ? wqkv_for_attn(l, c) : ConstDataPtr(),
                        weights ? out(val(ValueKind::kdA, l)) : DataPtr());
    if (!weights) return;
    const DataPtr a = in(val(ValueKind::kA, l));
    if (c.attn_remote) {
      wqkv_grad(be, d, dqkv, a, out(val(ValueKind::kdW, l)));
    } else if (!split) {
      wqkv_backward_weight(be, d, dqkv, a, P.grad_at(Slot::kWqkv, l), dw_ws());
    }
  }
  void attn_w(int l, const PartContext& c) {
    if (c.transfer == TransferMode::kWeights)
      wqkv_backward_weight(be, d, in(val(ValueKind::kdQKV, l)), in(val(ValueKind::kA, l)),
                           P.grad_at(Slot::kWqkv, l), dw_ws());
  }

  // With split, H, dG and dU are kept whole for W instead of forming the weight gradients.
  void post_bwd(int l, bool split) {
    PostBackward t;
    t.dxo = in(val(ValueKind::kdX, l + 1));
    t.y = in(val(ValueKind::kY, l));
    t.z = in(val(ValueKind::kZ, l));
    t.rstd2 = in(val(ValueKind::kRstd2, l));
    t.g = maybe(val(ValueKind::kG, l));
    t.u = maybe(val(ValueKind::kU, l));
    t.o = in(val(ValueKind::kO, l));
    if (split) {
      t.h = out(val(ValueKind::kH, l));
      t.dg = out(val(ValueKind::kdG, l));
      t.du = out(val(ValueKind::kdU, l));
    }
    t.dr = out(val(ValueKind::kdR, l));
    t.dout = out(val(ValueKind::kdO, l));
    const PostGrads wg = post_grads(l);
    post_backward_input(be, d, post_weights(l), wg.norm2, t, split ? nullptr : &wg, post_ws());
  }
  void post_w(int l) {
    PostBackward t;
    t.dxo = in(val(ValueKind::kdX, l + 1));
    t.h = in(val(ValueKind::kH, l));
    t.dg = in(val(ValueKind::kdG, l));
    t.du = in(val(ValueKind::kdU, l));
    t.z = in(val(ValueKind::kZ, l));
    t.dr = in(val(ValueKind::kdR, l));
    t.o = in(val(ValueKind::kO, l));
    post_backward_weight(be, d, t, post_grads(l));
  }

  void head_bwd(bool split) {
    HP_CHECK(batch->targets, "Model: the head's backward needs targets (Batch::targets is null)");
    const int64_t T = d.tokens;
    HeadBackward t;
    t.x = in(val(ValueKind::kX, L + 1));
    t.rstdf = in(val(ValueKind::kRstdF));
    t.lsece = in(val(ValueKind::kLseCE));
    t.targets = batch->targets;
    t.scale = batch->loss_scale;
    t.zf = split ? out(val(ValueKind::kZf)) : work(Ws::kZf, T * d.hidden);
    if (split) t.dlogits = out(val(ValueKind::kdLogits));
    t.dx = out(val(ValueKind::kdX, L + 1));
    HeadWorkspace w{work(Ws::kLogits, d.head_chunk * d.vocab),
                    ws.get(Ws::kRstd, prec.stats(), T), work(Ws::kDzf, T * d.hidden)};
    head_backward_input(be, d, head_weights(), P.grad_at(Slot::kFinalNorm), t,
                        split ? DataPtr() : P.grad_at(Slot::kLmHead), w);
  }

  void backward(const Part& p, const PartContext& c, bool split) {
    switch (p.kind) {
      case PartKind::kEmbed:
        if (!split) weights(p, c);
        return;
      case PartKind::kPre: pre_bwd(p.layer, c, split); return;
      case PartKind::kAttn: attn_bwd(p.layer, c, split); return;
      case PartKind::kPost: post_bwd(p.layer, split); return;
      case PartKind::kHead: head_bwd(split); return;
    }
  }
  void weights(const Part& p, const PartContext& c) {
    switch (p.kind) {
      case PartKind::kEmbed:
        embed_backward_weight(be, d, batch->tokens, in(val(ValueKind::kdX, 1)),
                              P.grad_at(Slot::kEmbed));
        return;
      case PartKind::kPre: pre_w(p.layer, c); return;
      case PartKind::kAttn: attn_w(p.layer, c); return;
      case PartKind::kPost: post_w(p.layer); return;
      case PartKind::kHead:
        head_backward_weight(be, d, in(val(ValueKind::kdLogits)), in(val(ValueKind::kZf)),
                             P.grad_at(Slot::kLmHead));
        return;
    }
  }

  // ---- one op ----
  void check_op(const ComputeOp& op, const std::vector<PartContext>& ctx) {
    HP_CHECK(!op.parts.empty(), "Model: op '{}' runs no parts", op_str(op));
    HP_CHECK(ctx.size() == op.parts.size(),
             "Model: op '{}' has {} parts but {} part contexts; pass one PartContext per part "
             "(local_contexts() makes them for a single stage)",
             op_str(op), op.parts.size(), ctx.size());
    const bool fwd = op.dir == Dir::kF;
    for (size_t i = 0; i < op.parts.size(); ++i) {
      const Part& p = op.parts[i];
      HP_CHECK(p.kind == PartKind::kEmbed || p.kind == PartKind::kHead ||
                   (p.layer >= 1 && p.layer <= L),
               "Model: op '{}' names {}, outside the model's {} layers", op_str(op), p.str(), L);
      if (i > 0) {
        const int a = op.parts[i - 1].index(L), b = p.index(L);
        HP_CHECK(fwd ? b == a + 1 : b == a - 1,
                 "Model: op '{}' is not a contiguous run of parts in {} order", op_str(op),
                 fwd ? "model" : "reverse model");
      }
      if (p.has_params())
        HP_CHECK(P.owns(p), "Model: op '{}' runs {} but this stage's Params do not hold it",
                 op_str(op), p.str());
    }
  }

  void require_live(const std::vector<Value>& vs, const ComputeOp& op) {
    for (const Value& v : vs) {
      HP_CHECK(st->is_live(v, mb),
               "Model: op '{}' needs {} of micro-batch {} in the value store (received or left by "
               "the previous op); the store holds: {}",
               op_str(op), v.str(), mb, st->describe());
      consumed.push_back(v);
    }
  }

  void cleanup(const std::vector<Value>& outputs) {
    auto is_out = [&](const Value& v) {
      return std::find(outputs.begin(), outputs.end(), v) != outputs.end();
    };
    for (const auto* list : {&consumed, &created})
      for (const Value& v : *list)
        if (!is_out(v) && st->is_live(v, mb)) st->release(v, mb);
  }

  void run(const ComputeOp& op, const std::vector<PartContext>& ctx, ValueStore& store,
           const Batch& data) {
    check_op(op, ctx);
    HP_CHECK(data.batch >= 1 && data.seq >= 1, "Model: bad micro-batch shape {} x {}", data.batch,
             data.seq);
    HP_CHECK(&store.backend() == &be && store.precision() == prec,
             "Model: the value store is on {} in {}, the model on {} in {}; give each stage one "
             "backend and one precision",
             store.backend().name(), store.precision().name(), be.name(), prec.name());
    st = &store;
    batch = &data;
    mb = op.mb;
    d = part_dims(cfg, data.batch, data.seq, opt.mlp_chunk, opt.head_chunk, tp);
    consumed.clear();
    created.clear();
    const size_t n = op.parts.size();
    if (op.dir == Dir::kF) {
      require_live(forward_inputs(op.parts[0], ctx[0], L), op);
      for (size_t i = 0; i < n; ++i) forward(op.parts[i], ctx[i], false);
      for (size_t i = 0; i < n; ++i)
        for (const Value& v : part_stash(op, i, ctx[i], L))  // no targets (logits only): no lsece
          if (v.kind != ValueKind::kLseCE || batch->targets) store.keep(v, mb);
      cleanup(forward_outputs(op.parts[n - 1], ctx[n - 1], L));
      return;
    }
    if (op.dir == Dir::kW) {
      for (size_t i = 0; i < n; ++i) weights(op.parts[i], ctx[i]);
      for (size_t i = 0; i < n; ++i)
        for (const Value& v : weight_stash(op.parts[i], ctx[i], L)) store.unkeep(v, mb);
      return;
    }
    // B or I: recompute what the policy dropped, in model order, then backpropagate.
    require_live(backward_inputs(op.parts[0], ctx[0], L), op);
    // Posts keep or redo their G and U, and stop early, as recompute_run says (schedule/ir.h).
    for (auto it = op.recompute.rbegin(); it != op.recompute.rend(); ++it) {
      auto pos = std::find(op.parts.begin(), op.parts.end(), *it);
      HP_CHECK(pos != op.parts.end(), "Model: op '{}' recomputes {}, which it does not run",
               op_str(op), it->str());
      const RecomputeRun how =
          recompute_run(op, static_cast<size_t>(std::distance(it, op.recompute.rend()) - 1));
      forward(*it, ctx[static_cast<size_t>(pos - op.parts.begin())], true, how.read_later,
              how.keep_gu);
    }
    const bool split = op.dir == Dir::kI;
    for (size_t i = 0; i < n; ++i) backward(op.parts[i], ctx[i], split);
    {
      // I swaps F's stash for W's in one step: measure the peak after the swap, not during it.
      struct Defer {
        ValueStore& s;
        explicit Defer(ValueStore& x) : s(x) { s.defer_stash_peak(true); }
        ~Defer() { s.defer_stash_peak(false); }
      } defer(store);
      if (split)
        for (size_t i = 0; i < n; ++i)
          for (const Value& v : weight_stash(op.parts[i], ctx[i], L)) store.keep(v, mb);
      for (size_t i = 0; i < n; ++i)
        for (const Value& v : part_stash(op, i, ctx[i], L)) store.unkeep(v, mb);
    }
    cleanup(backward_outputs(op.parts[n - 1], ctx[n - 1], L));
  }
};

// A zeroed f64 in backend memory for the next head F op's loss (the buffer grows by doubling,
// keeping the slots already written).
DataPtr Model::Impl::next_loss_slot() {
  const int64_t i = static_cast<int64_t>(loss_scales.size());
  if (i >= loss_sums.elems()) {
    Buffer bigger(be, DType::kF64, std::max<int64_t>(8, 2 * loss_sums.elems()));
    if (i > 0) be.copy(bigger.data(), loss_sums.data(), i * dtype_bytes(DType::kF64));
    loss_sums = std::move(bigger);
  }
  loss_scales.push_back(batch->loss_scale);
  const DataPtr slot = loss_sums.ptr().at(i);
  be.zero(slot.data, dtype_bytes(DType::kF64));
  return slot;
}

// Rows of a chunk of logits into the host sink: all of them (one download), or with last_only the
// last position of each sequence. Downloaded as they are, converted on the host when the sink's
// type differs.
void Model::Impl::sink_logits(ConstDataPtr logits, int64_t row0, int64_t rows) {
  const int64_t V = d.vocab, esize = dtype_bytes(logits.dtype);
  auto emit = [&](int64_t src_row, int64_t dst_row, int64_t n) {
    const DataPtr dst = logits_out.at(dst_row * V);
    const int64_t bytes = n * V * esize;
    if (dst.dtype == logits.dtype) {
      be.download(dst.data, logits.at(src_row * V).data, bytes);
      return;
    }
    logits_host.resize(static_cast<size_t>(bytes));
    be.download(logits_host.data(), logits.at(src_row * V).data, bytes);
    const char* src = logits_host.data();
    for (int64_t i = 0; i < n * V; ++i) {
      double x = 0;
      if (logits.dtype == DType::kBF16) {
        x = to_float(reinterpret_cast<const bf16*>(src)[i]);
      } else if (logits.dtype == DType::kF32) {
        x = reinterpret_cast<const float*>(src)[i];
      } else {
        x = reinterpret_cast<const double*>(src)[i];
      }
      if (dst.dtype == DType::kF64) {
        static_cast<double*>(dst.data)[i] = x;
      } else {
        static_cast<float*>(dst.data)[i] = static_cast<float>(x);
      }
    }
  };
  if (!last_only) {
    emit(0, row0, rows);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    if ((row0 + r + 1) % d.seq == 0) emit(r, (row0 + r) / d.seq, 1);
}

Model::Model(Params& params, ModelOptions opt, TpGroup* tp)
    : cfg_(params.config()), params_(params), opt_(opt) {
  cfg_.validate();
  HP_CHECK(opt_.mlp_chunk >= 0 && opt_.head_chunk >= 0,
           "Model: mlp_chunk ({}) and head_chunk ({}) must be >= 0 (0 = no chunking)",
           opt_.mlp_chunk, opt_.head_chunk);
  const TpShard group = tp ? tp->shard() : TpShard{};
  HP_CHECK(params.tp() == group,
           "Model: the parameters are tensor-parallel rank {} of {}, the model's group rank {} of {}; "
           "build both from the same group",
           params.tp().rank, params.tp().size, group.rank, group.size);
  HP_CHECK(!tp || &tp->backend() == &params.backend(),
           "Model: the tensor-parallel group stages on {}, the parameters live on {}",
           tp ? tp->backend().name() : "", params.backend().name());
  impl_ = std::make_unique<Impl>(cfg_, params_, opt_, tp);
}

Model::~Model() = default;

void Model::run(const ComputeOp& op, const std::vector<PartContext>& ctx, ValueStore& store,
                const Batch& mb) {
  impl_->run(op, ctx, store, mb);
}

double Model::take_loss() {
  Impl& m = *impl_;
  const size_t n = m.loss_scales.size();
  if (n == 0) return 0;
  std::vector<double> sums(n);
  m.be.download(sums.data(), m.loss_sums.data(), static_cast<int64_t>(n) * 8);
  double loss = 0;
  for (size_t i = 0; i < n; ++i) loss += sums[i] * m.loss_scales[i];
  m.loss_scales.clear();
  // Every rank of a tensor-parallel group scored all the token rows (vocabulary-parallel loss):
  // the same bits on each, nothing to sum.
  return loss;
}

int64_t Model::workspace_bytes() const { return impl_->ws.bytes(); }

void Model::set_logits_sink(DataPtr out, bool last_only) {
  HP_CHECK(!out || out.dtype == DType::kF32 || out.dtype == DType::kF64,
           "Model: the logits sink must be f32 or f64 host memory, not {}", dtype_name(out.dtype));
  HP_CHECK(!out || impl_->tp_size == 1,
           "Model: logits are not collected under tensor parallelism (each rank holds its own slice "
           "of the vocabulary); evaluate or sample with a model of one rank");
  impl_->logits_out = out;
  impl_->last_only = last_only;
}

void TokenBuffer::upload(Backend& be, std::span<const int32_t> ids, int64_t vocab,
                         std::string_view what) {
  for (size_t t = 0; t < ids.size(); ++t)
    HP_CHECK(ids[t] >= 0 && ids[t] < vocab,
             "Model: {} id {} at position {} is outside the vocabulary [0, {}); tokenize with the "
             "model's vocabulary",
             what, ids[t], t, vocab);
  const int64_t bytes = static_cast<int64_t>(ids.size() * sizeof(int32_t));
  if (buf_.bytes() < bytes || buf_.backend() != &be) buf_ = RawBuffer(be, bytes);
  if (bytes > 0) be.upload(buf_.data(), ids.data(), bytes);
  size_ = static_cast<int64_t>(ids.size());
}

namespace {

ComputeOp make_op(Dir dir, int mb, std::vector<Part> parts, Recompute policy) {
  ComputeOp op;
  op.dir = dir;
  op.mb = mb;
  if (dir != Dir::kF) std::reverse(parts.begin(), parts.end());
  op.parts = std::move(parts);
  op.recompute = recompute_parts(op, policy);
  return op;
}

ComputeOp whole_model_op(Dir dir, int mb, int layers, Recompute policy) {
  std::vector<Part> parts;
  for (int i = 0; i <= 3 * layers + 1; ++i) parts.push_back(Part::from_index(i, layers));
  return make_op(dir, mb, std::move(parts), policy);
}

// One op per layer ([embed] [pre:l attn:l post:l]... [head]): with full/no-attn each layer keeps
// only its input and recomputes itself (checkpointing per layer). Any split gives bitwise the same
// loss and gradients (tests/model/split_test.cc); this one keeps recomputation memory per layer.
std::vector<std::vector<Part>> layer_ops(int layers) {
  std::vector<std::vector<Part>> ops{{Part::embed()}};
  for (int l = 1; l <= layers; ++l) ops.push_back({Part::pre(l), Part::attn(l), Part::post(l)});
  ops.push_back({Part::head()});
  return ops;
}

}  // namespace

double loss_and_grads(Model& model, const int32_t* tokens, const int32_t* targets, int64_t batch,
                      int64_t seq, int microbatches, StepOptions opt, ValueStore* store) {
  HP_CHECK(batch >= 1 && seq >= 1 && microbatches >= 1,
           "loss_and_grads: batch ({}), seq ({}) and microbatches ({}) must be >= 1", batch, seq,
           microbatches);
  const int L = static_cast<int>(model.config().layers);
  ValueStore own(model.backend(), model.precision());
  ValueStore& st = store ? *store : own;
  const double scale = 1.0 / static_cast<double>(batch * seq * microbatches);
  const auto ops = layer_ops(L);
  model.take_loss();  // start from no pending loss
  for (int j = 0; j < microbatches; ++j) {
    Batch b;
    b.tokens = tokens + j * batch * seq;
    b.targets = targets + j * batch * seq;
    b.batch = batch;
    b.seq = seq;
    b.loss_scale = scale;
    for (const auto& parts : ops) {  // embed -> layers -> head
      ComputeOp f = make_op(Dir::kF, j, parts, opt.recompute);
      model.run(f, local_contexts(f, opt.recompute, opt.transfer), st, b);
    }
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {  // and back
      ComputeOp bw = make_op(Dir::kB, j, *it, opt.recompute);
      model.run(bw, local_contexts(bw, opt.recompute, opt.transfer), st, b);
    }
  }
  return model.take_loss();
}

double eval_loss(Model& model, const int32_t* tokens, const int32_t* targets, int64_t batch,
                 int64_t seq) {
  HP_CHECK(targets, "eval_loss: targets are required");
  ValueStore st(model.backend(), model.precision());
  Batch b{tokens, targets, batch, seq, 1.0 / static_cast<double>(batch * seq)};
  ComputeOp f = whole_model_op(Dir::kF, 0, static_cast<int>(model.config().layers), Recompute::kFull);
  model.take_loss();
  model.run(f, local_contexts(f, Recompute::kFull, TransferMode::kWeights), st, b);
  return model.take_loss();
}

void forward_logits(Model& model, const int32_t* tokens, int64_t batch, int64_t seq, DataPtr out,
                    bool last_only) {
  ValueStore st(model.backend(), model.precision());
  Batch b{tokens, nullptr, batch, seq, 1.0};
  ComputeOp f = whole_model_op(Dir::kF, 0, static_cast<int>(model.config().layers), Recompute::kFull);
  model.set_logits_sink(out, last_only);
  try {
    model.run(f, local_contexts(f, Recompute::kFull, TransferMode::kWeights), st, b);
  } catch (...) {
    model.set_logits_sink({}, false);
    throw;
  }
  model.set_logits_sink({}, false);
}

}  // namespace hp

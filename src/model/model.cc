// The model's parts: forward, backward-for-inputs and backward-for-weights of embed, pre, attn,
// post and head, driven one compute op at a time (see model.h).
#include "model/model.h"

#include <algorithm>
#include <type_traits>

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
  if (part.kind == PartKind::kAttn && c.first_in_op && c.policy != Recompute::kNone) {
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
// Shapes: Tn = batch*seq tokens of the micro-batch, h hidden, kv = h_kv, q = h + 2kv, f = ffn,
// V = vocab. Every matrix is token-major (one row per token).
template <typename T>
struct ModelT<T>::Impl {
  const ModelConfig& cfg;
  KernelsT<T>& k;
  ParamsT<T>& P;
  const ModelOptions& opt;
  const int L;
  const int64_t h, kv, q, f, V, heads, kv_heads, hd;

  // State of the op being run.
  ValueStoreT<T>* st = nullptr;
  const Batch* batch = nullptr;
  int mb = 0;
  int64_t Tn = 0;
  std::vector<Value> consumed, created;

  // Workspace (grows to the largest op, then stays).
  std::vector<T> w_qkv, w_dqkv, w_g, w_u, w_h, w_dh, w_dg, w_du, w_dz, w_zf, w_logits, w_dzf,
      w_rstd, w_dw;
  std::vector<float> w_lse;
  T* logits_out = nullptr;
  bool last_only = false;

  Impl(const ModelConfig& c, KernelsT<T>& kk, ParamsT<T>& p, const ModelOptions& o)
      : cfg(c), k(kk), P(p), opt(o), L(static_cast<int>(c.layers)), h(c.hidden), kv(c.kv_dim()),
        q(c.qkv_dim()), f(c.intermediate), V(c.vocab), heads(c.heads), kv_heads(c.kv_heads),
        hd(c.head_dim()) {}

  static T* grow(std::vector<T>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
  }
  float* grow_f(int64_t n) {
    if (static_cast<int64_t>(w_lse.size()) < n) w_lse.resize(static_cast<size_t>(n));
    return w_lse.data();
  }
  int64_t ws_bytes() const {
    int64_t n = 0;
    for (const auto* v : {&w_qkv, &w_dqkv, &w_g, &w_u, &w_h, &w_dh, &w_dg, &w_du, &w_dz, &w_zf,
                          &w_logits, &w_dzf, &w_rstd, &w_dw})
      n += static_cast<int64_t>(v->capacity() * sizeof(T));
    return n + static_cast<int64_t>(w_lse.capacity() * sizeof(float));
  }

  // Store access for the running op.
  T* in(Value v) { return st->get(v, mb); }
  T* maybe(Value v) { return st->find(v, mb); }
  T* out(Value v) {
    if (T* p = st->find(v, mb)) return p;  // recomputation rewrites a stashed value (same bits)
    created.push_back(v);
    return st->create(v, mb, value_elems(v, cfg, Tn));
  }
  static Value val(ValueKind kind, int l = 0) { return Value{kind, l}; }
  int64_t mlp_chunk() const { return opt.mlp_chunk > 0 ? std::min(opt.mlp_chunk, Tn) : Tn; }
  int64_t head_chunk() const { return opt.head_chunk > 0 ? std::min(opt.head_chunk, Tn) : Tn; }
  static void copy(T* dst, const T* src, int64_t n) { std::copy(src, src + n, dst); }

  // The kernels take the log-sum-exps as float; a double model keeps them as double values.
  float* lse_for_kernel(T* lse_value, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      return lse_value;
    } else {
      float* w = grow_f(n);
      for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(lse_value[i]);
      return w;
    }
  }
  void lse_back(T* lse_value, const float* w, int64_t n) {
    if constexpr (!std::is_same_v<T, float>) {
      for (int64_t i = 0; i < n; ++i) lse_value[i] = static_cast<T>(w[i]);
    }
  }

  AttnShape attn_shape() const {
    AttnShape s;
    s.batch = batch->batch;
    s.seq = batch->seq;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.head_dim = hd;
    s.ld_qkv = q;
    s.ld_o = h;
    return s;
  }
  void rope(T* qkv, bool inverse) {
    k.rope(qkv, Tn, q, batch->seq, heads, hd, cfg.rope_theta, inverse);
    k.rope(qkv + h, Tn, q, batch->seq, kv_heads, hd, cfg.rope_theta, inverse);
  }
  // W_qkv (q, h) as attention of layer l sees it: the received W:l or this stage's parameter.
  T* wqkv_for_attn(int l, const PartContext& c) {
    if (c.transfer == TransferMode::kWeights && c.attn_remote) return in(val(ValueKind::kW, l));
    return P.at(Slot::kWqkv, l);
  }
  // Adds one micro-batch's dW_qkv = dQKV^T A (q, h) to the gradient, through a workspace so the
  // sum is bitwise the same whether it is formed here or on another stage and shipped (dW:l).
  void add_dwqkv(int l, const T* dqkv, const T* a) {
    T* dw = grow(w_dw, q * h);
    k.gemm(true, false, q, h, Tn, T(1), dqkv, q, a, h, T(0), dw, h);
    k.axpy(P.grad_at(Slot::kWqkv, l), dw, T(1), q * h);
  }

  // ---- forward of each part ----
  // embed: X:1 (Tn, h) = table[tokens]
  void embed_fwd() {
    HP_CHECK(batch->tokens, "Model: embed needs the micro-batch's tokens (Batch::tokens is null)");
    for (int64_t t = 0; t < Tn; ++t)
      HP_CHECK(batch->tokens[t] >= 0 && batch->tokens[t] < V,
               "Model: token {} at position {} is outside the vocabulary [0, {})", batch->tokens[t],
               t, V);
    k.embedding_forward(out(val(ValueKind::kX, 1)), batch->tokens, P.at(Slot::kEmbed), Tn, h);
  }

  // pre:l: A:l (Tn, h) = RMSNorm1(X:l), rstd1:l (Tn); activations mode: QKV:l (Tn, q) = A W^T;
  // weights mode with attention remote: W:l (q, h) = a copy of W_qkv to ship.
  void pre_fwd(int l, const PartContext& c) {
    const T* x = in(val(ValueKind::kX, l));
    T* a = out(val(ValueKind::kA, l));
    k.rmsnorm_forward(a, out(val(ValueKind::kRstd1, l)), x, P.at(Slot::kNorm1, l), Tn, h,
                      cfg.rms_eps);
    if (c.transfer == TransferMode::kActivations) {
      k.gemm(false, true, Tn, q, h, T(1), a, h, P.at(Slot::kWqkv, l), h, T(0),
             out(val(ValueKind::kQKV, l)), q);
    } else if (c.attn_remote) {
      copy(out(val(ValueKind::kW, l)), P.at(Slot::kWqkv, l), q * h);
    }
  }

  // attn:l: QKVr (Tn, q) = rotary(A W^T) (or rotary(QKV) in activations mode), O:l (Tn, h) and
  // lse:l (heads, Tn) from causal attention. QKVr is a value only when it is stashed (policy
  // none) or recomputed for this op's backward; otherwise it lives in the workspace.
  void attn_fwd(int l, const PartContext& c, bool recompute) {
    const bool keep_qkvr = c.policy == Recompute::kNone || recompute;
    T* qkvr = keep_qkvr ? out(val(ValueKind::kQKVr, l)) : grow(w_qkv, Tn * q);
    make_qkvr(l, c, qkvr);
    T* o = out(val(ValueKind::kO, l));
    T* lse = out(val(ValueKind::kLse, l));
    float* lse_k = lse_for_kernel(lse, heads * Tn);
    k.attention_forward(attn_shape(), qkvr, qkvr + h, qkvr + h + kv, o, lse_k);
    lse_back(lse, lse_k, heads * Tn);
  }
  void make_qkvr(int l, const PartContext& c, T* qkvr) {
    if (c.transfer == TransferMode::kActivations) {
      copy(qkvr, in(val(ValueKind::kQKV, l)), Tn * q);
    } else {
      k.gemm(false, true, Tn, q, h, T(1), in(val(ValueKind::kA, l)), h, wqkv_for_attn(l, c), h,
             T(0), qkvr, q);
    }
    rope(qkvr, false);
  }

  // post:l: Y:l = O W_o^T + X:l; Z:l = RMSNorm2(Y), rstd2:l; per chunk of rows
  // G = Z W_gate^T, U = Z W_up^T (chunk, f), H = silu(G) * U, X:l+1 = Y + H W_down^T.
  // G:l and U:l are full values when stashed (policy none) and, with `keep_gu`, in a
  // recomputation for the op's own backward, which then reads them instead of multiplying them
  // out a second time (transient: released when the op ends; the caller asks it for one post per
  // op, so the extra memory is one layer's G and U). A recomputation whose X:l+1 no later
  // recomputed part reads (`need_output` false) stops after G and U.
  void post_fwd(int l, const PartContext& c, bool recompute, bool need_output, bool keep_gu) {
    const T* x = in(val(ValueKind::kX, l));
    const T* o = in(val(ValueKind::kO, l));
    T* y = out(val(ValueKind::kY, l));
    T* rstd2 = out(val(ValueKind::kRstd2, l));
    T* z = out(val(ValueKind::kZ, l));
    T* xo = need_output ? out(val(ValueKind::kX, l + 1)) : nullptr;
    copy(y, x, Tn * h);
    k.gemm(false, true, Tn, h, h, T(1), o, h, P.at(Slot::kWo, l), h, T(1), y, h);
    k.rmsnorm_forward(z, rstd2, y, P.at(Slot::kNorm2, l), Tn, h, cfg.rms_eps);
    const bool full = c.policy == Recompute::kNone || (recompute && (keep_gu || !need_output));
    T* g = full ? out(val(ValueKind::kG, l)) : nullptr;
    T* u = full ? out(val(ValueKind::kU, l)) : nullptr;
    const int64_t C = mlp_chunk();
    for (int64_t c0 = 0; c0 < Tn; c0 += C) {
      const int64_t n = std::min(C, Tn - c0);
      T* gc = full ? g + c0 * f : grow(w_g, C * f);
      T* uc = full ? u + c0 * f : grow(w_u, C * f);
      T* hc = grow(w_h, C * f);
      k.gemm(false, true, n, f, h, T(1), z + c0 * h, h, P.at(Slot::kGate, l), h, T(0), gc, f);
      k.gemm(false, true, n, f, h, T(1), z + c0 * h, h, P.at(Slot::kUp, l), h, T(0), uc, f);
      if (!xo) continue;
      k.swiglu_forward(hc, gc, uc, n * f);
      copy(xo + c0 * h, y + c0 * h, n * h);
      k.gemm(false, true, n, h, f, T(1), hc, f, P.at(Slot::kDown, l), f, T(1), xo + c0 * h, h);
    }
  }

  // head: Zf = RMSNorm_f(X:L+1) (workspace), rstdf, logits per chunk (chunk, V), lsece (Tn).
  // Returns the sum of the token losses (0 without targets).
  double head_fwd() {
    const T* x = in(val(ValueKind::kX, L + 1));
    T* zf = grow(w_zf, Tn * h);
    k.rmsnorm_forward(zf, out(val(ValueKind::kRstdF)), x, P.at(Slot::kFinalNorm), Tn, h,
                      cfg.rms_eps);
    T* lsece = batch->targets ? out(val(ValueKind::kLseCE)) : nullptr;
    float* lse_k = batch->targets ? lse_for_kernel(lsece, Tn) : nullptr;
    const int64_t C = head_chunk();
    double sum = 0;
    for (int64_t c0 = 0; c0 < Tn; c0 += C) {
      const int64_t n = std::min(C, Tn - c0);
      T* logits = grow(w_logits, C * V);
      k.gemm(false, true, n, V, h, T(1), zf + c0 * h, h, P.at(Slot::kLmHead), h, T(0), logits, V);
      if (logits_out) copy_logits(logits, c0, n);
      if (batch->targets)
        sum += k.cross_entropy_forward(logits, V, batch->targets + c0, n, V, lse_k + c0);
    }
    if (batch->targets) lse_back(lsece, lse_k, Tn);
    return sum;
  }
  void copy_logits(const T* logits, int64_t c0, int64_t n) {
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = c0 + r;
      if (!last_only) {
        copy(logits_out + t * V, logits + r * V, V);
      } else if ((t + 1) % batch->seq == 0) {
        copy(logits_out + (t / batch->seq) * V, logits + r * V, V);
      }
    }
  }

  // Recomputation hints (post only): `need_output` false when no later recomputed part of the op
  // reads the output; `keep_gu` to keep G and U for the op's backward (see post_fwd).
  double forward(const Part& p, const PartContext& c, bool recompute, bool need_output = true,
                 bool keep_gu = false) {
    switch (p.kind) {
      case PartKind::kEmbed: embed_fwd(); return 0;
      case PartKind::kPre: pre_fwd(p.layer, c); return 0;
      case PartKind::kAttn: attn_fwd(p.layer, c, recompute); return 0;
      case PartKind::kPost: post_fwd(p.layer, c, recompute, need_output, keep_gu); return 0;
      case PartKind::kHead: return head_fwd();
    }
    return 0;
  }

  // ---- backward of each part (split: I only, weight work left to W through the weight stash) ----
  void embed_bwd(bool split) {
    if (!split) embed_w();
  }
  void embed_w() {
    k.embedding_backward(P.grad_at(Slot::kEmbed), batch->tokens, in(val(ValueKind::kdX, 1)), Tn, h);
  }

  // pre:l: dA = dQKV W (activations) or received dA:l; dX:l = dR:l + RMSNorm1'(dA); dgain1 +=.
  void pre_bwd(int l, const PartContext& c, bool split) {
    const T* da = nullptr;
    if (c.transfer == TransferMode::kActivations) {
      const T* dqkv = in(val(ValueKind::kdQKV, l));
      T* w = grow(w_dz, Tn * h);
      k.gemm(false, false, Tn, h, q, T(1), dqkv, q, P.at(Slot::kWqkv, l), h, T(0), w, h);
      da = w;
      if (!split) pre_w(l, c);
    } else {
      da = in(val(ValueKind::kdA, l));
      if (c.attn_remote)  // a micro-batch's dW_qkv shipped back by the attention stage
        k.axpy(P.grad_at(Slot::kWqkv, l), in(val(ValueKind::kdW, l)), T(1), q * h);
    }
    T* dx = out(val(ValueKind::kdX, l));
    copy(dx, in(val(ValueKind::kdR, l)), Tn * h);
    k.rmsnorm_backward(dx, P.grad_at(Slot::kNorm1, l), da, in(val(ValueKind::kX, l)),
                       P.at(Slot::kNorm1, l), in(val(ValueKind::kRstd1, l)), Tn, h, true);
  }
  void pre_w(int l, const PartContext& c) {
    if (c.transfer == TransferMode::kActivations)
      add_dwqkv(l, in(val(ValueKind::kdQKV, l)), in(val(ValueKind::kA, l)));
  }

  // attn:l: dQKVr from attention backward (dO:l, O, lse), dQKV = inverse rotary; activations
  // mode hands dQKV:l back; weights mode forms dA:l = dQKV W and dW_qkv = dQKV^T A (added to the
  // gradient when W_qkv is local, shipped as dW:l when remote).
  void attn_bwd(int l, const PartContext& c, bool split) {
    const bool weights = c.transfer == TransferMode::kWeights;
    HP_CHECK(!(split && weights && c.attn_remote),
             "Model: a split backward (I/W) of attn:{} away from pre:{} in weights mode is not "
             "supported (dW:{} would have no op to travel with); use B ops or activations mode",
             l, l, l);
    T* qkvr = maybe(val(ValueKind::kQKVr, l));
    if (!qkvr) {  // recomputation without attention: rebuild QKV + rotary, never the attention
      qkvr = grow(w_qkv, Tn * q);
      make_qkvr(l, c, qkvr);
    }
    T* lse = in(val(ValueKind::kLse, l));
    float* lse_k = lse_for_kernel(lse, heads * Tn);
    T* dqkv = (weights && split) ? out(val(ValueKind::kdQKV, l))
              : weights          ? grow(w_dqkv, Tn * q)
                                 : out(val(ValueKind::kdQKV, l));
    k.attention_backward(attn_shape(), qkvr, qkvr + h, qkvr + h + kv, in(val(ValueKind::kO, l)),
                         in(val(ValueKind::kdO, l)), lse_k, dqkv, dqkv + h, dqkv + h + kv);
    rope(dqkv, true);
    if (!weights) return;
    const T* w = wqkv_for_attn(l, c);
    k.gemm(false, false, Tn, h, q, T(1), dqkv, q, w, h, T(0), out(val(ValueKind::kdA, l)), h);
    const T* a = in(val(ValueKind::kA, l));
    if (c.attn_remote) {
      k.gemm(true, false, q, h, Tn, T(1), dqkv, q, a, h, T(0), out(val(ValueKind::kdW, l)), h);
    } else if (!split) {
      add_dwqkv(l, dqkv, a);
    }
  }
  void attn_w(int l, const PartContext& c) {
    if (c.transfer == TransferMode::kWeights)
      add_dwqkv(l, in(val(ValueKind::kdQKV, l)), in(val(ValueKind::kA, l)));
  }

  // post:l, per chunk of rows: H = silu(G) U (G, U stashed or recomputed from Z), dH = dX' W_down,
  // dG, dU = SwiGLU'(dH), dZ = dG W_gate + dU W_up; then dR:l = dY = dX' + RMSNorm2'(dZ),
  // dO:l = dY W_o. Weight gradients per chunk (dW_down += dX'^T H, dW_gate += dG^T Z,
  // dW_up += dU^T Z), then dW_o += dY^T O. With split, dG, dU, H are kept whole for W instead.
  void post_bwd(int l, bool split) {
    const T* dxo = in(val(ValueKind::kdX, l + 1));
    const T* y = in(val(ValueKind::kY, l));
    const T* z = in(val(ValueKind::kZ, l));
    const T* g = maybe(val(ValueKind::kG, l));
    const T* u = maybe(val(ValueKind::kU, l));
    T* hs = split ? out(val(ValueKind::kH, l)) : nullptr;
    T* dgs = split ? out(val(ValueKind::kdG, l)) : nullptr;
    T* dus = split ? out(val(ValueKind::kdU, l)) : nullptr;
    T* dz = grow(w_dz, Tn * h);
    const int64_t C = mlp_chunk();
    for (int64_t c0 = 0; c0 < Tn; c0 += C) {
      const int64_t n = std::min(C, Tn - c0);
      const T* zc = z + c0 * h;
      const T* gc = g ? g + c0 * f : nullptr;
      const T* uc = u ? u + c0 * f : nullptr;
      if (!gc) {
        T* wg = grow(w_g, C * f);
        k.gemm(false, true, n, f, h, T(1), zc, h, P.at(Slot::kGate, l), h, T(0), wg, f);
        gc = wg;
      }
      if (!uc) {
        T* wu = grow(w_u, C * f);
        k.gemm(false, true, n, f, h, T(1), zc, h, P.at(Slot::kUp, l), h, T(0), wu, f);
        uc = wu;
      }
      T* hc = split ? hs + c0 * f : grow(w_h, C * f);
      k.swiglu_forward(hc, gc, uc, n * f);
      T* dh = grow(w_dh, C * f);
      k.gemm(false, false, n, f, h, T(1), dxo + c0 * h, h, P.at(Slot::kDown, l), f, T(0), dh, f);
      T* dgc = split ? dgs + c0 * f : grow(w_dg, C * f);
      T* duc = split ? dus + c0 * f : grow(w_du, C * f);
      k.swiglu_backward(dgc, duc, dh, gc, uc, n * f);
      k.gemm(false, false, n, h, f, T(1), dgc, f, P.at(Slot::kGate, l), h, T(0), dz + c0 * h, h);
      k.gemm(false, false, n, h, f, T(1), duc, f, P.at(Slot::kUp, l), h, T(1), dz + c0 * h, h);
      if (!split) post_w_chunk(l, c0, n, dxo, hc, dgc, duc, zc);
    }
    T* dr = out(val(ValueKind::kdR, l));
    copy(dr, dxo, Tn * h);
    k.rmsnorm_backward(dr, P.grad_at(Slot::kNorm2, l), dz, y, P.at(Slot::kNorm2, l),
                       in(val(ValueKind::kRstd2, l)), Tn, h, true);
    k.gemm(false, false, Tn, h, h, T(1), dr, h, P.at(Slot::kWo, l), h, T(0),
           out(val(ValueKind::kdO, l)), h);
    if (!split) post_w_o(l, dr);
  }
  void post_w_chunk(int l, int64_t c0, int64_t n, const T* dxo, const T* hc, const T* dgc,
                    const T* duc, const T* zc) {
    k.gemm(true, false, h, f, n, T(1), dxo + c0 * h, h, hc, f, T(1), P.grad_at(Slot::kDown, l), f);
    k.gemm(true, false, f, h, n, T(1), dgc, f, zc, h, T(1), P.grad_at(Slot::kGate, l), h);
    k.gemm(true, false, f, h, n, T(1), duc, f, zc, h, T(1), P.grad_at(Slot::kUp, l), h);
  }
  void post_w_o(int l, const T* dr) {
    k.gemm(true, false, h, h, Tn, T(1), dr, h, in(val(ValueKind::kO, l)), h, T(1),
           P.grad_at(Slot::kWo, l), h);
  }
  void post_w(int l) {
    const T* dxo = in(val(ValueKind::kdX, l + 1));
    const T* hs = in(val(ValueKind::kH, l));
    const T* dgs = in(val(ValueKind::kdG, l));
    const T* dus = in(val(ValueKind::kdU, l));
    const T* z = in(val(ValueKind::kZ, l));
    const int64_t C = mlp_chunk();  // the same chunks as B, so the sums match bitwise
    for (int64_t c0 = 0; c0 < Tn; c0 += C) {
      const int64_t n = std::min(C, Tn - c0);
      post_w_chunk(l, c0, n, dxo, hs + c0 * f, dgs + c0 * f, dus + c0 * f, z + c0 * h);
    }
    post_w_o(l, in(val(ValueKind::kdR, l)));
  }

  // head: Zf recomputed from X:L+1; per chunk logits again, dlogits = (softmax - onehot) *
  // loss_scale, dZf = dlogits W_lm, dW_lm += dlogits^T Zf; dX:L+1 = RMSNorm_f'(dZf).
  void head_bwd(bool split) {
    HP_CHECK(batch->targets, "Model: the head's backward needs targets (Batch::targets is null)");
    const T* x = in(val(ValueKind::kX, L + 1));
    T* zf = split ? out(val(ValueKind::kZf)) : grow(w_zf, Tn * h);
    k.rmsnorm_forward(zf, grow(w_rstd, Tn), x, P.at(Slot::kFinalNorm), Tn, h, cfg.rms_eps);
    T* dl_all = split ? out(val(ValueKind::kdLogits)) : nullptr;
    float* lse_k = lse_for_kernel(in(val(ValueKind::kLseCE)), Tn);
    T* dzf = grow(w_dzf, Tn * h);
    const int64_t C = head_chunk();
    const T scale = static_cast<T>(batch->loss_scale);
    for (int64_t c0 = 0; c0 < Tn; c0 += C) {
      const int64_t n = std::min(C, Tn - c0);
      T* dl = split ? dl_all + c0 * V : grow(w_logits, C * V);
      k.gemm(false, true, n, V, h, T(1), zf + c0 * h, h, P.at(Slot::kLmHead), h, T(0), dl, V);
      k.cross_entropy_backward(dl, dl, V, lse_k + c0, batch->targets + c0, n, V, scale);
      k.gemm(false, false, n, h, V, T(1), dl, V, P.at(Slot::kLmHead), h, T(0), dzf + c0 * h, h);
      if (!split) head_w_chunk(dl, zf + c0 * h, n);
    }
    k.rmsnorm_backward(out(val(ValueKind::kdX, L + 1)), P.grad_at(Slot::kFinalNorm), dzf, x,
                       P.at(Slot::kFinalNorm), in(val(ValueKind::kRstdF)), Tn, h, false);
  }
  void head_w_chunk(const T* dl, const T* zfc, int64_t n) {
    k.gemm(true, false, V, h, n, T(1), dl, V, zfc, h, T(1), P.grad_at(Slot::kLmHead), h);
  }
  void head_w() {
    const T* dl = in(val(ValueKind::kdLogits));
    const T* zf = in(val(ValueKind::kZf));
    const int64_t C = head_chunk();
    for (int64_t c0 = 0; c0 < Tn; c0 += C)
      head_w_chunk(dl + c0 * V, zf + c0 * h, std::min(C, Tn - c0));
  }

  void backward(const Part& p, const PartContext& c, bool split) {
    switch (p.kind) {
      case PartKind::kEmbed: embed_bwd(split); return;
      case PartKind::kPre: pre_bwd(p.layer, c, split); return;
      case PartKind::kAttn: attn_bwd(p.layer, c, split); return;
      case PartKind::kPost: post_bwd(p.layer, split); return;
      case PartKind::kHead: head_bwd(split); return;
    }
  }
  void weights(const Part& p, const PartContext& c) {
    switch (p.kind) {
      case PartKind::kEmbed: embed_w(); return;
      case PartKind::kPre: pre_w(p.layer, c); return;
      case PartKind::kAttn: attn_w(p.layer, c); return;
      case PartKind::kPost: post_w(p.layer); return;
      case PartKind::kHead: head_w(); return;
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

  double run(const ComputeOp& op, const std::vector<PartContext>& ctx, ValueStoreT<T>& store,
             const Batch& data) {
    check_op(op, ctx);
    HP_CHECK(data.batch >= 1 && data.seq >= 1, "Model: bad micro-batch shape {} x {}", data.batch,
             data.seq);
    st = &store;
    batch = &data;
    mb = op.mb;
    Tn = data.batch * data.seq;
    consumed.clear();
    created.clear();
    const size_t n = op.parts.size();
    double loss = 0;
    if (op.dir == Dir::kF) {
      require_live(forward_inputs(op.parts[0], ctx[0], L), op);
      for (size_t i = 0; i < n; ++i) loss += forward(op.parts[i], ctx[i], false);
      for (size_t i = 0; i < n; ++i)
        for (const Value& v : part_stash(op, i, ctx[i], L)) store.keep(v, mb);
      cleanup(forward_outputs(op.parts[n - 1], ctx[n - 1], L));
      return loss * data.loss_scale;
    }
    if (op.dir == Dir::kW) {
      for (size_t i = 0; i < n; ++i) weights(op.parts[i], ctx[i]);
      for (size_t i = 0; i < n; ++i)
        for (const Value& v : weight_stash(op.parts[i], ctx[i], L)) store.unkeep(v, mb);
      return 0;
    }
    // B or I: recompute what the policy dropped, in model order, then backpropagate.
    require_live(backward_inputs(op.parts[0], ctx[0], L), op);
    // The last post in model order keeps its G and U for the backward (or, when nothing after it
    // is recomputed, stops after them): the backward then does not multiply them out again.
    auto last_post = std::find_if(op.recompute.begin(), op.recompute.end(),
                                  [](const Part& p) { return p.kind == PartKind::kPost; });
    for (auto it = op.recompute.rbegin(); it != op.recompute.rend(); ++it) {
      auto pos = std::find(op.parts.begin(), op.parts.end(), *it);
      HP_CHECK(pos != op.parts.end(), "Model: op '{}' recomputes {}, which it does not run",
               op_str(op), it->str());
      const bool keep_gu = last_post != op.recompute.end() && *it == *last_post;
      forward(*it, ctx[static_cast<size_t>(pos - op.parts.begin())], true,
              std::next(it) != op.recompute.rend(), keep_gu);
    }
    const bool split = op.dir == Dir::kI;
    for (size_t i = 0; i < n; ++i) backward(op.parts[i], ctx[i], split);
    {
      // I swaps F's stash for W's in one step: measure the peak after the swap, not during it.
      struct Defer {
        ValueStoreT<T>& s;
        explicit Defer(ValueStoreT<T>& x) : s(x) { s.defer_stash_peak(true); }
        ~Defer() { s.defer_stash_peak(false); }
      } defer(store);
      if (split)
        for (size_t i = 0; i < n; ++i)
          for (const Value& v : weight_stash(op.parts[i], ctx[i], L)) store.keep(v, mb);
      for (size_t i = 0; i < n; ++i)
        for (const Value& v : part_stash(op, i, ctx[i], L)) store.unkeep(v, mb);
    }
    cleanup(backward_outputs(op.parts[n - 1], ctx[n - 1], L));
    return 0;
  }
};

template <typename T>
ModelT<T>::ModelT(const ModelConfig& cfg, KernelsT<T>& kernels, ParamsT<T>& params, ModelOptions opt)
    : cfg_(cfg), kernels_(kernels), params_(params), opt_(opt) {
  cfg_.validate();
  HP_CHECK(opt_.mlp_chunk >= 0 && opt_.head_chunk >= 0,
           "Model: mlp_chunk ({}) and head_chunk ({}) must be >= 0 (0 = no chunking)",
           opt_.mlp_chunk, opt_.head_chunk);
  impl_ = std::make_unique<Impl>(cfg_, kernels_, params_, opt_);
}

template <typename T>
ModelT<T>::~ModelT() = default;

template <typename T>
double ModelT<T>::run(const ComputeOp& op, const std::vector<PartContext>& ctx,
                      ValueStoreT<T>& store, const Batch& mb) {
  return impl_->run(op, ctx, store, mb);
}

template <typename T>
int64_t ModelT<T>::workspace_bytes() const {
  return impl_->ws_bytes();
}

template <typename T>
void ModelT<T>::set_logits_sink(T* out, bool last_only) {
  impl_->logits_out = out;
  impl_->last_only = last_only;
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

template <typename T>
double loss_and_grads(ModelT<T>& model, const int32_t* tokens, const int32_t* targets,
                      int64_t batch, int64_t seq, int microbatches, StepOptions opt,
                      ValueStoreT<T>* store) {
  HP_CHECK(batch >= 1 && seq >= 1 && microbatches >= 1,
           "loss_and_grads: batch ({}), seq ({}) and microbatches ({}) must be >= 1", batch, seq,
           microbatches);
  const int L = static_cast<int>(model.config().layers);
  ValueStoreT<T> own;
  ValueStoreT<T>& st = store ? *store : own;
  const double scale = 1.0 / static_cast<double>(batch * seq * microbatches);
  const auto ops = layer_ops(L);
  double loss = 0;
  for (int j = 0; j < microbatches; ++j) {
    Batch b;
    b.tokens = tokens + j * batch * seq;
    b.targets = targets + j * batch * seq;
    b.batch = batch;
    b.seq = seq;
    b.loss_scale = scale;
    for (const auto& parts : ops) {
      ComputeOp f = make_op(Dir::kF, j, parts, opt.recompute);
      loss += model.run(f, local_contexts(f, opt.recompute, opt.transfer), st, b);
    }
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      ComputeOp bw = make_op(Dir::kB, j, *it, opt.recompute);
      model.run(bw, local_contexts(bw, opt.recompute, opt.transfer), st, b);
    }
  }
  return loss;
}

template <typename T>
double eval_loss(ModelT<T>& model, const int32_t* tokens, const int32_t* targets, int64_t batch,
                 int64_t seq) {
  HP_CHECK(targets, "eval_loss: targets are required");
  ValueStoreT<T> st;
  Batch b{tokens, targets, batch, seq, 1.0 / static_cast<double>(batch * seq)};
  ComputeOp f = whole_model_op(Dir::kF, 0, static_cast<int>(model.config().layers), Recompute::kFull);
  return model.run(f, local_contexts(f, Recompute::kFull, TransferMode::kWeights), st, b);
}

template <typename T>
void forward_logits(ModelT<T>& model, const int32_t* tokens, int64_t batch, int64_t seq, T* out,
                    bool last_only) {
  ValueStoreT<T> st;
  Batch b{tokens, nullptr, batch, seq, 1.0};
  ComputeOp f = whole_model_op(Dir::kF, 0, static_cast<int>(model.config().layers), Recompute::kFull);
  model.set_logits_sink(out, last_only);
  try {
    model.run(f, local_contexts(f, Recompute::kFull, TransferMode::kWeights), st, b);
  } catch (...) {
    model.set_logits_sink(nullptr, false);
    throw;
  }
  model.set_logits_sink(nullptr, false);
}

#define HP_INSTANTIATE(T)                                                                         \
  template class ModelT<T>;                                                                       \
  template double loss_and_grads<T>(ModelT<T>&, const int32_t*, const int32_t*, int64_t, int64_t, \
                                    int, StepOptions, ValueStoreT<T>*);                           \
  template double eval_loss<T>(ModelT<T>&, const int32_t*, const int32_t*, int64_t, int64_t);     \
  template void forward_logits<T>(ModelT<T>&, const int32_t*, int64_t, int64_t, T*, bool);
HP_INSTANTIATE(float)
HP_INSTANTIATE(double)

}  // namespace hp

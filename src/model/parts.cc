// The parts' math (see parts.h): kernel calls and backend copies, nothing else.
#include "model/parts.h"

#include <algorithm>

#include "model/tensor_parallel.h"
#include "util/error.h"

namespace hp {

namespace {

// dst = src, n elements of one type, in backend memory.
void copy_elems(Backend& be, DataPtr dst, ConstDataPtr src, int64_t n) {
  HP_CHECK(dst.dtype == src.dtype, "internal: copy of {} values into a {} tensor",
           dtype_name(src.dtype), dtype_name(dst.dtype));
  be.copy(dst.data, src.data, n * dtype_bytes(dst.dtype));
}

// Rotary on the q and k columns of a QKV matrix (T,q) in place (inverse: the backward).
void rope_qk(Backend& be, const PartDims& d, DataPtr qkv, bool inverse) {
  Kernels& k = be.kernels();
  k.rope(qkv, d.tokens, d.qkv, d.seq, d.heads, d.head_dim, d.rope_theta, inverse);
  k.rope(qkv.at(d.attn), d.tokens, d.qkv, d.seq, d.kv_heads, d.head_dim, d.rope_theta, inverse);
}

// Sequence parallelism: all T rows of a (rows, cols) value, gathered over the group into staging
// `slot`; the value itself without a group.
ConstDataPtr gather_rows(const PartDims& d, ConstDataPtr mine, int64_t cols, int slot,
                         const char* what) {
  if (!d.tp) return mine;
  const DataPtr full = d.tp->staging(slot, mine.dtype, d.tokens * cols);
  d.tp->all_gather(mine, full, d.rows * cols, std::string("all-gather of ") + what);
  return full;
}

// Where a row-parallel product of all T rows goes before it is summed: staging `slot` with a
// group, `out` itself without one.
DataPtr partial_rows(const PartDims& d, DataPtr out, int64_t cols, int slot) {
  return d.tp ? d.tp->staging(slot, out.dtype, d.tokens * cols) : out;
}

// out (rows, cols) = this rank's rows of the sum over the group of `partial` (T, cols); nothing
// without a group (partial is out).
void sum_rows(const PartDims& d, ConstDataPtr partial, DataPtr out, int64_t cols,
              const char* what) {
  if (d.tp) d.tp->reduce_scatter(partial, out, d.rows * cols, std::string("reduce-scatter of ") + what);
}

}  // namespace

AttnShape PartDims::attn_shape() const {
  AttnShape s;
  s.batch = batch;
  s.seq = seq;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.ld_qkv = qkv;
  s.ld_o = attn;
  return s;
}

PartDims part_dims(const ModelConfig& cfg, int64_t batch, int64_t seq, int64_t mlp_chunk,
                   int64_t head_chunk, TpGroup* tp) {
  const int64_t n = tp ? tp->size() : 1;
  PartDims d;
  d.batch = batch;
  d.seq = seq;
  d.tokens = batch * seq;
  check_tensor_parallel(cfg, static_cast<int>(n), d.tokens);
  d.hidden = cfg.hidden;
  d.heads = cfg.heads / n;
  d.kv_heads = cfg.kv_heads / n;
  d.head_dim = cfg.head_dim();
  d.attn = d.heads * d.head_dim;
  d.kv = d.kv_heads * d.head_dim;
  d.qkv = d.attn + 2 * d.kv;
  d.ffn = cfg.intermediate / n;
  d.vocab = cfg.vocab / n;
  d.slice = {(tp ? tp->rank() : 0) * d.vocab, d.vocab, cfg.vocab};
  d.rows = d.tokens / n;
  d.row0 = tp ? tp->rank() * d.rows : 0;
  d.tp = n > 1 ? tp : nullptr;
  d.rms_eps = cfg.rms_eps;
  d.rope_theta = cfg.rope_theta;
  d.mlp_chunk = mlp_chunk > 0 ? std::min(mlp_chunk, d.tokens) : d.tokens;
  d.head_chunk = head_chunk > 0 ? std::min(head_chunk, d.tokens) : d.tokens;
  return d;
}

// ---- embed ----------------------------------------------------------------------------------

void embed_forward(Backend& be, const PartDims& d, const int32_t* tokens, ConstDataPtr table,
                   DataPtr x) {
  if (!d.tp) {
    be.kernels().embedding_forward(x, tokens, table, d.tokens, d.hidden);
    return;
  }
  // Each token's row is in one slice; the other ranks add zeros, so the sum is exact.
  const DataPtr part = partial_rows(d, x, d.hidden, 0);
  be.kernels().vocab_embedding_forward(part, tokens, table, d.slice, d.tokens, d.hidden);
  sum_rows(d, part, x, d.hidden, "X:1");
}

void embed_backward_weight(Backend& be, const PartDims& d, const int32_t* tokens, ConstDataPtr dx,
                           DataPtr dtable) {
  if (!d.tp) {
    be.kernels().embedding_backward(dtable, tokens, dx, d.tokens, d.hidden);
    return;
  }
  be.kernels().vocab_embedding_backward(dtable, tokens, gather_rows(d, dx, d.hidden, 0, "dX:1"),
                                        d.slice, d.tokens, d.hidden);
}

// ---- pre:l ----------------------------------------------------------------------------------

void pre_forward(Backend& be, const PartDims& d, const PreWeights& w, ConstDataPtr x, DataPtr a,
                 DataPtr rstd1, DataPtr qkv, DataPtr w_out) {
  Kernels& k = be.kernels();
  const int64_t T = d.tokens, h = d.hidden, q = d.qkv;
  k.rmsnorm_forward(a, rstd1, x, w.norm1, d.rows, h, d.rms_eps);
  if (qkv) k.gemm(false, true, T, q, h, 1.0, gather_rows(d, a, h, 0, "A"), h, w.wqkv, h, 0.0, qkv, q);
  if (w_out) copy_elems(be, w_out, w.wqkv, q * h);
}

void pre_backward_input(Backend& be, const PartDims& d, const PreWeights& w, ConstDataPtr x,
                        ConstDataPtr rstd1, ConstDataPtr da, ConstDataPtr dqkv, DataPtr da_ws,
                        ConstDataPtr dr, DataPtr dx, DataPtr g_norm1) {
  Kernels& k = be.kernels();
  const int64_t T = d.tokens, h = d.hidden, q = d.qkv;
  if (dqkv) {
    const DataPtr part = partial_rows(d, da_ws, h, 0);
    k.gemm(false, false, T, h, q, 1.0, dqkv, q, w.wqkv, h, 0.0, part, h);
    sum_rows(d, part, da_ws, h, "dA");
    da = da_ws;
  }
  copy_elems(be, dx, dr, d.rows * h);
  k.rmsnorm_backward(dx, g_norm1, da, x, w.norm1, rstd1, d.rows, h, true);
}

// ---- the W_qkv gradient -----------------------------------------------------------------------

void wqkv_grad(Backend& be, const PartDims& d, ConstDataPtr dqkv, ConstDataPtr a, DataPtr dw) {
  const int64_t h = d.hidden, q = d.qkv;
  be.kernels().gemm(true, false, q, h, d.tokens, 1.0, dqkv, q, gather_rows(d, a, h, 0, "A"), h, 0.0,
                    dw, h);
}

void add_wqkv_grad(Backend& be, const PartDims& d, ConstDataPtr dw, DataPtr g_wqkv) {
  be.kernels().axpy(g_wqkv, dw, 1.0, d.qkv * d.hidden);
}

void wqkv_backward_weight(Backend& be, const PartDims& d, ConstDataPtr dqkv, ConstDataPtr a,
                          DataPtr g_wqkv, DataPtr dw_ws) {
  wqkv_grad(be, d, dqkv, a, dw_ws);
  add_wqkv_grad(be, d, dw_ws, g_wqkv);
}

// ---- attn:l ---------------------------------------------------------------------------------

void attn_qkv(Backend& be, const PartDims& d, ConstDataPtr a, ConstDataPtr w, ConstDataPtr qkv,
              DataPtr qkvr) {
  const int64_t T = d.tokens, h = d.hidden, q = d.qkv;
  if (qkv) {
    copy_elems(be, qkvr, qkv, T * q);
  } else {
    be.kernels().gemm(false, true, T, q, h, 1.0, gather_rows(d, a, h, 0, "A"), h, w, h, 0.0, qkvr,
                      q);
  }
  rope_qk(be, d, qkvr, false);
}

void attn_forward(Backend& be, const PartDims& d, ConstDataPtr qkvr, DataPtr o, DataPtr lse) {
  const int64_t a = d.attn, kv = d.kv;
  be.kernels().attention_forward(d.attn_shape(), qkvr, qkvr.at(a), qkvr.at(a + kv), o, lse);
}

void attn_backward_input(Backend& be, const PartDims& d, ConstDataPtr qkvr, ConstDataPtr o,
                         ConstDataPtr dout, ConstDataPtr lse, DataPtr dqkv, ConstDataPtr w,
                         DataPtr da) {
  Kernels& k = be.kernels();
  const int64_t T = d.tokens, h = d.hidden, a = d.attn, kv = d.kv, q = d.qkv;
  k.attention_backward(d.attn_shape(), qkvr, qkvr.at(a), qkvr.at(a + kv), o, dout, lse, dqkv,
                       dqkv.at(a), dqkv.at(a + kv));
  rope_qk(be, d, dqkv, true);
  if (w) {
    const DataPtr part = partial_rows(d, da, h, 0);
    k.gemm(false, false, T, h, q, 1.0, dqkv, q, w, h, 0.0, part, h);
    sum_rows(d, part, da, h, "dA");
  }
}

// ---- post:l ---------------------------------------------------------------------------------

void post_forward(Backend& be, const PartDims& d, const PostWeights& w, const PostForward& t,
                  const PostWorkspace& ws) {
  Kernels& k = be.kernels();
  const int64_t T = d.tokens, R = d.rows, h = d.hidden, a = d.attn, f = d.ffn, C = d.mlp_chunk;
  if (d.tp) {  // Y = X + the group's sum of O W_o^T (row-parallel W_o)
    const DataPtr part = partial_rows(d, t.y, h, 1);
    k.gemm(false, true, T, h, a, 1.0, t.o, a, w.wo, a, 0.0, part, h);
    sum_rows(d, part, t.y, h, "Y");
    k.axpy(t.y, t.x, 1.0, R * h);
  } else {
    copy_elems(be, t.y, t.x, T * h);
    k.gemm(false, true, T, h, a, 1.0, t.o, a, w.wo, a, 1.0, t.y, h);
  }
  k.rmsnorm_forward(t.z, t.rstd2, t.y, w.norm2, R, h, d.rms_eps);
  const ConstDataPtr z = gather_rows(d, t.z, h, 0, "Z");
  // With a group, down's products of all T rows go to staging and are summed after the loop.
  const DataPtr down_part = t.xo && d.tp ? partial_rows(d, t.xo, h, 1) : DataPtr();
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    const DataPtr gc = t.g ? t.g.at(c0 * f) : ws.g;
    const DataPtr uc = t.u ? t.u.at(c0 * f) : ws.u;
    k.gemm(false, true, n, f, h, 1.0, z.at(c0 * h), h, w.gate, h, 0.0, gc, f);
    k.gemm(false, true, n, f, h, 1.0, z.at(c0 * h), h, w.up, h, 0.0, uc, f);
    if (!t.xo) continue;
    k.swiglu_forward(ws.h, gc, uc, n * f);
    if (d.tp) {
      k.gemm(false, true, n, h, f, 1.0, ws.h, f, w.down, f, 0.0, down_part.at(c0 * h), h);
      continue;
    }
    copy_elems(be, t.xo.at(c0 * h), t.y.at(c0 * h), n * h);
    k.gemm(false, true, n, h, f, 1.0, ws.h, f, w.down, f, 1.0, t.xo.at(c0 * h), h);
  }
  if (down_part) {  // X:l+1 = Y + the group's sum of H W_down^T (row-parallel down)
    sum_rows(d, down_part, t.xo, h, "X");
    k.axpy(t.xo, t.y, 1.0, R * h);
  }
}

namespace {

// One chunk's weight gradients: dW_down += dX'^T H, dW_gate += dG^T Z, dW_up += dU^T Z.
void post_weight_chunk(Kernels& k, const PartDims& d, int64_t n, ConstDataPtr dxo, ConstDataPtr hc,
                       ConstDataPtr dgc, ConstDataPtr duc, ConstDataPtr zc, const PostGrads& wg) {
  const int64_t h = d.hidden, f = d.ffn;
  k.gemm(true, false, h, f, n, 1.0, dxo, h, hc, f, 1.0, wg.down, f);
  k.gemm(true, false, f, h, n, 1.0, dgc, f, zc, h, 1.0, wg.gate, h);
  k.gemm(true, false, f, h, n, 1.0, duc, f, zc, h, 1.0, wg.up, h);
}

}  // namespace

void post_backward_input(Backend& be, const PartDims& d, const PostWeights& w, DataPtr g_norm2,
                         const PostBackward& t, const PostGrads* wg, const PostWorkspace& ws) {
  Kernels& k = be.kernels();
  const int64_t T = d.tokens, R = d.rows, h = d.hidden, a = d.attn, f = d.ffn, C = d.mlp_chunk;
  const ConstDataPtr dxo = gather_rows(d, t.dxo, h, 0, "dX");
  const ConstDataPtr z = gather_rows(d, t.z, h, 1, "Z");
  const DataPtr dz_part = partial_rows(d, ws.dz, h, 2);  // dZ of all T rows, summed after
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    const ConstDataPtr zc = z.at(c0 * h);
    ConstDataPtr gc = t.g ? t.g.at(c0 * f) : ConstDataPtr();
    ConstDataPtr uc = t.u ? t.u.at(c0 * f) : ConstDataPtr();
    if (!gc) {
      k.gemm(false, true, n, f, h, 1.0, zc, h, w.gate, h, 0.0, ws.g, f);
      gc = ws.g;
    }
    if (!uc) {
      k.gemm(false, true, n, f, h, 1.0, zc, h, w.up, h, 0.0, ws.u, f);
      uc = ws.u;
    }
    const DataPtr hc = t.h ? t.h.at(c0 * f) : ws.h;
    k.swiglu_forward(hc, gc, uc, n * f);
    k.gemm(false, false, n, f, h, 1.0, dxo.at(c0 * h), h, w.down, f, 0.0, ws.dh, f);
    const DataPtr dgc = t.dg ? t.dg.at(c0 * f) : ws.dg;
    const DataPtr duc = t.du ? t.du.at(c0 * f) : ws.du;
    k.swiglu_backward(dgc, duc, ws.dh, gc, uc, n * f);
    k.gemm(false, false, n, h, f, 1.0, dgc, f, w.gate, h, 0.0, dz_part.at(c0 * h), h);
    k.gemm(false, false, n, h, f, 1.0, duc, f, w.up, h, 1.0, dz_part.at(c0 * h), h);
    if (wg) post_weight_chunk(k, d, n, dxo.at(c0 * h), hc, dgc, duc, zc, *wg);
  }
  sum_rows(d, dz_part, ws.dz, h, "dZ");
  copy_elems(be, t.dr, t.dxo, R * h);
  k.rmsnorm_backward(t.dr, g_norm2, ws.dz, t.y, w.norm2, t.rstd2, R, h, true);
  const ConstDataPtr dr = gather_rows(d, t.dr, h, 0, "dR");
  k.gemm(false, false, T, a, h, 1.0, dr, h, w.wo, a, 0.0, t.dout, a);
  if (wg) k.gemm(true, false, h, a, T, 1.0, dr, h, t.o, a, 1.0, wg->wo, a);
}

void post_backward_weight(Backend& be, const PartDims& d, const PostBackward& t,
                          const PostGrads& wg) {
  Kernels& k = be.kernels();
  const int64_t T = d.tokens, h = d.hidden, a = d.attn, f = d.ffn, C = d.mlp_chunk;
  const ConstDataPtr dxo = gather_rows(d, t.dxo, h, 0, "dX");
  const ConstDataPtr z = gather_rows(d, t.z, h, 1, "Z");
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    post_weight_chunk(k, d, n, dxo.at(c0 * h), t.h.at(c0 * f), t.dg.at(c0 * f), t.du.at(c0 * f),
                      z.at(c0 * h), wg);
  }
  k.gemm(true, false, h, a, T, 1.0, gather_rows(d, t.dr, h, 2, "dR"), h, t.o, a, 1.0, wg.wo, a);
}

// ---- head -----------------------------------------------------------------------------------

namespace {

// lsece (n) and loss_sum of n rows of a slice's logits: each rank's (lse, target logit) per row,
// gathered over the group and combined in rank order (the same bits on every rank).
void vocab_parallel_loss(Kernels& k, const PartDims& d, ConstDataPtr logits, const int32_t* targets,
                         int64_t n, DataPtr lsece, DataPtr loss_sum) {
  const DataPtr mine = d.tp->staging(1, lsece.dtype, 2 * n);
  const DataPtr all = d.tp->staging(2, lsece.dtype, 2 * n * d.tp->size());
  k.vocab_cross_entropy_stats(logits, d.vocab, targets, d.slice, n, mine);
  d.tp->all_gather(mine, all, 2 * n, "all-gather of the loss statistics");
  k.vocab_cross_entropy_combine(all, d.tp->size(), n, lsece, loss_sum);
}

}  // namespace

void head_forward(Backend& be, const PartDims& d, const HeadWeights& w, ConstDataPtr x,
                  DataPtr rstdf, DataPtr zf, const int32_t* targets, DataPtr lsece,
                  DataPtr loss_sum, DataPtr logits_ws, const LogitsSink& sink) {
  Kernels& k = be.kernels();
  const int64_t T = d.tokens, h = d.hidden, V = d.vocab, C = d.head_chunk;
  k.rmsnorm_forward(zf, rstdf, x, w.final_norm, d.rows, h, d.rms_eps);
  const ConstDataPtr z = gather_rows(d, zf, h, 0, "Zf");
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    k.gemm(false, true, n, V, h, 1.0, z.at(c0 * h), h, w.lm_head, h, 0.0, logits_ws, V);
    if (sink) sink(logits_ws, c0, n);
    if (!targets) continue;
    if (d.tp)
      vocab_parallel_loss(k, d, logits_ws, targets + c0, n, lsece.at(c0), loss_sum);
    else
      k.cross_entropy_forward(logits_ws, V, targets + c0, n, V, lsece.at(c0), loss_sum);
  }
}

void head_backward_input(Backend& be, const PartDims& d, const HeadWeights& w, DataPtr g_final_norm,
                         const HeadBackward& t, DataPtr g_lm, const HeadWorkspace& ws) {
  Kernels& k = be.kernels();
  const int64_t T = d.tokens, h = d.hidden, V = d.vocab, C = d.head_chunk;
  k.rmsnorm_forward(t.zf, ws.rstd, t.x, w.final_norm, d.rows, h, d.rms_eps);
  const ConstDataPtr z = gather_rows(d, t.zf, h, 0, "Zf");
  const DataPtr dz_part = partial_rows(d, ws.dzf, h, 1);  // dZf of all T rows, summed after
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    const DataPtr dl = t.dlogits ? t.dlogits.at(c0 * V) : ws.logits;
    k.gemm(false, true, n, V, h, 1.0, z.at(c0 * h), h, w.lm_head, h, 0.0, dl, V);
    if (d.tp)
      k.vocab_cross_entropy_backward(dl, dl, V, t.lsece.at(c0), t.targets + c0, d.slice, n,
                                     t.scale);
    else
      k.cross_entropy_backward(dl, dl, V, t.lsece.at(c0), t.targets + c0, n, V, t.scale);
    k.gemm(false, false, n, h, V, 1.0, dl, V, w.lm_head, h, 0.0, dz_part.at(c0 * h), h);
    if (g_lm) k.gemm(true, false, V, h, n, 1.0, dl, V, z.at(c0 * h), h, 1.0, g_lm, h);
  }
  sum_rows(d, dz_part, ws.dzf, h, "dZf");
  k.rmsnorm_backward(t.dx, g_final_norm, ws.dzf, t.x, w.final_norm, t.rstdf, d.rows, h, false);
}

void head_backward_weight(Backend& be, const PartDims& d, ConstDataPtr dlogits, ConstDataPtr zf,
                          DataPtr g_lm) {
  Kernels& k = be.kernels();
  const int64_t T = d.tokens, h = d.hidden, V = d.vocab, C = d.head_chunk;
  const ConstDataPtr z = gather_rows(d, zf, h, 0, "Zf");
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    k.gemm(true, false, V, h, n, 1.0, dlogits.at(c0 * V), V, z.at(c0 * h), h, 1.0, g_lm, h);
  }
}

}  // namespace hp

// The transformer, part by part: forward, backward-for-inputs and backward-for-weights of embed,
// pre:l (RMSNorm1 + QKV), attn:l (rotary + causal attention), post:l (W_o, residual, RMSNorm2,
// SwiGLU MLP in row chunks, residual) and head (final RMSNorm, LM head, cross-entropy), as plain
// functions over a backend's kernels with every input, output and workspace explicit. Which
// values a part keeps, receives or ships, and what is recomputed, is the op runner's business
// (model.cc); docs/model.md explains the parts.
//
// Shapes: T = batch*seq tokens of one micro-batch, h hidden, kv = kv_heads*head_dim, q = h + 2kv,
// f = ffn, V = vocab, C = rows per chunk. Every activation matrix is token-major (one row per
// token). Types (docs/precision.md): [c] compute (activations, their gradients, the weights parts
// read), [m] master (weight gradients, accumulated with +=), [s] stats (per-row statistics),
// tokens int32. All pointers are the backend's memory; nothing here reads it on the host.
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/backend.h"
#include "util/model_config.h"

namespace hp {

class TpGroup;

// With tensor parallelism (tensor_parallel.h; docs/tensor-parallel.md) the dimensions are one
// rank's: heads, kv_heads, kv, qkv, attn, ffn and vocab are the rank's share (vocab: the ids of
// `slice`), and the values between the norms and the residuals hold `rows` of the T token rows,
// starting at row0; X, A, Y, Z, Zf and their gradients are (rows, h) then, the per-row statistics
// (rows), and the parts gather the rows before a column-parallel GEMM and sum-scatter them after a
// row-parallel one. The embedding and the LM head are vocabulary-parallel: embed sums the group's
// lookups into the rank's rows, the head computes the logits of all T rows over its slice and the
// loss from the group's per-slice statistics. Without a group rows = T, row0 = 0, attn = h and
// the slice is the whole vocabulary.
struct PartDims {
  int64_t tokens = 1, batch = 1, seq = 1;  // T = batch * seq
  int64_t hidden = 1, kv = 1, qkv = 1, ffn = 1, vocab = 1;
  int64_t heads = 1, kv_heads = 1, head_dim = 1;
  int64_t attn = 1;                        // heads * head_dim: columns of O, of W_o
  int64_t rows = 1, row0 = 0;              // this rank's token rows of the sequence-split values
  VocabSlice slice;                        // this rank's ids of the embedding and the LM head
  TpGroup* tp = nullptr;
  double rms_eps = 1e-5, rope_theta = 10000;
  int64_t mlp_chunk = 1, head_chunk = 1;  // rows per chunk of the MLP / of the logits (of T)
  AttnShape attn_shape() const;
};
// mlp_chunk / head_chunk 0 mean one chunk of all rows. With `tp`, the dimensions of its rank.
PartDims part_dims(const ModelConfig& cfg, int64_t batch, int64_t seq, int64_t mlp_chunk,
                   int64_t head_chunk, TpGroup* tp = nullptr);

// ---- embed ----------------------------------------------------------------------------------
// X (T,h) [c] = table (V,h) [c] rows of tokens (T). With a group: the rank's rows of the group's
// sum of slice lookups (one reduce-scatter).
void embed_forward(Backend& be, const PartDims& d, const int32_t* tokens, ConstDataPtr table,
                   DataPtr x);
// dtable (V,h) [m] += dX (T,h) [c] scattered to the rows of tokens (T), in token order. With a
// group: dX gathered, the slice's rows only.
void embed_backward_weight(Backend& be, const PartDims& d, const int32_t* tokens, ConstDataPtr dx,
                           DataPtr dtable);

// ---- pre:l ----------------------------------------------------------------------------------
struct PreWeights {
  ConstDataPtr norm1;  // (h) [c]
  ConstDataPtr wqkv;   // (q,h) [c]: q_proj | k_proj | v_proj rows
};
// A (T,h) [c] = RMSNorm1(X (T,h) [c]), rstd1 (T) [s]. Optional outputs: qkv (T,q) [c] = A W_qkv^T
// (activations mode); w_out (q,h) [c] = a copy of W_qkv to ship (weights mode, attention remote).
void pre_forward(Backend& be, const PartDims& d, const PreWeights& w, ConstDataPtr x, DataPtr a,
                 DataPtr rstd1, DataPtr qkv, DataPtr w_out);
// dX (T,h) [c] = dR (T,h) [c] + RMSNorm1'(dA); g_norm1 (h) [m] +=. dA (T,h) [c] is given (weights
// mode: from attn), or formed from dqkv (T,q) [c] as dQKV W_qkv in da_ws (T,h) [c].
void pre_backward_input(Backend& be, const PartDims& d, const PreWeights& w, ConstDataPtr x,
                        ConstDataPtr rstd1, ConstDataPtr da, ConstDataPtr dqkv, DataPtr da_ws,
                        ConstDataPtr dr, DataPtr dx, DataPtr g_norm1);

// ---- the W_qkv gradient (pre:l's in activations mode, attn:l's in weights mode) ------------
// dW (q,h) [m] = dQKV (T,q) [c]^T A (T,h) [c] of one micro-batch (overwritten: to be shipped).
void wqkv_grad(Backend& be, const PartDims& d, ConstDataPtr dqkv, ConstDataPtr a, DataPtr dw);
// g_wqkv (q,h) [m] += dW (q,h) [m] (a micro-batch's gradient, formed here or received).
void add_wqkv_grad(Backend& be, const PartDims& d, ConstDataPtr dw, DataPtr g_wqkv);
// g_wqkv += dQKV^T A through dw_ws (q,h) [m]: bitwise the same as wqkv_grad on another stage
// followed by add_wqkv_grad of the shipped dW.
void wqkv_backward_weight(Backend& be, const PartDims& d, ConstDataPtr dqkv, ConstDataPtr a,
                          DataPtr g_wqkv, DataPtr dw_ws);

// ---- attn:l ---------------------------------------------------------------------------------
// QKVr (T,q) [c] = rotary(A (T,h) [c] W (q,h)^T), or rotary(QKV (T,q) [c]) when qkv is given
// (activations mode; then a and w are unused).
void attn_qkv(Backend& be, const PartDims& d, ConstDataPtr a, ConstDataPtr w, ConstDataPtr qkv,
              DataPtr qkvr);
// O (T,h) [c] and lse (heads,T) [s] = causal attention over QKVr (T,q) [c].
void attn_forward(Backend& be, const PartDims& d, ConstDataPtr qkvr, DataPtr o, DataPtr lse);
// dQKV (T,q) [c] = inverse rotary of the attention backward from dO (T,h) [c] (with QKVr, O (T,h)
// [c], lse (heads,T) [s] of the forward); with w (q,h) [c] given (weights mode) also
// dA (T,h) [c] = dQKV W.
void attn_backward_input(Backend& be, const PartDims& d, ConstDataPtr qkvr, ConstDataPtr o,
                         ConstDataPtr dout, ConstDataPtr lse, DataPtr dqkv, ConstDataPtr w,
                         DataPtr da);

// ---- post:l ---------------------------------------------------------------------------------
struct PostWeights {
  ConstDataPtr wo;     // (h,h) [c]
  ConstDataPtr norm2;  // (h) [c]
  ConstDataPtr gate;   // (f,h) [c]
  ConstDataPtr up;     // (f,h) [c]
  ConstDataPtr down;   // (h,f) [c]
};
struct PostGrads {  // [m], accumulated
  DataPtr wo, norm2, gate, up, down;
};
// Per-chunk scratch: g, u, h, dh, dg, du (C,f) [c] each; dz (T,h) [c].
struct PostWorkspace {
  DataPtr g, u, h, dh, dg, du, dz;
};
struct PostForward {
  ConstDataPtr x, o;    // inputs X:l, O:l (T,h) [c]
  DataPtr y, rstd2, z;  // Y (T,h) [c], rstd2 (T) [s], Z (T,h) [c]
  DataPtr g, u;         // G, U (T,f) [c] kept whole, or null: per chunk in the workspace
  DataPtr xo;           // X:l+1 (T,h) [c], or null: stop after G and U
};
// Y = O W_o^T + X; Z = RMSNorm2(Y); per chunk of C rows G = Z W_gate^T, U = Z W_up^T,
// H = silu(G) U, X:l+1 = Y + H W_down^T.
void post_forward(Backend& be, const PartDims& d, const PostWeights& w, const PostForward& t,
                  const PostWorkspace& ws);
struct PostBackward {
  ConstDataPtr dxo;          // dX:l+1 (T,h) [c]
  ConstDataPtr y, z, rstd2;  // of the forward
  ConstDataPtr g, u;         // G, U (T,f) [c] when kept, else null: recomputed per chunk from Z
  ConstDataPtr o;            // O:l (T,h) [c], for dW_o
  DataPtr dr, dout;          // dR:l = dY (T,h) [c], dO:l (T,h) [c]
  DataPtr h, dg, du;         // H, dG, dU (T,f) [c] kept whole for post_backward_weight, or null
};
// Per chunk: H = silu(G) U, dH = dX:l+1 W_down, dG, dU = SwiGLU'(dH), dZ = dG W_gate + dU W_up;
// then dY = dX:l+1 + RMSNorm2'(dZ) (g_norm2 [m] +=), dO = dY W_o. With `wg` (a B op) the weight
// gradients accumulate chunk by chunk as post_backward_weight forms them; without (an I op) H, dG
// and dU go whole to t.h, t.dg, t.du instead.
void post_backward_input(Backend& be, const PartDims& d, const PostWeights& w, DataPtr g_norm2,
                         const PostBackward& t, const PostGrads* wg, const PostWorkspace& ws);
// The weight gradients from H, dG, dU (T,f) [c], Z, dX:l+1, dR = dY and O (T,h) [c]: per chunk
// dW_down += dX:l+1^T H, dW_gate += dG^T Z, dW_up += dU^T Z (the chunks of the backward, so the
// sums are bitwise those of a B op), then dW_o += dY^T O.
void post_backward_weight(Backend& be, const PartDims& d, const PostBackward& t,
                          const PostGrads& wg);

// ---- head -----------------------------------------------------------------------------------
struct HeadWeights {
  ConstDataPtr final_norm;  // (h) [c]
  ConstDataPtr lm_head;     // (V,h) [c] (the embedding table when tied)
};
// Sees each chunk of logits (rows, V) [c] that starts at token row0.
using LogitsSink = std::function<void(ConstDataPtr logits, int64_t row0, int64_t rows)>;
// Zf (T,h) [c] = RMSNorm_f(X:L+1 (T,h) [c]) in zf, rstdf (T) [s]; per chunk of C rows
// logits (C,V) [c] = Zf W_lm^T in logits_ws. With targets (T): lsece (T) [s] = logsumexp(logits)
// and loss_sum (one f64) += sum over the rows of lsece - logits[target]. sink (optional) sees
// every chunk's logits. With a group: Zf and rstdf are the rank's rows, Zf is gathered, the logits
// are the slice's columns, lsece and loss_sum come from the group's per-slice statistics (one
// all-gather per chunk) and are the whole loss's on every rank.
void head_forward(Backend& be, const PartDims& d, const HeadWeights& w, ConstDataPtr x,
                  DataPtr rstdf, DataPtr zf, const int32_t* targets, DataPtr lsece,
                  DataPtr loss_sum, DataPtr logits_ws, const LogitsSink& sink);
struct HeadBackward {
  ConstDataPtr x;          // X:L+1 (T,h) [c]
  ConstDataPtr rstdf;      // (T) [s] of the forward
  ConstDataPtr lsece;      // (T) [s] of the forward
  const int32_t* targets;  // (T)
  double scale;            // the loss scale (1 / tokens of the step)
  DataPtr zf;              // Zf (T,h) [c], recomputed here (workspace, or kept for the weights)
  DataPtr dlogits;         // (T,V) [c] kept whole for head_backward_weight, or null: per chunk
  DataPtr dx;              // dX:L+1 (T,h) [c]
};
// Scratch: logits (C,V) [c], rstd (T) [s], dzf (T,h) [c].
struct HeadWorkspace {
  DataPtr logits, rstd, dzf;
};
// Zf again from X:L+1; per chunk logits again, dlogits = (softmax - onehot(target)) * scale,
// dZf = dlogits W_lm, and with g_lm (a B op) dW_lm (V,h) [m] += dlogits^T Zf; then
// dX:L+1 = RMSNorm_f'(dZf), g_final_norm (h) [m] +=. With a group Zf is gathered and dZf's
// partial sums over the slices are reduce-scattered to the rank's rows.
void head_backward_input(Backend& be, const PartDims& d, const HeadWeights& w, DataPtr g_final_norm,
                         const HeadBackward& t, DataPtr g_lm, const HeadWorkspace& ws);
// dW_lm (V,h) [m] += dlogits (T,V) [c]^T Zf (T,h) [c], chunk by chunk as the backward.
void head_backward_weight(Backend& be, const PartDims& d, ConstDataPtr dlogits, ConstDataPtr zf,
                          DataPtr g_lm);

}  // namespace hp

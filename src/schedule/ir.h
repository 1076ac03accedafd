// The schedule IR: what every stage runs, in order, as plain data. A generator emits compute ops;
// lower() adds the communication ops (start/wait pairs) and the messages they move.
// Nothing here knows about MPI, BLAS or timing.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hp {

// ---- Model parts -------------------------------------------------------------------------------
// Layer l (1..L) is cut into pre (RMSNorm1 [+ W_qkv in activations mode]), attn (QKV projection in
// weights mode, rotary, causal attention) and post (W_o, residual, RMSNorm2, SwiGLU MLP, residual).
enum class PartKind : uint8_t { kEmbed, kPre, kAttn, kPost, kHead };
const char* part_kind_str(PartKind k);  // "embed", "pre", "attn", "post", "head"

struct Part {
  PartKind kind = PartKind::kEmbed;
  int layer = 0;  // 1..L for pre/attn/post; 0 for embed and head

  static Part embed() { return {PartKind::kEmbed, 0}; }
  static Part pre(int l) { return {PartKind::kPre, l}; }
  static Part attn(int l) { return {PartKind::kAttn, l}; }
  static Part post(int l) { return {PartKind::kPost, l}; }
  static Part head() { return {PartKind::kHead, 0}; }

  // Position in model order, independent of L: embed 0, pre:l 3l-2, attn:l 3l-1, post:l 3l,
  // head INT_MAX. Parts compare by this key.
  int order_key() const;
  // Dense index 0..3L+1 in model order (head = 3L+1) and its inverse.
  int index(int layers) const { return kind == PartKind::kHead ? 3 * layers + 1 : order_key(); }
  static Part from_index(int index, int layers);

  bool has_params() const { return kind != PartKind::kAttn; }
  std::string str() const;  // "embed", "pre:3", "attn:3", "post:3", "head"
  // Parses str()'s form; throws hp::Error saying what is wrong (layer range checked when layers > 0).
  static Part parse(std::string_view text, int layers = 0);

  friend bool operator==(const Part& a, const Part& b) { return a.kind == b.kind && a.layer == b.layer; }
  friend bool operator<(const Part& a, const Part& b) { return a.order_key() < b.order_key(); }
};

// ---- Ops -----------------------------------------------------------------------------------------
// F forward; B full backward (= I then W, back to back); I backward for inputs only;
// W backward for weights only (ZB1P defers it to fill the bubble).
enum class Dir : uint8_t { kF, kB, kI, kW };
const char* dir_str(Dir d);             // "F", "B", "I", "W"
Dir parse_dir(std::string_view text);   // throws

// The directions a part's work splits into when costed or timed: F, I and W (B = I + W).
inline constexpr Dir kPartDirs[] = {Dir::kF, Dir::kI, Dir::kW};
inline constexpr PartKind kPartKinds[] = {PartKind::kEmbed, PartKind::kPre, PartKind::kAttn,
                                          PartKind::kPost, PartKind::kHead};

// One number per part kind and direction (seconds, FLOPs, a spread), read and written by name:
// at(PartKind::kAttn, Dir::kI). Reading B gives I + W; B cannot be written (set I and W).
class PartTable {
 public:
  double at(PartKind k, Dir d) const {
    const auto& r = v_[static_cast<size_t>(k)];
    return d == Dir::kB ? r[1] + r[2] : r[slot(d)];
  }
  double& at(PartKind k, Dir d) { return v_[static_cast<size_t>(k)][slot(d)]; }
  double total(PartKind k) const { return at(k, Dir::kF) + at(k, Dir::kB); }  // F + I + W
  PartTable& operator*=(double factor) {
    for (auto& r : v_)
      for (double& x : r) x *= factor;
    return *this;
  }

 private:
  static size_t slot(Dir d);  // F 0, I 1, W 2; B throws (a full backward is I + W)
  std::array<std::array<double, 3>, 5> v_{};
};

// none: keep every activation a backward needs. full: an op keeps only its inputs and recomputes
// its whole forward. no-attn (HelixPipe): like full, but attention keeps its output and
// log-sum-exp so core attention is never recomputed. Neither reruns the head: it keeps its two
// per-token statistics instead (recomputes()). selective (Megatron-LM's default selective
// granularity, which recomputes the attention core): the opposite of no-attn: attention keeps only
// its inputs and reruns its forward in the backward, every other part keeps what none keeps
// (see docs/memory.md).
enum class Recompute : uint8_t { kNone, kFull, kNoAttn, kSelective };
inline constexpr Recompute kAllRecompute[] = {Recompute::kNone, Recompute::kFull,
                                              Recompute::kNoAttn, Recompute::kSelective};
const char* recompute_str(Recompute r);  // "none", "full", "no-attn", "selective"
Recompute parse_recompute(std::string_view text);
std::vector<std::string> recompute_policy_names();  // of kAllRecompute, for flag checks
// Whether a backward under `policy` reruns the forward of a part of `kind` (recompute_parts).
bool recomputes(Recompute policy, PartKind kind);

// How attention reaches W_qkv when it runs away from pre(l)'s stage (docs/design.md section 6):
// weights = ship W_qkv with {A, R} and ship dW_qkv back; activations = pre(l) applies W_qkv and
// ships QKV + R.
enum class TransferMode : uint8_t { kWeights, kActivations };
const char* transfer_str(TransferMode t);  // "weights", "activations"
TransferMode parse_transfer(std::string_view text);

struct ComputeOp {
  Dir dir = Dir::kF;
  int mb = 0;
  // The parts it runs, in execution order: ascending model order for F, descending for B/I/W.
  // Always a contiguous run of the model order.
  std::vector<Part> parts;
  // B/I ops only: the parts whose forward is recomputed before the backward runs. Derived from the
  // schedule's policy by recompute_parts(); kept in the data so it is visible and checkable.
  std::vector<Part> recompute;
  int fold = 0;  // HelixPipe fold (0 elsewhere); informational, for timelines
};

// ---- Communication (added by lower()) ------------------------------------------------------------
// A message moves named values (see values.h) of one micro-batch from the op that produces them on
// `src` to the op that consumes them on `dst`.
struct Message {
  int id = 0;              // unique within the schedule: 0..messages.size()-1, in vector order
  // Sequence number on its ordered link (src, dst), in send order: unique per link and small
  // (a few hundred even for p=8, m=64, L=64), so it fits any MPI tag range (>= 32767). MPI
  // matches on (source, tag), so the runtime should use this as the tag (see lower.h).
  int tag = 0;
  int src = 0, dst = 0;    // stages
  int mb = 0;
  Dir dir = Dir::kF;       // kF: activations flowing forward; kB: gradients flowing backward
  Part from, to;           // producing part (on src) and consuming part (on dst)
  std::vector<std::string> values;  // e.g. {"A:3", "X:3", "W:3"}
  int64_t bytes = 0;       // 0 until sized for a model config
  int producer = 0;        // index into stages[src].ops
  int consumer = 0;        // index into stages[dst].ops
};

enum class OpKind : uint8_t { kCompute, kSendStart, kSendWait, kRecvStart, kRecvWait };
const char* op_kind_str(OpKind k);  // "compute", "send.start", "send.wait", "recv.start", "recv.wait"
// send.start and send.wait run on a message's source stage, recv.start and recv.wait on its
// destination (schedule/walker.h says what each means).
inline bool runs_on_sender(OpKind k) { return k == OpKind::kSendStart || k == OpKind::kSendWait; }

struct LoweredOp {
  OpKind kind = OpKind::kCompute;
  int index = 0;  // kCompute: index into Stage::ops; otherwise a Message id
};

struct Stage {
  std::vector<ComputeOp> ops;        // compute only, in execution order
  std::vector<LoweredOp> lowered;    // empty until lower() runs; every compute op appears once
};

struct Schedule {
  std::string name = "custom";  // generator name, or "custom" for a hand-written file
  int num_stages = 1;           // p
  int microbatches = 1;         // m
  int layers = 1;               // L
  int folds = 1;                // F (HelixPipe)
  int virtual_stages = 1;       // V (interleaved 1F1B)
  Recompute recompute = Recompute::kNone;
  // One policy per stage when stages differ (an AdaPipe plan, sim/adapipe.h); empty: `recompute`
  // on every stage. Whatever reads a stage's policy goes through policy_of().
  std::vector<Recompute> stage_recompute = {};
  TransferMode transfer = TransferMode::kWeights;
  std::vector<Stage> stages;      // size p
  std::vector<Message> messages;  // empty until lower() runs

  Recompute policy_of(int stage) const {
    return stage_recompute.empty() ? recompute : stage_recompute[static_cast<size_t>(stage)];
  }
  bool is_lowered() const { return !messages.empty() || (!stages.empty() && !stages[0].lowered.empty()); }
};

// The parts a B/I op recomputes under `policy`: none -> {}; full -> every part of the op;
// no-attn -> every part but attention. (Attention under no-attn recomputes its QKV projection and
// rotary internally; see docs/memory.md.)
std::vector<Part> recompute_parts(const ComputeOp& op, Recompute policy);

// How Model::run (src/model/model.cc) replays part number `i` of op.recompute before the op's
// backward; CostModel::op_time (src/sim/cost_model.h) charges the same.
//   keep_gu:    the first post of op.recompute (the last in model order) keeps its gate and up
//               values for the backward; every other recomputed post leaves them, so its backward
//               multiplies them out again.
//   read_later: something after it in the op reads its output: true for every part but the first
//               of op.recompute, and for the first too when it is a post and the op holds the head
//               (the head's backward reads the last post's output). A post whose output nothing
//               reads stops after its gate and up values.
struct RecomputeRun {
  bool keep_gu = false;
  bool read_later = false;
};
RecomputeRun recompute_run(const ComputeOp& op, size_t i);

// The schedule's policy as one word: recompute_str() of it when every stage follows the same one,
// else "mixed" (stage_recompute then says which).
std::string recompute_label(const Schedule& s);

// "F 3 embed pre:1" style, for messages and debugging (the file format lives in text_io.h).
std::string op_str(const ComputeOp& op);

}  // namespace hp

// The distributed executor: one pipeline stage runs its lowered program (schedule/lower.h) for one
// training step. The walker (schedule/walker.h) steps the program and decides what each op means;
// the executor is its transport: compute runs through a ComputeBackend, send.start packs the
// message's values and starts an isend, recv.start posts an irecv (early, where the lowering put
// it), the waits block in Comm::wait, a completed send frees its buffer and a completed receive
// unpacks into the store. Statistics, the timeline and the after-last-compute hook are observers.
// Message tags are the per-link sequence numbers lower() assigns (Message::tag), so they stay far
// below any MPI tag limit. Every wait carries a watchdog description naming the message, the op it
// feeds and the peer stage. Messages are bytes: the values packed back to back, each in its type
// (value_dtype), into a buffer of the store's backend memory with backend copies. The stash lives in the backend's ValueStore and follows the recompute
// policy exactly (the model marks it); its peak is reported per step and must equal the
// validator's prediction.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "model/model.h"
#include "model/value_store.h"
#include "schedule/ir.h"
#include "schedule/lower.h"
#include "schedule/timeline.h"
#include "schedule/walker.h"
#include "util/model_config.h"

namespace hp {

// What runs a compute op on this stage. The executor owns the communication, the backend the math.
class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;
  // Runs `op` with the contexts of its parts, reading/writing values in `store`. Returns the loss
  // share of the op (0 unless it runs the head forward).
  virtual double compute(const ComputeOp& op, const std::vector<PartContext>& ctx,
                         ValueStore& store) = 0;
};

// The real model as a backend: micro-batch mb's tokens come from batch_of(mb). compute() returns
// 0: the model adds each head op's loss into backend memory, and the caller reads the step's loss
// once with Model::take_loss() (DistStage does).
class ModelBackend : public ComputeBackend {
 public:
  ModelBackend(Model& model, std::function<Batch(int mb)> batch_of)
      : model_(model), batch_of_(std::move(batch_of)) {}
  double compute(const ComputeOp& op, const std::vector<PartContext>& ctx,
                 ValueStore& store) override {
    model_.run(op, ctx, store, batch_of_(op.mb));
    return 0;
  }

 private:
  Model& model_;
  std::function<Batch(int mb)> batch_of_;
};

// Per-step measurements of one stage.
struct StageStats {
  double total_s = 0;      // wall time of the step's op list
  double busy_s = 0;       // inside compute ops
  double comm_wait_s = 0;  // blocked in recv.wait / send.wait
  double bubble_fraction() const { return total_s > 0 ? 1.0 - busy_s / total_s : 0; }
  int64_t peak_stash_bytes = 0;  // measured between ops (validator's definition)
  int64_t peak_bytes = 0;        // everything in the store, incl. in-flight values
  int64_t bytes_sent = 0, bytes_received = 0;
  int messages_sent = 0, messages_received = 0;
  double loss_share = 0;  // sum of the compute ops' returns
};

struct ExecutorOptions {
  // Append events (compute, waits, sends, receives) to this timeline, with times relative to
  // `time_origin` (a steady-clock time in seconds from now_seconds(), util/timer.h); null: no
  // recording.
  Timeline* timeline = nullptr;
  double time_origin = 0;
};


// One stage of a lowered schedule over a pipeline comm whose rank r plays stage r.
class StageExecutor {
 public:
  // `sch` must be lowered with sizes for `cfg` and `tokens_per_mb` (lower(sch, &cfg, B*S)); the
  // executor checks this and that pipeline.size() == sch.num_stages. It keeps references.
  // With `tensor_parallel` = T > 1 this is one rank of a stage's tensor-parallel group: it sends
  // and receives its 1/T of every message (values.h value_elems with tp = T) to and from the
  // same-rank member of the neighbouring stages' groups (docs/tensor-parallel.md).
  StageExecutor(const Schedule& sch, int stage, Comm& pipeline, const ModelConfig& cfg,
                int64_t tokens_per_mb, int tensor_parallel = 1);
  StageExecutor(const StageExecutor&) = delete;
  StageExecutor& operator=(const StageExecutor&) = delete;

  // Runs this stage's op list once (one step). The store must be empty on entry and is empty on
  // return (anything left is a schedule/model bug and throws). `after_last_compute` (optional) runs
  // right after the stage's last compute op, before the trailing send.waits: the place to start
  // the gradient all-reduce so it overlaps the remaining communication.
  StageStats run(ComputeBackend& backend, ValueStore& store, const ExecutorOptions& opt = {},
                 const std::function<void()>& after_last_compute = {});

  int stage() const { return stage_; }
  const Schedule& schedule() const { return sch_; }

 private:
  class Link;  // the walker's transport over the comm (executor.cc)
  struct Pending {
    Request req;
    RawBuffer buf;  // packed values of the message, in the store's backend memory
  };
  std::string describe(const Message& m, bool send) const;
  // Message buffers: the values of message `m` packed one after another in Message::values order.
  void pack(const Message& m, const ValueStore& store, RawBuffer& buf) const;
  void unpack(const Message& m, const RawBuffer& buf, ValueStore& store) const;
  // Buffers are recycled across messages and steps (fresh memory is slow to touch): a completed
  // send or receive gives its buffer back, the next one takes the best fit.
  RawBuffer take_buffer(Backend& be, int64_t bytes);
  void give_buffer(RawBuffer&& buf);

  const Schedule& sch_;
  int stage_;
  Comm& comm_;
  ModelConfig cfg_;
  int64_t tokens_;
  ScheduleIndex index_;
  Walker walker_;  // this stage's program, matched by the comm
  // Per message id: its values, their sizes (elements) and the total, in Message::values order.
  std::vector<std::vector<Value>> values_;
  std::vector<std::vector<int64_t>> elems_;
  std::vector<int64_t> total_elems_;
  // Per message id: its bytes under the precision of the store being run (set by run()).
  std::vector<int64_t> bytes_;
  // Per message id of this stage: the watchdog descriptions of its send / its receive.
  std::vector<std::string> send_what_, recv_what_;
  std::vector<RawBuffer> spare_;
  std::vector<Pending> sends_, recvs_;  // indexed by message id (only this stage's are used)
  std::vector<PartContext> ctx_;        // the parts of the op being run
};

}  // namespace hp

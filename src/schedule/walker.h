// The walker: the one place that steps lowered programs (schedule/lower.h) and decides what
// compute, send.start, send.wait, recv.start and recv.wait mean. The validator, the simulator, the
// lowering's send-wait fix-up, the runtime executor and the test runners are configurations of it:
// a WalkTransport (what an op does and how long it takes) plus WalkObservers (what is checked or
// recorded). Not here: costs, MPI, the model, the contents of values.
//
// What the ops mean (every configuration):
//   - A stage runs its program in order. A stage whose `lowered` list is empty runs its compute ops
//     in order (a one-stage schedule need not be lowered).
//   - compute: the transport runs the op.
//   - send.start / recv.start post the send / the receive; neither blocks. Posting one twice is an
//     error.
//   - recv.wait with no earlier recv.start posts the receive right there, then waits (a blocking
//     receive; observers see a recv start at that point).
//   - send.wait with no earlier send.start is an error (there is nothing to wait for).
//   - a wait holds its stage until the transfer is complete; waiting twice is an error.
//   - a program that ends while a send or receive it posted was never waited for is an error (the
//     runtime could not free or read its buffer); under FIFO matching so is a message that is sent
//     but never received.
//
// Who decides when a transfer is complete (Matching):
//   - kRendezvous / kBuffered: the walker, over FIFO links. Every stage is walked in one global
//     order: stages 0..p-1 in turn, each until it blocks, round after round, until every stage has
//     finished or none can move (a deadlock: run() returns false and stuck() says why). On each
//     ordered pair (src, dst) transfers move in the order the sender starts them. A transfer moves
//     once it is sent (kBuffered: eager, the receiver only collects it) or once it is sent and its
//     receive is posted (kRendezvous: MPI's protocol for large messages), and every earlier
//     transfer on its link has moved. A send.wait or recv.wait completes once its transfer moved.
//     A program that finishes under rendezvous also finishes under buffered sends (transfers only
//     move earlier), so the checks use rendezvous.
//   - kByTransport: the transport; its waits return once the transfer is complete (they block).
//     The walked stages run one after another; the real executor walks its one stage.
// Where the send.waits sit is the lowering's choice: a send.wait before the sender's next compute
// op holds the stage until the receiver posts (under rendezvous), one after it lets the compute
// overlap the transfer. The walker runs the program as written; lower() moves a send.wait that
// would block forever (see lower.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "schedule/ir.h"

namespace hp {

enum class Matching : uint8_t { kRendezvous, kBuffered, kByTransport };

// When an op held its stage, on the transport's clock (0 where a configuration keeps no time).
struct OpTimes {
  double start = 0, end = 0;
};

// A transfer as the transport placed it (FIFO matching).
struct TransferTimes {
  double start = 0;    // the first byte leaves
  double sent = 0;     // the last byte has left (the send side is done)
  double arrival = 0;  // the last byte has arrived (the receive side is done)
  int64_t bytes = 0;   // as the transport counts them
};

// The clock and transport of a walk: what each step does and when. The walker decides when each
// is called; an implementation never looks at op kinds.
class WalkTransport {
 public:
  virtual ~WalkTransport() = default;
  // Runs compute op `op` (index into Stage::ops) of `stage`.
  virtual OpTimes compute(int stage, int op) = 0;
  // Posts the send / the receive of `m` (never blocks); returns the time it was posted.
  virtual double start_send(int stage, const Message& m) = 0;
  virtual double start_recv(int stage, const Message& m) = 0;
  // FIFO matching: the transfer of `m` moves now (called in the order the walk moves them).
  virtual TransferTimes transfer(const Message& m) { return {}; }
  // The waits, called once the transfer can complete (FIFO matching: it moved; kByTransport:
  // right away, and they return once it is complete). Return the interval the stage was held.
  virtual OpTimes wait_send(int stage, const Message& m) = 0;
  virtual OpTimes wait_recv(int stage, const Message& m) = 0;
  // After every op that ran (the runtime lets in-flight transfers progress here).
  virtual void after_op(int stage) {}
};

// Does nothing and keeps no time: for walks that only need the order of events.
class NullTransport : public WalkTransport {
 public:
  OpTimes compute(int, int) override { return {}; }
  double start_send(int, const Message&) override { return 0; }
  double start_recv(int, const Message&) override { return 0; }
  OpTimes wait_send(int, const Message&) override { return {}; }
  OpTimes wait_recv(int, const Message&) override { return {}; }
};

// Told what ran, after it ran. `posted` is when the matching start ran (the wait's own receive
// start for a recv.wait that posted it).
class WalkObserver {
 public:
  virtual ~WalkObserver() = default;
  virtual void on_compute(int stage, int op, const OpTimes& t) {}
  virtual void on_send_start(int stage, const Message& m, double posted) {}
  virtual void on_recv_start(int stage, const Message& m, double posted) {}
  virtual void on_send_wait(int stage, const Message& m, double posted, const OpTimes& t) {}
  virtual void on_recv_wait(int stage, const Message& m, double posted, const OpTimes& t) {}
  virtual void on_transfer(const Message& m, const TransferTimes& t) {}  // FIFO matching
};

// A stage that cannot go on: the wait it is held at and why.
struct StuckWait {
  enum class Why : uint8_t {
    kNotSent,    // recv.wait: the sender has not started the send
    kNotPosted,  // send.wait under rendezvous: the receiver has not posted the receive
    kQueued,     // an earlier transfer on the link has not moved
  };
  int stage = 0;
  size_t pos = 0;  // index into the stage's program
  LoweredOp op;
  int msg = 0;  // index into Schedule::messages
  Why why = Why::kQueued;
  int blocker = -1;  // kQueued: index of the message at the head of the link
};

class Walker {
 public:
  // Walks every stage of `s`. `who` starts every error message ("simulate", "validate"). Checks
  // the programs up front (compute ops in range; messages that exist, go between two stages and
  // belong to the stage that runs their op; under FIFO matching each sent exactly once) and throws
  // hp::Error naming the stage, the op and the message.
  Walker(const Schedule& s, Matching matching, std::string who);
  // Walks only `stage`, the transport matching its transfers (the runtime executor).
  Walker(const Schedule& s, int stage, std::string who);

  // Back to the start of every program (the state a new step starts from).
  void reset();
  // Walks until every walked stage has finished (true) or, under FIFO matching, every unfinished
  // stage is held at a wait whose transfer cannot move (false). A later call resumes; between
  // calls a program's waits may be moved (lower() defers send.waits that way), nothing else.
  // Throws hp::Error on a broken program (see the header comment).
  bool run(WalkTransport& transport, std::span<WalkObserver* const> observers = {});

  const Schedule& schedule() const { return s_; }
  Matching matching() const { return matching_; }
  size_t pc(int stage) const { return pc_[static_cast<size_t>(stage)]; }
  size_t program_size(int stage) const;
  LoweredOp op_at(int stage, size_t pos) const;  // a compute op for stages without a program
  int message_index(int id) const;               // index into Schedule::messages, -1 if none
  bool sent(int msg) const { return state_[static_cast<size_t>(msg)] & kSent; }
  bool posted(int msg) const { return state_[static_cast<size_t>(msg)] & kPosted; }

  // After run() returned false: each stuck stage, in stage order.
  std::vector<StuckWait> stuck() const;
  // The deadlock in words: a first line ("deadlock under blocking in-order execution: 2 of 2
  // stages can never finish"), then one line per stuck stage naming its op, the message, the op
  // that consumes it and what the transfer waits for.
  std::vector<std::string> deadlock_report() const;
  // A window of every stage's program around where it stands ('>>' marks it).
  std::string deadlock_grid() const;
  // "F0[embed..post:1]", "send.start#3>s1", "recv.wait#2<s1".
  std::string op_label(int stage, const LoweredOp& op) const;

 private:
  enum : uint8_t { kSent = 1, kPosted = 2, kMoved = 4, kSendWaited = 8, kRecvWaited = 16 };
  void index_messages();
  void check_programs();
  void build_links();
  bool step(int stage, WalkTransport& t, std::span<WalkObserver* const> obs);
  void start_send(int stage, int mi, WalkTransport& t, std::span<WalkObserver* const> obs);
  void start_recv(int stage, int mi, WalkTransport& t, std::span<WalkObserver* const> obs);
  bool wait_send(int stage, int mi, WalkTransport& t, std::span<WalkObserver* const> obs);
  bool wait_recv(int stage, int mi, WalkTransport& t, std::span<WalkObserver* const> obs);
  void advance_link(int link, WalkTransport& t, std::span<WalkObserver* const> obs);
  bool fifo() const { return matching_ != Matching::kByTransport; }
  void check_finished() const;
  [[noreturn]] void broken(int stage, int mi, const std::string& what) const;
  std::string stage_state(int stage) const;

  const Schedule& s_;
  Matching matching_;
  std::string who_;
  std::vector<int> stages_;  // the stages walked, ascending
  std::vector<size_t> pc_;   // per stage of the schedule
  // Message id -> index: a table when ids are small (lower() numbers them 0..N-1), else a map.
  std::vector<int> by_id_;
  std::unordered_map<int, int> by_id_sparse_;
  std::vector<uint8_t> state_;  // per message
  std::vector<double> send_posted_, recv_posted_;
  // FIFO matching: per ordered pair, its messages in send order and the first that has not moved.
  std::vector<std::vector<int>> links_;
  std::vector<size_t> link_head_;
  std::vector<int> link_of_;  // per message
};

// "message 2 (B0 pre:2 -> post:1, stage 1 -> 0)".
std::string message_label(const Message& m);
// "stage 0 op 3 (B 0 post:1 attn:1)" (without the op when it does not exist).
std::string compute_op_label(const Schedule& s, int stage, int op);

}  // namespace hp

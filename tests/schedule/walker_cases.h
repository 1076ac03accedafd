// The walker's edge cases as lowered programs, each a real lowered schedule (so the validator, the
// simulator and the model can run it too) with its programs edited by hand. Shared by
// tests/schedule/walker_test.cc and tests/sim/simulator_test.cc.
#pragma once

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "schedule/lower.h"
#include "schedule_test_util.h"

namespace hp::test {

// Index of lowered op (kind, index) in `stage`'s program; -1 when absent.
inline int find_op(const Schedule& s, int stage, OpKind kind, int index) {
  const auto& prog = s.stages[stage].lowered;
  for (size_t j = 0; j < prog.size(); ++j)
    if (prog[j].kind == kind && prog[j].index == index) return static_cast<int>(j);
  return -1;
}

inline void erase_op(Schedule& s, int stage, OpKind kind, int index) {
  auto& prog = s.stages[stage].lowered;
  prog.erase(prog.begin() + find_op(s, stage, kind, index));
}

// Moves lowered op (kind, index) to right after op (after_kind, after_index) of the same stage.
inline void move_after(Schedule& s, int stage, OpKind kind, int index, OpKind after_kind,
                       int after_index) {
  auto& prog = s.stages[stage].lowered;
  const LoweredOp op = prog[find_op(s, stage, kind, index)];
  erase_op(s, stage, kind, index);
  prog.insert(prog.begin() + find_op(s, stage, after_kind, after_index) + 1, op);
}

// gpipe p=2 m=2 L=2, lowered with message sizes for `cfg` (when given) and micro-batches of 16
// tokens. Messages: 0, 1 forward (stage 0 -> 1), 2, 3 backward.
inline Schedule gpipe_two_stages(const ModelConfig* cfg = nullptr) {
  Schedule s = gen("gpipe", 2, 2, 2);
  lower(s, cfg, cfg ? 16 : 0);
  return s;
}

// 1f1b p=2 m=3 L=2. Messages: 0, 1, 2 forward (stage 0 -> 1), 3, 4, 5 backward.
inline Schedule one_f_one_b(const ModelConfig* cfg = nullptr) {
  Schedule s = gen("1f1b", 2, 3, 2);
  lower(s, cfg, cfg ? 16 : 0);
  return s;
}

// No recv.start anywhere: every recv.wait posts its own receive. Valid (receives still come in
// send order); under rendezvous each transfer waits for its recv.wait.
inline Schedule blocking_receives(const ModelConfig* cfg = nullptr) {
  Schedule s = gpipe_two_stages(cfg);
  for (Stage& st : s.stages)
    std::erase_if(st.lowered, [](const LoweredOp& op) { return op.kind == OpKind::kRecvStart; });
  return s;
}

// Stage 0 waits for the send of message 0 before its next compute op (lower() puts the wait after
// it): nothing blocks forever, but the compute no longer overlaps the transfer.
inline Schedule send_wait_before_compute(const ModelConfig* cfg = nullptr) {
  Schedule s = gpipe_two_stages(cfg);
  move_after(s, 0, OpKind::kSendWait, 0, OpKind::kSendStart, 0);
  return s;
}

// Each stage waits for a send right after starting it, before it posts the receive the other
// stage is about to send: stage 0 holds at send.wait #1 until stage 1 posts #1, which stage 1 does
// only after its send.wait #3, which needs stage 0 to post #3 first. A deadlock under rendezvous;
// buffered sends finish; defer_blocking_send_waits() moves both waits past the next start.
inline Schedule early_send_waits(const ModelConfig* cfg = nullptr) {
  Schedule s = one_f_one_b(cfg);
  move_after(s, 0, OpKind::kSendWait, 1, OpKind::kSendStart, 1);
  move_after(s, 1, OpKind::kSendWait, 3, OpKind::kSendStart, 3);
  return s;
}

// Broken: stage 1 never receives message 1 (no recv.start, no recv.wait).
inline Schedule missing_receive(const ModelConfig* cfg = nullptr) {
  Schedule s = one_f_one_b(cfg);
  erase_op(s, 1, OpKind::kRecvStart, 1);
  erase_op(s, 1, OpKind::kRecvWait, 1);
  return s;
}

// Broken: stage 0 sends message 1 (micro-batch 1) before message 0 on the same link, then waits
// for message 1, while stage 1 receives them in micro-batch order. Under rendezvous message 0
// queues behind message 1, whose receive stage 1 posts only after using message 0: a deadlock.
// Buffered sends both go out.
inline Schedule swapped_sends(const ModelConfig* cfg = nullptr) {
  Schedule s = gpipe_two_stages(cfg);
  for (LoweredOp& op : s.stages[0].lowered)
    if ((op.kind == OpKind::kSendStart || op.kind == OpKind::kSendWait) && op.index < 2)
      op.index = 1 - op.index;
  move_after(s, 0, OpKind::kSendWait, 1, OpKind::kSendStart, 0);
  return s;
}

struct WalkerCase {
  std::string name;
  Schedule (*make)(const ModelConfig*);
  bool rendezvous_finishes, buffered_finishes;
  bool valid;  // validate() accepts it
};
inline void PrintTo(const WalkerCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<WalkerCase> walker_cases() {
  return {{"gpipe", gpipe_two_stages, true, true, true},
          {"1f1b", one_f_one_b, true, true, true},
          {"blocking_receives", blocking_receives, true, true, true},
          {"send_wait_before_compute", send_wait_before_compute, true, true, true},
          {"early_send_waits", early_send_waits, false, true, false},
          {"swapped_sends", swapped_sends, false, true, false}};
}

}  // namespace hp::test

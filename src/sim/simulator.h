// The simulator: replays a lowered schedule on a cost model and returns makespan, bubble, busy and
// idle time per stage, communication volume, throughput, MFU and a Timeline. The walker
// (schedule/walker.h) steps the programs and matches transfers over FIFO links; the simulator
// prices them: a compute op takes its cost, a wait holds its stage until the bytes went out
// (send.wait) or arrived (recv.wait), and transfers use a separate per-link resource, so they
// overlap compute and serialize per directed stage pair. It never sees MPI, BLAS or CUDA.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "schedule/ir.h"
#include "sim/cost_model.h"
#include "sim/timeline.h"

namespace hp {

struct SimOptions {
  // true: a transfer starts once both the send and the matching receive are posted (MPI's
  // rendezvous protocol for large messages, what the runtime gets); false: eager, at the send
  // (the walker's Matching::kRendezvous / kBuffered).
  bool rendezvous = true;
  // true: a stage's inter-node transfers share one network port each way (one NIC per device):
  // they go out one after another across all its peers, and arrive one after another at the
  // receiver. false: every directed stage pair has its own wire (enough for NVLink switches).
  bool shared_nic = false;
  // Overlap erosion (DeviceProfile::comm_compute_share): a transfer of d seconds delays the
  // compute stream of its sender and of its receiver by comm_compute_share * d (the SMs and HBM
  // bandwidth its communication kernel takes). Charged when the transfer is placed, as busy time;
  // an upper bound, since a stage that would have idled anyway loses nothing. In [0, 1).
  double comm_compute_share = 0;
  // Message bytes are multiplied by this (lower() sizes fp32 values; 0.5 models bf16 transfers).
  double message_bytes_scale = 1.0;
  bool record_timeline = true;
  std::string title;  // timeline title; empty = derived from the schedule
  // Tokens of one micro-batch for tokens_per_s (0 = the cost model's).
  int64_t tokens_per_microbatch = 0;
  // Compute times of stage s are multiplied by stage_time_scale[s] (empty: 1 everywhere), for
  // stages whose devices run at different speeds (e.g. cores measured slower than the profile).
  std::vector<double> stage_time_scale;
  // Per stage and per part kind and direction (empty: 1 everywhere): CostModel::op_time's
  // `scale`, e.g. bench's calibration of each part on each stage's core. Applied before
  // stage_time_scale.
  std::vector<PartTable> stage_part_scale;
};

struct StageResult {
  int stage = 0;
  double busy = 0;  // compute time (recomputation included)
  double idle = 0;  // makespan - busy
  double wait = 0;  // time blocked in send/recv waits (part of idle)
  double end = 0;   // when the stage's last op finished
  // Left 0 by simulate(); callers with a model config fill it from the stash prediction.
  int64_t peak_activation_bytes = 0;
  int64_t sent_bytes = 0, recv_bytes = 0;
  int messages_sent = 0;
};

struct SimResult {
  double makespan = 0;
  double bubble = 0;  // makespan - max busy
  double bubble_fraction = 0;  // bubble / makespan
  std::vector<StageResult> stages;
  std::map<std::pair<int, int>, int64_t> pair_bytes;  // (src, dst) -> bytes sent
  double tokens_per_s = 0;  // 0 when the tokens per micro-batch are unknown
  double mfu = 0;           // model FLOPs / (makespan * stages * peak); 0 when unknown
  Timeline timeline;
};

// Replays `lowered` (a schedule after lower(); a one-stage schedule may skip lowering). Throws
// hp::Error on a malformed schedule or a deadlock, naming each blocked stage and what it waits for.
SimResult simulate(const Schedule& lowered, const CostModel& cost, const SimOptions& opt = {});

// The JSON result (docs/formats/sim.md): {"version":1,"schedule":..,"makespan":..,"bubble":..,
// "stages":[{"stage":0,"busy":..,"peak_activation_bytes":..,...}],"tokens_per_s":..,...}
nlohmann::json sim_result_json(const SimResult& r, const Schedule& s);

}  // namespace hp

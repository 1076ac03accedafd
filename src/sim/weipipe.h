// WeiPipe (weight passing, PPoPP'25) as a baseline for `helixpipe compare`: the p ranks form a
// ring, each owns one chunk of L/p layers (weights, fp32 gradient accumulator, optimizer state), and
// instead of activations the chunks' weights and their gradients travel round the ring. A rank
// keeps its own micro-batches and runs every layer on them: forward through chunks 0..p-1 as the
// forward weights pass by, backward through p-1..0 as the backward weights pass the other way,
// adding its share to the gradient partial sum of each chunk, which travels on to the next rank.
//
// Not an op program for the walker: every rank runs every part, so a part has no home stage and
// what moves is weights and running sums, not the values of schedule/values.h. The ring is
// instead replayed step by step here (docs/simulator.md "WeiPipe" gives the model and its
// assumptions; tests/sim/weipipe_test.cc works small cases by hand).
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/generate.h"
#include "schedule/ir.h"
#include "sim/cost_model.h"
#include "sim/parallel.h"
#include "sim/sim_setup.h"
#include "sim/simulator.h"
#include "util/model_config.h"

namespace hp {

struct WeiPipeOptions {
  Recompute recompute = Recompute::kNone;
  // Bytes of one chunk's weights on one GPU (the largest chunk's; its gradient partial sum has the
  // same size): each of the three ring flows moves this per step.
  int64_t chunk_bytes = 0;
  // Bytes of the parameters every rank holds a copy of (embedding, final norm, head), whose
  // gradients are all-reduced over the ring once at the end.
  int64_t replicated_bytes = 0;
  bool rendezvous = true;   // a transfer starts when the receiver has posted (SimOptions)
  bool shared_nic = false;  // a rank's inter-node transfers share its port each way (SimOptions)
  double comm_compute_share = 0;  // overlap erosion (SimOptions)
  int64_t tokens_per_microbatch = 0;  // for tokens_per_s (0: the cost model's)
};

// Replays one iteration of m micro-batches (rank r takes micro-batches r, r+p, r+2p, ...) of an
// L-layer model over p ranks. Stage r of the result is rank r (peak_activation_bytes left 0).
// Throws hp::Error when p > L or m < 1.
SimResult simulate_weipipe(const CostModel& cost, int p, int m, int layers,
                           const WeiPipeOptions& opt);

// Parameters (elements) one rank holds for the whole TP group: its largest layer chunk plus the
// replicated embedding, final norm and head.
int64_t weipipe_rank_params(const ModelConfig& cfg, int pp);

// Memory per GPU (as gpu_memory in sim/parallel.h; `peak_stash_bytes` for the whole TP group):
// the owned chunk at 4 + 12/d bytes per parameter (fp32 gradient accumulator, master weights and
// Adam sharded over DP), the replicated parameters at 2 + 4 + 12/d, six bf16 ring buffers of one
// chunk (forward weights in use and arriving, backward weights likewise, gradient partial sum
// being added to and arriving), the stash, and one layer's backward working memory.
GpuMemory weipipe_memory(const ModelConfig& cfg, const Layout& layout, int64_t tokens,
                         double peak_stash_bytes, int bytes_per_elem);

// The planner's evaluate() (sim/parallel.h) for a WeiPipe case: memory first (one micro-batch's
// whole-model stash under c.recompute, weipipe_memory), then, when it fits within `memory_bytes`
// or `simulate_all`, the ring on `cost` (the layout's per-GPU part costs) with the planner's link
// rules (rendezvous, one NIC per GPU, dev.comm_compute_share) and the DP all-reduce of a rank's
// parameters. A case the ring cannot run (p > L) comes back with `error` set.
PlanResult weipipe_evaluate(const PlanCase& c, const ModelConfig& cfg, int64_t seq_len,
                            const DeviceProfile& dev, const CostModel& cost, double memory_bytes,
                            bool simulate_all);

// compare's WeiPipe row: the ring on `c` (p = spec.stages, m, L, recomputation as simulate_spec
// picks it, default none), weights in the device dtype / tp; with a model, every rank's peak stash
// is one micro-batch's whole-model stash (a one-stage, one-micro-batch schedule's, per GPU).
// The returned schedule is named "weipipe" and has no ops.
SimRun simulate_weipipe_spec(const ScheduleSpec& spec, const CostSetup& c);

}  // namespace hp

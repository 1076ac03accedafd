// The memory a training or gradient run will need, estimated from the model, the schedule and the
// step shape before anything is allocated, and the check that refuses a run this machine cannot
// hold, with the estimate, its parts and the limit, instead of an allocation failure or the kernel's
// out-of-memory killer part-way through (docs/training.md, "Memory").
//
// The estimate counts what the backend allocates:
//   weights    master weights (f32), plus the bf16 copy the GEMMs read under --precision=bf16
//   gradients  one per weight, in the master type
//   optimizer  AdamW's two moments per weight (train only)
//   stash      the stage's peak activation stash: sim/memory.h stash_peaks of the schedule, the
//              same figure the validator reports and the executor is checked against
//   working    what one op holds besides the stash: its inputs and outputs in flight, the
//              recomputed forward of a layer under recomputation, the MLP's T x ffn temporaries
//              (chunk x ffn with --mlp-chunk), the logits of one cross-entropy chunk, and messages
//              received for later ops
// It is an estimate (within about 25% of the measured peak on the test models, see
// tests/runtime/memory_check_test.cc); runs far past the limit are what it is for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "schedule/ir.h"
#include "util/model_config.h"

namespace hp {

struct MemoryEstimate {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t stash = 0;
  int64_t working = 0;
  int64_t total() const { return weights + gradients + optimizer + stash + working; }
  MemoryEstimate& operator+=(const MemoryEstimate& o);
  // "1.20 GiB (weights 300.00 MiB, gradients 300.00 MiB, AdamW moments 600.00 MiB, ...)"
  std::string describe() const;
};

// Parameters a part holds on one rank of a tensor-parallel group of `tp` (attention: none).
int64_t part_params(const ModelConfig& cfg, Part part, int tp = 1);

struct MemoryShape {
  int64_t tokens_per_mb = 0;  // B x S of one micro-batch
  int64_t mlp_chunk = 0;      // 0: the MLP runs over all tokens at once
  Precision precision = Precision::fp32();
  bool optimizer = true;      // train: AdamW moments; grad: none
  int tp = 1;                 // tensor-parallel group size (everything per rank of it)
};

// One rank of stage `stage` of a lowered or compute-only schedule.
MemoryEstimate estimate_stage_memory(const ModelConfig& cfg, const Schedule& s, int stage,
                                     const MemoryShape& shape);

// The single-process trainer (runtime/trainer.h): the whole model on one stage, micro-batches run
// one after the other (F of all parts, then B), recomputing as `recompute` says.
MemoryEstimate estimate_single_process_memory(const ModelConfig& cfg, Recompute recompute,
                                              const MemoryShape& shape);

// The ranks of a D x P x T grid of `world_size` ranks that run on this machine: Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE under mpirun, else all of them (in-process ranks).
int ranks_on_this_machine(int world_size);

// What the grid's ranks on this machine allocate together: every stage's estimate times D x T when
// all ranks are here, else the largest stage's times the ranks here (which stages share a machine
// is not known before the grid is made). `shape.tp` is T.
MemoryEstimate grid_memory_here(const ModelConfig& cfg, const Schedule& s, int data_parallel,
                                int world_size, const MemoryShape& shape);

struct MemoryLimit {
  int64_t bytes = -1;  // < 0: unknown (no check)
  std::string source;  // where the figure comes from, for the message
};

// What this process may still allocate: HP_MEMORY_LIMIT (bytes, or with a K/M/G/T suffix of 1024s)
// when set, else the smaller of MemAvailable in /proc/meminfo and the cgroup's memory.max minus
// its memory.current (cgroup v2). Unknown when neither can be read.
MemoryLimit available_memory();

// Throws hp::Error when `need` (what this machine's ranks will allocate together; `what` names it,
// e.g. "this process (4 in-process ranks)") is over `limit`: the estimate with its parts, the limit
// and its source, and what to change. Nothing when the limit is unknown.
void check_memory_fits(const MemoryEstimate& need, const std::string& what,
                       const MemoryLimit& limit);

}  // namespace hp

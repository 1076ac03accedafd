#include "runtime/memory_check.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string_view>

#include "model/model.h"
#include "model/value_store.h"
#include "schedule/generate.h"
#include "schedule/values.h"
#include "sim/memory.h"
#include "util/error.h"
#include "util/human_units.h"

namespace hp {

MemoryEstimate& MemoryEstimate::operator+=(const MemoryEstimate& o) {
  weights += o.weights;
  gradients += o.gradients;
  optimizer += o.optimizer;
  stash += o.stash;
  working += o.working;
  return *this;
}

std::string MemoryEstimate::describe() const {
  auto b = [](int64_t v) { return human_bytes(static_cast<double>(v)); };
  std::string parts = fmt::format("weights {}, gradients {}", b(weights), b(gradients));
  if (optimizer > 0) parts += fmt::format(", AdamW moments {}", b(optimizer));
  parts += fmt::format(", activation stash {}, working {}", b(stash), b(working));
  return fmt::format("{} ({})", b(total()), parts);
}

int64_t part_params(const ModelConfig& cfg, Part part, int tp) {
  const int64_t h = cfg.hidden, f = cfg.intermediate, V = cfg.vocab, q = cfg.qkv_dim();
  switch (part.kind) {
    case PartKind::kEmbed:
      return V * h / tp;  // vocabulary-parallel rows
    case PartKind::kPre:
      return h + q * h / tp;  // input norm (whole), W_qkv rows of the rank's heads
    case PartKind::kAttn:
      return 0;
    case PartKind::kPost:
      return h * h / tp + h + 3 * f * h / tp;  // W_o columns, norm2, gate/up rows, down columns
    case PartKind::kHead:
      return h + (cfg.tie_embeddings ? 0 : V * h / tp);  // the tied head reads the embedding
  }
  return 0;
}

namespace {

// Weights, gradients and AdamW moments of `params` parameters.
void add_model_states(MemoryEstimate& m, int64_t params, const MemoryShape& shape) {
  const int64_t master = dtype_bytes(shape.precision.master);
  m.weights = params * master;
  if (shape.precision.weight_copy()) m.weights += params * dtype_bytes(shape.precision.compute);
  m.gradients = params * master;
  m.optimizer = shape.optimizer ? 2 * params * master : 0;
}

// What the stage holds besides the stash (see the header). The model's workspace keeps one
// grow-only buffer per kind of temporary (src/model/model.cc), so those add up over the parts the
// stage runs; on top of them come a layer's forward values rebuilt for its backward under
// recomputation, and the values in flight around an op (inputs, outputs, their gradients and
// messages received ahead of the ops that read them).
int64_t working_bytes(const ModelConfig& cfg, const std::set<PartKind>& kinds, Recompute recompute,
                      const MemoryShape& shape) {
  const ElemBytes eb = elem_bytes(shape.precision);
  const int64_t T = shape.tokens_per_mb, tp = shape.tp;
  const int64_t e = eb.compute, h = cfg.hidden, f = cfg.intermediate / tp;
  const int64_t q = cfg.qkv_dim() / tp;
  const bool layer = kinds.count(PartKind::kPre) || kinds.count(PartKind::kAttn);
  int64_t ws = 0;
  if (layer) ws += 2 * T * q * e + q * h * eb.master;  // QKVr, dQKV; a dW_qkv in the master type
  if (kinds.count(PartKind::kPost)) {
    const int64_t mlp_rows = shape.mlp_chunk > 0 ? std::min(shape.mlp_chunk, T) : T;
    ws += 6 * mlp_rows * f * e + T * h * e;  // G, U, H, dH, dG, dU of a chunk; dZ
  }
  if (kinds.count(PartKind::kHead)) {
    const int64_t chunk = std::min<int64_t>(ModelOptions{}.head_chunk, T);
    ws += chunk * (cfg.vocab / tp) * e + 2 * T * h * e + T * eb.stats;  // logits, Zf, dZf, rstd
  }
  int64_t rebuilt = 0;
  if (recompute != Recompute::kNone && (layer || kinds.count(PartKind::kPost))) {
    const PartContext ctx;
    for (Part p : {Part::pre(1), Part::attn(1), Part::post(1)}) {
      if (recompute == Recompute::kSelective && p.kind != PartKind::kAttn) continue;
      rebuilt += values_bytes(forward_stash(p, ctx, static_cast<int>(cfg.layers)), cfg, T, eb,
                              static_cast<int>(tp));
    }
  }
  const int64_t in_flight = 4 * (T / tp) * h * e;
  return ws + rebuilt + in_flight;
}

}  // namespace

namespace {

// One stage's estimate, given every stage's peak stash (stash_peaks of the whole schedule, which
// the callers that estimate several stages compute once).
MemoryEstimate stage_memory(const ModelConfig& cfg, const Schedule& s, int stage,
                            const MemoryShape& shape, const std::vector<int64_t>& peaks) {
  HP_CHECK(stage >= 0 && stage < s.num_stages, "estimate_stage_memory: stage {} of {}", stage,
           s.num_stages);
  MemoryEstimate m;
  std::set<Part> parts;
  std::set<PartKind> kinds;
  for (const ComputeOp& op : s.stages[static_cast<size_t>(stage)].ops) {
    for (const Part& p : op.parts) {
      parts.insert(p);
      kinds.insert(p.kind);
    }
  }
  int64_t params = 0;
  for (const Part& p : parts) params += part_params(cfg, p, shape.tp);
  add_model_states(m, params, shape);
  m.stash = peaks[static_cast<size_t>(stage)] / shape.tp;
  m.working = working_bytes(cfg, kinds, s.recompute, shape);
  return m;
}

std::vector<int64_t> stage_peaks(const ModelConfig& cfg, const Schedule& s,
                                 const MemoryShape& shape) {
  return stash_peaks(s, cfg, shape.tokens_per_mb, elem_bytes(shape.precision));
}

}  // namespace

MemoryEstimate estimate_stage_memory(const ModelConfig& cfg, const Schedule& s, int stage,
                                     const MemoryShape& shape) {
  return stage_memory(cfg, s, stage, shape, stage_peaks(cfg, s, shape));
}

MemoryEstimate estimate_single_process_memory(const ModelConfig& cfg, Recompute recompute,
                                              const MemoryShape& shape) {
  // The trainer runs one micro-batch's F and B at a time, as GPipe on one stage with m = 1 does.
  ScheduleSpec spec;
  spec.name = "gpipe";
  spec.stages = 1;
  spec.microbatches = 1;
  spec.layers = static_cast<int>(cfg.layers);
  spec.recompute = recompute;
  spec.layers_from_model = true;
  return estimate_stage_memory(cfg, generate(spec), 0, shape);
}

int ranks_on_this_machine(int world_size) {
  if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); env != nullptr) {
    const int n = std::atoi(env);
    if (n >= 1 && n <= world_size) return n;
  }
  return world_size;
}

MemoryEstimate grid_memory_here(const ModelConfig& cfg, const Schedule& s, int data_parallel,
                                int world_size, const MemoryShape& shape) {
  const int here = ranks_on_this_machine(world_size);
  MemoryEstimate sum, largest;
  const std::vector<int64_t> peaks = stage_peaks(cfg, s, shape);
  for (int stage = 0; stage < s.num_stages; ++stage) {
    const MemoryEstimate e = stage_memory(cfg, s, stage, shape, peaks);
    for (int r = 0; r < data_parallel * shape.tp; ++r) sum += e;
    if (e.total() > largest.total()) largest = e;
  }
  if (here == world_size) return sum;
  MemoryEstimate need;
  for (int r = 0; r < here; ++r) need += largest;
  return need;
}

namespace {

// A number of bytes with an optional binary suffix (K, M, G, T), or -1 when it is not one.
int64_t parse_bytes(std::string_view text) {
  if (text.empty()) return -1;
  int64_t scale = 1;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (const char* at = std::strchr("KMGT", last); at != nullptr && last != '\0') {
    scale = int64_t{1} << (10 * (at - "KMGT" + 1));
    text.remove_suffix(1);
  }
  if (text.empty() || text.size() > 15) return -1;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v * scale;
}

// A "Key:   N kB" line of /proc/meminfo, in bytes; -1 when absent.
int64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  int64_t kb = 0;
  while (in >> name >> kb) {
    std::getline(in, unit);
    if (name == key + ":") return kb * 1024;
  }
  return -1;
}

int64_t read_cgroup_number(const char* path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v) || v == "max") return -1;
  return parse_bytes(v);
}

}  // namespace

MemoryLimit available_memory() {
  if (const char* env = std::getenv("HP_MEMORY_LIMIT"); env != nullptr && *env != '\0') {
    const int64_t b = parse_bytes(env);
    HP_CHECK(b > 0,
             "HP_MEMORY_LIMIT='{}' is not a size in bytes (a whole number, optionally with K, M, G "
             "or T for powers of 1024, e.g. 16G); unset it to use the machine's available memory",
             env);
    return {b, "HP_MEMORY_LIMIT"};
  }
  MemoryLimit lim;
  if (const int64_t avail = meminfo_bytes("MemAvailable"); avail >= 0) {
    lim = {avail, "MemAvailable in /proc/meminfo"};
  }
  const int64_t max = read_cgroup_number("/sys/fs/cgroup/memory.max");
  const int64_t cur = read_cgroup_number("/sys/fs/cgroup/memory.current");
  if (max > 0 && cur >= 0 && (lim.bytes < 0 || max - cur < lim.bytes)) {
    lim = {std::max<int64_t>(0, max - cur), "the cgroup's memory.max less its memory.current"};
  }
  return lim;
}

void check_memory_fits(const MemoryEstimate& need, const std::string& what,
                       const MemoryLimit& limit) {
  if (limit.bytes < 0 || need.total() <= limit.bytes) return;
  fail("{} would need about {} of memory, but {} is available ({}); shorten --seq-len or "
       "--microbatch-size, recompute (--recompute=no-attn or full), chunk the MLP (--mlp-chunk), or "
       "spread the model over more pipeline stages or tensor-parallel ranks (docs/training.md, "
       "\"Memory\"; HP_MEMORY_LIMIT overrides the limit)",
       what, need.describe(), human_bytes(static_cast<double>(limit.bytes)), limit.source);
}

}  // namespace hp

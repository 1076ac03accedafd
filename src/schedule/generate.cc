// The five generators. Baselines cut the model at layer boundaries (whole-stage ops); HelixPipe
// follows docs/design.md sections 4-5 literally, then groups consecutive feeding ops into steps.
#include "schedule/generate.h"

#include <algorithm>
#include <string>

#include "util/error.h"
#include "util/nearest_name.h"

namespace hp {

namespace {

// "8 or 12": the multiples of k nearest to x (one value when x is below k).
std::string nearest_multiples(int x, int k) {
  int down = x / k * k, up = down + k;
  if (down < k) return std::to_string(up);
  if (down == x) return std::to_string(x);
  return std::to_string(down) + " or " + std::to_string(up);
}

// The divisors of x, as "1, 2, 4".
std::string divisors(int x) {
  std::string out;
  for (int d = 1; d <= x; ++d)
    if (x % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return out;
}

// L as the user gave it: "--layers=4" or "the model's 4 layers (num_hidden_layers)".
std::string layers_text(const ScheduleSpec& spec) {
  return spec.layers_from_model
             ? fmt::format("the model's {} layers (num_hidden_layers)", spec.layers)
             : fmt::format("--layers={}", spec.layers);
}

// A stage-local chunk of consecutive parts: layers [first, last] plus embed/head at the ends.
struct Chunk {
  int first = 1, last = 0;
  bool embed = false, head = false;
};

std::vector<Part> chunk_parts(const Chunk& c) {
  std::vector<Part> parts;
  if (c.embed) parts.push_back(Part::embed());
  for (int l = c.first; l <= c.last; ++l) {
    parts.push_back(Part::pre(l));
    parts.push_back(Part::attn(l));
    parts.push_back(Part::post(l));
  }
  if (c.head) parts.push_back(Part::head());
  return parts;
}

// `parts` in model order; backward ops run them in reverse.
ComputeOp make_op(Dir dir, int mb, std::vector<Part> parts, Recompute policy, int fold = 0) {
  ComputeOp op;
  op.dir = dir;
  op.mb = mb;
  if (dir != Dir::kF) std::reverse(parts.begin(), parts.end());
  op.parts = std::move(parts);
  op.fold = fold;
  op.recompute = recompute_parts(op, policy);
  return op;
}

Schedule make_header(const ScheduleSpec& spec, Recompute policy) {
  Schedule s;
  s.name = spec.name;
  s.num_stages = spec.stages;
  s.microbatches = spec.microbatches;
  s.layers = spec.layers;
  s.folds = spec.folds;
  s.virtual_stages = spec.virtual_stages;
  s.recompute = policy;
  s.stage_recompute = spec.stage_recompute;
  s.transfer = spec.transfer;
  s.stages.resize(spec.stages);
  return s;
}

// One chunk per stage (GPipe, 1F1B, ZB-H1): `counts` layers on each stage, or split_layers().
std::vector<Chunk> stage_chunks(int layers, int p, const std::vector<int>& counts = {}) {
  std::vector<Chunk> chunks;
  auto ranges = split_layers(layers, p);
  for (int r = 0, next = 1; r < p && !counts.empty(); next += counts[r++])
    ranges[r] = {next, next + counts[r] - 1};
  for (int r = 0; r < p; ++r) {
    chunks.push_back(Chunk{ranges[r].first, ranges[r].second, r == 0, r == p - 1});
  }
  return chunks;
}

void gen_gpipe(Schedule& s, const std::vector<int>& counts) {
  auto chunks = stage_chunks(s.layers, s.num_stages, counts);
  for (int r = 0; r < s.num_stages; ++r) {
    auto parts = chunk_parts(chunks[r]);
    const Recompute pol = s.policy_of(r);
    for (int i = 0; i < s.microbatches; ++i)
      s.stages[r].ops.push_back(make_op(Dir::kF, i, parts, pol));
    for (int i = 0; i < s.microbatches; ++i)
      s.stages[r].ops.push_back(make_op(Dir::kB, i, parts, pol));
  }
}

// 1F1B: stage r runs p-1-r warm-up forwards, then alternates one forward and one backward, then
// drains the remaining backwards. ZB-H1 is the same with B split into I and W, where stage r
// keeps up to r W's pending (run later, filling the drain bubble): the stage never holds more than
// p micro-batches in flight, the count 1F1B holds on stage 0.
void gen_1f1b(Schedule& s, bool split, const std::vector<int>& counts) {
  const int p = s.num_stages, m = s.microbatches;
  auto chunks = stage_chunks(s.layers, p, counts);
  for (int r = 0; r < p; ++r) {
    auto parts = chunk_parts(chunks[r]);
    const Recompute pol = s.policy_of(r);
    auto& ops = s.stages[r].ops;
    const int warmup = std::min(p - 1 - r, m);
    const int defer = split ? r : 0;
    int next_f = 0, next_w = 0;
    for (; next_f < warmup; ++next_f) ops.push_back(make_op(Dir::kF, next_f, parts, pol));
    for (int j = 0; j < m; ++j) {
      if (next_f < m) ops.push_back(make_op(Dir::kF, next_f++, parts, pol));
      if (!split) {
        ops.push_back(make_op(Dir::kB, j, parts, pol));
        continue;
      }
      ops.push_back(make_op(Dir::kI, j, parts, pol));
      while (j + 1 - next_w > defer) ops.push_back(make_op(Dir::kW, next_w++, parts, pol));
    }
    while (next_w < m && split) ops.push_back(make_op(Dir::kW, next_w++, parts, pol));
  }
}

// An uneven plan (ScheduleSpec::stage_layers / stage_recompute) has one entry per stage, and its
// layer counts are >= 1 and add up to L.
void check_stage_plan(const ScheduleSpec& spec) {
  const auto& n = spec.stage_layers;
  HP_CHECK(spec.stage_recompute.empty() ||
               static_cast<int>(spec.stage_recompute.size()) == spec.stages,
           "{} per-stage recompute policies given for {} stages", spec.stage_recompute.size(),
           spec.stages);
  if (n.empty()) return;
  HP_CHECK(static_cast<int>(n.size()) == spec.stages, "{} per-stage layer counts given for {} stages",
           n.size(), spec.stages);
  int sum = 0;
  for (int k : n) {
    HP_CHECK(k >= 1, "every stage needs at least one layer; a per-stage layer count is {}", k);
    sum += k;
  }
  HP_CHECK(sum == spec.layers, "the per-stage layer counts add up to {}, not the {} layers", sum,
           spec.layers);
}

// Megatron-LM's interleaved 1F1B: stage r holds chunks r, r+p, ..., r+(V-1)p of p*V model chunks.
// The k-th forward on a stage runs chunk (k mod pV)/p of micro-batch (k/(pV))*p + k mod p; the
// k-th backward the same with the chunk order reversed. Warm-up 2(p-1-r) + (V-1)p forwards (all of
// them when m == p), then one forward / one backward, then the remaining backwards.
void gen_interleaved(Schedule& s) {
  const int p = s.num_stages, m = s.microbatches, V = s.virtual_stages;
  auto ranges = split_layers(s.layers, p * V);
  const int total = m * V;
  for (int r = 0; r < p; ++r) {
    auto& ops = s.stages[r].ops;
    auto parts_of = [&](int v) {
      int c = v * p + r;
      return chunk_parts(Chunk{ranges[c].first, ranges[c].second, c == 0, c == p * V - 1});
    };
    auto mb_of = [&](int k) { return (k / (p * V)) * p + k % p; };
    auto fwd = [&](int k) {
      int v = (k % (p * V)) / p;
      ops.push_back(make_op(Dir::kF, mb_of(k), parts_of(v), s.recompute));
    };
    auto bwd = [&](int k) {
      int v = V - 1 - (k % (p * V)) / p;
      ops.push_back(make_op(Dir::kB, mb_of(k), parts_of(v), s.recompute));
    };
    int warmup = m == p ? total : std::min(total, 2 * (p - 1 - r) + (V - 1) * p);
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int k = 0; k < total - warmup; ++k) {
      fwd(k + warmup);
      bwd(k);
    }
    for (int k = std::max(0, total - warmup); k < total; ++k) bwd(k);
  }
}

// ---- HelixPipe ---------------------------------------------------------------------------------
// Units of docs/design.md section 5: E = chunk 0, A_l = attn(l), P_c = chunk c, T = tail.
enum class Unit { kE, kA, kP, kT };

struct UnitOp {
  Unit unit;
  int index;  // layer for A, chunk for P
  int mb;
  int fold;
};

std::vector<Part> unit_parts(const UnitOp& u, int L) {
  switch (u.unit) {
    case Unit::kE: return {Part::embed(), Part::pre(1)};
    case Unit::kA: return {Part::attn(u.index)};
    case Unit::kP: return {Part::post(u.index), Part::pre(u.index + 1)};
    case Unit::kT: return {Part::post(L), Part::head()};
  }
  return {};
}

// The last part of `a` hands its output to the first part of `b` (same micro-batch).
bool feeds(const UnitOp& a, const UnitOp& b, int L) {
  if (a.mb != b.mb) return false;
  auto pa = unit_parts(a, L), pb = unit_parts(b, L);
  return pa.back().index(L) + 1 == pb.front().index(L);
}

// Forward unit order on stage r, the four sweeps per group of docs/design.md section 5, for
// G = ceil(m / pF) groups (micro-batch ids >= m are dropped afterwards by the caller).
std::vector<UnitOp> helix_units(int p, int L, int F, int G, int r) {
  std::vector<UnitOp> out;
  const int V = L / p;
  auto mb = [&](int g, int d, int f) { return g * p * F + d * F + f; };
  auto add = [&](Unit u, int index, int id) { out.push_back(UnitOp{u, index, id, id % F}); };
  if (p == 1) {
    // One stage: every micro-batch runs the whole model; the step grouping merges it into one op.
    for (int i = 0; i < G * F; ++i) {
      add(Unit::kE, 0, i);
      for (int l = 1; l <= L; ++l) {
        add(Unit::kA, l, i);
        if (l < L) add(Unit::kP, l, i);
      }
      add(Unit::kT, 0, i);
    }
    return out;
  }
  if (r == 0)
    for (int f = 0; f < F; ++f) add(Unit::kE, 0, mb(0, 0, f));
  for (int g = 0; g < G; ++g) {
    for (int d = r - 1; d >= 0; --d)
      for (int f = 0; f < F; ++f) {
        add(Unit::kA, r - d, mb(g, d, f));
        if (d == 0) add(Unit::kP, r, mb(g, d, f));
      }
    for (int d = 1; d <= p - 1; ++d)
      for (int f = 0; f < F; ++f) {
        if (r == 0 && g > 0) add(Unit::kT, 0, mb(g - 1, d, f));
        if (r == 0) add(Unit::kE, 0, mb(g, d, f));
        else add(Unit::kP, r, mb(g, d, f));
        if (d == p - 1) add(Unit::kA, r + 1, mb(g, d, f));
      }
    for (int v = 1; v <= V - 1; ++v) {
      for (int d = p - 2; d >= 0; --d)
        for (int f = 0; f < F; ++f) {
          add(Unit::kA, v * p + r - d, mb(g, d, f));
          if (d == 0) add(Unit::kP, v * p + r, mb(g, d, f));
        }
      for (int d = 1; d <= p - 1; ++d)
        for (int f = 0; f < F; ++f) {
          add(Unit::kP, v * p + r, mb(g, d, f));
          if (d == p - 1) add(Unit::kA, v * p + r + 1, mb(g, d, f));
        }
    }
    for (int d = p - 2; d >= r; --d)
      for (int f = 0; f < F; ++f) {
        add(Unit::kA, L + r - d, mb(g, d, f));
        if (d == 0) {  // r == 0 only
          add(Unit::kT, 0, mb(g, d, f));
          if (g < G - 1) add(Unit::kE, 0, mb(g + 1, 0, f));
        }
      }
  }
  if (r == 0)
    for (int d = 1; d <= p - 1; ++d)
      for (int f = 0; f < F; ++f) add(Unit::kT, 0, mb(G - 1, d, f));
  return out;
}

void gen_helix(Schedule& s) {
  const int p = s.num_stages, L = s.layers, F = s.folds, m = s.microbatches;
  const int G = (m + p * F - 1) / (p * F);
  for (int r = 0; r < p; ++r) {
    auto units = helix_units(p, L, F, G, r);
    // Group consecutive feeding units into steps before dropping the partial group's missing
    // micro-batches, so every remaining op looks exactly as in the full schedule.
    std::vector<ComputeOp> fwd;
    for (size_t k = 0; k < units.size();) {
      size_t e = k + 1;
      while (e < units.size() && feeds(units[e - 1], units[e], L)) ++e;
      if (units[k].mb < m) {
        std::vector<Part> parts;
        for (size_t j = k; j < e; ++j) {
          auto more = unit_parts(units[j], L);
          parts.insert(parts.end(), more.begin(), more.end());
        }
        fwd.push_back(make_op(Dir::kF, units[k].mb, parts, s.recompute, units[k].fold));
      }
      k = e;
    }
    auto& ops = s.stages[r].ops;
    ops = fwd;
    for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) {
      ops.push_back(make_op(Dir::kB, it->mb, it->parts, s.recompute, it->fold));
    }
  }
}

}  // namespace

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved", "zb1p", "helix"};
  return names;
}

Recompute default_recompute(std::string_view name) {
  return name == "helix" ? Recompute::kNoAttn : Recompute::kNone;
}

std::vector<std::pair<int, int>> split_layers(int layers, int parts) {
  HP_CHECK(parts >= 1, "cannot split layers over {} stages: need at least 1", parts);
  HP_CHECK(layers >= parts,
           "cannot split {} layers over {} pipeline stages: every stage needs at least one layer "
           "(use --layers >= {} or fewer stages)",
           layers, parts, parts);
  std::vector<std::pair<int, int>> out;
  const int base = layers / parts, extra = layers % parts;
  int next = 1;
  for (int r = 0; r < parts; ++r) {
    int n = base + (r >= parts - extra ? 1 : 0);
    out.emplace_back(next, next + n - 1);
    next += n;
  }
  return out;
}

Schedule generate(const ScheduleSpec& spec) {
  const auto& names = schedule_names();
  if (std::find(names.begin(), names.end(), spec.name) == names.end()) {
    fail("unknown schedule '{}'{}: expected one of gpipe, 1f1b, interleaved, zb1p, helix", spec.name,
         did_you_mean(spec.name, names));
  }
  HP_CHECK(spec.stages >= 1, "--stages must be at least 1, got {}", spec.stages);
  HP_CHECK(spec.microbatches >= 1, "--microbatches must be at least 1, got {}", spec.microbatches);
  HP_CHECK(spec.layers >= 1, "--layers must be at least 1, got {}", spec.layers);
  HP_CHECK(spec.folds >= 1, "--folds must be at least 1, got {}", spec.folds);
  HP_CHECK(spec.virtual_stages >= 1, "--virtual must be at least 1, got {}", spec.virtual_stages);
  const int p = spec.stages, m = spec.microbatches, L = spec.layers;
  HP_CHECK(spec.folds == 1 || spec.name == "helix",
           "--folds={} applies to the helix schedule only; '{}' needs --folds=1", spec.folds,
           spec.name);
  HP_CHECK(spec.virtual_stages == 1 || spec.name == "interleaved",
           "--virtual={} applies to the interleaved schedule only; '{}' needs --virtual=1",
           spec.virtual_stages, spec.name);
  const Recompute policy = spec.recompute.value_or(default_recompute(spec.name));
  HP_CHECK((spec.stage_layers.empty() && spec.stage_recompute.empty()) ||
               spec.name == "gpipe" || spec.name == "1f1b" || spec.name == "zb1p",
           "per-stage layer counts and recompute policies apply to gpipe, 1f1b and zb1p only, not "
           "'{}'",
           spec.name);
  Schedule s = make_header(spec, policy);

  const std::string Ls = layers_text(spec);
  if (spec.name == "helix") {
    HP_CHECK(L % p == 0,
             "helix needs the layer count to be a multiple of the stage count (each stage holds "
             "L/p parameter chunks): {} is not a multiple of --stages={}; {}",
             Ls, p,
             spec.layers_from_model
                 ? fmt::format("stage counts that divide {}: {}", L, divisors(L))
                 : "nearest valid --layers: " + nearest_multiples(L, p));
    gen_helix(s);
    return s;
  }
  if (spec.name == "interleaved") {
    const int V = spec.virtual_stages;
    HP_CHECK(V >= 2,
             "interleaved needs --virtual >= 2 model chunks per stage (with 1 it is plain "
             "--schedule=1f1b)");
    HP_CHECK(L >= p * V,
             "interleaved needs at least one layer per model chunk: {} < stages*virtual = {}*{}; "
             "{}",
             Ls, p, V,
             spec.layers_from_model
                 ? std::string("use fewer --stages or a smaller --virtual")
                 : fmt::format("use --layers >= {} or a smaller --virtual", p * V));
    HP_CHECK(m % p == 0,
             "interleaved runs micro-batches in rounds of one per stage: --microbatches={} is not "
             "a multiple of --stages={}; nearest valid --microbatches: {}",
             m, p, nearest_multiples(m, p));
    gen_interleaved(s);
    return s;
  }
  HP_CHECK(L >= p, "{} needs at least one layer per stage: {} < --stages={}; {}", spec.name, Ls, p,
           spec.layers_from_model ? fmt::format("use --stages <= {}", L)
                                  : fmt::format("use --layers >= {}", p));
  check_stage_plan(spec);
  if (spec.name == "gpipe") gen_gpipe(s, spec.stage_layers);
  else if (spec.name == "1f1b") gen_1f1b(s, false, spec.stage_layers);
  else gen_1f1b(s, true, spec.stage_layers);
  return s;
}

}  // namespace hp

#include "sim/adapipe.h"

#include <algorithm>
#include <limits>
#include <string>

#include "sim/memory.h"
#include "util/error.h"

namespace hp {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The parts of stage i of p holding n of L layers, in model order. Which layers they are does not
// change a part's time or the size of its values, so the stage's position picks them: the first
// stage starts at layer 1, the last ends at L, a middle one starts at 2.
std::vector<Part> stage_parts(int i, int p, int n, int L) {
  const int first = i == 0 ? 1 : (i == p - 1 ? L - n + 1 : 2);
  std::vector<Part> parts;
  if (i == 0) parts.push_back(Part::embed());
  for (int l = first; l < first + n; ++l) {
    parts.push_back(Part::pre(l));
    parts.push_back(Part::attn(l));
    parts.push_back(Part::post(l));
  }
  if (i == p - 1) parts.push_back(Part::head());
  return parts;
}

// The fastest fitting choice of each (stage, layer count): c(i, n) and its policy.
struct Choice {
  double time = kInf, memory = 0;
  Recompute policy = Recompute::kNone;
};

std::vector<std::vector<Choice>> best_choices(const AdaPipeTable& t) {
  std::vector<std::vector<Choice>> c(t.stages, std::vector<Choice>(t.layers + 1));
  for (int i = 0; i < t.stages; ++i) {
    // Every other stage needs one layer at least.
    for (int n = 1; n <= t.layers - (t.stages - 1); ++n) {
      for (Recompute r : t.policies) {
        const double mem = t.memory ? t.memory(i, n, r) : 0.0;
        if (t.memory_limit > 0 && mem > t.memory_limit) continue;
        const double time = t.time(i, n, r);
        if (time < c[i][n].time) c[i][n] = {time, mem, r};
      }
    }
  }
  return c;
}

}  // namespace

AdaPipePlan adapipe_search(const AdaPipeTable& t) {
  const int p = t.stages, L = t.layers;
  HP_CHECK(p >= 1 && L >= p && t.time, "AdaPipe needs 1 <= stages <= layers and a time table "
           "(got {} stages, {} layers)", p, L);
  const auto c = best_choices(t);
  // Pass 1: B(i, j), the least bottleneck of i stages holding j layers.
  std::vector<std::vector<double>> B(p + 1, std::vector<double>(L + 1, kInf));
  B[0][0] = 0;
  for (int i = 0; i < p; ++i)
    for (int j = i; j <= L; ++j) {
      if (B[i][j] == kInf) continue;
      for (int n = 1; j + n <= L; ++n)
        B[i + 1][j + n] = std::min(B[i + 1][j + n], std::max(B[i][j], c[i][n].time));
    }
  AdaPipePlan plan;
  if (B[p][L] == kInf) return plan;
  const double cap = B[p][L] * (1 + 1e-12);
  // Pass 2: S(i, j), the least total time under that bottleneck; `from` remembers the n chosen.
  std::vector<std::vector<double>> S(p + 1, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<int>> from(p + 1, std::vector<int>(L + 1, 0));
  S[0][0] = 0;
  for (int i = 0; i < p; ++i)
    for (int j = i; j <= L; ++j) {
      if (S[i][j] == kInf) continue;
      for (int n = 1; j + n <= L; ++n) {
        if (c[i][n].time > cap) continue;
        const double s = S[i][j] + c[i][n].time;
        if (s < S[i + 1][j + n]) {
          S[i + 1][j + n] = s;
          from[i + 1][j + n] = n;
        }
      }
    }
  plan.found = true;
  plan.layers.assign(p, 0);
  for (int i = p, j = L; i > 0; --i) {
    plan.layers[i - 1] = from[i][j];
    j -= from[i][j];
  }
  for (int i = 0; i < p; ++i) {
    const Choice& ch = c[i][plan.layers[i]];
    plan.recompute.push_back(ch.policy);
    plan.stage_time.push_back(ch.time);
    plan.stage_memory.push_back(ch.memory);
    plan.bottleneck = std::max(plan.bottleneck, ch.time);
  }
  return plan;
}

AdaPipeTable adapipe_table(const CostModel& cost, const ModelConfig* cfg, int64_t tokens,
                           ElemBytes eb, const Layout& lay, TransferMode transfer, int p, int m,
                           int L, double memory_limit, int64_t mlp_chunk) {
  AdaPipeTable t;
  t.stages = p;
  t.layers = L;
  t.memory_limit = memory_limit;
  t.time = [&cost, p, L](int i, int n, Recompute r) {
    ComputeOp f;
    f.dir = Dir::kF;
    f.parts = stage_parts(i, p, n, L);
    ComputeOp b;
    b.dir = Dir::kB;
    b.parts.assign(f.parts.rbegin(), f.parts.rend());
    b.recompute = recompute_parts(b, r);
    return cost.op_time(f, r) + cost.op_time(b, r);
  };
  if (cfg) {
    const ModelConfig model = *cfg;
    t.memory = [model, tokens, eb, lay, transfer, p, m, L, mlp_chunk](int i, int n, Recompute r) {
      const double in_flight = std::min(m, p - i);
      const double stash = in_flight * static_cast<double>(op_stash_bytes(
                                           stage_parts(i, p, n, L), r, transfer, model, L, tokens, eb));
      const double params = stage_params_per_gpu(model, n, i == 0, i == p - 1, lay.tp);
      return stage_gpu_memory(model, lay, tokens, params, stash, mlp_chunk, eb.compute).total();
    };
  }
  return t;
}

AdaPipePlan adapipe_plan(const CostSetup& c, int stages, int microbatches, int layers,
                         double memory_limit) {
  const AdaPipeTable t =
      adapipe_table(c.cost, c.model ? &*c.model : nullptr, c.tokens_per_mb, c.elem_bytes, c.layout,
                    c.transfer, stages, microbatches, layers, memory_limit);
  return adapipe_search(t);
}

GpuMemory plan_gpu_memory(const ModelConfig& cfg, const Layout& lay, int64_t tokens,
                          const std::vector<int>& stage_layers, const std::vector<double>& stash,
                          int64_t mlp_chunk, int e) {
  GpuMemory worst;
  const int p = static_cast<int>(stage_layers.size());
  for (int i = 0; i < p; ++i) {
    const double params = stage_params_per_gpu(cfg, stage_layers[i], i == 0, i == p - 1, lay.tp);
    const GpuMemory g = stage_gpu_memory(cfg, lay, tokens, params, stash[i], mlp_chunk, e);
    if (i == 0 || g.total() > worst.total()) worst = g;
  }
  return worst;
}

double plan_max_params(const ModelConfig& cfg, const std::vector<int>& stage_layers, int tp) {
  double most = 0;
  const int p = static_cast<int>(stage_layers.size());
  for (int i = 0; i < p; ++i)
    most = std::max(most, stage_params_per_gpu(cfg, stage_layers[i], i == 0, i == p - 1, tp));
  return most;
}

std::string join_layers(const std::vector<int>& layers) {
  std::string s;
  for (int n : layers) s += (s.empty() ? "" : ",") + std::to_string(n);
  return s;
}

std::vector<std::string> recompute_names(const std::vector<Recompute>& policies) {
  std::vector<std::string> out;
  for (Recompute r : policies) out.emplace_back(recompute_str(r));
  return out;
}

std::string adapipe_plan_str(const std::vector<int>& layers, const std::vector<Recompute>& policies) {
  std::string s = "layers " + join_layers(layers) + " recompute ";
  for (size_t i = 0; i < policies.size(); ++i) s += (i ? "," : "") + std::string(recompute_str(policies[i]));
  return s;
}

}  // namespace hp

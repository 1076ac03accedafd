// AdamW (through the backends' kernels) against a hand-written double reference, the LR schedule,
// clipping, optimizer state round trip, sampling and the progress/SVG helpers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "kernels/cpu_kernels.h"
#include "runtime/optimizer.h"
#include "runtime/progress.h"
#include "runtime/sampling.h"
#include "runtime/train_state.h"
#include "util/error.h"
#include "util/rng.h"

namespace hp {
namespace {

// The algorithm as written in the AdamW paper / torch docs, one scalar at a time.
struct RefAdamW {
  double p, m = 0, v = 0;
  void step(double g, double lr, double b1, double b2, double eps, double wd, int t) {
    p = p - lr * wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / (1 - std::pow(b1, t));
    const double vhat = v / (1 - std::pow(b2, t));
    p = p - lr * mhat / (std::sqrt(vhat) + eps);
  }
};

TEST(AdamW, FirstStepByHand) {
  // Step 1 without decay: m_hat = g, v_hat = g^2, so p moves by lr * g / (|g| + eps).
  auto k = make_reference_kernels();
  double p = 1.0, g = 0.5, m = 0, v = 0;
  k->adamw(&p, &g, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0.0, 1, 1.0, DataPtr());
  EXPECT_NEAR(p, 1.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(m, 0.05, 1e-15);
  EXPECT_NEAR(v, 0.001 * 0.25, 1e-15);
  // With decay 0.1 (decoupled): first shrink by lr*wd, then the same step.
  p = 1.0, m = 0, v = 0;
  k->adamw(&p, &g, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0.1, 1, 1.0, DataPtr());
  EXPECT_NEAR(p, 1.0 * (1 - 0.01) - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
}

TEST(AdamW, MatchesReferenceOverManySteps) {
  const int n = 7, steps = 25;
  AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  std::vector<double> p(n), m(n, 0), v(n, 0), g(n);
  std::vector<float> pf(n), mf(n, 0), vf(n, 0), gf(n);
  std::vector<RefAdamW> ref(n);
  auto ref64 = make_reference_kernels();
  auto cpu = make_cpu_kernels(1);
  Rng rng(3);
  for (int i = 0; i < n; ++i) ref[i].p = p[i] = pf[i] = static_cast<float>(rng.normal());
  for (int t = 1; t <= steps; ++t) {
    const double lr = 0.01 * t / steps;
    const double scale = 0.5;
    for (int i = 0; i < n; ++i) {
      g[i] = static_cast<float>(rng.normal() * (i + 1));
      gf[i] = static_cast<float>(g[i]);
      ref[i].step(g[i] * scale, lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, t);
    }
    ref64->adamw(p.data(), g.data(), m.data(), v.data(), n, lr, cfg.beta1, cfg.beta2, cfg.eps,
                 cfg.weight_decay, t, scale, DataPtr());
    cpu->adamw(pf.data(), gf.data(), mf.data(), vf.data(), n, lr, cfg.beta1, cfg.beta2, cfg.eps,
               cfg.weight_decay, t, scale, DataPtr());
  }
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(p[i], ref[i].p, 1e-13 * std::abs(ref[i].p) + 1e-15) << i;
    EXPECT_NEAR(m[i], ref[i].m, 1e-13 * std::abs(ref[i].m) + 1e-15) << i;
    // The CPU kernels update f32 state in f32 arithmetic.
    EXPECT_NEAR(pf[i], ref[i].p, 1e-5 * std::abs(ref[i].p) + 1e-6) << i;
  }
}

TEST(AdamW, NoDecayForVectors) {
  // The AdamW class decays matrices only: a norm gain with zero gradient stays put.
  std::vector<float> w = {1, 1, 1, 1}, gw = {0, 0, 0, 0}, gain = {1, 1}, gg = {0, 0};
  std::vector<ParamRef> ps = {{"w", {2, 2}, w.data(), gw.data(), DataPtr(), nullptr, {}},
                              {"g", {2}, gain.data(), gg.data(), DataPtr(), nullptr, {}}};
  auto be = make_reference_backend();  // host memory: the vectors above are its memory too
  AdamW opt(*be, AdamWConfig{0.9, 0.95, 1e-8, 0.5});
  opt.step(ps, 0.1, 1.0);
  EXPECT_FLOAT_EQ(w[0], 0.95f);
  EXPECT_EQ(gain[0], 1.f);
  EXPECT_EQ(opt.steps(), 1);
}

TEST(AdamW, StateRoundTripContinuesIdentically) {
  std::vector<float> w(6), g(6);
  Rng rng(9);
  for (auto& x : w) x = static_cast<float>(rng.normal());
  std::vector<ParamRef> ps = {
      {"model.layers.0.mlp.up_proj.weight", {2, 3}, w.data(), g.data(), DataPtr(), nullptr, {}}};
  auto be = make_cpu_backend(1);
  AdamW a(*be);
  for (int t = 0; t < 3; ++t) {
    for (auto& x : g) x = static_cast<float>(rng.normal());
    a.step(ps, 0.01, 1.0);
  }
  std::string path = (std::filesystem::temp_directory_path() /
                      ("hp_opt_" + std::to_string(::getpid()) + ".safetensors")).string();
  write_safetensors(path, a.state_tensors(ps));
  std::vector<float> w2 = w;
  std::vector<ParamRef> ps2 = {{ps[0].name, {2, 3}, w2.data(), g.data(), DataPtr(), nullptr, {}}};
  AdamW b(*be);
  b.load_state(SafetensorsReader::open(path), ps2, a.steps());
  for (auto& x : g) x = static_cast<float>(rng.normal());
  a.step(ps, 0.01, 1.0);
  b.step(ps2, 0.01, 1.0);
  EXPECT_EQ(w, w2);  // bitwise
  std::filesystem::remove(path);
}

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{1.0, 0.1, 4, 14};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(2), 0.75);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);                 // cosine starts at the peak
  EXPECT_NEAR(s.at(9), 0.1 + 0.9 * 0.5, 1e-15);   // half way: mean of peak and floor
  EXPECT_NEAR(s.at(14), 0.1, 1e-15);
  EXPECT_NEAR(s.at(100), 0.1, 1e-15);             // stays at the floor after the end
  for (int t = 4; t < 14; ++t) EXPECT_GE(s.at(t), s.at(t + 1));
  LrSchedule none{2.0, 0.0, 0, 10};
  EXPECT_DOUBLE_EQ(none.at(0), 2.0);
  EXPECT_THROW((LrSchedule{-1, 0, 0, 1}.validate()), Error);
}

TEST(Clip, GlobalNormFromPartials) {
  auto k = make_reference_kernels();
  std::vector<float> a = {3, 0}, b = {0, 4};
  std::vector<double> partials = {k->sum_squares(a.data(), 2), k->sum_squares(b.data(), 2)};
  const double norm = global_norm_from_partials(partials);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  // Any partition of the same values gives the same norm.
  std::vector<float> all = {3, 0, 0, 4};
  std::vector<double> one = {k->sum_squares(all.data(), 4)};
  EXPECT_DOUBLE_EQ(global_norm_from_partials(one), norm);
  EXPECT_DOUBLE_EQ(clip_factor(5.0, 1.0), 0.2);
  EXPECT_DOUBLE_EQ(clip_factor(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_factor(5.0, 0.0), 1.0);  // clipping off
  // Clipping through grad_scale equals clipping the gradient beforehand.
  double p1 = 1, m1 = 0, v1 = 0, g1 = 3.0 * 0.2;
  double p2 = 1, m2 = 0, v2 = 0, g2 = 3.0;
  AdamWConfig cfg;
  k->adamw(&p1, &g1, &m1, &v1, 1, 0.1, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, 1, 1.0,
           DataPtr());
  k->adamw(&p2, &g2, &m2, &v2, 1, 0.1, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, 1, 0.2,
           DataPtr());
  EXPECT_DOUBLE_EQ(p1, p2);
}

TEST(TrainState, JsonRoundTripAndReshape) {
  TrainState s;
  s.step = 7;
  s.next_sequence = 10;
  s.seq_len = 64;
  s.seed = 42;
  s.history.push_back({1, 5.5, 1e-3, 2.0, 0.1, 1000});
  TrainState t = TrainState::from_json(s.to_json(), "test");
  EXPECT_EQ(t.to_json(), s.to_json());
  EXPECT_EQ(t.next_sequence_for(64), 10);
  EXPECT_EQ(t.next_sequence_for(128), 5);
  EXPECT_EQ(t.next_sequence_for(100), 7);  // 640 tokens -> ceil(6.4)
  nlohmann::json broken = s.to_json();
  broken.erase("data");
  EXPECT_THROW(TrainState::from_json(broken, "x"), Error);
}

TEST(TrainState, OutOfRangeFieldsAreRefusedNamingFieldAndFile) {
  TrainState s;
  s.step = 7;
  s.next_sequence = 10;
  s.seq_len = 64;
  s.microbatch_size = 2;
  s.microbatches = 4;
  s.lr.total = 100;
  s.history.push_back({1, 5.5, 1e-3, 2.0, 0.1, 1000});
  const nlohmann::json good = s.to_json();
  ASSERT_NO_THROW(TrainState::from_json(good, "ck/trainer_state.json"));
  const double big = 1e308;
  const nlohmann::json two63 = uint64_t{1} << 63;
  struct Case {
    const char* pointer;  // JSON pointer of the field to spoil
    nlohmann::json value;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"/adamw/beta1", -1, "adamw.beta1 must be in [0, 1)"},
      {"/adamw/beta1", 1.0, "adamw.beta1 must be in [0, 1)"},
      {"/adamw/beta2", big, "adamw.beta2 must be in [0, 1)"},
      {"/adamw/eps", 0.0, "adamw.eps must be in (0, 1]"},
      {"/adamw/eps", big, "adamw.eps must be in (0, 1]"},
      {"/adamw/weight_decay", -1, "adamw.weight_decay must be in [0, 10]"},
      {"/adamw/weight_decay", big, "adamw.weight_decay must be in [0, 10]"},
      {"/adamw/eps", "small", "adamw.eps is missing or not a number"},
      {"/clip", -1, "clip must be in [0, 1000000000]"},
      {"/clip", big, "clip must be in [0, 1000000000]"},
      {"/lr_schedule/peak", -1, "lr_schedule.peak must be in (0, 10]"},
      {"/lr_schedule/peak", big, "lr_schedule.peak must be in (0, 10]"},
      {"/lr_schedule/min_ratio", 2.0, "lr_schedule.min_ratio must be in [0, 1]"},
      {"/lr_schedule/warmup", -1, "lr_schedule.warmup must be in [0, 1099511627776]"},
      {"/lr_schedule/total", two63, "lr_schedule.total must be an integer"},
      {"/lr_schedule/total", big, "lr_schedule.total must be an integer"},
      {"/lr_schedule/total", 0, "lr_schedule.total must be in [1, 1099511627776]"},
      {"/step", -1, "step must be an integer in [0, 1099511627776]"},
      {"/step", two63, "step must be an integer in [0, 1099511627776]"},
      {"/step", big, "step must be an integer in [0, 1099511627776]"},
      {"/data/microbatches", -1, "data.microbatches must be an integer in [0, 1048576]"},
      {"/data/microbatches", two63, "data.microbatches must be an integer"},
      {"/data/microbatch_size", int64_t{1} << 21, "data.microbatch_size must be an integer"},
      {"/data/seq_len", 0, "data.seq_len must be an integer in [1, 16777216]"},
      {"/data/seq_len", big, "data.seq_len must be an integer"},
      {"/data/next_sequence", -1, "data.next_sequence must be an integer in [0, "},
      // 2^53 tokens / 64 per sequence = 2^47 sequences at most.
      {"/data/next_sequence", int64_t{1} << 48,
       "data.next_sequence must be an integer in [0, 140737488355328]"},
      {"/tokens_seen", two63, "tokens_seen must be an integer"},
      {"/loss_history/0/step", big, "loss_history entry"},
      {"/version", big, "trainer state version"},
      {"/rng/seed", big, "rng.seed is missing or not an integer"},
      {"/format", 5, "not a helixpipe trainer state"},  // used to escape as a json type_error
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    try {
      TrainState::from_json(j, "ck/trainer_state.json");
      ADD_FAILURE() << c.pointer << " = " << c.value.dump() << " was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(c.needle), std::string::npos) << c.pointer << ": " << m;
      EXPECT_EQ(m.rfind("ck/trainer_state.json: ", 0), 0u) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  // Older files without B and M, and the edges of each range, are accepted.
  nlohmann::json old = good;
  old["data"].erase("microbatch_size");
  old["data"].erase("microbatches");
  EXPECT_EQ(TrainState::from_json(old, "x").microbatches, 0);
  nlohmann::json edge = good;
  edge["adamw"]["beta1"] = 0.0;
  edge["adamw"]["weight_decay"] = 0.0;
  edge["clip"] = 0.0;
  edge["data"]["next_sequence"] = (int64_t{1} << 53) / 64;
  EXPECT_EQ(TrainState::from_json(edge, "x").next_sequence_for(128), (int64_t{1} << 53) / 128);
}

TEST(AdamW, NonFiniteOrNegativeMomentsAreRefusedNamingTheTensor) {
  std::vector<float> w(6, 1.f), g(6, 0.5f);
  std::vector<ParamRef> ps = {
      {"model.layers.0.mlp.up_proj.weight", {2, 3}, w.data(), g.data(), DataPtr(), nullptr, {}}};
  auto be = make_cpu_backend(1);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("hp_opt_bad_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  struct Case {
    const char* tensor;
    float value;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"exp_avg.", std::nanf(""),
       "'exp_avg.model.layers.0.mlp.up_proj.weight' holds nan at element 4"},
      {"exp_avg.", -INFINITY, "'exp_avg.model.layers.0.mlp.up_proj.weight' holds -inf"},
      {"exp_avg_sq.", INFINITY, "'exp_avg_sq.model.layers.0.mlp.up_proj.weight' holds inf"},
      {"exp_avg_sq.", -1.f, "'exp_avg_sq.model.layers.0.mlp.up_proj.weight' holds -1"},
  };
  for (const Case& c : cases) {
    std::vector<float> m(6, 0.1f), v(6, 0.2f);
    (std::string(c.tensor) == "exp_avg." ? m : v)[4] = c.value;
    const std::vector<StWriteTensor> ts = {
        {"exp_avg." + ps[0].name, StDType::kF32, {2, 3}, m.data()},
        {"exp_avg_sq." + ps[0].name, StDType::kF32, {2, 3}, v.data()}};
    write_safetensors(path, ts);
    AdamW a(*be);
    try {
      a.load_state(SafetensorsReader::open(path), ps, 3);
      ADD_FAILURE() << c.needle << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
  // A negative first moment is an ordinary value.
  std::vector<float> m(6, -0.1f), v(6, 0.2f);
  const std::vector<StWriteTensor> ts = {
      {"exp_avg." + ps[0].name, StDType::kF32, {2, 3}, m.data()},
      {"exp_avg_sq." + ps[0].name, StDType::kF32, {2, 3}, v.data()}};
  write_safetensors(path, ts);
  AdamW a(*be);
  EXPECT_NO_THROW(a.load_state(SafetensorsReader::open(path), ps, 3));
  std::filesystem::remove(path);
}

TEST(Sampling, GreedyTopKAndDistribution) {
  std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f};
  Rng rng(1);
  EXPECT_EQ(sample_token(logits, 4, 0.0, 0, rng), 1);  // first maximum
  EXPECT_EQ(sample_token(logits, 1, 1.0, 0, rng), 0);  // limit restricts the ids
  std::vector<int> counts(4, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[sample_token(logits, 4, 1.0, 2, rng)]++;
  EXPECT_EQ(counts[0] + counts[2], 0);  // top-2 keeps ids 1 and 3 only
  EXPECT_NEAR(counts[1] / double(n), 0.5, 0.02);
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < n; ++i) counts[sample_token(logits, 4, 1.0, 0, rng)]++;
  const double z = 1 + 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(counts[2] / double(n), std::exp(1.0) / z, 0.015);
  Rng a(5), b(5);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(logits, 4, 0.8, 3, a), sample_token(logits, 4, 0.8, 3, b));
}

TEST(Progress, FormatsAndSvg) {
  EXPECT_EQ(format_duration(12.34), "12.3s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_count(12345), "12.3k");
  std::vector<StepRecord> h;
  for (int i = 1; i <= 30; ++i) h.push_back({i, 5.0 / i, 1e-3, 1, 0.1, 100});
  std::string svg = loss_curve_svg(h, "a <b> & c");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("a &lt;b&gt; &amp; c"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), ','), 2 * 30 + 0);  // one x,y pair per step per line
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// What ProgressLine writes for `steps` steps in a mode, as text.
std::string progress_text(bool tty, int64_t total, LogInterval every) {
  std::FILE* f = std::tmpfile();
  {
    ProgressLine p(f, tty, total, every);
    for (int64_t s = 1; s <= total; ++s) p.update({s, 2.0, 1e-3, 1, 0.1, 100}, 1.0);
    p.finish();
  }
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out += static_cast<char>(c);
  std::fclose(f);
  return out;
}

TEST(Progress, LinesAtTheIntervalAndInPlaceOnATerminal) {
  const std::string lines = progress_text(false, 7, LogInterval{3, 0});
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 4) << lines;  // steps 1, 3, 6, 7
  for (const char* s : {"step 1/7", "step 3/7", "step 6/7", "step 7/7"})
    EXPECT_NE(lines.find(s), std::string::npos) << s;
  EXPECT_EQ(lines.find('\r'), std::string::npos);
  const std::string tty = progress_text(true, 7, LogInterval{3, 0});
  EXPECT_EQ(std::count(tty.begin(), tty.end(), '\r'), 7);
  EXPECT_EQ(std::count(tty.begin(), tty.end(), '\n'), 1);  // finish() ends the line
  // A long interval in seconds: only the first and the last step.
  const std::string secs = progress_text(false, 5, LogInterval{0, 3600});
  EXPECT_EQ(std::count(secs.begin(), secs.end(), '\n'), 2) << secs;
}

TEST(Progress, ParsesModesAndIntervals) {
  EXPECT_EQ(parse_log_interval("20").steps, 20);
  EXPECT_EQ(parse_log_interval("30s").seconds, 30.0);
  EXPECT_EQ(parse_log_interval("0.5s").seconds, 0.5);
  for (const char* bad : {"0", "-3", "2.5", "s", "", "10m", "1e99", "nan", "3 s"})
    EXPECT_THROW(parse_log_interval(bad), Error) << bad;
  EXPECT_EQ(parse_progress_mode("lines"), ProgressMode::kLines);
  EXPECT_THROW(parse_progress_mode("fancy"), Error);
  EXPECT_TRUE(progress_in_place(ProgressMode::kTty, false));
  EXPECT_FALSE(progress_in_place(ProgressMode::kLines, true));
  // auto: never in place for several processes, nor with CI set.
  EXPECT_FALSE(progress_in_place(ProgressMode::kAuto, false));
  ::setenv("CI", "1", 1);
  EXPECT_FALSE(progress_in_place(ProgressMode::kAuto, true));
  ::unsetenv("CI");
}

}  // namespace
}  // namespace hp

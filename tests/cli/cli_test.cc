// The training commands end to end, by running the helixpipe binary: init -> grad equals the
// model's own loss_and_grads on the sequences the spec names; grad file layout; eval; resume
// reproduces an uninterrupted run bit for bit; loss falls on text; generate; bad inputs fail with
// a clear message and a non-zero exit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/params.h"
#include "runtime/model_io.h"
#include "util/atomic_file.h"
#include "util/rng.h"
#include "run_cli.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

using CmdResult = test::CliResult;

CmdResult helixpipe(const std::string& args) { return test::run_helixpipe(args); }

std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t pos = t.rfind('\n');
  return pos == std::string::npos ? t : t.substr(pos + 1);
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hp_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // English-like text from a fixed word list: a byte model learns its spelling quickly.
    const char* words[] = {"the", "king", "said", "unto", "them", "and", "it", "was", "good",
                           "light", "land", "water", "of", "in", "that", "he", "made", "day"};
    Rng rng(7);
    std::string text;
    while (text.size() < 40000) {
      const int n = 5 + static_cast<int>(rng.uniform() * 8);
      for (int i = 0; i < n; ++i) {
        std::string w = words[static_cast<int>(rng.uniform() * 18)];
        if (i == 0) w[0] = static_cast<char>(w[0] - 'a' + 'A');
        text += w + (i + 1 < n ? " " : ".\n");
      }
    }
    write_file_atomic(path("text.txt"), text);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::vector<float> read_tensor(const SafetensorsReader& f, const std::string& name) {
  const StTensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> v(t->numel());
  f.read_f32(name, t->shape, v.data());
  return v;
}

// Loss and gradients computed here with the library, reading the data by the spec's formula.
struct Reference {
  double loss;
  std::map<std::string, std::vector<float>> grads;
};

Reference reference_grad(const std::string& ckpt, const std::string& data, int64_t S, int64_t B,
                         int64_t M, Precision prec = Precision::fp32()) {
  const CheckpointInfo info = open_checkpoint(ckpt);
  const ModelConfig cfg = model_config_from_hf(info.config, "config");
  auto be = make_cpu_backend(1);
  Params params(cfg, Params::all_parts(cfg), *be, prec);
  std::vector<float> w(static_cast<size_t>(params.size()));
  load_model_safetensors(info.model_path, cfg,
                         [&](const std::string& n) { return w.data() + params.tensor(n).offset; });
  params.set_values(w);
  const std::string bytes = read_file(data);
  std::vector<int32_t> tokens(B * M * S), targets(B * M * S);
  for (int64_t j = 0; j < M; ++j) {
    for (int64_t r = 0; r < B; ++r) {
      const int64_t k = j * B + r;
      for (int64_t i = 0; i < S; ++i) {
        tokens[(j * B + r) * S + i] = static_cast<uint8_t>(bytes[k * S + i]);
        targets[(j * B + r) * S + i] = static_cast<uint8_t>(bytes[k * S + i + 1]);
      }
    }
  }
  Model model(params);
  TokenBuffer tok, tgt;
  tok.upload(*be, tokens, cfg.vocab, "token");
  tgt.upload(*be, targets, cfg.vocab, "target");
  params.zero_grad();
  Reference ref;
  ref.loss = loss_and_grads(model, tok.data(), tgt.data(), B, S, static_cast<int>(M));
  const std::vector<float> grads = params.host_grads<float>();
  for (const ParamTensor& t : params.tensors()) {
    const float* g = grads.data() + t.offset;
    ref.grads[t.name].assign(g, g + t.numel);
  }
  return ref;
}

TEST_F(CliTest, InitWritesHuggingFaceLayout) {
  const CmdResult r = helixpipe("init --model=tiny --seed=5 --out=" + path("m"));
  ASSERT_EQ(r.rc, 0) << r.out;
  const CheckpointInfo info = open_checkpoint(path("m"));
  EXPECT_TRUE(info.has_marker);
  EXPECT_EQ(info.config["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(info.config["num_key_value_heads"], 2);
  const ModelConfig cfg = model_config_from_hf(info.config, "config");
  const auto file = SafetensorsReader::open(info.model_path);
  const auto specs = hf_tensor_specs(cfg);
  ASSERT_EQ(file.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(file.tensors()[i].name, specs[i].name);
    EXPECT_EQ(file.tensors()[i].shape, specs[i].shape);
    EXPECT_EQ(file.tensors()[i].dtype, StDType::kF32);
  }
  // The values are the model's own seeded initialization.
  auto be = make_reference_backend();
  Params params(cfg, Params::all_parts(cfg), *be);
  params.init(5);
  const std::vector<float> values = params.host_values<float>();
  for (const ParamTensor& t : params.tensors()) {
    const std::vector<float> want(values.begin() + t.offset, values.begin() + t.offset + t.numel);
    EXPECT_EQ(read_tensor(file, t.name), want) << t.name;
  }
  // Another seed gives other values.
  ASSERT_EQ(helixpipe("init --model=tiny --seed=6 --out=" + path("m6")).rc, 0);
  const auto other = SafetensorsReader::open(path("m6") + "/model.safetensors");
  EXPECT_NE(read_tensor(other, "model.layers.0.self_attn.q_proj.weight"),
            read_tensor(file, "model.layers.0.self_attn.q_proj.weight"));
}

TEST_F(CliTest, GradEqualsModelLossAndGrads) {
  // Untied preset and a tied GQA config from a JSON file.
  write_file_atomic(path("tied.json"),
                    R"({"hidden_size": 32, "intermediate_size": 40, "num_attention_heads": 4,
                        "num_key_value_heads": 1, "num_hidden_layers": 2, "vocab_size": 256,
                        "tie_word_embeddings": true})");
  for (const std::string& model : {std::string("tiny"), path("tied.json")}) {
    SCOPED_TRACE(model);
    fs::remove_all(path("m"));
    ASSERT_EQ(helixpipe("init --model=" + model + " --seed=11 --out=" + path("m")).rc, 0);
    const int64_t S = 24, B = 2, M = 3;
    const CmdResult r = helixpipe(fmt::format(
        "grad --checkpoint={} --data={} --seq-len={} --microbatch-size={} --microbatches={} "
        "--out={} --threads=1",
        path("m"), path("text.txt"), S, B, M, path("g.safetensors")));
    ASSERT_EQ(r.rc, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(last_line(r.out));
    ASSERT_TRUE(j.contains("loss")) << r.out;
    const Reference ref = reference_grad(path("m"), path("text.txt"), S, B, M);
    EXPECT_EQ(j["loss"].get<double>(), ref.loss);
    EXPECT_GT(ref.loss, 4.0);  // near ln(256) for a fresh model
    const auto file = SafetensorsReader::open(path("g.safetensors"));
    const CheckpointInfo info = open_checkpoint(path("m"));
    const auto specs = hf_tensor_specs(model_config_from_hf(info.config, "config"));
    ASSERT_EQ(file.tensors().size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(file.tensors()[i].name, specs[i].name);
      EXPECT_EQ(file.tensors()[i].shape, specs[i].shape);
      EXPECT_EQ(file.tensors()[i].dtype, StDType::kF32);
      EXPECT_EQ(read_tensor(file, specs[i].name), ref.grads.at(specs[i].name)) << specs[i].name;
    }
  }
}

TEST_F(CliTest, GradReadsTheSpecifiedSequences) {
  // Changing a byte beyond the last target of B*M sequences leaves the loss unchanged; changing
  // the last target changes it.
  ASSERT_EQ(helixpipe("init --model=tiny --out=" + path("m")).rc, 0);
  const int64_t S = 16, B = 2, M = 2;
  std::string text = read_file(path("text.txt"));
  auto grad_loss = [&](const std::string& t) {
    write_file_atomic(path("t.txt"), t);
    const CmdResult r = helixpipe(fmt::format("grad --checkpoint={} --data={} --seq-len={} "
                                        "--microbatch-size={} --microbatches={} --out={}",
                                        path("m"), path("t.txt"), S, B, M, path("g.st")));
    EXPECT_EQ(r.rc, 0) << r.out;
    return nlohmann::json::parse(last_line(r.out))["loss"].get<double>();
  };
  const double base = grad_loss(text);
  std::string after = text;
  after[B * M * S + 1] = after[B * M * S + 1] == 'x' ? 'y' : 'x';
  EXPECT_EQ(grad_loss(after), base);
  std::string last = text;
  last[B * M * S] = last[B * M * S] == 'x' ? 'y' : 'x';
  EXPECT_NE(grad_loss(last), base);
}

TEST_F(CliTest, EvalMatchesGradLossAndPerplexity) {
  ASSERT_EQ(helixpipe("init --model=tiny --seed=2 --out=" + path("m")).rc, 0);
  const CmdResult g = helixpipe("grad --checkpoint=" + path("m") + " --data=" + path("text.txt") +
                          " --seq-len=32 --microbatch-size=3 --microbatches=2 --out=" + path("g.st"));
  ASSERT_EQ(g.rc, 0) << g.out;
  const double grad_loss = nlohmann::json::parse(last_line(g.out))["loss"].get<double>();
  const CmdResult e = helixpipe("eval --checkpoint=" + path("m") + " --data=" + path("text.txt") +
                          " --seq-len=32 --max-sequences=6 --batch-size=4");
  ASSERT_EQ(e.rc, 0) << e.out;
  const nlohmann::json j = nlohmann::json::parse(last_line(e.out));
  EXPECT_NEAR(j["loss"].get<double>(), grad_loss, 1e-6 * grad_loss);
  EXPECT_NEAR(j["ppl"].get<double>(), std::exp(j["loss"].get<double>()), 1e-9 * j["ppl"].get<double>());
  // --skip-sequences: sequences 3..5 alone, weighted with 0..2, give the mean over 0..5.
  auto eval_loss_of = [&](const std::string& extra) {
    const CmdResult r = helixpipe("eval --checkpoint=" + path("m") + " --data=" + path("text.txt") +
                                  " --seq-len=32 " + extra);
    EXPECT_EQ(r.rc, 0) << r.out;
    return nlohmann::json::parse(last_line(r.out))["loss"].get<double>();
  };
  const double first3 = eval_loss_of("--max-sequences=3");
  const double next3 = eval_loss_of("--skip-sequences=3 --max-sequences=3");
  EXPECT_NE(first3, next3);
  EXPECT_NEAR((first3 + next3) / 2, j["loss"].get<double>(), 1e-6 * grad_loss);
}

std::vector<double> log_losses(const std::string& path) {
  std::vector<double> v;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) v.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return v;
}

TEST_F(CliTest, ResumeReproducesTheUninterruptedRun) {
  const std::string common = "--model=tiny --data=" + path("text.txt") +
                             " --seq-len=32 --microbatch-size=2 --microbatches=2 --steps=10 "
                             "--lr=5e-3 --warmup=2 --threads=1 --seed=9";
  const CmdResult a = helixpipe("train " + common + " --save=" + path("a") + " --log=" + path("a.jsonl"));
  ASSERT_EQ(a.rc, 0) << a.out;
  const CmdResult b1 = helixpipe("train " + common + " --stop-after=5 --save=" + path("b") +
                           " --log=" + path("b.jsonl"));
  ASSERT_EQ(b1.rc, 0) << b1.out;
  // Resume with no run flags: everything comes from the checkpoint.
  const CmdResult b2 = helixpipe("train --resume=" + path("b") + " --data=" + path("text.txt") +
                           " --threads=1 --save=" + path("b") + " --log=" + path("b.jsonl"));
  ASSERT_EQ(b2.rc, 0) << b2.out;
  EXPECT_NE(b2.out.find("resuming at step 5"), std::string::npos) << b2.out;
  const auto la = log_losses(path("a.jsonl")), lb = log_losses(path("b.jsonl"));
  ASSERT_EQ(la.size(), 10u);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(read_file(path("a") + "/model.safetensors"), read_file(path("b") + "/model.safetensors"));
  EXPECT_EQ(read_file(path("a") + "/optimizer.safetensors"),
            read_file(path("b") + "/optimizer.safetensors"));
  const auto st = nlohmann::json::parse(read_file(path("b") + "/trainer_state.json"));
  EXPECT_EQ(st["step"], 10);
  EXPECT_EQ(st["data"]["next_sequence"], 40);
  EXPECT_EQ(st["loss_history"].size(), 10u);
  // The run is over: resuming again asks for more steps.
  const CmdResult b3 = helixpipe("train --resume=" + path("b") + " --data=" + path("text.txt"));
  EXPECT_NE(b3.rc, 0);
  EXPECT_NE(b3.out.find("raise --steps"), std::string::npos) << b3.out;
}

TEST_F(CliTest, SaveEveryOverridesAndStartingFromWeights) {
  const std::string data = " --data=" + path("text.txt");
  const CmdResult a = helixpipe("train --model=tiny" + data +
                                " --seq-len=16 --microbatch-size=2 --steps=6 --save-every=2 "
                                "--stop-after=4 --save=" + path("d"));
  ASSERT_EQ(a.rc, 0) << a.out;
  auto state = [&] { return nlohmann::json::parse(read_file(path("d") + "/trainer_state.json")); };
  EXPECT_EQ(state()["step"], 4);
  EXPECT_EQ(state()["data"]["next_sequence"], 8);
  // Extending a run: --steps overrides the saved schedule, with a note.
  const CmdResult b = helixpipe("train --resume=" + path("d") + data + " --steps=8 --save=" + path("d"));
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("resuming with changed --steps"), std::string::npos) << b.out;
  EXPECT_EQ(state()["step"], 8);
  EXPECT_EQ(state()["lr_schedule"]["total"], 8);
  EXPECT_EQ(state()["loss_history"].size(), 8u);
  // --checkpoint takes the weights only: a fresh run from step 0 and sequence 0.
  const CmdResult c = helixpipe("train --checkpoint=" + path("d") + data +
                                " --seq-len=16 --steps=1 --save=" + path("e"));
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("starting at step 0"), std::string::npos) << c.out;
  const auto e = nlohmann::json::parse(read_file(path("e") + "/trainer_state.json"));
  EXPECT_EQ(e["step"], 1);
  EXPECT_EQ(e["data"]["next_sequence"], 1);
  // Its first loss is the trained model's loss on sequence 0, below a fresh model's.
  EXPECT_LT(e["loss_history"][0]["loss"].get<double>(),
            state()["loss_history"][0]["loss"].get<double>());
}

TEST_F(CliTest, LossFallsOnText) {
  const CmdResult r = helixpipe("train --model=tiny --data=" + path("text.txt") +
                          " --seq-len=64 --microbatch-size=4 --steps=60 --lr=1e-2 --warmup=5 "
                          "--log=" + path("l.jsonl") + " --loss-svg=" + path("l.svg") +
                          " --save=" + path("m"));
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto l = log_losses(path("l.jsonl"));
  ASSERT_EQ(l.size(), 60u);
  double tail = 0;
  for (size_t i = 50; i < 60; ++i) tail += l[i];
  tail /= 10;
  EXPECT_LT(tail, 0.8 * l[0]) << "first " << l[0] << " last-10 mean " << tail;
  EXPECT_NE(read_file(path("l.svg")).find("<svg"), std::string::npos);
  EXPECT_NE(r.out.find("done: 60 steps"), std::string::npos) << r.out;
  // JSONL fields.
  std::ifstream in(path("l.jsonl"));
  std::string line;
  std::getline(in, line);
  const auto j = nlohmann::json::parse(line);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "seconds", "tokens_per_s",
                          "tokens_seen", "gflops"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  // The trained model is better on this text than a fresh one.
  const CmdResult e = helixpipe("eval --checkpoint=" + path("m") + " --data=" + path("text.txt") +
                          " --seq-len=64 --max-sequences=32");
  ASSERT_EQ(e.rc, 0) << e.out;
  EXPECT_LT(nlohmann::json::parse(last_line(e.out))["loss"].get<double>(), 0.8 * l[0]);
  // Generation continues the prompt deterministically for a seed.
  const CmdResult g1 = helixpipe("generate --checkpoint=" + path("m") +
                           " --prompt=The --tokens=40 --seed=3 --top-k=5");
  const CmdResult g2 = helixpipe("generate --checkpoint=" + path("m") +
                           " --prompt=The --tokens=40 --seed=3 --top-k=5");
  ASSERT_EQ(g1.rc, 0) << g1.out;
  EXPECT_EQ(g1.out, g2.out);
  EXPECT_EQ(g1.out.rfind("The", 0), 0u) << g1.out;
  EXPECT_EQ(g1.out.size(), 3u + 40u + 1u);
  // Greedy decoding with the KV cache picks the same bytes as re-running the forward pass.
  const std::string greedy = "generate --checkpoint=" + path("m") + " --prompt=And --tokens=50 --temperature=0";
  const CmdResult c1 = helixpipe(greedy);
  const CmdResult c2 = helixpipe(greedy + " --no-cache");
  ASSERT_EQ(c1.rc, 0) << c1.out;
  ASSERT_EQ(c2.rc, 0) << c2.out;
  EXPECT_EQ(c1.out, c2.out);
  // A window smaller than the text: the cache refills and generation goes on.
  const CmdResult c3 = helixpipe(greedy + " --context=8");
  ASSERT_EQ(c3.rc, 0) << c3.out;
  EXPECT_EQ(c3.out.size(), 3u + 50u + 1u);
}

// --precision on grad, eval and train. bf16 reaches the model: grad equals the library's own bf16
// loss_and_grads on the CPU backend bit for bit and differs from fp32 by bf16 rounding only; a bf16
// run resumed without the flag continues in bf16 and reproduces the uninterrupted run; auto takes
// what the kernels offer; bf16 where the kernels lack it is refused with a message.
TEST_F(CliTest, PrecisionFlagReachesTheModel) {
  if (!make_cpu_backend(1)->kernels().supports(Precision::bf16()))
    GTEST_SKIP() << "the CPU backend offers no bf16 here (it needs AVX512-BF16 and oneDNN)";
  ASSERT_EQ(helixpipe("init --model=tiny --seed=5 --out=" + path("m")).rc, 0);
  const int64_t S = 32, B = 2, M = 2;
  auto grad = [&](const std::string& precision) {
    const CmdResult r = helixpipe(fmt::format(
        "grad --checkpoint={} --data={} --seq-len={} --microbatch-size={} --microbatches={} "
        "--out={} --threads=1 --precision={}",
        path("m"), path("text.txt"), S, B, M, path("g.safetensors"), precision));
    EXPECT_EQ(r.rc, 0) << r.out;
    return r;
  };
  const CmdResult g16 = grad("bf16");
  ASSERT_EQ(g16.rc, 0) << g16.out;
  EXPECT_NE(g16.out.find("(bf16)"), std::string::npos) << g16.out;
  const double loss16 = nlohmann::json::parse(last_line(g16.out))["loss"].get<double>();
  const Reference ref16 =
      reference_grad(path("m"), path("text.txt"), S, B, M, Precision::bf16());
  EXPECT_EQ(loss16, ref16.loss);
  const auto file = SafetensorsReader::open(path("g.safetensors"));
  for (const auto& [name, g] : ref16.grads) EXPECT_EQ(read_tensor(file, name), g) << name;
  const double loss32 =
      nlohmann::json::parse(last_line(grad("fp32").out))["loss"].get<double>();
  EXPECT_NE(loss16, loss32) << "the bf16 run computed in fp32";
  EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
  EXPECT_EQ(nlohmann::json::parse(last_line(grad("auto").out))["loss"].get<double>(), loss16);

  const std::string eval = "eval --checkpoint=" + path("m") + " --data=" + path("text.txt") +
                           " --seq-len=32 --max-sequences=4 --threads=1 --precision=";
  const CmdResult e16 = helixpipe(eval + "bf16"), e32 = helixpipe(eval + "fp32");
  ASSERT_EQ(e16.rc, 0) << e16.out;
  ASSERT_EQ(e32.rc, 0) << e32.out;
  EXPECT_NE(e16.out.find("in bf16"), std::string::npos) << e16.out;
  const double el16 = nlohmann::json::parse(last_line(e16.out))["loss"].get<double>();
  const double el32 = nlohmann::json::parse(last_line(e32.out))["loss"].get<double>();
  EXPECT_NE(el16, el32);
  EXPECT_NEAR(el16, el32, 1e-2 * el32);

  const std::string common = "--model=tiny --data=" + path("text.txt") +
                             " --seq-len=32 --microbatch-size=2 --steps=6 --lr=5e-3 --threads=1 "
                             "--precision=bf16";
  const CmdResult a = helixpipe("train " + common + " --log=" + path("a.jsonl"));
  ASSERT_EQ(a.rc, 0) << a.out;
  EXPECT_NE(a.out.find("bf16 on"), std::string::npos) << a.out;
  // MFU against the bf16 rate: twice the cpu profile's fp32 figure.
  EXPECT_NE(a.out.find(" x 2 for bf16 x 1 thread"), std::string::npos) << a.out;
  ASSERT_EQ(helixpipe("train " + common + " --stop-after=3 --save=" + path("b") + " --log=" +
                      path("b.jsonl"))
                .rc,
            0);
  EXPECT_EQ(nlohmann::json::parse(read_file(path("b") + "/trainer_state.json"))["precision"],
            "bf16");
  const CmdResult b2 = helixpipe("train --resume=" + path("b") + " --data=" + path("text.txt") +
                                 " --threads=1 --log=" + path("b.jsonl"));
  ASSERT_EQ(b2.rc, 0) << b2.out;
  EXPECT_NE(b2.out.find("bf16 on"), std::string::npos) << b2.out;
  EXPECT_EQ(log_losses(path("a.jsonl")), log_losses(path("b.jsonl")));
  // Resuming in another precision is allowed (the saved state is f32) and said.
  const CmdResult b3 = helixpipe("train --resume=" + path("b") + " --data=" + path("text.txt") +
                                 " --threads=1 --precision=fp32 --stop-after=4");
  ASSERT_EQ(b3.rc, 0) << b3.out;
  EXPECT_NE(b3.out.find("resuming a run trained in bf16 in fp32"), std::string::npos) << b3.out;
  EXPECT_EQ(b3.out.find("for bf16"), std::string::npos) << b3.out;
  EXPECT_NE(b3.out.find("MFU against"), std::string::npos) << b3.out;

  // Kernels without bf16 (forced here): auto falls back to fp32, an explicit bf16 is refused.
  ::setenv("HP_CPU_ISA", "avx512", 1);
  const CmdResult f32 = grad("fp32"), fauto = grad("auto");
  const CmdResult refused = helixpipe(fmt::format(
      "grad --checkpoint={} --data={} --seq-len=8 --out={} --precision=bf16", path("m"),
      path("text.txt"), path("x.safetensors")));
  ::unsetenv("HP_CPU_ISA");
  EXPECT_EQ(last_line(fauto.out), last_line(f32.out));
  EXPECT_NE(refused.rc, 0);
  EXPECT_NE(refused.out.find("--precision=bf16 needs bf16 kernels"), std::string::npos)
      << refused.out;
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
}

// --progress and --log-interval: plain lines at the interval (the popen'ed stdout is no terminal,
// so auto gives lines too), or a line rewritten in place when asked for.
TEST_F(CliTest, ProgressLinesOrInPlace) {
  const std::string run = "train --model=tiny --data=" + path("text.txt") +
                          " --seq-len=16 --steps=6 --threads=1 ";
  const CmdResult lines = helixpipe(run + "--log-interval=2");
  ASSERT_EQ(lines.rc, 0) << lines.out;
  EXPECT_EQ(lines.out.find('\r'), std::string::npos) << lines.out;
  for (const char* s : {"step 1/6", "step 2/6", "step 4/6", "step 6/6"})
    EXPECT_NE(lines.out.find(s), std::string::npos) << s << "\n" << lines.out;
  EXPECT_EQ(lines.out.find("step 3/6"), std::string::npos) << lines.out;
  const CmdResult tty = helixpipe(run + "--progress=tty");
  ASSERT_EQ(tty.rc, 0) << tty.out;
  EXPECT_NE(tty.out.find("\r\033[K"), std::string::npos) << tty.out;
}

// Output paths that cannot be written are refused before the first step, not after the run; the
// summary lists what was written; missing folders are created.
TEST_F(CliTest, RunsThatCannotFitAreRefusedBeforeAllocating) {
  // The limit comes from HP_MEMORY_LIMIT here so that the test does not depend on this machine's
  // free memory; the tiny model's run needs about 1 MiB.
  ::setenv("HP_MEMORY_LIMIT", "200K", 1);
  const std::string data = " --data=" + path("text.txt") + " --seq-len=16 --threads=1";
  const CmdResult g0 = helixpipe("init --model=tiny --out=" + path("m"));
  ASSERT_EQ(g0.rc, 0) << g0.out;
  for (const std::string& run :
       {"train --model=tiny --steps=3 --save=" + path("ck") + data,
        "train --model=tiny --steps=3 --stages=2 --schedule=1f1b --microbatches=2 --save=" +
            path("ck") + data,
        "grad --checkpoint=" + path("m") + " --out=" + path("g.safetensors") + data}) {
    const CmdResult r = helixpipe(run);
    EXPECT_EQ(r.rc, 1) << run << "\n" << r.out;
    for (const char* needle : {"would need about", "weights", "activation stash",
                               "is available (HP_MEMORY_LIMIT)", "--seq-len"})
      EXPECT_NE(r.out.find(needle), std::string::npos) << needle << " in\n" << r.out;
    EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << run;
    EXPECT_FALSE(fs::exists(path("ck"))) << "the refused run made its checkpoint folder";
    EXPECT_FALSE(fs::exists(path("g.safetensors")));
  }
  ::setenv("HP_MEMORY_LIMIT", "64x", 1);
  const CmdResult bad = helixpipe("train --model=tiny --steps=3" + data);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.out.find("HP_MEMORY_LIMIT='64x' is not a size"), std::string::npos) << bad.out;
  ::unsetenv("HP_MEMORY_LIMIT");
  const CmdResult ok = helixpipe("train --model=tiny --steps=3" + data);
  EXPECT_EQ(ok.rc, 0) << ok.out;
}

TEST_F(CliTest, OutputPathsAreCheckedBeforeTheFirstStep) {
  fs::create_directories(path("busy"));
  write_file_atomic(path("busy/notes.txt"), "someone's file");
  const std::string run = "train --model=tiny --data=" + path("text.txt") +
                          " --seq-len=16 --steps=3 --threads=1 ";
  struct Case {
    std::string flags, message;
  };
  for (const Case& c : std::vector<Case>{
           {"--save=" + path("busy"), "neither empty nor a checkpoint"},
           {"--log=" + path("text.txt") + "/l.jsonl", "is not a folder"},
           {"--loss-svg=" + path("busy"), "is a folder"},
           {"--save=" + path("text.txt") + "/ck", "cannot create folder"}}) {
    const CmdResult r = helixpipe(run + c.flags);
    EXPECT_NE(r.rc, 0) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.flags << "\n" << r.out;
    EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << "a step ran: " << c.flags;
  }
  EXPECT_EQ(read_file(path("busy/notes.txt")), "someone's file");
  const CmdResult g = helixpipe("init --model=tiny --out=" + path("m"));
  ASSERT_EQ(g.rc, 0) << g.out;
  const CmdResult gr = helixpipe("grad --checkpoint=" + path("m") + " --data=" + path("text.txt") +
                                 " --seq-len=8 --out=" + path("busy"));
  EXPECT_NE(gr.rc, 0);
  EXPECT_NE(gr.out.find("--out '" + path("busy") + "' is a folder"), std::string::npos) << gr.out;
  // Missing folders are created; the summary names every file.
  const CmdResult ok = helixpipe(run + "--save=" + path("new/a/ck") + " --log=" +
                                 path("new/b/l.jsonl") + " --loss-svg=" + path("new/c/l.svg"));
  ASSERT_EQ(ok.rc, 0) << ok.out;
  for (const std::string& p : {path("new/a/ck"), path("new/b/l.jsonl"), path("new/c/l.svg")}) {
    EXPECT_TRUE(fs::exists(p)) << p;
    EXPECT_NE(ok.out.find(p), std::string::npos) << p << "\n" << ok.out;
  }
  EXPECT_NE(ok.out.find("(checkpoint)"), std::string::npos) << ok.out;
}

TEST_F(CliTest, TokenizeThenTrainReadsTheSameTokens) {
  const CmdResult t = helixpipe("tokenize --input=" + path("text.txt") + " --out=" + path("t.tok"));
  ASSERT_EQ(t.rc, 0) << t.out;
  ASSERT_EQ(helixpipe("init --model=tiny --out=" + path("m")).rc, 0);
  const std::string g = " --seq-len=16 --microbatches=2 --out=" + path("g.st");
  const CmdResult a = helixpipe("grad --checkpoint=" + path("m") + " --data=" + path("text.txt") + g);
  const CmdResult b = helixpipe("grad --checkpoint=" + path("m") + " --data=" + path("t.tok") + g);
  ASSERT_EQ(a.rc, 0) << a.out;
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_EQ(last_line(a.out), last_line(b.out));
}

// The same text bytes as an llm.c shard, a nanoGPT .bin and a Megatron dataset (two documents)
// give the same gradient as the text itself; a file with an id the model cannot embed is refused
// naming the position, and an unknown --data-format is a usage error.
TEST_F(CliTest, ForeignTokenFilesTrainLikeTheirText) {
  const std::string text = read_file(path("text.txt")).substr(0, 4000);
  write_file_atomic(path("short.txt"), text);
  auto le = [](uint64_t v, int bytes) {
    std::string b;
    for (int i = 0; i < bytes; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return b;
  };
  std::string u16;
  for (unsigned char c : text) u16 += le(c, 2);
  std::string llmc = le(20240520, 4) + le(1, 4) + le(text.size(), 4) + std::string(253 * 4, '\0');
  write_file_atomic(path("shard.bin"), llmc + u16);
  write_file_atomic(path("train.bin"), u16);
  write_file_atomic(path("mega_text_document.bin"), u16);
  const uint64_t half = text.size() / 2;
  write_file_atomic(path("mega_text_document.idx"),
                    std::string("MMIDIDX\0\0", 9) + le(1, 8) + le(8, 1) + le(2, 8) + le(3, 8) +
                        le(half, 4) + le(text.size() - half, 4) + le(0, 8) + le(2 * half, 8) +
                        le(0, 8) + le(1, 8) + le(2, 8));
  ASSERT_EQ(helixpipe("init --model=tiny --out=" + path("m")).rc, 0);
  const std::string g = " --seq-len=16 --microbatches=2 --out=" + path("g.st");
  const CmdResult ref =
      helixpipe("grad --checkpoint=" + path("m") + " --data=" + path("short.txt") + g);
  ASSERT_EQ(ref.rc, 0) << ref.out;
  for (const std::string& data : {path("shard.bin"), path("train.bin"), path("mega_text_document"),
                                  path("mega_text_document.idx")}) {
    const CmdResult r = helixpipe("grad --checkpoint=" + path("m") + " --data=" + data + g);
    ASSERT_EQ(r.rc, 0) << data << "\n" << r.out;
    EXPECT_EQ(last_line(r.out), last_line(ref.out)) << data;
  }
  const CmdResult t = helixpipe("train --model=tiny --steps=1 --seq-len=16 --data=" +
                                path("mega_text_document") + " --data-format=megatron");
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("Megatron indexed dataset, uint16, 2 documents"), std::string::npos)
      << t.out;
  // Token 300 at position 5 is beyond the tiny model's vocabulary.
  std::string bad = u16;
  bad.replace(10, 2, le(300, 2));
  write_file_atomic(path("bad.bin"), bad);
  const CmdResult b = helixpipe("eval --checkpoint=" + path("m") + " --data=" + path("bad.bin") +
                                " --seq-len=8");
  EXPECT_NE(b.rc, 0);
  EXPECT_NE(b.out.find("token 300 at position 5 is outside [0, 256)"), std::string::npos) << b.out;
  const CmdResult u = helixpipe("eval --checkpoint=" + path("m") + " --data=" + path("bad.bin") +
                                " --seq-len=8 --data-format=parquet");
  EXPECT_EQ(u.rc, 2) << u.out;
  EXPECT_NE(u.out.find("--data-format"), std::string::npos) << u.out;
}

TEST_F(CliTest, BadInputsFailWithClearMessages) {
  ASSERT_EQ(helixpipe("init --model=tiny --out=" + path("m")).rc, 0);
  const std::string data = " --data=" + path("text.txt");
  struct Case {
    std::string args, message;
  };
  // Truncated token file: a valid one cut short.
  ASSERT_EQ(helixpipe("tokenize --input=" + path("text.txt") + " --out=" + path("t.tok")).rc, 0);
  fs::copy_file(path("t.tok"), path("cut.tok"));
  fs::resize_file(path("cut.tok"), fs::file_size(path("t.tok")) - 7);
  // Corrupt checkpoint: one byte of the weights changed.
  fs::copy(path("m"), path("bad"));
  {
    std::fstream f(path("bad") + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  // A model folder without the marker and with a missing tensor file.
  fs::create_directories(path("half"));
  fs::copy_file(path("m") + "/config.json", path("half") + "/config.json");
  // Model folders (no marker) whose config.json claims sizes the weights do not have: 2^31
  // layers used to loop without end building the parts; 65536 layers is within the limits but
  // must be refused from the weights' header before anything is allocated for it.
  for (const auto& [name, layers] :
       {std::pair{"huge", int64_t{1} << 31}, std::pair{"many", int64_t{65536}}}) {
    fs::create_directories(path(name));
    fs::copy_file(path("m") + "/model.safetensors", path(name) + "/model.safetensors");
    nlohmann::json cfg = nlohmann::json::parse(read_file(path("m") + "/config.json"));
    cfg["num_hidden_layers"] = layers;
    write_file_atomic(path(name) + "/config.json", cfg.dump());
  }
  const std::vector<Case> cases = {
      {"train --model=tiny --steps=2", "--data is required"},
      {"train" + data + " --steps=2", "give exactly one of --model"},
      {"train --model=tiny --checkpoint=" + path("m") + data, "give exactly one of --model"},
      {"train --model=nosuch" + data, "no such file and no such preset"},
      {"train --model=tiny --seq-len=0" + data, "--seq-len must be > 0, got 0"},
      {"train --model=tiny --microbatches=abc" + data, "--microbatches"},
      {"train --model=tiny --recompute=some" + data, "some"},
      {"train --model=tiny --lr=-1" + data, "--lr must be > 0, got -1"},
      {"train --model=tiny --precision=fp16" + data, "--precision"},
      {"train --model=tiny --log-interval=0" + data, "--log-interval=0 should be"},
      {"train --model=tiny --progress=fancy" + data, "--progress"},
      {"train --model=tiny --save-every=5" + data, "--save-every needs --save"},
      {"train --model=tiny --save-dtype=bf16" + data, "--save-dtype=bf16 needs --save"},
      {"train --model=tiny --save-dtype=fp16 --save=" + path("x") + data, "--save-dtype"},
      {"train --model=tiny --bogus=1" + data, "bogus"},
      {"train --resume=" + path("m") + data, "start from its weights with --checkpoint"},
      {"train --model=tiny --data=" + path("cut.tok"), "truncated"},
      {"train --model=tiny --seq-len=100000" + data, "too few for one sequence"},
      {"grad --checkpoint=" + path("bad") + data + " --seq-len=8 --out=" + path("g.st"),
       "is corrupt"},
      {"grad --checkpoint=" + path("half") + data + " --seq-len=8 --out=" + path("g.st"),
       "model.safetensors' is missing"},
      {"grad --checkpoint=" + path("m") + data + " --out=" + path("g.st"), "--seq-len is required"},
      {"grad --checkpoint=" + path("m") + data + " --seq-len=16 --microbatches=100000 --out=" +
           path("g.st"),
       "sequences"},
      {"grad --checkpoint=" + path("nowhere") + data + " --seq-len=8 --out=" + path("g.st"),
       "does not exist"},
      {"eval --checkpoint=" + path("m") + " --data=" + path("cut.tok") + " --seq-len=8", "truncated"},
      {"eval --checkpoint=" + path("m") + data + " --seq-len=0", "--seq-len must be >= 1"},
      {"eval --checkpoint=" + path("huge") + data + " --seq-len=8",
       "num_hidden_layers = 2147483648 is larger than helixpipe supports"},
      {"eval --checkpoint=" + path("many") + data + " --seq-len=8",
       "has no tensor 'model.layers.2.input_layernorm.weight'"},
      {"train --checkpoint=" + path("many") + data, "has no tensor 'model.layers.2."},
      {"eval --checkpoint=" + path("m") + data + " --seq-len=8 --skip-sequences=100000000",
       "leaves nothing"},
      {"generate --checkpoint=" + path("m") + " --prompt=", "--prompt"},
      {"generate --checkpoint=" + path("m") + " --prompt=a --top-k=-2", "--top-k must be >= 0"},
      {"init --model=tiny", "--out is required"},
      {"tokenize --input=" + path("nothing.txt") + " --out=" + path("x.tok"), "nothing.txt"},
  };
  for (const Case& c : cases) {
    const CmdResult r = helixpipe(c.args);
    EXPECT_NE(r.rc, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("error"), std::string::npos) << c.args << "\n" << r.out;
  }
}

// The rules of docs/cli.md, on every command: --version, an unknown flag with a suggestion and
// exit code 2, an empty value refused, a flag given twice takes the last value, numbers and
// choices checked with messages in words.
TEST_F(CliTest, FlagRulesHoldForEveryCommand) {
  const CmdResult top = helixpipe("--version");
  EXPECT_EQ(top.rc, 0) << top.out;
  EXPECT_EQ(top.out.rfind("helixpipe 0.1.0 (", 0), 0u) << top.out;
  for (const char* cmd : {"schedule", "validate", "simulate", "compare", "sweep", "plan", "init",
                          "tokenize", "train", "grad", "eval", "generate", "bench", "profile"}) {
    SCOPED_TRACE(cmd);
    const CmdResult v = helixpipe(std::string(cmd) + " --version");
    EXPECT_EQ(v.rc, 0) << v.out;
    EXPECT_EQ(v.out, top.out);
    const CmdResult bad = helixpipe(std::string(cmd) + " --no-such-flag=1");
    EXPECT_EQ(bad.rc, 2) << bad.out;
    EXPECT_NE(bad.out.find(fmt::format("helixpipe {}: error: unknown flag --no-such-flag", cmd)),
              std::string::npos)
        << bad.out;
    EXPECT_NE(bad.out.find(fmt::format("(see 'helixpipe {} --help')", cmd)), std::string::npos)
        << bad.out;
  }
  const CmdResult typo_cmd = helixpipe("trian --model=tiny");
  EXPECT_EQ(typo_cmd.rc, 2);
  EXPECT_NE(typo_cmd.out.find("unknown command 'trian' (did you mean train?)"), std::string::npos)
      << typo_cmd.out;

  const std::string data = " --data=" + path("text.txt");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"train --model=tiny --lrr=0.1" + data, "unknown flag --lrr (did you mean --lr?)"},
      {"train --model=tiny --data=", "--data= has an empty value"},
      {"train --model=tiny --steps=1e3" + data, "--steps takes a whole number, got '1e3'"},
      {"train --model=tiny --stages=0" + data, "--stages must be > 0, got 0"},
      {"train --model=tiny --precision=fp61" + data,
       "--precision must be one of fp32, bf16, auto, got 'fp61' (did you mean fp32?)"},
      {"train --model=tiny --warmup=-1" + data, "--warmup must be >= 0, got -1"},
      {"train --model=tiny stray" + data, "stray"},
      {"schedule --schedule=1f1b --stages=2 --microbatches=2 --layers=2 --format=", "--format"},
      {"simulate --schedule=1f1b --stages=two --microbatches=2 --layers=2",
       "--stages takes a whole number, got 'two'"},
  };
  for (const Case& c : cases) {
    const CmdResult r = helixpipe(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
  }

  // Given twice, the last value counts: two steps are logged, not one.
  const CmdResult twice = helixpipe("train --model=tiny --seq-len=16 --steps=1 --steps=2 --log=" +
                                    path("twice.jsonl") + data);
  ASSERT_EQ(twice.rc, 0) << twice.out;
  std::ifstream log(path("twice.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(log, line);) lines += !line.empty();
  EXPECT_EQ(lines, 2);
}

// train --help lists its flags in the groups Model, Data, Optimisation, Parallelism and Output, in
// that order, each flag in its group, with examples at the end.
TEST_F(CliTest, TrainHelpGroupsEveryFlag) {
  const CmdResult h = helixpipe("train --help");
  ASSERT_EQ(h.rc, 0) << h.out;
  const std::vector<std::pair<std::string, std::vector<std::string>>> groups = {
      {"Model:", {"--model", "--checkpoint", "--resume", "--seed", "--precision", "--recompute",
                  "--mlp-chunk"}},
      {"Data:", {"--data", "--data-format", "--seq-len", "--microbatch-size", "--microbatches"}},
      {"Optimisation:", {"--steps", "--stop-after", "--lr", "--warmup", "--min-lr",
                         "--weight-decay", "--clip"}},
      {"Parallelism:", {"--threads", "--schedule", "--schedule-file", "--stages", "--folds",
                        "--virtual", "--data-parallel", "--tensor-parallel", "--transfer",
                        "--progress-thread"}},
      {"Output:", {"--save", "--save-every", "--save-dtype", "--log", "--loss-svg", "--progress", "--log-interval",
                   "--peak-gflops", "--trace", "--timeline"}},
  };
  size_t prev = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t at = h.out.find("\n" + groups[g].first + "\n");
    ASSERT_NE(at, std::string::npos) << groups[g].first << "\n" << h.out;
    EXPECT_GT(at, prev) << groups[g].first;
    const size_t end = g + 1 < groups.size() ? h.out.find("\n" + groups[g + 1].first + "\n")
                                             : h.out.find("Examples:");
    ASSERT_NE(end, std::string::npos) << h.out;
    const std::string body = h.out.substr(at, end - at);
    for (const std::string& flag : groups[g].second)
      EXPECT_NE(body.find("  " + flag + " "), std::string::npos) << flag << " in " << body;
    prev = at;
  }
}

// An independent f32 -> bf16 rounding (nearest, ties to even) by comparing the two bf16
// neighbours' distances in double.
float reference_bf16(float x) {
  if (!std::isfinite(x)) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t down_bits = u & 0xffff0000u, up_bits = down_bits + 0x10000u;
  float down, up;
  std::memcpy(&down, &down_bits, 4);
  std::memcpy(&up, &up_bits, 4);
  if (down == x) return x;
  const double up_value = std::isinf(up) ? std::copysign(std::ldexp(1.0, 128), x) : up;
  const double dd = std::fabs(static_cast<double>(x) - down), du = std::fabs(up_value - x);
  if (dd != du) return dd < du ? down : up;
  return ((down_bits >> 16) & 1u) == 0 ? down : up;
}

double last_loss(const CmdResult& r) {
  return nlohmann::json::parse(last_line(r.out))["loss"].get<double>();
}

// train --save-dtype=bf16: the same run saved both ways; the bf16 model is the f32 one rounded to
// nearest even, it reads everywhere a model is read, and --resume refuses it with a message.
TEST_F(CliTest, Bf16CheckpointsForInferenceAreNotResumable) {
  const std::string common = "train --model=tiny --data=" + path("text.txt") +
                             " --seq-len=32 --microbatch-size=2 --steps=3 --lr=5e-3 --threads=1 "
                             "--seed=4";
  ASSERT_EQ(helixpipe(common + " --save=" + path("f32")).rc, 0);
  const CmdResult b = helixpipe(common + " --save-dtype=bf16 --save=" + path("b16"));
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("bf16 checkpoint, not resumable"), std::string::npos) << b.out;
  const CheckpointInfo info = open_checkpoint(path("b16"));
  EXPECT_FALSE(info.resumable);
  EXPECT_EQ(info.model_dtype, StDType::kBF16);
  EXPECT_FALSE(info.optimizer_path.has_value());
  EXPECT_TRUE(info.trainer_state.has_value());  // the run's record stays
  EXPECT_EQ(info.config["torch_dtype"], "bfloat16");
  const auto f32 = SafetensorsReader::open(path("f32") + "/model.safetensors");
  const auto b16 = SafetensorsReader::open(info.model_path);
  ASSERT_EQ(b16.tensors().size(), f32.tensors().size());
  int64_t changed = 0;
  for (const StTensorInfo& t : f32.tensors()) {
    ASSERT_NE(b16.find(t.name), nullptr) << t.name;
    EXPECT_EQ(b16.find(t.name)->dtype, StDType::kBF16) << t.name;
    const std::vector<float> full = read_tensor(f32, t.name), half = read_tensor(b16, t.name);
    ASSERT_EQ(full.size(), half.size());
    for (size_t i = 0; i < full.size(); ++i) {
      ASSERT_EQ(half[i], reference_bf16(full[i])) << t.name << "[" << i << "]";
      changed += half[i] != full[i];
    }
  }
  EXPECT_GT(changed, 0);

  // --resume: refused, saying what the folder is and what to do instead.
  const CmdResult r = helixpipe("train --resume=" + path("b16") + " --data=" + path("text.txt") +
                                " --steps=5");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--save-dtype=bf16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--checkpoint " + path("b16")), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--save-dtype=fp32"), std::string::npos) << r.out;

  // eval: the bf16 model's loss lies within 0.01 nats of the f32 model's (weights rounded by at
  // most 2^-9 relative each; a similar 3-step run measured 7e-4).
  const std::string eval = " --data=" + path("text.txt") + " --seq-len=32 --max-sequences=8 --threads=1";
  const CmdResult e32 = helixpipe("eval --checkpoint=" + path("f32") + eval);
  const CmdResult e16 = helixpipe("eval --checkpoint=" + path("b16") + eval);
  ASSERT_EQ(e32.rc, 0) << e32.out;
  ASSERT_EQ(e16.rc, 0) << e16.out;
  EXPECT_NEAR(last_loss(e16), last_loss(e32), 0.01);
  // generate and --checkpoint read it too.
  const CmdResult g = helixpipe("generate --checkpoint=" + path("b16") +
                                " --prompt=The --tokens=10 --temperature=0");
  ASSERT_EQ(g.rc, 0) << g.out;
  EXPECT_EQ(g.out.size(), 3u + 10u + 1u);
  const CmdResult c = helixpipe("train --checkpoint=" + path("b16") + " --data=" +
                                path("text.txt") + " --seq-len=32 --steps=1 --save=" + path("c"));
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_TRUE(open_checkpoint(path("c")).resumable);
  // A pipelined run (two in-process stages) saves the same way.
  const CmdResult d = helixpipe(common + " --stages=2 --microbatches=2 --save-dtype=bf16 --save=" +
                                path("d16"));
  ASSERT_EQ(d.rc, 0) << d.out;
  const CheckpointInfo dinfo = open_checkpoint(path("d16"));
  EXPECT_FALSE(dinfo.resumable);
  EXPECT_FALSE(dinfo.optimizer_path.has_value());
  const auto dfile = SafetensorsReader::open(dinfo.model_path);
  ASSERT_EQ(dfile.tensors().size(), f32.tensors().size());
  for (const StTensorInfo& t : dfile.tensors()) EXPECT_EQ(t.dtype, StDType::kBF16) << t.name;
}

// Copies the model of checkpoint `from` into `out` as a sharded Hugging Face folder: config.json,
// `n` shards (tensors dealt out in turn, bytes unchanged) and model.safetensors.index.json.
void write_sharded_copy(const std::string& from, const std::string& out, int n) {
  fs::create_directories(out);
  fs::copy_file(from + "/config.json", out + "/config.json");
  const auto file = SafetensorsReader::open(from + "/model.safetensors");
  std::vector<std::vector<StWriteTensor>> shards(n);
  nlohmann::json map = nlohmann::json::object();
  auto shard_name = [&](int s) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n); };
  int i = 0;
  for (const StTensorInfo& t : file.tensors()) {
    const int s = i++ % n;
    shards[s].push_back({t.name, t.dtype, t.shape, file.data(t)});
    map[t.name] = shard_name(s);
  }
  for (int s = 0; s < n; ++s)
    write_safetensors(out + "/" + shard_name(s), shards[s], {{"format", "pt"}});
  write_file_atomic(out + "/model.safetensors.index.json",
                    nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2));
}

// A sharded model folder reads exactly like the single file: eval, grad and generate give the
// same results to the bit; a folder whose index and shards disagree is refused naming both.
TEST_F(CliTest, ShardedModelFoldersReadLikeOneFile) {
  ASSERT_EQ(helixpipe("init --model=tiny --seed=8 --out=" + path("m")).rc, 0);
  write_sharded_copy(path("m"), path("sh3"), 3);
  write_sharded_copy(path("m"), path("sh2"), 2);
  const std::string eval = " --data=" + path("text.txt") + " --seq-len=24 --max-sequences=4 --threads=1";
  const CmdResult e = helixpipe("eval --checkpoint=" + path("m") + eval);
  ASSERT_EQ(e.rc, 0) << e.out;
  const std::string grad = " --data=" + path("text.txt") + " --seq-len=16 --microbatch-size=2 --threads=1";
  ASSERT_EQ(helixpipe("grad --checkpoint=" + path("m") + grad + " --out=" + path("g.st")).rc, 0);
  const std::string greedy = " --prompt=The --tokens=20 --temperature=0";
  const CmdResult g = helixpipe("generate --checkpoint=" + path("m") + greedy);
  ASSERT_EQ(g.rc, 0) << g.out;
  for (const char* sh : {"sh2", "sh3"}) {
    SCOPED_TRACE(sh);
    const CmdResult es = helixpipe("eval --checkpoint=" + path(sh) + eval);
    ASSERT_EQ(es.rc, 0) << es.out;
    EXPECT_EQ(last_line(es.out), last_line(e.out));
    const CmdResult gs = helixpipe("grad --checkpoint=" + path(sh) + grad + " --out=" + path("gs.st"));
    ASSERT_EQ(gs.rc, 0) << gs.out;
    EXPECT_EQ(read_file(path("gs.st")), read_file(path("g.st")));
    EXPECT_EQ(helixpipe("generate --checkpoint=" + path(sh) + greedy).out, g.out);
  }
  // Starting a run from it works; resuming it does not (no training state).
  const CmdResult t = helixpipe("train --checkpoint=" + path("sh3") + " --data=" + path("text.txt") +
                                " --seq-len=16 --steps=1 --save=" + path("t"));
  ASSERT_EQ(t.rc, 0) << t.out;
  const CmdResult r = helixpipe("train --resume=" + path("sh3") + " --data=" + path("text.txt"));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("start from its weights with --checkpoint"), std::string::npos) << r.out;
  // The index names a tensor its shard does not hold.
  nlohmann::json index = nlohmann::json::parse(read_file(path("sh3") + "/model.safetensors.index.json"));
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";
  write_file_atomic(path("sh3") + "/model.safetensors.index.json", index.dump());
  const CmdResult bad = helixpipe("eval --checkpoint=" + path("sh3") + eval);
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("maps tensor 'model.norm.weight' to shard 'model-00001-of-00003.safetensors'"),
            std::string::npos) << bad.out;
  // A missing shard.
  fs::remove(path("sh2") + "/model-00002-of-00002.safetensors");
  const CmdResult missing = helixpipe("eval --checkpoint=" + path("sh2") + eval);
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.out.find("model-00002-of-00002.safetensors' does not exist"), std::string::npos)
      << missing.out;
}

// Every save writes generation_config.json and the byte-level tokenizer; special token ids of a
// Hugging Face config.json are passed on.
TEST_F(CliTest, SavesWriteGenerationConfigAndTokenizer) {
  ASSERT_EQ(helixpipe("init --model=tiny --out=" + path("m")).rc, 0);
  for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(path("m") + "/" + f)) << f;
  const auto gen = nlohmann::json::parse(read_file(path("m") + "/generation_config.json"));
  EXPECT_FALSE(gen.contains("bos_token_id"));
  EXPECT_FALSE(gen.contains("eos_token_id"));
  EXPECT_EQ(gen["max_length"], model_presets()[0].second.max_positions);
  nlohmann::json cfg = nlohmann::json::parse(read_file(path("m") + "/config.json"));
  cfg["bos_token_id"] = 1;
  cfg["eos_token_id"] = 2;
  cfg["max_position_embeddings"] = 512;
  write_file_atomic(path("hf.json"), cfg.dump());
  ASSERT_EQ(helixpipe("init --model=" + path("hf.json") + " --out=" + path("s")).rc, 0);
  const auto gen2 = nlohmann::json::parse(read_file(path("s") + "/generation_config.json"));
  EXPECT_EQ(gen2["bos_token_id"], 1);
  EXPECT_EQ(gen2["eos_token_id"], 2);
  EXPECT_EQ(gen2["max_length"], 512);
  const auto saved = nlohmann::json::parse(read_file(path("s") + "/config.json"));
  EXPECT_EQ(saved["bos_token_id"], 1);
  EXPECT_EQ(saved["eos_token_id"], 2);
  const auto tok = nlohmann::json::parse(read_file(path("s") + "/tokenizer.json"));
  EXPECT_EQ(tok["model"]["vocab"].size(), 256u);
  EXPECT_EQ(tok["model"]["vocab"]["a"].get<int>(), static_cast<int>('a'));
  EXPECT_EQ(tok["model"]["vocab"]["\u0120"].get<int>(), static_cast<int>(' '));
}

// generate --precision: fp32 and auto (with the key/value cache: f32) sample what the default does;
// bf16 is refused where the kernels lack it, and asks for --no-cache where they have it.
TEST_F(CliTest, GeneratePrecision) {
  ASSERT_EQ(helixpipe("init --model=tiny --seed=3 --out=" + path("m")).rc, 0);
  const std::string gen = "generate --checkpoint=" + path("m") + " --prompt=The --tokens=12 --seed=2";
  const CmdResult base = helixpipe(gen);
  ASSERT_EQ(base.rc, 0) << base.out;
  EXPECT_EQ(helixpipe(gen + " --precision=fp32").out, base.out);
  EXPECT_EQ(helixpipe(gen + " --precision=auto").out, base.out);
  const CmdResult bf16 = helixpipe(gen + " --precision=bf16");
  EXPECT_NE(bf16.rc, 0);
  if (!make_cpu_backend(1)->kernels().supports(Precision::bf16())) {
    EXPECT_NE(bf16.out.find("--precision=bf16 needs bf16 kernels"), std::string::npos) << bf16.out;
    EXPECT_NE(helixpipe(gen + " --precision=bf16 --no-cache").rc, 0);
  } else {
    EXPECT_NE(bf16.out.find("needs --no-cache"), std::string::npos) << bf16.out;
    const CmdResult nc = helixpipe(gen + " --precision=bf16 --no-cache");
    ASSERT_EQ(nc.rc, 0) << nc.out;
    EXPECT_EQ(nc.out.rfind("The", 0), 0u) << nc.out;
  }
  const CmdResult bad = helixpipe(gen + " --precision=fp16");
  EXPECT_EQ(bad.rc, 2) << bad.out;
}

// The Hugging Face layout against an independent float64 Llama in plain PyTorch (transformers is
// not in Debian): tools/hf_layout_check.py, both directions. Skipped without python3-torch.
TEST_F(CliTest, HuggingFaceLayoutMatchesTorchLlama) {
  std::string python;
  for (const char* p : {"/usr/bin/python3", "python3"}) {
    if (std::system((std::string(p) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) {
      python = p;
      break;
    }
  }
  if (python.empty()) GTEST_SKIP() << "python3 with torch not installed (apt-get install python3-torch)";
  const std::string cmd = python + " " + HP_SOURCE_DIR + "/tools/hf_layout_check.py " +
                          HP_BINARY_DIR + "/helixpipe " + path("hf") + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_EQ(last_line(out), "OK") << out;
}

}  // namespace
}  // namespace hp

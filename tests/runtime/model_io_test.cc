// config.json and model.safetensors in the Hugging Face layout: round trips and clear errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/model_files.h"
#include "checkpoint/safetensors.h"
#include "runtime/model_io.h"
#include "util/error.h"
#include "../error_text.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_config(bool tie) {
  ModelConfig c;
  c.hidden = 8;
  c.intermediate = 12;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.vocab = 11;
  c.tie_embeddings = tie;
  return c;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("hp_model_io_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

// Tensors by name, filled with distinct values.
std::map<std::string, std::vector<float>> make_tensors(const ModelConfig& c, float base) {
  std::map<std::string, std::vector<float>> m;
  float v = base;
  for (const HfTensorSpec& s : hf_tensor_specs(c)) {
    auto& t = m[s.name];
    t.resize(s.numel());
    for (float& x : t) x = (v += 0.25f);
  }
  return m;
}

void save(const std::string& path, const ModelConfig& c,
          std::map<std::string, std::vector<float>>& tensors) {
  auto list = model_write_tensors(
      c, [&](const std::string& n) -> const float* { return tensors.at(n).data(); });
  write_safetensors(path, list, {{"format", "pt"}});
}

using test::error_of;

TEST(ModelIo, TensorNamesAndShapes) {
  const ModelConfig c = tiny_config(false);
  const auto specs = hf_tensor_specs(c);
  ASSERT_EQ(specs.size(), 1u + 9u * 2 + 2);
  EXPECT_EQ(specs.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(specs.front().shape, (std::vector<int64_t>{11, 8}));
  EXPECT_EQ(specs[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(specs[3].name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(specs[3].shape, (std::vector<int64_t>{4, 8}));  // kv_heads 2 * head_dim 2
  EXPECT_EQ(specs[9].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(specs[9].shape, (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(specs.back().name, "lm_head.weight");
  int64_t total = 0;
  for (const auto& s : specs) total += s.numel();
  EXPECT_EQ(total, c.params_total());
  const auto tied = hf_tensor_specs(tiny_config(true));
  EXPECT_EQ(tied.back().name, "model.norm.weight");
  int64_t tied_total = 0;
  for (const auto& s : tied) tied_total += s.numel();
  EXPECT_EQ(tied_total, tiny_config(true).params_total());
}

TEST(ModelIo, ConfigRoundTrip) {
  ModelConfig c = tiny_config(true);
  c.rms_eps = 1e-6;
  c.rope_theta = 500000;
  c.max_positions = 4096;
  const nlohmann::json j = model_config_to_hf(c);
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["model_type"], "llama");
  for (const char* key : {"hidden_size", "intermediate_size", "num_attention_heads",
                          "num_key_value_heads", "num_hidden_layers", "vocab_size", "rms_norm_eps",
                          "rope_theta", "max_position_embeddings", "tie_word_embeddings"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  const ModelConfig back = model_config_from_hf(j, "test");
  EXPECT_EQ(back.hidden, c.hidden);
  EXPECT_EQ(back.intermediate, c.intermediate);
  EXPECT_EQ(back.heads, c.heads);
  EXPECT_EQ(back.kv_heads, c.kv_heads);
  EXPECT_EQ(back.layers, c.layers);
  EXPECT_EQ(back.vocab, c.vocab);
  EXPECT_EQ(back.rms_eps, c.rms_eps);
  EXPECT_EQ(back.rope_theta, c.rope_theta);
  EXPECT_EQ(back.max_positions, c.max_positions);
  EXPECT_EQ(back.tie_embeddings, c.tie_embeddings);
}

TEST(ModelIo, ConfigUsesTransformersDefaultsAndRejectsOthers) {
  nlohmann::json j = {{"hidden_size", 8},       {"intermediate_size", 12}, {"num_attention_heads", 4},
                      {"num_hidden_layers", 1}, {"vocab_size", 10},        {"model_type", "llama"}};
  const ModelConfig c = model_config_from_hf(j, "cfg");
  EXPECT_EQ(c.rms_eps, 1e-6);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.max_positions, 2048);
  EXPECT_FALSE(c.tie_embeddings);

  nlohmann::json missing = j;
  missing.erase("hidden_size");
  EXPECT_NE(error_of([&] { model_config_from_hf(missing, "cfg"); }).find("'hidden_size' is missing"),
            std::string::npos);
  nlohmann::json other = j;
  other["model_type"] = "gpt2";
  EXPECT_NE(error_of([&] { model_config_from_hf(other, "cfg"); }).find("only reads Llama"),
            std::string::npos);
  nlohmann::json bias = j;
  bias["attention_bias"] = true;
  EXPECT_NE(error_of([&] { model_config_from_hf(bias, "cfg"); }).find("attention_bias"),
            std::string::npos);
  nlohmann::json bad_heads = j;
  bad_heads["num_key_value_heads"] = 3;
  EXPECT_NE(error_of([&] { model_config_from_hf(bad_heads, "cfg"); }).find("num_key_value_heads"),
            std::string::npos);
}

TEST(ModelIo, ConfigFromNewerTransformers) {
  // transformers 4.56+ writes "dtype"; v5 puts rope_theta under rope_parameters.
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                      {"hidden_size", 8}, {"intermediate_size", 12}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"num_hidden_layers", 1}, {"vocab_size", 10},
                      {"dtype", "float32"}, {"_name_or_path", "x"}, {"head_dim", 2},
                      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 500000.0}}}};
  const ModelConfig c = model_config_from_hf(j, "cfg");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.kv_heads, 2);
  j["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_NE(error_of([&] { model_config_from_hf(j, "cfg"); }).find("rope_type"), std::string::npos);
}

TEST(ModelIo, SafetensorsRoundTrip) {
  for (bool tie : {false, true}) {
    TempDir dir;
    const ModelConfig c = tiny_config(tie);
    auto src = make_tensors(c, 0.f);
    save(dir.file("m.safetensors"), c, src);
    auto dst = make_tensors(c, 1000.f);
    load_model_safetensors(dir.file("m.safetensors"), c,
                           [&](const std::string& n) { return dst.at(n).data(); });
    EXPECT_EQ(src, dst);
    const auto file = SafetensorsReader::open(dir.file("m.safetensors"));
    EXPECT_EQ(file.find("lm_head.weight") != nullptr, !tie);
    EXPECT_EQ(file.metadata().at("format"), "pt");
  }
}

TEST(ModelIo, LocatorMaySkipTensors) {
  TempDir dir;
  const ModelConfig c = tiny_config(false);
  auto src = make_tensors(c, 0.f);
  save(dir.file("m.safetensors"), c, src);
  std::vector<float> norm(c.hidden, -1.f);
  load_model_safetensors(dir.file("m.safetensors"), c, [&](const std::string& n) -> float* {
    return n == "model.norm.weight" ? norm.data() : nullptr;
  });
  EXPECT_EQ(norm, src.at("model.norm.weight"));
}

TEST(ModelIo, TiedModelIgnoresLmHeadAndInvFreq) {
  TempDir dir;
  const ModelConfig untied = tiny_config(false);
  auto src = make_tensors(untied, 0.f);
  std::vector<float> inv_freq(1, 1.f);
  auto list = model_write_tensors(
      untied, [&](const std::string& n) -> const float* { return src.at(n).data(); });
  list.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", StDType::kF32, {1}, inv_freq.data()});
  write_safetensors(dir.file("m.safetensors"), list);
  const ModelConfig tied = tiny_config(true);
  auto dst = make_tensors(tied, 1000.f);
  load_model_safetensors(dir.file("m.safetensors"), tied,
                         [&](const std::string& n) { return dst.at(n).data(); });
  EXPECT_EQ(dst.at("model.embed_tokens.weight"), src.at("model.embed_tokens.weight"));
}

TEST(ModelIo, MissingMisshapedWrongDtypeUnknownTruncated) {
  TempDir dir;
  const ModelConfig c = tiny_config(false);
  auto src = make_tensors(c, 0.f);
  auto dst = make_tensors(c, 0.f);
  auto locate = [&](const std::string& n) { return dst.at(n).data(); };
  auto all = model_write_tensors(
      c, [&](const std::string& n) -> const float* { return src.at(n).data(); });

  // Missing: drop layer 1's up_proj.
  {
    auto list = all;
    std::erase_if(list, [](const StWriteTensor& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
    write_safetensors(dir.file("missing.safetensors"), list);
    const std::string e = error_of([&] { load_model_safetensors(dir.file("missing.safetensors"), c, locate); });
    EXPECT_NE(e.find("has no tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << e;
  }
  // Misshaped: k_proj written as [h, h] (no GQA).
  {
    auto list = all;
    std::vector<float> big(c.hidden * c.hidden, 0.f);
    for (auto& t : list) {
      if (t.name == "model.layers.0.self_attn.k_proj.weight") {
        t.shape = {c.hidden, c.hidden};
        t.data = big.data();
      }
    }
    write_safetensors(dir.file("shape.safetensors"), list);
    const std::string e = error_of([&] { load_model_safetensors(dir.file("shape.safetensors"), c, locate); });
    EXPECT_NE(e.find("'model.layers.0.self_attn.k_proj.weight' has shape [8, 8] but [4, 8]"),
              std::string::npos) << e;
  }
  // Wrong dtype: the final norm as int32.
  {
    auto list = all;
    std::vector<int32_t> ints(c.hidden, 1);
    for (auto& t : list) {
      if (t.name == "model.norm.weight") {
        t.dtype = StDType::kI32;
        t.data = ints.data();
      }
    }
    write_safetensors(dir.file("dtype.safetensors"), list);
    const std::string e = error_of([&] { load_model_safetensors(dir.file("dtype.safetensors"), c, locate); });
    EXPECT_NE(e.find("'model.norm.weight' has dtype I32"), std::string::npos) << e;
  }
  // Unknown tensor: a bias the architecture does not have.
  {
    auto list = all;
    std::vector<float> bias(c.hidden, 0.f);
    list.push_back({"model.layers.0.self_attn.q_proj.bias", StDType::kF32, {c.hidden}, bias.data()});
    write_safetensors(dir.file("extra.safetensors"), list);
    const std::string e = error_of([&] { load_model_safetensors(dir.file("extra.safetensors"), c, locate); });
    EXPECT_NE(e.find("q_proj.bias"), std::string::npos) << e;
  }
  // Truncated: the last 10 bytes cut off.
  {
    write_safetensors(dir.file("full.safetensors"), all);
    const auto size = fs::file_size(dir.file("full.safetensors"));
    fs::copy_file(dir.file("full.safetensors"), dir.file("cut.safetensors"));
    fs::resize_file(dir.file("cut.safetensors"), size - 10);
    const std::string e = error_of([&] { load_model_safetensors(dir.file("cut.safetensors"), c, locate); });
    EXPECT_FALSE(e.empty());
    EXPECT_NE(e.find("cut.safetensors"), std::string::npos) << e;
  }
  // F16 is accepted and converted.
  {
    auto list = all;
    std::vector<uint16_t> halves(c.hidden, 0x3C00);  // 1.0
    for (auto& t : list) {
      if (t.name == "model.norm.weight") {
        t.dtype = StDType::kF16;
        t.data = halves.data();
      }
    }
    write_safetensors(dir.file("f16.safetensors"), list);
    load_model_safetensors(dir.file("f16.safetensors"), c, locate);
    EXPECT_EQ(dst.at("model.norm.weight"), std::vector<float>(c.hidden, 1.f));
  }
}

TEST(ModelIo, ConfigWithoutVocabSizeIsRefused) {
  nlohmann::json j = {{"hidden_size", 8},       {"intermediate_size", 12},
                      {"num_attention_heads", 4}, {"num_hidden_layers", 1},
                      {"vocab_size", 10}};
  EXPECT_EQ(model_config_from_hf(j, "cfg").vocab, 10);
  j.erase("vocab_size");
  EXPECT_NE(error_of([&] { model_config_from_hf(j, "cfg"); }).find("'vocab_size' is missing"),
            std::string::npos);
}

TEST(ModelIo, ConfigIsCheckedAgainstTheFileBeforeLoading) {
  TempDir dir;
  const ModelConfig c = tiny_config(false);
  auto src = make_tensors(c, 0.f);
  save(dir.file("m.safetensors"), c, src);
  check_model_safetensors(dir.file("m.safetensors"), c);  // the config it was saved with
  // A config claiming the most layers allowed is refused from the header alone: the file has no
  // layer 2 (nothing of the size the config describes is allocated).
  ModelConfig many = c;
  many.layers = ModelConfig::kMaxLayers;
  const std::string e1 =
      error_of([&] { check_model_safetensors(dir.file("m.safetensors"), many); });
  EXPECT_NE(e1.find("has no tensor 'model.layers.2.input_layernorm.weight'"), std::string::npos)
      << e1;
  EXPECT_NE(e1.find("layers 65536"), std::string::npos) << e1;
  // A wider model: the first tensor's shape disagrees, and the message names both shapes.
  ModelConfig wide = c;
  wide.hidden = 16;
  const std::string e2 =
      error_of([&] { check_model_safetensors(dir.file("m.safetensors"), wide); });
  EXPECT_NE(e2.find("'model.embed_tokens.weight' has shape [11, 8] but [11, 16] was expected"),
            std::string::npos)
      << e2;
  ModelConfig fewer = c;
  fewer.layers = 1;
  const std::string e3 =
      error_of([&] { check_model_safetensors(dir.file("m.safetensors"), fewer); });
  EXPECT_NE(e3.find("model.layers.1."), std::string::npos) << e3;
}

TEST(ModelIo, NonFiniteWeightsAreRefusedNamingTheTensor) {
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    TempDir dir;
    const ModelConfig c = tiny_config(false);
    auto src = make_tensors(c, 0.f);
    src.at("model.layers.1.mlp.gate_proj.weight")[5] = bad;
    save(dir.file("m.safetensors"), c, src);
    auto dst = make_tensors(c, 0.f);
    const std::string e = error_of([&] {
      load_model_safetensors(dir.file("m.safetensors"), c,
                             [&](const std::string& n) { return dst.at(n).data(); });
    });
    EXPECT_NE(e.find("tensor 'model.layers.1.mlp.gate_proj.weight' holds"), std::string::npos) << e;
    EXPECT_NE(e.find("at element 5"), std::string::npos) << e;
    // A stage that does not hold the tensor does not read it, so it does not refuse it.
    auto dst2 = make_tensors(c, 0.f);
    load_model_safetensors(dir.file("m.safetensors"), c, [&](const std::string& n) -> float* {
      return n == "model.norm.weight" ? dst2.at(n).data() : nullptr;
    });
  }
  // F16 infinity (0x7C00) is converted, then refused the same way.
  TempDir dir;
  const ModelConfig c = tiny_config(false);
  auto src = make_tensors(c, 0.f);
  auto list = model_write_tensors(
      c, [&](const std::string& n) -> const float* { return src.at(n).data(); });
  std::vector<uint16_t> halves(c.hidden, 0x3C00);
  halves[3] = 0x7C00;
  for (auto& t : list) {
    if (t.name == "model.norm.weight") {
      t.dtype = StDType::kF16;
      t.data = halves.data();
    }
  }
  write_safetensors(dir.file("f16.safetensors"), list);
  auto dst = make_tensors(c, 0.f);
  const std::string e = error_of([&] {
    load_model_safetensors(dir.file("f16.safetensors"), c,
                           [&](const std::string& n) { return dst.at(n).data(); });
  });
  EXPECT_NE(e.find("'model.norm.weight' holds inf at element 3"), std::string::npos) << e;
}

// Writes the tensors of `c` (values from `src`) as `n` shards of `dir`, tensors dealt out in turn,
// and the index; returns the index path.
std::string save_sharded(const TempDir& dir, const ModelConfig& c,
                         std::map<std::string, std::vector<float>>& src, int n) {
  auto list = model_write_tensors(
      c, [&](const std::string& name) -> const float* { return src.at(name).data(); });
  std::vector<std::vector<StWriteTensor>> shards(n);
  nlohmann::json map = nlohmann::json::object();
  for (size_t i = 0; i < list.size(); ++i) {
    const int s = static_cast<int>(i % n);
    shards[s].push_back(list[i]);
    map[list[i].name] = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n);
  }
  for (int s = 0; s < n; ++s)
    write_safetensors(dir.file(fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n)),
                      shards[s], {{"format", "pt"}});
  std::ofstream(dir.file(kModelIndexFile)) << nlohmann::json{{"weight_map", map}}.dump();
  return dir.file(kModelIndexFile);
}

TEST(ModelIo, ShardedModelLoadsBitwiseLikeOneFile) {
  for (bool tie : {false, true}) {
    for (int shards : {2, 3}) {
      SCOPED_TRACE(fmt::format("tie {} shards {}", tie, shards));
      TempDir dir;
      const ModelConfig c = tiny_config(tie);
      auto src = make_tensors(c, 0.f);
      save(dir.file("one.safetensors"), c, src);
      const std::string index = save_sharded(dir, c, src, shards);
      check_model_safetensors(index, c);
      auto from_one = make_tensors(c, 1000.f), from_shards = make_tensors(c, 2000.f);
      load_model_safetensors(dir.file("one.safetensors"), c,
                             [&](const std::string& n) { return from_one.at(n).data(); });
      load_model_safetensors(index, c,
                             [&](const std::string& n) { return from_shards.at(n).data(); });
      for (const auto& [name, v] : src) {
        ASSERT_EQ(from_shards.at(name).size(), v.size());
        EXPECT_EQ(std::memcmp(from_shards.at(name).data(), v.data(), 4 * v.size()), 0) << name;
        EXPECT_EQ(std::memcmp(from_shards.at(name).data(), from_one.at(name).data(), 4 * v.size()),
                  0)
            << name;
      }
      // The config checks apply across the shards: a deeper config misses layer 2.
      ModelConfig deeper = c;
      deeper.layers = 3;
      const std::string e = error_of([&] { check_model_safetensors(index, deeper); });
      EXPECT_NE(e.find("has no tensor 'model.layers.2.input_layernorm.weight'"), std::string::npos)
          << e;
    }
  }
}

TEST(ModelIo, ShardedModelErrorsNameTheShard) {
  TempDir dir;
  const ModelConfig c = tiny_config(false);
  auto src = make_tensors(c, 0.f);
  src.at("model.layers.1.mlp.up_proj.weight")[2] = std::nanf("");
  const std::string index = save_sharded(dir, c, src, 3);
  auto dst = make_tensors(c, 0.f);
  const std::string e = error_of([&] {
    load_model_safetensors(index, c, [&](const std::string& n) { return dst.at(n).data(); });
  });
  // The NaN is reported in the shard file that holds it.
  EXPECT_NE(e.find("model-0000"), std::string::npos) << e;
  EXPECT_NE(e.find("'model.layers.1.mlp.up_proj.weight' holds nan at element 2"),
            std::string::npos)
      << e;
}

// A BF16 file (as Hugging Face bf16 models are) is widened to f32 exactly.
TEST(ModelIo, Bf16FileLoadsWidened) {
  TempDir dir;
  const ModelConfig c = tiny_config(false);
  auto src = make_tensors(c, 0.f);
  auto list = model_write_tensors(
      c, [&](const std::string& n) -> const float* { return src.at(n).data(); });
  std::map<std::string, std::vector<uint16_t>> halves;
  for (auto& t : list) {
    auto& h = halves[t.name];
    for (float x : src.at(t.name)) h.push_back(f32_to_bf16_bits(x));
    t.dtype = StDType::kBF16;
    t.data = h.data();
  }
  write_safetensors(dir.file("bf16.safetensors"), list, {{"format", "pt"}});
  auto dst = make_tensors(c, 0.f);
  load_model_safetensors(dir.file("bf16.safetensors"), c,
                         [&](const std::string& n) { return dst.at(n).data(); });
  for (const auto& [name, v] : src) {
    for (size_t i = 0; i < v.size(); ++i) {
      // The top 16 bits of the f32 value, read back by shifting: an exact widening.
      uint32_t bits = static_cast<uint32_t>(halves.at(name)[i]) << 16;
      float want;
      std::memcpy(&want, &bits, 4);
      ASSERT_EQ(dst.at(name)[i], want) << name << "[" << i << "]";
      ASSERT_LE(std::fabs(dst.at(name)[i] - v[i]), std::ldexp(std::fabs(v[i]), -8)) << name;
    }
  }
}

}  // namespace
}  // namespace hp

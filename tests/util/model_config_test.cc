#include "util/model_config.h"

#include <gtest/gtest.h>

#include "util/error.h"
#include "../error_text.h"
#include "../tiny_gpt.h"

namespace hp {
namespace {

TEST(ModelConfig, ReadsHuggingFaceKeysAndRoundTrips) {
  nlohmann::json j = {{"hidden_size", 64},       {"intermediate_size", 160},
                      {"num_attention_heads", 8}, {"num_key_value_heads", 2},
                      {"num_hidden_layers", 3},   {"vocab_size", 300},
                      {"rms_norm_eps", 1e-6},     {"rope_theta", 500000.0},
                      {"tie_word_embeddings", true}, {"model_type", "llama"}};
  ModelConfig c = ModelConfig::from_json(j, "test");
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.kv_dim(), 16);
  EXPECT_EQ(c.qkv_dim(), 96);
  ModelConfig back = ModelConfig::from_json(c.to_hf_json(), "roundtrip");
  EXPECT_EQ(back.hidden, 64);
  EXPECT_EQ(back.kv_heads, 2);
  EXPECT_EQ(back.vocab, 300);
  EXPECT_TRUE(back.tie_embeddings);
  EXPECT_DOUBLE_EQ(back.rope_theta, 500000.0);
}

TEST(ModelConfig, RejectsBadShapesWithTheFieldName) {
  nlohmann::json j = {{"hidden_size", 60}, {"num_attention_heads", 8}};
  try {
    ModelConfig::from_json(j, "cfg.json");
    FAIL() << "accepted hidden 60 with 8 heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_size 60"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ModelConfig::from_json({{"hidden_sise", 64}}, "typo"), Error);
  EXPECT_THROW(ModelConfig::from_json({{"num_attention_heads", 4}, {"num_key_value_heads", 3}}, "gqa"),
               Error);
  EXPECT_THROW(ModelConfig::load("no-such-preset-or-file"), Error);
}

std::string error_of(const nlohmann::json& j) {
  try {
    ModelConfig::from_json(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, RefusesSizesBeyondTheLimitsNamingTheField) {
  const nlohmann::json base = {{"hidden_size", 64}, {"intermediate_size", 160},
                               {"num_attention_heads", 8}, {"num_hidden_layers", 3},
                               {"vocab_size", 300}};
  ASSERT_EQ(error_of(base), "");
  struct Case {
    const char* key;
    nlohmann::json value;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"num_hidden_layers", int64_t{1} << 31, "num_hidden_layers = 2147483648 is larger"},
      {"num_hidden_layers", 65537, "num_hidden_layers = 65537 is larger"},
      {"hidden_size", int64_t{1} << 31, "hidden_size = 2147483648 is larger"},
      {"intermediate_size", int64_t{1} << 40, "intermediate_size = 1099511627776 is larger"},
      {"vocab_size", int64_t{1} << 31, "vocab_size = 2147483648 is larger"},
      {"max_position_embeddings", int64_t{1} << 62, "max_position_embeddings = "},
      {"num_attention_heads", int64_t{1} << 33, "num_attention_heads = 8589934592 is larger"},
      // Beyond int64: nlohmann keeps it unsigned; it must not wrap to a negative size.
      {"num_hidden_layers", uint64_t{1} << 63, "'num_hidden_layers' = 9223372036854775808 is far"},
      {"vocab_size", -1, "vocab_size must be positive, got -1"},
      {"rms_norm_eps", 1e308, "rms_norm_eps must be in (0, 1]"},
      {"rms_norm_eps", -1.0, "rms_norm_eps must be in (0, 1]"},
      {"rope_theta", 1e308, "rope_theta must be in (0, 1e12]"},
      {"hidden_size", 2.5, "'hidden_size' must be an integer"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = base;
    j[c.key] = c.value;
    const std::string e = error_of(j);
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.key << " = " << c.value.dump() << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.rfind("cfg.json: ", 0), 0u) << e;
  }
  // Every size within its own limit, but 2^20 * 2^20 * 3 * 2^16 parameters in all: the total is
  // computed exactly in 64 bits and refused.
  nlohmann::json big = base;
  big["hidden_size"] = ModelConfig::kMaxHidden;
  big["intermediate_size"] = ModelConfig::kMaxIntermediate;
  big["num_hidden_layers"] = ModelConfig::kMaxLayers;
  big["vocab_size"] = ModelConfig::kMaxVocab;
  EXPECT_NE(error_of(big).find("parameters is more than helixpipe supports"), std::string::npos)
      << error_of(big);
  // The largest accepted sizes do not overflow the counts (2^40 parameters exactly fits).
  ModelConfig edge;
  edge.hidden = 1 << 10;
  edge.heads = 8;
  edge.kv_heads = 8;
  edge.intermediate = 1 << 10;
  edge.vocab = 1 << 10;
  edge.layers = ModelConfig::kMaxLayers;
  EXPECT_NO_THROW(edge.validate());
  EXPECT_EQ(edge.params_per_layer(), 3 * 1024 * 1024 + 1024 * 1024 + 3 * 1024 * 1024 + 2 * 1024);
}

TEST(ModelConfig, HuggingFaceConfigMustStateItsSizes) {
  // Our own form may leave sizes at their defaults; a Hugging Face config.json may not.
  nlohmann::json j = {{"model_type", "llama"},     {"hidden_size", 64},
                      {"intermediate_size", 160},  {"num_attention_heads", 8},
                      {"num_hidden_layers", 3},    {"vocab_size", 300}};
  EXPECT_EQ(error_of(j), "");
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers"}) {
    nlohmann::json missing = j;
    missing.erase(key);
    EXPECT_NE(error_of(missing).find(std::string("'") + key + "' is missing"), std::string::npos)
        << error_of(missing);
    missing.erase("model_type");
    missing["architectures"] = {"LlamaForCausalLM"};
    EXPECT_NE(error_of(missing).find(std::string("'") + key + "' is missing"), std::string::npos);
  }
  nlohmann::json own = j;
  own.erase("model_type");
  own.erase("vocab_size");
  EXPECT_EQ(ModelConfig::from_json(own, "own").vocab, 256);
}

TEST(ModelConfig, ParameterCountMatchesTheLayout) {
  ModelConfig c = ModelConfig::load("tiny");
  const int64_t h = c.hidden, q = c.qkv_dim(), f = c.intermediate;
  EXPECT_EQ(c.params_per_layer(), q * h + h * h + 3 * h * f + 2 * h);
  EXPECT_EQ(c.params_total(), 2 * c.vocab * h + c.layers * c.params_per_layer() + h);
}

}  // namespace
}  // namespace hp

// The paper-size presets must have the parameter counts their comments promise (within 3%).
TEST(ModelConfig, PaperPresetsHaveTheirStatedSizes) {
  for (auto [name, params] : {std::pair{"1.3b", 1.34e9}, std::pair{"3b", 2.7e9}, std::pair{"7b", 6.74e9}}) {
    hp::ModelConfig c = hp::ModelConfig::load(name);
    c.validate();
    EXPECT_NEAR(static_cast<double>(c.params_total()) / params, 1.0, 0.03) << name;
    EXPECT_EQ(c.layers % 8, 0) << name;
  }
}

namespace hp {
namespace {

using test::tiny_gpt;  // tests/tiny_gpt.h

TEST(ModelConfig, GptParameterCountsByHand) {
  const ModelConfig c = tiny_gpt();
  c.validate();
  // pre: LayerNorm 1 (8 + 8) + W_qkv 24x8 + b_qkv 24 = 232.
  EXPECT_EQ(c.qkv_weight_elems(), 24 * 8 + 24);
  EXPECT_EQ(c.pre_params(), 232);
  // post: W_o 64 + b_o 8, LayerNorm 2 16, fc1 32x8 + 32, fc2 8x32 + 8 = 640.
  EXPECT_EQ(c.post_params(), 640);
  EXPECT_EQ(c.params_per_layer(), 12 * 8 * 8 + 13 * 8);  // 872
  EXPECT_EQ(c.embed_params(), 16 * 8 + 16 * 8);          // tokens + positions
  EXPECT_EQ(c.head_params(), 16);                         // final LayerNorm; LM head tied
  EXPECT_EQ(c.params_total(), 2016);
  // The learned table grows to the sequence a run uses; rotary positions have no table.
  EXPECT_EQ(c.for_sequence(64).embed_params(), (16 + 64) * 8);
  EXPECT_EQ(c.for_sequence(4).max_positions, 16);
  ModelConfig llama = c;
  llama.kind = ModelKind::kLlama;
  EXPECT_EQ(llama.for_sequence(64).max_positions, 16);
  EXPECT_EQ(llama.params_per_layer(), 24 * 8 + 64 + 3 * 8 * 32 + 2 * 8);
}

// GPT-3's table: 1.3B, 2.7B, 6.7B. With Megatron's padded vocabulary 50304 and 2048 positions.
TEST(ModelConfig, GptPresetsHaveTheGpt3Sizes) {
  for (auto [name, params] : {std::pair{"gpt-1.3b", int64_t{1315819520}},
                              std::pair{"gpt-3b", int64_t{2651673600}},
                              std::pair{"gpt-7b", int64_t{6658596864}}}) {
    const ModelConfig c = ModelConfig::load(name);
    c.validate();
    EXPECT_TRUE(c.is_gpt()) << name;
    EXPECT_EQ(c.intermediate, 4 * c.hidden) << name;
    EXPECT_EQ(c.params_total(), params) << name;
    EXPECT_EQ(c.layers % 8, 0) << name;
  }
  // At 128k tokens the reference's table holds 131072 rows: 0.54e9 more parameters.
  EXPECT_EQ(ModelConfig::load("gpt-7b").for_sequence(131072).params_total(), 7187079168);
}

TEST(ModelConfig, GptKindIsReadButNotRun) {
  nlohmann::json j = {{"model_kind", "gpt"}, {"hidden_size", 64}, {"intermediate_size", 256},
                      {"num_attention_heads", 4}, {"num_hidden_layers", 2}, {"vocab_size", 300},
                      {"max_position_embeddings", 1024}, {"name", "mine"}};
  const ModelConfig c = ModelConfig::from_json(j, "mine.json");
  EXPECT_TRUE(c.is_gpt());
  const std::string want =
      "model 'mine' is GPT-style; helixpipe trains LLaMA-style models only; it can be simulated "
      "with simulate/compare/plan/sweep";
  EXPECT_EQ(test::error_of([&] { c.check_runtime_supported(); }), want);
  EXPECT_EQ(test::error_of([&] { (void)c.to_hf_json(); }), want);
  EXPECT_NE(test::error_of([] { ModelConfig::load_for_runtime("gpt-7b"); }).find("'gpt-7b' is GPT"),
            std::string::npos);
  EXPECT_NO_THROW(ModelConfig::load_for_runtime("tiny"));
  j["model_kind"] = "bert";
  EXPECT_NE(test::error_of([&] { ModelConfig::from_json(j, "x"); }).find("'model_kind' must be"),
            std::string::npos);
}

}  // namespace
}  // namespace hp

#include "util/model_config.h"

#include <gtest/gtest.h>

#include "util/error.h"

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

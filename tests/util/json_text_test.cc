// JSON text with a NUL byte: nlohmann's parser stops at the NUL and ignores the rest, so the
// readers refuse such text instead.
#include "util/json_text.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "util/error.h"
#include "util/model_config.h"
#include "../error_text.h"

namespace hp {
namespace {

using test::error_of;

TEST(JsonText, BytesAfterANulAreNotIgnored) {
  const std::string text("{\"a\": 1}\0{\"b\": 2}", 17);
  // What the reader used to do: the parser alone takes the text up to the NUL as the whole file.
  EXPECT_EQ(nlohmann::json::parse(text), nlohmann::json({{"a", 1}}));
  EXPECT_EQ(error_of([&] { parse_json_text(text, "f.json"); }),
            "f.json: NUL byte at offset 8 of 17: a JSON file holds text only (is it binary, "
            "truncated or overwritten?); regenerate or fix the file");
  // A trailing NUL alone (a zero-padded file) is refused too.
  EXPECT_NE(error_of([&] { parse_json_text(std::string("{}\0", 3), "f.json"); })
                .find("NUL byte at offset 2 of 3"),
            std::string::npos);
  EXPECT_EQ(parse_json_text("{\"a\": [1, 2]}\n", "f.json"), nlohmann::json({{"a", {1, 2}}}));
  // Other parse errors still come from the parser, for the caller's own message.
  EXPECT_THROW(parse_json_text("{\"a\": ", "f.json"), nlohmann::json::parse_error);
}

TEST(JsonText, ModelConfigFileWithANulIsRefused) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("hp_json_text_" + std::to_string(::getpid()) + ".json"))
                               .string();
  const std::string good = R"({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 300})";
  std::ofstream(path, std::ios::binary) << good << std::string(1, '\0') << "{\"vocab_size\": 1}";
  EXPECT_NE(error_of([&] { ModelConfig::load(path); }).find("NUL byte at offset 64"),
            std::string::npos)
      << error_of([&] { ModelConfig::load(path); });
  std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
  EXPECT_EQ(ModelConfig::load(path).vocab, 300);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace hp

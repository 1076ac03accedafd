// What makes a checkpoint folder usable by Hugging Face tools and the other way round: sharded
// models (model.safetensors.index.json and its shards) with every inconsistency refused, BF16
// model files (rounding checked against a reference computed here in double), and the
// generation_config.json and byte-level tokenizer files every save writes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/crc32.h"
#include "checkpoint/hf_files.h"
#include "checkpoint/model_files.h"
#include "checkpoint/safetensors.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

class Folder {
 public:
  explicit Folder(const std::string& name) {
    path_ = fs::temp_directory_path() / ("hp_interop_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Folder() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Five tensors of distinct values, to be spread over shards.
struct Tensors {
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, std::vector<int64_t>> shapes;
  Tensors() {
    const std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
        {"model.embed_tokens.weight", {6, 4}},
        {"model.layers.0.self_attn.q_proj.weight", {4, 4}},
        {"model.layers.0.mlp.up_proj.weight", {3, 4}},
        {"model.norm.weight", {4}},
        {"lm_head.weight", {6, 4}}};
    float v = 0.1f;
    for (const auto& [name, shape] : specs) {
      shapes[name] = shape;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      auto& t = values[name];
      for (int64_t i = 0; i < n; ++i) t.push_back(v = v * 1.37f - 0.51f);
    }
  }
  StWriteTensor view(const std::string& name) const {
    return {name, StDType::kF32, shapes.at(name), values.at(name).data()};
  }
};

// Writes the tensors of `groups[i]` to shard i of `dir` and the index mapping each to its shard;
// returns the shard file names.
std::vector<std::string> write_sharded(const fs::path& dir, const Tensors& t,
                                       const std::vector<std::vector<std::string>>& groups) {
  nlohmann::json map = nlohmann::json::object();
  std::vector<std::string> names;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string shard =
        fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, groups.size());
    std::vector<StWriteTensor> list;
    for (const std::string& n : groups[i]) {
      list.push_back(t.view(n));
      map[n] = shard;
    }
    write_safetensors((dir / shard).string(), list, {{"format", "pt"}});
    names.push_back(shard);
  }
  write_raw((dir / kModelIndexFile).string(),
            nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2));
  return names;
}

const std::vector<std::vector<std::string>> kThreeShards = {
    {"model.embed_tokens.weight", "model.norm.weight"},
    {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight"},
    {"lm_head.weight"}};

std::vector<float> read_all(const ModelTensorFiles& m, const std::string& name) {
  const StTensorInfo* t = m.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(t->numel()));
  m.read_f32(name, t->shape, out.data());
  return out;
}

TEST(ShardedModel, ReadsTheSameTensorsAsOneFile) {
  const Tensors t;
  Folder one("one");
  std::vector<StWriteTensor> all;
  for (const auto& [name, v] : t.values) all.push_back(t.view(name));
  write_safetensors(one.file(kModelFile), all, {{"format", "pt"}});
  const ModelTensorFiles single = ModelTensorFiles::open(one.file(kModelFile));
  EXPECT_FALSE(single.sharded());
  for (const auto& groups : {std::vector<std::vector<std::string>>{
                                 {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"},
                                 {"model.layers.0.self_attn.q_proj.weight",
                                  "model.layers.0.mlp.up_proj.weight"}},
                             kThreeShards}) {
    Folder dir("sharded");
    write_sharded(dir.path(), t, groups);
    const ModelTensorFiles m = ModelTensorFiles::open(dir.file(kModelIndexFile));
    EXPECT_TRUE(m.sharded());
    EXPECT_EQ(m.files().size(), groups.size());
    ASSERT_EQ(m.tensors().size(), t.values.size());
    for (const auto& [name, want] : t.values) {
      const std::vector<float> got = read_all(m, name), one_file = read_all(single, name);
      ASSERT_EQ(got.size(), want.size());
      // Bitwise: the same bytes as the unsharded file and as the values written.
      EXPECT_EQ(std::memcmp(got.data(), want.data(), 4 * want.size()), 0) << name;
      EXPECT_EQ(std::memcmp(got.data(), one_file.data(), 4 * want.size()), 0) << name;
      EXPECT_EQ(m.find(name)->shape, t.shapes.at(name));
      EXPECT_NE(m.file_of(name).find(name), nullptr);
    }
  }
}

TEST(ShardedModel, OpenCheckpointFindsTheIndex) {
  const Tensors t;
  Folder dir("ck");
  write_raw(dir.file(kConfigFile), R"({"hidden_size": 4})");
  write_sharded(dir.path(), t, kThreeShards);
  const CheckpointInfo info = open_checkpoint(dir.path().string());
  EXPECT_FALSE(info.has_marker);
  EXPECT_EQ(info.model_path, dir.file(kModelIndexFile));
  EXPECT_TRUE(is_shard_index_path(info.model_path));
  // Both forms at once: which one holds the model is not guessed.
  write_safetensors(dir.file(kModelFile), std::vector<StWriteTensor>{t.view("model.norm.weight")});
  EXPECT_NE(error_of([&] { open_checkpoint(dir.path().string()); }).find("ambiguous"),
            std::string::npos);
  fs::remove(dir.file(kModelFile));
  fs::remove(dir.file(kModelIndexFile));
  const std::string e = error_of([&] { open_checkpoint(dir.path().string()); });
  EXPECT_NE(e.find("'model.safetensors' is missing"), std::string::npos) << e;
  EXPECT_NE(e.find(kModelIndexFile), std::string::npos) << e;
}

class ShardIndexErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    shards_ = write_sharded(dir_.path(), t_, kThreeShards);
    original_ = read_file(dir_.file(kModelIndexFile));
  }
  nlohmann::json index() const { return nlohmann::json::parse(original_); }
  void write_index(const std::string& text) { write_raw(dir_.file(kModelIndexFile), text); }
  std::string open_error() {
    return error_of([&] { ModelTensorFiles::open(dir_.file(kModelIndexFile)); });
  }
  Tensors t_;
  Folder dir_{"errors"};
  std::vector<std::string> shards_;
  std::string original_;  // the index as written, consistent with the shards
};

TEST_F(ShardIndexErrors, TensorNamedTwice) {
  // The same key twice in the JSON text: a parser would keep one silently.
  write_index(R"({"weight_map": {"model.norm.weight": ")" + shards_[0] +
              R"(", "model.norm.weight": ")" + shards_[1] + R"("}})");
  const std::string e = open_error();
  EXPECT_NE(e.find("names tensor 'model.norm.weight' more than once"), std::string::npos) << e;
  write_index(R"({"weight_map": {}, "weight_map": {}})");
  EXPECT_NE(open_error().find("key 'weight_map' more than once"), std::string::npos);
}

TEST_F(ShardIndexErrors, ShardOutsideTheFolderOrMissing) {
  for (const std::string& bad : std::vector<std::string>{"../" + shards_[0], "sub/" + shards_[0],
                                                         "..", ".", "", "/etc/passwd"}) {
    nlohmann::json j = index();
    j["weight_map"]["model.norm.weight"] = bad;
    write_index(j.dump());
    const std::string e = open_error();
    EXPECT_NE(e.find("not a file name in the index's folder"), std::string::npos) << bad << ": " << e;
  }
  write_index(original_);
  ModelTensorFiles::open(dir_.file(kModelIndexFile));  // consistent again
  fs::remove(dir_.file(shards_[2]));
  const std::string e = open_error();
  EXPECT_NE(e.find("'lm_head.weight' to shard '" + shards_[2] + "', but"), std::string::npos) << e;
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
}

TEST_F(ShardIndexErrors, MapAndShardsDisagree) {
  // In the map, missing from its shard (it is in another one): names the tensor and both shards.
  nlohmann::json j = index();
  j["weight_map"]["model.norm.weight"] = shards_[1];
  write_index(j.dump());
  std::string e = open_error();
  EXPECT_NE(e.find("maps tensor 'model.norm.weight' to shard '" + shards_[1] + "'"),
            std::string::npos) << e;
  EXPECT_NE(e.find("(it is in '" + shards_[0] + "')"), std::string::npos) << e;
  // In the map, in no shard at all.
  j = index();
  j["weight_map"]["model.layers.9.mlp.up_proj.weight"] = shards_[1];
  write_index(j.dump());
  e = open_error();
  EXPECT_NE(e.find("maps tensor 'model.layers.9.mlp.up_proj.weight' to shard '" + shards_[1] +
                   "', but"),
            std::string::npos) << e;
  EXPECT_NE(e.find("has no such tensor"), std::string::npos) << e;
  // In a shard, not in the map: names the shard and the tensor.
  j = index();
  j["weight_map"].erase("model.norm.weight");
  write_index(j.dump());
  e = open_error();
  EXPECT_NE(e.find(shards_[0] + "' holds tensor 'model.norm.weight', which shard index"),
            std::string::npos) << e;
  // In two shards: the second copy is a tensor the map puts elsewhere.
  write_safetensors(dir_.file(shards_[2]),
                    std::vector<StWriteTensor>{t_.view("lm_head.weight"), t_.view("model.norm.weight")});
  write_index(original_);
  e = open_error();
  EXPECT_NE(e.find(shards_[2] + "' holds tensor 'model.norm.weight', but shard index"),
            std::string::npos) << e;
  EXPECT_NE(e.find("maps it to shard '" + shards_[0] + "'"), std::string::npos) << e;
}

TEST_F(ShardIndexErrors, MalformedIndex) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"weight_map\": ", "not valid JSON"},
      {"[]", "no \"weight_map\" object"},
      {R"({"weight_map": []})", "no \"weight_map\" object"},
      {R"({"weight_map": {}})", "empty weight_map"},
      {R"({"weight_map": {"a": 3}})", "not to a shard file name"},
      {R"({"weight_map": {"a": "x.safetensors"}, "metadata": 1})", "\"metadata\" must be an object"},
      {std::string("{\"weight_map\": {}}\0x", 20), "NUL byte"}};
  for (const auto& [text, needle] : cases) {
    write_index(text);
    const std::string e = open_error();
    EXPECT_NE(e.find(needle), std::string::npos) << text << ": " << e;
  }
  // A shard that is not valid safetensors is refused by the safetensors reader, naming it.
  write_index(original_);
  write_raw(dir_.file(shards_[1]), "garbage!");
  EXPECT_NE(open_error().find(shards_[1]), std::string::npos);
}

TEST_F(ShardIndexErrors, MarkerMustListTheShards) {
  // A helixpipe marker over a sharded folder: the index and every shard must be verified by it.
  write_raw(dir_.file(kConfigFile), "{}");
  nlohmann::json files = nlohmann::json::object();
  for (const std::string& f : {std::string(kConfigFile), std::string(kModelIndexFile), shards_[0],
                               shards_[1], shards_[2]}) {
    const std::string bytes = read_file(dir_.file(f));
    files[f] = {{"bytes", bytes.size()},
                {"crc32", fmt::format("{:08x}", crc32(bytes.data(), bytes.size()))}};
  }
  nlohmann::json marker = {{"format", "helixpipe-checkpoint"}, {"version", 1}, {"files", files}};
  write_raw(dir_.file(kMarkerFile), marker.dump());
  const CheckpointInfo info = open_checkpoint(dir_.path().string());
  EXPECT_TRUE(info.has_marker);
  EXPECT_EQ(info.model_path, dir_.file(kModelIndexFile));
  marker["files"].erase(shards_[1]);
  write_raw(dir_.file(kMarkerFile), marker.dump());
  std::string e = error_of([&] { open_checkpoint(dir_.path().string()); });
  EXPECT_NE(e.find("shard '" + shards_[1] + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("is not listed in its marker"), std::string::npos) << e;
  // An index the marker does not list (beside a listed model.safetensors) is not used unverified.
  write_safetensors(dir_.file(kModelFile), std::vector<StWriteTensor>{t_.view("model.norm.weight")});
  const std::string model = read_file(dir_.file(kModelFile));
  marker = {{"format", "helixpipe-checkpoint"}, {"version", 1}, {"files", files}};
  marker["files"].erase(kModelIndexFile);
  marker["files"][kModelFile] = {{"bytes", model.size()},
                                 {"crc32", fmt::format("{:08x}", crc32(model.data(), model.size()))}};
  write_raw(dir_.file(kMarkerFile), marker.dump());
  e = error_of([&] { open_checkpoint(dir_.path().string()); });
  EXPECT_NE(e.find("has 'model.safetensors.index.json' but its marker"), std::string::npos) << e;
}

// An independent f32 -> bf16 rounding: the two bf16 neighbours of x, computed from its bits,
// compared by their distance to x in double; a tie goes to the even one.
float reference_bf16(float x) {
  if (std::isnan(x) || std::isinf(x)) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t down_bits = u & 0xffff0000u;
  float down, up;
  std::memcpy(&down, &down_bits, 4);
  const uint32_t up_bits = down_bits + 0x10000u;  // the next bf16 away from zero
  std::memcpy(&up, &up_bits, 4);
  if (down == x) return x;
  // Past the largest bf16 the next step is 2^128 (which the format writes as infinity).
  const double up_value = std::isinf(up) ? std::copysign(std::ldexp(1.0, 128), x) : up;
  const double dd = std::fabs(static_cast<double>(x) - down);
  const double du = std::fabs(up_value - x);
  if (dd < du) return down;
  if (du < dd) return up;
  return ((down_bits >> 16) & 1u) == 0 ? down : up;
}

float round_trip(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }

TEST(Bf16Storage, RoundsToNearestEven) {
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> uni(-4.f, 4.f);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float x = uni(gen);
    if (i % 2) {  // any finite bit pattern, subnormals and huge values included
      uint32_t u = bits(gen);
      std::memcpy(&x, &u, 4);
      if (!std::isfinite(x)) continue;
    }
    const float want = reference_bf16(x);
    const float got = round_trip(x);
    ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << x;
    // Within half a bf16 ulp (2^-8 relative) of x wherever the result is finite and normal.
    if (std::isfinite(got) && std::fabs(x) > 1e-30f) {
      ASSERT_LE(std::fabs(got - x), std::ldexp(std::fabs(x), -8)) << x;
    }
  }
  // Ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to the even 1; 1 + 3*2^-8 lies
  // halfway between 1 + 2^-7 and 1 + 2^-6 and goes to the even 1 + 2^-6.
  EXPECT_EQ(round_trip(1.f + std::ldexp(1.f, -8)), 1.f);
  EXPECT_EQ(round_trip(1.f + 3 * std::ldexp(1.f, -8)), 1.f + std::ldexp(1.f, -6));
  EXPECT_EQ(f32_to_bf16_bits(1.f), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(-2.f), 0xc000);
  EXPECT_EQ(round_trip(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_trip(-std::numeric_limits<float>::infinity()),
            -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(round_trip(std::numeric_limits<float>::quiet_NaN())));
  uint32_t snan_bits = 0x7f800001u;  // a NaN whose payload is all in the dropped half
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  EXPECT_TRUE(std::isnan(round_trip(snan)));
}

CheckpointContents small_model(std::vector<float>& w, std::vector<float>& m) {
  w = {1.f, 1.f + std::ldexp(1.f, -8), -3.14159265f, 1e-3f, 65504.5f, -0.3f};
  m = {0.5f, 0.25f, 0.f, 1.f, 2.f, 3.f};
  CheckpointContents c;
  c.config = {{"hidden_size", 2}, {"vocab_size", 300}, {"max_position_embeddings", 1024},
              {"torch_dtype", "float32"}};
  c.model = {{"model.norm.weight", StDType::kF32, {2, 3}, w.data()}};
  c.optimizer = {{"exp_avg.model.norm.weight", StDType::kF32, {2, 3}, m.data()}};
  c.trainer_state = nlohmann::json{{"step", 3}};
  return c;
}

TEST(Bf16Checkpoint, StoresRoundedModelAndIsNotResumable) {
  Folder root("bf16");
  std::vector<float> w, m;
  CheckpointContents c = small_model(w, m);
  const std::string dir = root.file("ck");
  // Optimizer state beside bf16 weights would pretend to be resumable.
  c.model_dtype = StDType::kBF16;
  EXPECT_NE(error_of([&] { save_checkpoint(dir, c); }).find("not resumable"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir));
  c.optimizer.clear();
  save_checkpoint(dir, c);
  const CheckpointInfo info = open_checkpoint(dir);
  EXPECT_EQ(info.model_dtype, StDType::kBF16);
  EXPECT_FALSE(info.resumable);
  EXPECT_FALSE(info.optimizer_path.has_value());
  EXPECT_EQ(info.config["torch_dtype"], "bfloat16");
  const SafetensorsReader r = SafetensorsReader::open(info.model_path);
  ASSERT_EQ(r.tensors().size(), 1u);
  EXPECT_EQ(r.tensors()[0].dtype, StDType::kBF16);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  std::vector<float> back(6);
  const std::vector<int64_t> shape = {2, 3};
  r.read_f32("model.norm.weight", shape, back.data());
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(back[i], reference_bf16(w[i])) << i;
    EXPECT_LE(std::fabs(back[i] - w[i]), std::ldexp(std::fabs(w[i]), -8)) << i;
  }
  EXPECT_NE(back[1], w[1]);  // rounding did happen (to the even neighbour, 1)
  // The default stays F32 and resumable.
  c = small_model(w, m);
  save_checkpoint(dir, c);
  const CheckpointInfo f32 = open_checkpoint(dir);
  EXPECT_EQ(f32.model_dtype, StDType::kF32);
  EXPECT_TRUE(f32.resumable);
  EXPECT_EQ(f32.config["torch_dtype"], "float32");
}

TEST(Bf16Checkpoint, MarkerFieldsAreChecked) {
  Folder root("bf16_marker");
  std::vector<float> w, m;
  const std::string dir = root.file("ck");
  save_checkpoint(dir, small_model(w, m));
  const std::string path = dir + "/" + kMarkerFile;
  nlohmann::json marker = nlohmann::json::parse(read_file(path));
  EXPECT_EQ(marker["model_dtype"], "F32");
  EXPECT_EQ(marker["resumable"], true);
  marker["resumable"] = "no";
  write_raw(path, marker.dump());
  EXPECT_NE(error_of([&] { open_checkpoint(dir); }).find("resumable must be true or false"),
            std::string::npos);
  marker["resumable"] = true;
  marker["model_dtype"] = "F16";
  write_raw(path, marker.dump());
  EXPECT_NE(error_of([&] { open_checkpoint(dir); }).find("model_dtype must be"), std::string::npos);
  // Markers written before these fields existed: F32 and resumable.
  marker.erase("model_dtype");
  marker.erase("resumable");
  write_raw(path, marker.dump());
  const CheckpointInfo info = open_checkpoint(dir);
  EXPECT_EQ(info.model_dtype, StDType::kF32);
  EXPECT_TRUE(info.resumable);
}

// GPT-2's byte-to-unicode table as its definition states it, built here on its own: the bytes
// '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF keep their code point; the rest, in increasing
// order, get U+0100 onwards. Returns the code point of each byte.
std::vector<uint32_t> gpt2_byte_table() {
  std::vector<int> keep;
  for (int b = '!'; b <= '~'; ++b) keep.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) keep.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) keep.push_back(b);
  std::vector<uint32_t> cp(256, 0);
  std::vector<bool> kept(256, false);
  for (int b : keep) {
    cp[b] = static_cast<uint32_t>(b);
    kept[b] = true;
  }
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b)
    if (!kept[b]) cp[b] = next++;
  return cp;
}

// Decodes one UTF-8 character that must fill `s`; returns 0xFFFFFFFF otherwise.
uint32_t single_code_point(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  if (s.size() == 1 && p[0] < 0x80) return p[0];
  if (s.size() == 2 && (p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80)
    return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
  return 0xFFFFFFFFu;
}

TEST(HfFiles, ByteLevelSymbols) {
  const std::vector<uint32_t> table = gpt2_byte_table();
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = single_code_point(byte_level_symbol(static_cast<uint8_t>(b)));
    EXPECT_EQ(cp, table[b]) << b;
    seen.insert(cp);
  }
  EXPECT_EQ(seen.size(), 256u);  // one symbol per byte
  // Values every GPT-2-style tokenizer shows: space is "Ġ", newline "Ċ", NUL "Ā", DEL "ġ", the
  // soft hyphen U+00AD "Ń"; letters stand for themselves.
  EXPECT_EQ(byte_level_symbol(' '), "\u0120");
  EXPECT_EQ(byte_level_symbol('\n'), "\u010A");
  EXPECT_EQ(byte_level_symbol(0), "\u0100");
  EXPECT_EQ(byte_level_symbol(0x7F), "\u0121");
  EXPECT_EQ(byte_level_symbol(0xAD), "\u0143");
  EXPECT_EQ(byte_level_symbol('a'), "a");
  EXPECT_EQ(byte_level_symbol(0xFF), "\u00FF");
}

// What the `tokenizers` pipeline of the saved tokenizer.json does, step by step, done here from
// the JSON: no normalizer; ByteLevel pre-tokenizer (no prefix space, no regex split) turns each
// byte into its symbol; BPE without merges makes each symbol a token, looked up in the vocab.
std::vector<int64_t> encode_with(const nlohmann::json& tok, const std::string& text) {
  const std::vector<uint32_t> table = gpt2_byte_table();
  std::vector<int64_t> ids;
  for (unsigned char byte : text) {
    std::string symbol;
    const uint32_t cp = table[byte];
    if (cp < 0x80) {
      symbol.push_back(static_cast<char>(cp));
    } else {
      symbol.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      symbol.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    const auto& vocab = tok["model"]["vocab"];
    ids.push_back(vocab.contains(symbol) ? vocab[symbol].get<int64_t>() : -1);
  }
  return ids;
}

TEST(HfFiles, EverySaveWritesGenerationConfigAndTokenizer) {
  Folder root("hf_files");
  std::vector<float> w, m;
  const std::string dir = root.file("ck");
  CheckpointContents c = small_model(w, m);
  c.config["bos_token_id"] = 1;
  c.config["eos_token_id"] = nlohmann::json::array({2, 7});
  save_checkpoint(dir, c);
  const nlohmann::json marker = nlohmann::json::parse(read_file(dir + "/" + kMarkerFile));
  for (const char* f : {kGenerationConfigFile, kTokenizerFile, kTokenizerConfigFile})
    EXPECT_TRUE(marker["files"].contains(f)) << f;

  const nlohmann::json gen = nlohmann::json::parse(read_file(dir + "/" + kGenerationConfigFile));
  EXPECT_EQ(gen["bos_token_id"], 1);
  EXPECT_EQ(gen["eos_token_id"], nlohmann::json::array({2, 7}));
  EXPECT_EQ(gen["max_length"], 1024);

  const nlohmann::json tok = nlohmann::json::parse(read_file(dir + "/" + kTokenizerFile));
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_TRUE(tok["model"]["merges"].empty());
  EXPECT_TRUE(tok["added_tokens"].empty());
  EXPECT_TRUE(tok["normalizer"].is_null());
  for (const char* part : {"pre_tokenizer", "decoder"}) {
    EXPECT_EQ(tok[part]["type"], "ByteLevel") << part;
    EXPECT_EQ(tok[part]["add_prefix_space"], false) << part;
  }
  EXPECT_EQ(tok["pre_tokenizer"]["use_regex"], false);
  // The vocab is exactly the 256 symbols, byte b's symbol having id b.
  const auto& vocab = tok["model"]["vocab"];
  ASSERT_EQ(vocab.size(), 256u);
  const std::vector<uint32_t> table = gpt2_byte_table();
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 256);
    EXPECT_EQ(single_code_point(it.key()), table[id]) << id;
  }
  // Every byte value, in any order, encodes to itself.
  std::string all_bytes;
  for (int b = 255; b >= 0; --b) all_bytes.push_back(static_cast<char>(b));
  const std::string text = "Hello, world!\n\tcaf\xc3\xa9 " + all_bytes + "  x";
  const std::vector<int64_t> ids = encode_with(tok, text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i)
    EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i])) << i;

  const nlohmann::json tc = nlohmann::json::parse(read_file(dir + "/" + kTokenizerConfigFile));
  EXPECT_EQ(tc["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(tc["clean_up_tokenization_spaces"], false);
  EXPECT_EQ(tc["model_max_length"], 1024);

  // A changed tokenizer file is caught by the marker like any other.
  std::string t = read_file(dir + "/" + kTokenizerFile);
  t[t.size() / 2] ^= 1;
  write_raw(dir + "/" + kTokenizerFile, t);
  EXPECT_NE(error_of([&] { open_checkpoint(dir); }).find("'tokenizer.json' has CRC32"),
            std::string::npos);
}

TEST(HfFiles, WithoutSpecialTokensOrByteVocab) {
  Folder root("hf_plain");
  std::vector<float> w, m;
  const std::string dir = root.file("ck");
  CheckpointContents c = small_model(w, m);
  save_checkpoint(dir, c);
  const nlohmann::json gen = nlohmann::json::parse(read_file(dir + "/" + kGenerationConfigFile));
  EXPECT_FALSE(gen.contains("bos_token_id"));
  EXPECT_FALSE(gen.contains("eos_token_id"));
  EXPECT_EQ(gen["max_length"], 1024);
  // A vocabulary smaller than 256 cannot hold the byte tokens: no tokenizer files.
  c.config["vocab_size"] = 100;
  save_checkpoint(dir, c);
  EXPECT_TRUE(fs::exists(dir + "/" + kGenerationConfigFile));
  EXPECT_FALSE(fs::exists(dir + "/" + kTokenizerFile));
  EXPECT_FALSE(fs::exists(dir + "/" + kTokenizerConfigFile));
  open_checkpoint(dir);
}

}  // namespace
}  // namespace hp

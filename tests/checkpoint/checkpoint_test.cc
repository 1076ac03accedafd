// safetensors round trip and corruptions; checkpoint folders: marker, atomic replace, crash before
// the marker, corrupt/truncated/missing files, plain Hugging Face folders.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/crc32.h"
#include "checkpoint/safetensors.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  fs::path dir = fs::temp_directory_path() / ("hp_ckpt_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

void write_raw(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected hp::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Builds a safetensors file by hand: header JSON text and data bytes.
std::string raw_safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

TEST(Crc32, KnownValues) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  std::string s(1000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 31);
  // Incremental over odd splits equals one pass (exercises the 8-byte and tail paths).
  EXPECT_EQ(crc32_update(crc32(s.data(), 13), s.data() + 13, s.size() - 13), crc32(s.data(), s.size()));
}

TEST(Safetensors, RoundTrip) {
  std::vector<float> a = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, -7.f};
  std::vector<int32_t> b = {7, -8, 9};
  std::vector<StWriteTensor> ts = {{"layer.a", StDType::kF32, {2, 3}, a.data()},
                                   {"b", StDType::kI32, {3}, b.data()},
                                   {"empty", StDType::kF32, {0, 4}, nullptr}};
  std::string path = (temp_dir() / "rt.safetensors").string();
  write_safetensors(path, ts, {{"format", "pt"}});
  SafetensorsReader r = SafetensorsReader::open(path);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  ASSERT_EQ(r.tensors().size(), 3u);
  EXPECT_EQ(r.tensors()[0].name, "layer.a");  // file order is write order
  const StTensorInfo* tb = r.find("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, StDType::kI32);
  EXPECT_EQ(std::memcmp(r.data(*tb), b.data(), 12), 0);
  std::vector<float> back(6);
  std::vector<int64_t> shape = {2, 3};
  r.read_f32("layer.a", shape, back.data());
  EXPECT_EQ(back, a);
  // The data section starts 8-byte aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data(r.tensors()[0])) % 8, 0u);
  std::vector<int64_t> wrong = {3, 2};
  expect_error([&] { r.read_f32("layer.a", wrong, back.data()); }, "has shape [2, 3] but [3, 2]");
  expect_error([&] { r.read_f32("nope", shape, back.data()); }, "has no tensor 'nope'");
  std::vector<int64_t> s3 = {3};
  expect_error([&] { r.read_f32("b", s3, back.data()); }, "expected a floating-point type");
}

TEST(Safetensors, ReadsHalfPrecision) {
  // F16: 1.0 = 0x3c00, -2.0 = 0xc000, 2^-24 (smallest subnormal) = 0x0001; BF16: 1.0 = 0x3f80.
  std::string f16 = std::string("\x00\x3c\x00\xc0\x01\x00", 6);
  std::string bf16 = std::string("\x80\x3f\x40\xc0", 4);  // 1.0, -3.0
  std::string header =
      R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"g":{"dtype":"BF16","shape":[2],"data_offsets":[6,10]}})";
  fs::path p = temp_dir() / "half.safetensors";
  write_raw(p, raw_safetensors(header, f16 + bf16));
  SafetensorsReader r = SafetensorsReader::open(p.string());
  float h[3], g[2];
  std::vector<int64_t> s3 = {3}, s2 = {2};
  r.read_f32("h", s3, h);
  r.read_f32("g", s2, g);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[1], -3.0f);
}

class SafetensorsCorruption : public ::testing::Test {
 protected:
  void expect_rejected(const std::string& bytes, const std::string& needle) {
    fs::path p = temp_dir() / "bad.safetensors";
    write_raw(p, bytes);
    expect_error([&] { SafetensorsReader::open(p.string()); }, needle);
  }
  std::string data8_ = std::string(8, '\1');
};

TEST_F(SafetensorsCorruption, Truncated) {
  std::vector<float> a(16, 1.f);
  std::vector<StWriteTensor> ts = {{"a", StDType::kF32, {16}, a.data()}};
  fs::path p = temp_dir() / "good.safetensors";
  write_safetensors(p.string(), ts);
  std::string good = read_file(p.string());
  expect_rejected(good.substr(0, 5), "no room for the 8-byte header length");
  expect_rejected(good.substr(0, 20), "truncated or corrupt: header length");
  expect_rejected(good.substr(0, good.size() - 4), "lie outside the 60 data bytes");
  expect_rejected(good + "junk", "bytes after the last tensor");
}

TEST_F(SafetensorsCorruption, BadHeaders) {
  expect_rejected(raw_safetensors("[1,2]", ""), "not a JSON object");
  expect_rejected(raw_safetensors("{\"a\":", ""), "not valid JSON");
  expect_rejected(
      raw_safetensors(R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", data8_),
      "unknown dtype");
  expect_rejected(
      raw_safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8_),
      "has 8 bytes but shape [3] of F32 needs 12");
  expect_rejected(
      raw_safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8_),
      "invalid dimension");
  expect_rejected(
      raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8_),
      "lie outside");
  expect_rejected(
      raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", data8_),
      "lie outside the 8 data bytes");
  expect_rejected(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2]}})", data8_),
                  "exactly dtype, shape and data_offsets");
  expect_rejected(raw_safetensors(R"({"__metadata__":{"x":1}})", ""), "is not a string");
}

TEST_F(SafetensorsCorruption, OverlapAndHoles) {
  expect_rejected(
      raw_safetensors(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          data8_),
      "overlaps");
  expect_rejected(
      raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8_),
      "unused bytes 0..4");
}

// A small checkpoint whose contents depend on `v`, to tell versions apart.
CheckpointContents contents(float v, std::vector<float>& storage) {
  storage = {v, v + 1, v + 2, v + 3};
  CheckpointContents c;
  c.config = {{"hidden_size", 2}, {"version_tag", v}};
  c.model = {{"model.norm.weight", StDType::kF32, {2, 2}, storage.data()}};
  c.optimizer = {{"m.model.norm.weight", StDType::kF32, {4}, storage.data()}};
  c.trainer_state = nlohmann::json{{"step", static_cast<int>(v)}};
  return c;
}

float model_value(const std::string& dir) {
  CheckpointInfo info = open_checkpoint(dir);
  SafetensorsReader r = SafetensorsReader::open(info.model_path);
  float x[4];
  std::vector<int64_t> s = {2, 2};
  r.read_f32("model.norm.weight", s, x);
  return x[0];
}

TEST(Checkpoint, SaveOpenAndReplace) {
  std::string dir = (temp_dir() / "ck_replace").string();
  fs::remove_all(dir);
  std::vector<float> st;
  save_checkpoint(dir, contents(1, st));
  CheckpointInfo info = open_checkpoint(dir);
  EXPECT_TRUE(info.has_marker);
  EXPECT_EQ(info.config["version_tag"], 1);
  ASSERT_TRUE(info.trainer_state.has_value());
  EXPECT_EQ((*info.trainer_state)["step"], 1);
  ASSERT_TRUE(info.optimizer_path.has_value());
  EXPECT_EQ(model_value(dir), 1.f);
  save_checkpoint(dir + "/", contents(2, st));  // trailing slash names the same folder
  EXPECT_EQ(model_value(dir), 2.f);
  // No temporary folders are left next to it.
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(temp_dir()))
    leftovers += e.path().filename().string().rfind("ck_replace.", 0) == 0;
  EXPECT_EQ(leftovers, 0);
}

TEST(Checkpoint, CrashBeforeMarkerKeepsOldCheckpoint) {
  std::string dir = (temp_dir() / "ck_crash").string();
  fs::remove_all(dir);
  std::vector<float> st;
  save_checkpoint(dir, contents(5, st));
  bool files_were_written = false;
  expect_error(
      [&] {
        save_checkpoint(dir, contents(6, st), [&] {
          // Everything but the marker exists in the temporary folder at this point.
          for (const auto& e : fs::directory_iterator(temp_dir())) {
            if (e.path().filename().string().rfind("ck_crash.tmp-", 0) == 0)
              files_were_written = fs::exists(e.path() / kModelFile) &&
                                   fs::exists(e.path() / kTrainerStateFile) &&
                                   !fs::exists(e.path() / kMarkerFile);
          }
          fail("simulated crash");
        });
      },
      "simulated crash");
  EXPECT_TRUE(files_were_written);
  EXPECT_EQ(model_value(dir), 5.f);
}

TEST(Checkpoint, NextSaveRemovesStaleTempFolders) {
  const fs::path root = temp_dir() / "stale";
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string dir = (root / "ck").string();
  std::vector<float> st;
  save_checkpoint(dir, contents(1, st));
  // What a save killed part-way leaves: a dead process's folder with some files, one of them a
  // half-written temporary file. 4194304 is above Linux's largest pid, so no process has it.
  const fs::path dead = root / "ck.tmp-4194305-0-1a2b3c";
  fs::create_directories(dead);
  write_raw(dead / kConfigFile, "{}");
  write_raw(dead / ".model.safetensors.tmp.4194305", "half");
  const fs::path dead_empty = root / "ck.tmp-4194306-3-f";
  fs::create_directories(dead_empty);
  // Look-alikes that are not ours, or not stale, must survive.
  const std::vector<fs::path> keep = {
      root / ("ck.tmp-" + std::to_string(::getpid()) + "-7-abc"),  // a save still running
      root / "ck.tmp-4194305-0-xyz",                                // not hex
      root / "ck.tmp-4194305-0",                                    // too few fields
      root / "ck.tmp-foo",                                          // not our pattern
      root / "ckx.tmp-4194305-0-1",                                 // another checkpoint's name
      root / "other.tmp-4194305-0-1",
      root / "ck.tmp-4194307-0-2",  // holds a file a save never writes
  };
  for (const auto& k : keep) fs::create_directories(k);
  write_raw(keep.back() / "notes.txt", "mine");
  write_raw(root / "ck.tmp-4194308-0-3", "a plain file with the pattern's name");
  fs::create_directory_symlink(root / "ck.tmp-foo", root / "ck.tmp-4194309-0-4");

  save_checkpoint(dir, contents(2, st));
  EXPECT_EQ(model_value(dir), 2.f);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(dead_empty));
  for (const auto& k : keep) EXPECT_TRUE(fs::exists(k)) << k;
  EXPECT_TRUE(fs::exists(keep.back() / "notes.txt"));
  EXPECT_TRUE(fs::is_regular_file(root / "ck.tmp-4194308-0-3"));
  EXPECT_TRUE(fs::is_symlink(root / "ck.tmp-4194309-0-4"));
  // Nothing left to remove the second time; the live folder still stays.
  EXPECT_TRUE(remove_stale_temp_folders(dir).empty());
  EXPECT_TRUE(fs::exists(keep.front()));
  fs::remove_all(root);
}

TEST(Checkpoint, RefusesToReplaceForeignFolder) {
  fs::path dir = temp_dir() / "ck_foreign";
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_raw(dir / "thesis.tex", "precious");
  std::vector<float> st;
  expect_error([&] { save_checkpoint(dir.string(), contents(1, st)); }, "refusing to replace");
  EXPECT_TRUE(fs::exists(dir / "thesis.tex"));
}

class CheckpointCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir() / "ck_corrupt";
    fs::remove_all(dir_);
    save_checkpoint(dir_.string(), contents(3, st_));
  }
  void expect_open_fails(const std::string& needle) {
    expect_error([&] { open_checkpoint(dir_.string()); }, needle);
  }
  fs::path dir_;
  std::vector<float> st_;
};

TEST_F(CheckpointCorruption, TruncatedModel) {
  std::string m = read_file((dir_ / kModelFile).string());
  write_raw(dir_ / kModelFile, m.substr(0, m.size() - 3));
  expect_open_fails("'model.safetensors' has");
}

TEST_F(CheckpointCorruption, FlippedByte) {
  std::string m = read_file((dir_ / kOptimizerFile).string());
  m[m.size() - 2] ^= 0x10;
  write_raw(dir_ / kOptimizerFile, m);
  expect_open_fails("'optimizer.safetensors' has CRC32");
}

TEST_F(CheckpointCorruption, MissingFile) {
  fs::remove(dir_ / kTrainerStateFile);
  expect_open_fails("'trainer_state.json' is missing");
}

TEST_F(CheckpointCorruption, MissingMarkerWithTrainingState) {
  fs::remove(dir_ / kMarkerFile);
  expect_open_fails("the save was interrupted");
}

TEST_F(CheckpointCorruption, GarbledMarker) {
  write_raw(dir_ / kMarkerFile, "{\"format\": ");
  expect_open_fails("is not valid JSON");
  write_raw(dir_ / kMarkerFile, R"({"format":"helixpipe-checkpoint","version":99,"files":{}})");
  expect_open_fails("format version 99");
}

TEST_F(CheckpointCorruption, MarkerListIsAuthoritative) {
  // A marker that omits optimizer.safetensors (or trainer_state.json) while the file is there:
  // the file would have been loaded without its size or CRC being checked.
  const std::string original = read_file((dir_ / kMarkerFile).string());
  for (const char* omitted : {kOptimizerFile, kTrainerStateFile}) {
    nlohmann::json marker = nlohmann::json::parse(original);
    ASSERT_TRUE(marker["files"].contains(omitted));
    marker["files"].erase(omitted);
    write_raw(dir_ / kMarkerFile, marker.dump());
    expect_open_fails(std::string("has '") + omitted + "' but its marker");
  }
  // Without the file, such a marker is a checkpoint without training state.
  nlohmann::json marker = nlohmann::json::parse(original);
  marker["files"].erase(kOptimizerFile);
  marker["files"].erase(kTrainerStateFile);
  write_raw(dir_ / kMarkerFile, marker.dump());
  fs::remove(dir_ / kOptimizerFile);
  fs::remove(dir_ / kTrainerStateFile);
  const CheckpointInfo info = open_checkpoint(dir_.string());
  EXPECT_FALSE(info.optimizer_path.has_value());
  EXPECT_FALSE(info.trainer_state.has_value());
}

TEST_F(CheckpointCorruption, MarkerEntriesOfTheWrongTypeAreMalformedNotACrash) {
  const std::string original = read_file((dir_ / kMarkerFile).string());
  for (const char* field : {"bytes", "crc32"}) {
    nlohmann::json marker = nlohmann::json::parse(original);
    marker["files"][kModelFile][field] = nlohmann::json::array();
    write_raw(dir_ / kMarkerFile, marker.dump());
    expect_open_fails("has a malformed entry 'model.safetensors'");
  }
  nlohmann::json marker = nlohmann::json::parse(original);
  marker["files"][kModelFile]["bytes"] = -5;
  write_raw(dir_ / kMarkerFile, marker.dump());
  expect_open_fails("has a malformed entry 'model.safetensors'");
  marker = nlohmann::json::parse(original);
  marker["format"] = 7;  // used to escape as a json type_error ("internal error")
  write_raw(dir_ / kMarkerFile, marker.dump());
  expect_open_fails("is malformed");
  marker = nlohmann::json::parse(original);
  marker["version"] = int64_t{1} << 32;  // was read as an int: 2^32 became 0
  write_raw(dir_ / kMarkerFile, marker.dump());
  expect_open_fails("format version 4294967296");
}

TEST_F(CheckpointCorruption, BytesAfterANulAreRefused) {
  // nlohmann's parser stops at a NUL, so the text after it used to be ignored.
  std::string marker = read_file((dir_ / kMarkerFile).string());
  write_raw(dir_ / kMarkerFile, marker + std::string(1, '\0') + "garbage");
  expect_open_fails("NUL byte at offset " + std::to_string(marker.size()));
}

TEST(Checkpoint, PlainHuggingFaceFolder) {
  fs::path dir = temp_dir() / "ck_hf";
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_raw(dir / kConfigFile, R"({"hidden_size": 2})");
  std::vector<float> w = {1, 2, 3, 4};
  std::vector<StWriteTensor> ts = {{"model.norm.weight", StDType::kF32, {2, 2}, w.data()}};
  write_safetensors((dir / kModelFile).string(), ts, {{"format", "pt"}});
  CheckpointInfo info = open_checkpoint(dir.string());
  EXPECT_FALSE(info.has_marker);
  EXPECT_FALSE(info.trainer_state.has_value());
  EXPECT_EQ(info.config["hidden_size"], 2);
  fs::remove(dir / kModelFile);
  expect_error([&] { open_checkpoint(dir.string()); }, "'model.safetensors' is missing");
  expect_error([&] { open_checkpoint((dir / "nothing").string()); }, "does not exist");
}

}  // namespace
}  // namespace hp

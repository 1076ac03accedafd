// libFuzzer target: the shard index of a sharded model, model.safetensors.index.json
// (checkpoint/model_files.h). The input is written as the index of a folder that also holds two
// small shards, model-00001-of-00002.safetensors (tensors "a" and "b") and
// model-00002-of-00002.safetensors (tensor "c"); ModelTensorFiles::open must accept it or refuse
// it with hp::Error (no other exception, no crash). What it accepts holds whole shards only (an
// index may name one shard: then its tensors alone), each tensor once, found in the shard that
// holds it, and read back.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/model_files.h"
#include "checkpoint/safetensors.h"
#include "fuzz_util.h"
#include "util/error.h"

namespace {

namespace fs = std::filesystem;

const fs::path& folder() {
  static const fs::path dir = [] {
    const fs::path d =
        fs::temp_directory_path() / ("hp_fuzz_shard_index_" + std::to_string(::getpid()));
    fs::create_directories(d);
    static const float v[4] = {1, 2, 3, 4};
    const std::vector<hp::StWriteTensor> first = {{"a", hp::StDType::kF32, {2}, v},
                                                  {"b", hp::StDType::kF32, {1}, v + 2}};
    const std::vector<hp::StWriteTensor> second = {{"c", hp::StDType::kF32, {1}, v + 3}};
    hp::write_safetensors((d / "model-00001-of-00002.safetensors").string(), first);
    hp::write_safetensors((d / "model-00002-of-00002.safetensors").string(), second);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hp;
  static fuzz::RemoveAtExit<folder> cleanup;
  const fs::path index = folder() / kModelIndexFile;
  std::ofstream(index, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    const ModelTensorFiles m = ModelTensorFiles::open(index.string());
    if (!m.sharded() || m.tensors().empty() || m.tensors().size() > 3) __builtin_trap();
    for (const StTensorInfo& t : m.tensors()) {
      if (t.name != "a" && t.name != "b" && t.name != "c") __builtin_trap();
      if (m.find(t.name) != &t || m.file_of(t.name).find(t.name) == nullptr) __builtin_trap();
      std::vector<float> out(static_cast<size_t>(t.numel()));
      m.read_f32(t.name, t.shape, out.data());
    }
    if ((m.find("a") == nullptr) != (m.find("b") == nullptr)) __builtin_trap();  // one shard
  } catch (const Error&) {
  }
  return 0;
}

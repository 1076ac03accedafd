// libFuzzer target: the checkpoint marker helixpipe_checkpoint.json (checkpoint/checkpoint.h), the
// file that lists every file of a checkpoint with its size and CRC32. The input is written as the
// marker of a folder that also holds a small config.json, model.safetensors and
// trainer_state.json; open_checkpoint must accept it or refuse it with hp::Error (no other
// exception, no crash), and what it accepts must list the two required files.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint.h"
#include "fuzz_util.h"
#include "util/error.h"

namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, std::string_view bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

const fs::path& folder() {
  static const fs::path dir = [] {
    const fs::path d =
        fs::temp_directory_path() / ("hp_fuzz_checkpoint_" + std::to_string(::getpid()));
    fs::create_directories(d);
    write(d / "config.json", "{}\n");
    write(d / "model.safetensors", std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
    write(d / "trainer_state.json", "{}\n");
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hp;
  static fuzz::RemoveAtExit<folder> cleanup;
  const fs::path& dir = folder();
  write(dir / kMarkerFile, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const CheckpointInfo info = open_checkpoint(dir.string());
    if (!info.has_marker) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}

// libFuzzer target: safetensors files (checkpoint/safetensors.h). The reader takes a path, so the
// input is placed in an in-memory file (memfd) and opened through /proc/self/fd. An accepted file
// must list tensors whose byte ranges lie inside its data, and each must read back as floats.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hp;
  static const int fd = ::memfd_create("hp_fuzz_safetensors", 0);
  if (fd < 0) __builtin_trap();
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    __builtin_trap();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    const SafetensorsReader r = SafetensorsReader::open(path);
    std::vector<float> out;
    for (const StTensorInfo& t : r.tensors()) {
      if (t.begin > t.end || t.end > size) __builtin_trap();
      if (r.find(t.name) != &t) __builtin_trap();
      const int64_t n = t.numel();
      if (n < 0 || n > (int64_t{1} << 16)) continue;
      out.resize(static_cast<size_t>(n));
      try {
        r.read_f32(t.name, t.shape, out.data());
      } catch (const Error&) {
        // dtypes read_f32 does not convert are refused with a message
      }
    }
  } catch (const Error&) {
  }
  return 0;
}

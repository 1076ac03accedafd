// Temp-then-rename file writing with fsync of the file and of its directory.
#include "util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace hp {

namespace {

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return;  // best effort for directories on filesystems that refuse it
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& writer) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid())))
                        .string();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    HP_CHECK(out.good(), "cannot write '{}': {} (does the folder exist and is it writable?)", tmp,
             std::strerror(errno));
    writer(out);
    out.flush();
    if (!out.good()) {
      out.close();
      std::remove(tmp.c_str());
      fail("writing '{}' failed (disk full?)", path);
    }
  }
  fsync_path(tmp, false);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail("cannot move '{}' into place as '{}': {}", tmp, path, std::strerror(err));
  }
  fsync_path(dir.string(), true);
}

void write_file_atomic(const std::string& path, std::string_view data) {
  write_file_atomic(path, [&](std::ostream& out) { out.write(data.data(), data.size()); });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HP_CHECK(in.good(), "cannot read '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace hp

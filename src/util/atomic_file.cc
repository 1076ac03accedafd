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

namespace {

// Creates `dir` when missing and a probe file in it; hp::Error naming `flag` when either fails.
void probe_folder(const std::string& flag, const std::string& path, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!dir.empty() && !fs::exists(dir, ec)) fs::create_directories(dir, ec);
  HP_CHECK(!ec, "{} '{}': cannot create folder '{}' ({}); choose another path", flag, path,
           dir.string(), ec.message());
  HP_CHECK(dir.empty() || fs::is_directory(dir), "{} '{}': '{}' is not a folder; choose another path",
           flag, path, dir.string());
  const fs::path probe = (dir.empty() ? fs::path(".") : dir) /
                         (".hp-write-check-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  HP_CHECK(fd >= 0, "{} '{}': cannot write in folder '{}' ({}); choose another path", flag, path,
           dir.empty() ? "." : dir.string(), std::strerror(errno));
  ::close(fd);
  fs::remove(probe, ec);
}

}  // namespace

void check_output_file(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  HP_CHECK(!path.empty(), "{} is empty; give a file path", flag);
  std::error_code ec;
  HP_CHECK(!fs::is_directory(path, ec), "{} '{}' is a folder; give a file path", flag, path);
  probe_folder(flag, path, fs::path(path).parent_path());
}

void check_output_folder(const std::string& flag, const std::string& path) {
  HP_CHECK(!path.empty(), "{} is empty; give a folder path", flag);
  probe_folder(flag, path, std::filesystem::path(path));
}

}  // namespace hp

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

// Returns 0, or for a file whose data did not reach the disk the errno of its fsync: no room
// (ENOSPC, EDQUOT) or an I/O error. Other refusals (a file system without fsync) and every
// directory are best effort: 0.
int fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return 0;
  int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  if (directory || (err != ENOSPC && err != EDQUOT && err != EIO)) err = 0;
  return err;
}

// The error for a failed write of `path`: NoSpaceError when the file system had no room.
[[noreturn]] void write_failed(const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    throw NoSpaceError(fmt::format("no space left while writing '{}' ({})", path,
                                   std::strerror(err)),
                       path, err);
  }
  if (err == EFBIG) {
    throw NoSpaceError(fmt::format("no space left while writing '{}': the file size limit "
                                   "(ulimit -f) was reached ({})",
                                   path, std::strerror(err)),
                       path, err);
  }
  fail("writing '{}' failed: {}", path, err != 0 ? std::strerror(err) : "unknown error (disk full?)");
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
    errno = 0;  // the failing write() leaves its reason here (the stream only sets badbit)
    writer(out);
    out.flush();
    if (!out.good()) {
      const int err = errno;
      out.close();
      std::remove(tmp.c_str());
      write_failed(path, err);
    }
  }
  // Some file systems report a full disk only when the data reaches it.
  if (const int err = fsync_path(tmp, false); err != 0) {
    std::remove(tmp.c_str());
    write_failed(path, err);
  }
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

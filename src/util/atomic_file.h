// Writing files so that a crash never leaves a half-written one behind: write a temporary file
// beside the target, flush it to disk, then rename it over the target.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "util/error.h"

namespace hp {

// A write that failed because the file system had no room for it: a full disk (ENOSPC), a full
// quota (EDQUOT) or the process's file size limit (EFBIG; RLIMIT_FSIZE, `ulimit -f`, with SIGXFSZ
// ignored as the helixpipe binary does). Callers that know what the file belongs to (a checkpoint
// save) catch it to say what is still intact.
class NoSpaceError : public Error {
 public:
  NoSpaceError(const std::string& what, std::string path, int error_number)
      : Error(what), path_(std::move(path)), error_number_(error_number) {}
  const std::string& path() const { return path_; }  // the file being written
  int error_number() const { return error_number_; }

 private:
  std::string path_;
  int error_number_;
};

// Writes `data` to `path` atomically. Throws hp::Error naming the path on any failure (a
// NoSpaceError when the file system had no room).
void write_file_atomic(const std::string& path, std::string_view data);

// Same, with the content produced by a callback writing into a stream (for large files).
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& writer);

// Checks, before any work, that a file can be written at `path` later: creates its folder when
// missing (the convention for output paths) and creates and removes a probe file there. Throws
// hp::Error naming `flag` and saying why (a parent that is a file, a folder at `path`, no
// permission, a full disk...).
void check_output_file(const std::string& flag, const std::string& path);

// The same for a folder that files will be written into (created when missing).
void check_output_folder(const std::string& flag, const std::string& path);

// Reads a whole file; throws hp::Error naming the path when it cannot.
std::string read_file(const std::string& path);

}  // namespace hp

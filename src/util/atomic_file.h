// Writing files so that a crash never leaves a half-written one behind: write a temporary file
// beside the target, flush it to disk, then rename it over the target.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace hp {

// Writes `data` to `path` atomically. Throws hp::Error naming the path on any failure.
void write_file_atomic(const std::string& path, std::string_view data);

// Same, with the content produced by a callback writing into a stream (for large files).
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& writer);

// Reads a whole file; throws hp::Error naming the path when it cannot.
std::string read_file(const std::string& path);

}  // namespace hp

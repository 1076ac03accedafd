// A read-only memory map of a whole file (RAII). Used for token files, text corpora and safetensors,
// so a multi-gigabyte file costs no copy and no upfront read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hp {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only. Throws hp::Error naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // false for an empty file (mmap of length 0 is not allowed)
};

}  // namespace hp

// safetensors files (the Hugging Face tensor format), our own reader and writer: 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}},
// then the tensor bytes. The reader validates everything and memory-maps the data.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/mapped_file.h"

namespace hp {

enum class StDType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU64, kU32, kU16, kU8, kBool };

std::string_view st_dtype_name(StDType d);  // "F32", "BF16", ...
size_t st_dtype_bytes(StDType d);

struct StTensorInfo {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  int64_t numel() const;
};

// A tensor to write: `data` holds numel(shape) elements of `dtype`, little-endian.
struct StWriteTensor {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes `tensors` (in this order) and `metadata` to `path` atomically (temp then rename).
// Names must be unique and not "__metadata__".
void write_safetensors(const std::string& path, std::span<const StWriteTensor> tensors,
                       const std::map<std::string, std::string>& metadata = {});

class SafetensorsReader {
 public:
  // Opens and validates: header length within the file, JSON well formed, known dtypes, shapes
  // matching byte ranges, ranges inside the data, neither overlapping nor leaving holes.
  static SafetensorsReader open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<StTensorInfo>& tensors() const { return tensors_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const StTensorInfo* find(std::string_view name) const;  // nullptr when absent
  const uint8_t* data(const StTensorInfo& t) const { return data_ + t.begin; }

  // Copies tensor `name` into out as float (F32 as is; F16, BF16, F64 converted), after checking
  // that it exists and has exactly `shape`. Errors name the file, the tensor and both shapes.
  void read_f32(const std::string& name, std::span<const int64_t> shape, float* out) const;

 private:
  MappedFile file_;
  const uint8_t* data_ = nullptr;
  uint64_t data_size_ = 0;
  std::vector<StTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

std::string shape_string(std::span<const int64_t> shape);  // "[2, 3]"

// bfloat16 storage (the top 16 bits of an IEEE float), for writing and reading BF16 tensors on any
// CPU. The conversion from f32 rounds to nearest, ties to even; a NaN stays a NaN (quiet), and
// values beyond the largest bf16 round to infinity as IEEE rounding does.
uint16_t f32_to_bf16_bits(float f);
float bf16_bits_to_f32(uint16_t b);

}  // namespace hp

// safetensors reading (validated, memory-mapped) and writing (atomic).
#include "checkpoint/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <ostream>
#include <set>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_text.h"

namespace hp {

namespace {

struct DTypeRow {
  StDType d;
  const char* name;
  size_t bytes;
};
constexpr DTypeRow kDTypes[] = {
    {StDType::kF64, "F64", 8}, {StDType::kF32, "F32", 4}, {StDType::kF16, "F16", 2},
    {StDType::kBF16, "BF16", 2}, {StDType::kI64, "I64", 8}, {StDType::kI32, "I32", 4},
    {StDType::kI16, "I16", 2}, {StDType::kI8, "I8", 1},   {StDType::kU64, "U64", 8},
    {StDType::kU32, "U32", 4}, {StDType::kU16, "U16", 2}, {StDType::kU8, "U8", 1},
    {StDType::kBool, "BOOL", 1}};

// Header larger than this is certainly corrupt (real ones are kilobytes).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  // Adding 0x7fff plus the lowest kept bit carries into the kept bits exactly when the dropped
  // half is above one half, or equal to it with an odd kept part (ties to even).
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::string_view st_dtype_name(StDType d) {
  for (const auto& r : kDTypes)
    if (r.d == d) return r.name;
  return "?";
}

size_t st_dtype_bytes(StDType d) {
  for (const auto& r : kDTypes)
    if (r.d == d) return r.bytes;
  return 0;
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void write_safetensors(const std::string& path, std::span<const StWriteTensor> tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const StWriteTensor& t : tensors) {
    HP_CHECK(!t.name.empty() && t.name != "__metadata__", "safetensors '{}': invalid tensor name '{}'",
             path, t.name);
    HP_CHECK(seen.insert(t.name).second, "safetensors '{}': tensor '{}' given twice", path, t.name);
    int64_t numel = 1;
    for (int64_t s : t.shape) {
      HP_CHECK(s >= 0, "safetensors '{}': tensor '{}' has negative dimension in {}", path, t.name,
               shape_string(t.shape));
      numel *= s;
    }
    HP_CHECK(numel == 0 || t.data != nullptr, "safetensors '{}': tensor '{}' has no data", path,
             t.name);
    const uint64_t bytes = static_cast<uint64_t>(numel) * st_dtype_bytes(t.dtype);
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string json = header.dump();
  // Pad with spaces so the data starts 8-byte aligned (allowed by the format, helps mmap users).
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');
  write_file_atomic(path, [&](std::ostream& out) {
    uint8_t len[8];
    const uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(json.data(), json.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      out.write(static_cast<const char*>(tensors[i].data), static_cast<std::streamsize>(sizes[i]));
    }
  });
}

SafetensorsReader SafetensorsReader::open(const std::string& path) {
  SafetensorsReader r;
  r.file_ = MappedFile(path);
  const uint8_t* p = r.file_.data();
  const uint64_t size = r.file_.size();
  HP_CHECK(size >= 8, "safetensors '{}' is truncated: {} bytes, no room for the 8-byte header length",
           path, size);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(p[i]) << (8 * i);
  HP_CHECK(n <= kMaxHeaderBytes && n <= size - 8,
           "safetensors '{}' is truncated or corrupt: header length {} but the file has {} bytes",
           path, n, size);
  HP_CHECK(n >= 2 && p[8] == '{', "safetensors '{}': the header is not a JSON object", path);
  check_no_nul(std::string_view(reinterpret_cast<const char*>(p) + 8, n),
               "safetensors '" + path + "' header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(p + 8, p + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors '{}': the header is not valid JSON ({})", path, e.what());
  }
  HP_CHECK(header.is_object(), "safetensors '{}': the header is not a JSON object", path);
  r.data_ = p + 8 + n;
  r.data_size_ = size - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      HP_CHECK(v.is_object(), "safetensors '{}': __metadata__ must be an object of strings", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        HP_CHECK(m.value().is_string(), "safetensors '{}': __metadata__ value '{}' is not a string",
                 path, m.key());
        r.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    HP_CHECK(v.is_object() && v.size() == 3 && v.contains("dtype") && v.contains("shape") &&
                 v.contains("data_offsets"),
             "safetensors '{}': tensor '{}' must have exactly dtype, shape and data_offsets", path,
             name);
    StTensorInfo t;
    t.name = name;
    bool known = false;
    if (v["dtype"].is_string()) {
      for (const auto& row : kDTypes) {
        if (v["dtype"].get<std::string>() == row.name) {
          t.dtype = row.d;
          known = true;
        }
      }
    }
    HP_CHECK(known, "safetensors '{}': tensor '{}' has unknown dtype {}", path, name,
             v["dtype"].dump());
    HP_CHECK(v["shape"].is_array(), "safetensors '{}': tensor '{}' shape is not an array", path,
             name);
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      HP_CHECK(d.is_number_unsigned() && d.get<uint64_t>() < (1ull << 40),
               "safetensors '{}': tensor '{}' has an invalid dimension {}", path, name, d.dump());
      t.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      HP_CHECK(numel < (1ull << 50), "safetensors '{}': tensor '{}' is impossibly large", path,
               name);
    }
    const auto& off = v["data_offsets"];
    HP_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                 off[1].is_number_unsigned(),
             "safetensors '{}': tensor '{}' data_offsets must be two non-negative integers", path,
             name);
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    HP_CHECK(t.begin <= t.end && t.end <= r.data_size_,
             "safetensors '{}': tensor '{}' data_offsets [{}, {}] lie outside the {} data bytes "
             "(truncated file?)",
             path, name, t.begin, t.end, r.data_size_);
    HP_CHECK(t.end - t.begin == numel * st_dtype_bytes(t.dtype),
             "safetensors '{}': tensor '{}' has {} bytes but shape {} of {} needs {}", path, name,
             t.end - t.begin, shape_string(t.shape), st_dtype_name(t.dtype),
             numel * st_dtype_bytes(t.dtype));
    r.tensors_.push_back(std::move(t));
  }
  std::sort(r.tensors_.begin(), r.tensors_.end(),
            [](const StTensorInfo& a, const StTensorInfo& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t at = 0;
  for (size_t i = 0; i < r.tensors_.size(); ++i) {
    const StTensorInfo& t = r.tensors_[i];
    HP_CHECK(t.begin >= at, "safetensors '{}': tensor '{}' overlaps tensor '{}' in the data", path,
             t.name, r.tensors_[i - 1].name);
    HP_CHECK(t.begin == at, "safetensors '{}': unused bytes {}..{} before tensor '{}' (corrupt?)",
             path, at, t.begin, t.name);
    at = t.end;
  }
  HP_CHECK(at == r.data_size_,
           "safetensors '{}': {} bytes after the last tensor that no tensor uses (corrupt?)", path,
           r.data_size_ - at);
  return r;
}

const StTensorInfo* SafetensorsReader::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsReader::read_f32(const std::string& name, std::span<const int64_t> shape,
                                 float* out) const {
  const StTensorInfo* t = find(name);
  HP_CHECK(t != nullptr, "safetensors '{}' has no tensor '{}'", path(), name);
  HP_CHECK(std::equal(t->shape.begin(), t->shape.end(), shape.begin(), shape.end()),
           "safetensors '{}': tensor '{}' has shape {} but {} was expected (a checkpoint of a "
           "different model config?)",
           path(), name, shape_string(t->shape), shape_string(shape));
  const uint8_t* src = data(*t);
  const int64_t n = t->numel();
  switch (t->dtype) {
    case StDType::kF32:
      std::memcpy(out, src, n * 4);
      break;
    case StDType::kF64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, src + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    case StDType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = bf16_bits_to_f32(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
      }
      break;
    case StDType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = half_to_float(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
      }
      break;
    default:
      fail("safetensors '{}': tensor '{}' has dtype {}, expected a floating-point type", path(),
           name, st_dtype_name(t->dtype));
  }
}

}  // namespace hp

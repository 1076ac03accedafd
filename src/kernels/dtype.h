// Element types, the mixed-precision policy every backend computes under, and typed pointers into
// a backend's memory. Not here: memory ownership (backend.h) or the math (kernels.h).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "util/error.h"

namespace hp {

// kF64 exists for gradient checks on the reference backend; training uses kF32 and kBF16.
enum class DType : uint8_t { kF32, kBF16, kF64 };

constexpr int64_t dtype_bytes(DType t) {
  return t == DType::kF64 ? 8 : t == DType::kF32 ? 4 : 2;
}
constexpr const char* dtype_name(DType t) {
  return t == DType::kF64 ? "f64" : t == DType::kF32 ? "f32" : "bf16";
}

// bfloat16 on the host: the top 16 bits of an IEEE float. Conversion rounds to nearest even
// (NaN stays NaN), as CUDA's __float2bfloat16_rn and the AVX512-BF16 instructions do.
struct bf16 {
  uint16_t bits = 0;
};
inline bf16 to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(rounded >> 16)};
}
inline float to_float(bf16 b) { return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16); }

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<bf16>() { return DType::kBF16; }

// Which tensors are kept in which type (docs/precision.md explains why):
//   compute: activations, activation gradients, and the weight copies GEMMs and attention read;
//   master:  parameters, parameter gradients (accumulated across micro-batches) and AdamW state;
//   stats:   per-row statistics (RMSNorm rstd, attention and cross-entropy log-sum-exp) and the
//            loss: f32, or f64 when the master type is f64 (gradient checks).
// GEMMs accumulate in at least f32 whatever the compute type. bf16() is mixed precision (bf16
// compute over f32 master weights); fp32() and fp64() compute in their master type throughout.
struct Precision {
  DType compute = DType::kF32;
  DType master = DType::kF32;

  DType stats() const { return master == DType::kF64 ? DType::kF64 : DType::kF32; }
  // True when GEMMs read a separate low-precision copy of the weights (refreshed after each
  // optimizer step) instead of the master weights themselves.
  bool weight_copy() const { return compute != master; }
  bool operator==(const Precision&) const = default;

  static Precision fp32() { return {DType::kF32, DType::kF32}; }
  static Precision bf16() { return {DType::kBF16, DType::kF32}; }
  static Precision fp64() { return {DType::kF64, DType::kF64}; }
  // "fp32" | "bf16" | "fp64"; throws hp::Error naming the accepted values otherwise.
  static Precision parse(std::string_view name);
  const char* name() const;
};

inline Precision Precision::parse(std::string_view name) {
  if (name == "fp32") return fp32();
  if (name == "bf16") return bf16();
  if (name == "fp64") return fp64();
  fail("unknown precision '{}': use fp32 or bf16 (fp64 is for gradient checks)", name);
}
inline const char* Precision::name() const {
  if (*this == fp32()) return "fp32";
  if (*this == bf16()) return "bf16";
  if (*this == fp64()) return "fp64";
  return "custom";
}

// A read-only typed address in some backend's memory (host or device): kernels take these, so the
// element type travels with the pointer and a mismatch is an error, not a reinterpretation.
struct ConstDataPtr {
  const void* data = nullptr;
  DType dtype = DType::kF32;

  ConstDataPtr() = default;
  ConstDataPtr(const void* d, DType t) : data(d), dtype(t) {}
  template <typename T>
  ConstDataPtr(const T* p) : data(p), dtype(dtype_of<T>()) {}  // NOLINT: implicit by design

  explicit operator bool() const { return data != nullptr; }
  // The address `elems` elements further on.
  ConstDataPtr at(int64_t elems) const {
    return {static_cast<const char*>(data) + elems * dtype_bytes(dtype), dtype};
  }
  // The address as T*; throws when the element type is not T.
  template <typename T>
  const T* as() const {
    HP_CHECK(dtype == dtype_of<T>(), "typed pointer holds {} values, read as {}",
             dtype_name(dtype), dtype_name(dtype_of<T>()));
    return static_cast<const T*>(data);
  }
};

struct DataPtr {
  void* data = nullptr;
  DType dtype = DType::kF32;

  DataPtr() = default;
  DataPtr(void* d, DType t) : data(d), dtype(t) {}
  template <typename T>
  DataPtr(T* p) : data(p), dtype(dtype_of<T>()) {}  // NOLINT: implicit by design

  explicit operator bool() const { return data != nullptr; }
  operator ConstDataPtr() const { return {data, dtype}; }  // NOLINT
  DataPtr at(int64_t elems) const {
    return {static_cast<char*>(data) + elems * dtype_bytes(dtype), dtype};
  }
  template <typename T>
  T* as() const {
    HP_CHECK(dtype == dtype_of<T>(), "typed pointer holds {} values, written as {}",
             dtype_name(dtype), dtype_name(dtype_of<T>()));
    return static_cast<T*>(data);
  }
};

}  // namespace hp

// bf16 loads and stores for the AVX512-BF16 build (included only by *_avx512bf16.cc, after
// simd.h; the rules of simd.h apply). Values travel as raw 16-bit patterns (u16) inside these
// files; a load widens 16 of them to an f32 vector exactly, a store rounds an f32 vector to nearest
// even with vcvtneps2bf16 (which, unlike hp::to_bf16, flushes f32 subnormals to zero).
#pragma once

#include <cstdint>

#include "kernels/cpu/simd.h"
#include "kernels/dtype.h"

namespace hp {
namespace HP_SIMD_NS {

using u16 = uint16_t;

// A bf16 array as its bit patterns (bf16 is a standard-layout struct holding one uint16_t).
HP_ALWAYS_INLINE const u16* raw(const bf16* p) { return reinterpret_cast<const u16*>(p); }
HP_ALWAYS_INLINE u16* raw(bf16* p) { return reinterpret_cast<u16*>(p); }

HP_ALWAYS_INLINE __mmask16 first_n(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}
HP_ALWAYS_INLINE __m512 widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// 16 (or the first n) bf16 values at p as f32 (the rest 0).
HP_ALWAYS_INLINE __m512 bload(const u16* p) {
  return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
HP_ALWAYS_INLINE __m512 bload_n(const u16* p, int64_t n) {
  return widen(_mm256_maskz_loadu_epi16(first_n(n), p));
}
HP_ALWAYS_INLINE __m256i narrow(__m512 x) {
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
}
HP_ALWAYS_INLINE void bstore(u16* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(x));
}
HP_ALWAYS_INLINE void bstore_n(u16* p, __m512 x, int64_t n) {
  _mm256_mask_storeu_epi16(p, first_n(n), narrow(x));
}
// Masked f32 loads and stores for row tails.
HP_ALWAYS_INLINE __m512 fload_n(const float* p, int64_t n) {
  return _mm512_maskz_loadu_ps(first_n(n), p);
}
HP_ALWAYS_INLINE void fstore_n(float* p, __m512 x, int64_t n) {
  _mm512_mask_storeu_ps(p, first_n(n), x);
}

// Scalars, rounded by the same instruction as the vectors.
HP_ALWAYS_INLINE float bf2f(u16 b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
HP_ALWAYS_INLINE u16 f2bf(float x) {
  const __m128i r = reinterpret_cast<__m128i>(_mm_cvtneps_pbh(_mm_set_ss(x)));
  return static_cast<u16>(_mm_extract_epi16(r, 0));
}

}  // namespace HP_SIMD_NS
}  // namespace hp

// A thin vector layer so one source file serves both ISAs: the same *_impl.h is included by a file
// compiled with AVX-512 flags (*_avx512.cc) and by one compiled with AVX2+FMA flags (*_avx2.cc).
// Everything here lives in namespace hp::HP_SIMD_NS (avx512 or avx2), so the two copies never
// collide. Rule for the ISA files: no out-of-line templates shared with other files (std::vector,
// fmt, HP_CHECK): the linker could keep the AVX-512 copy and run it on an AVX2-only CPU. Checks
// and allocations are done by the dispatcher (cpu_kernels.cc), which is built with default flags.
#pragma once

// GCC 12 reports its own _mm512_undefined_* placeholders (used inside reduce/convert intrinsics)
// as "maybe uninitialized"; a false positive, silenced for the ISA files only.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>
#include <omp.h>

#include <cmath>
#include <cstdint>

// The including .cc file says which copy it is (HP_SIMD_AVX512 or HP_SIMD_AVX2), so a build whose
// global flags already enable AVX-512 (-march=native) still gets a 256-bit AVX2 copy. The bf16
// kernels (*_avx512bf16.cc, HP_SIMD_AVX512BF16) are a third copy in their own namespace.
#if defined(HP_SIMD_AVX512BF16)
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512VL__) || !defined(__AVX512BF16__)
#error "an *_avx512bf16.cc file must be compiled with the AVX-512 flags and -mavx512bf16"
#endif
#define HP_SIMD_NS avx512bf16
#define HP_SIMD_NS_NAME "avx512bf16"
#define HP_SIMD_512 1
#elif defined(HP_SIMD_AVX512)
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || !defined(__AVX512VL__)
#error "an *_avx512.cc file must be compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl"
#endif
#define HP_SIMD_NS avx512
#define HP_SIMD_NS_NAME "avx512"
#define HP_SIMD_512 1
#elif defined(HP_SIMD_AVX2)
#if !defined(__AVX2__) || !defined(__FMA__)
#error "an *_avx2.cc file must be compiled with -mavx2 -mfma"
#endif
#define HP_SIMD_NS avx2
#define HP_SIMD_NS_NAME "avx2"
#else
#error "define HP_SIMD_AVX512BF16, HP_SIMD_AVX512 or HP_SIMD_AVX2 before including simd.h"
#endif

#define HP_ALWAYS_INLINE inline __attribute__((always_inline))

namespace hp {
namespace HP_SIMD_NS {

#if defined(HP_SIMD_512)
using vf = __m512;
inline constexpr int kW = 16;  // floats per vector
HP_ALWAYS_INLINE vf vload(const float* p) { return _mm512_loadu_ps(p); }
HP_ALWAYS_INLINE void vstore(float* p, vf x) { _mm512_storeu_ps(p, x); }
HP_ALWAYS_INLINE vf vset1(float x) { return _mm512_set1_ps(x); }
HP_ALWAYS_INLINE vf vzero() { return _mm512_setzero_ps(); }
HP_ALWAYS_INLINE vf vfmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
HP_ALWAYS_INLINE vf vfnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
HP_ALWAYS_INLINE vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
HP_ALWAYS_INLINE vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
HP_ALWAYS_INLINE vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
HP_ALWAYS_INLINE vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
HP_ALWAYS_INLINE vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
HP_ALWAYS_INLINE vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
HP_ALWAYS_INLINE vf vsqrt(vf a) { return _mm512_sqrt_ps(a); }
HP_ALWAYS_INLINE float hsum(vf x) { return _mm512_reduce_add_ps(x); }
HP_ALWAYS_INLINE float hmax(vf x) { return _mm512_reduce_max_ps(x); }
HP_ALWAYS_INLINE vf vround(vf x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// 2^n for integral-valued n in [-126, 127].
HP_ALWAYS_INLINE vf vpow2i(vf n) {
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_castsi512_ps(e);
}
// x where x >= lo, else 0.
HP_ALWAYS_INLINE vf vzero_below(vf x, vf v, vf lo) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), v);
}
#else
using vf = __m256;
inline constexpr int kW = 8;
HP_ALWAYS_INLINE vf vload(const float* p) { return _mm256_loadu_ps(p); }
HP_ALWAYS_INLINE void vstore(float* p, vf x) { _mm256_storeu_ps(p, x); }
HP_ALWAYS_INLINE vf vset1(float x) { return _mm256_set1_ps(x); }
HP_ALWAYS_INLINE vf vzero() { return _mm256_setzero_ps(); }
HP_ALWAYS_INLINE vf vfmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
HP_ALWAYS_INLINE vf vfnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
HP_ALWAYS_INLINE vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
HP_ALWAYS_INLINE vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
HP_ALWAYS_INLINE vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
HP_ALWAYS_INLINE vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
HP_ALWAYS_INLINE vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
HP_ALWAYS_INLINE vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
HP_ALWAYS_INLINE vf vsqrt(vf a) { return _mm256_sqrt_ps(a); }
HP_ALWAYS_INLINE float hsum(vf x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
HP_ALWAYS_INLINE float hmax(vf x) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
HP_ALWAYS_INLINE vf vround(vf x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
HP_ALWAYS_INLINE vf vpow2i(vf n) {
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_castsi256_ps(e);
}
HP_ALWAYS_INLINE vf vzero_below(vf x, vf v, vf lo) {
  return _mm256_and_ps(_mm256_cmp_ps(x, lo, _CMP_GE_OQ), v);
}
#endif

// exp(x) in fp32, at most 1.24 ulp from the true value over [-87, 88] (measured on 1.8M points
// against double exp); exactly 0 below -87.3 (so
// masked -inf scores give 0) and saturating above 88. Range reduction x = n ln2 + r with a two-part
// ln2, then a degree-6 polynomial for e^r on |r| <= ln2/2 (the classic Cephes coefficients).
HP_ALWAYS_INLINE vf vexp(vf x) {
  const vf lo = vset1(-87.33f);
  const vf xc = vmin(vmax(x, lo), vset1(88.3f));
  const vf n = vround(vmul(xc, vset1(1.44269504088896341f)));
  vf r = vfnmadd(n, vset1(0.693359375f), xc);
  r = vfnmadd(n, vset1(-2.12194440e-4f), r);
  vf p = vset1(1.9875691500e-4f);
  p = vfmadd(p, r, vset1(1.3981999507e-3f));
  p = vfmadd(p, r, vset1(8.3334519073e-3f));
  p = vfmadd(p, r, vset1(4.1665795894e-2f));
  p = vfmadd(p, r, vset1(1.6666665459e-1f));
  p = vfmadd(p, r, vset1(5.0000001201e-1f));
  const vf r2 = vmul(r, r);
  p = vfmadd(p, r2, vadd(r, vset1(1.0f)));
  p = vmul(p, vpow2i(n));  // n <= round(88.3 log2 e) = 127: no overflow of the exponent
  return vzero_below(x, p, lo);
}

// e^x for a softmax's arguments (x <= 0 there; any x below 88 works), where a few ulp are plenty:
// x log2(e) = n + f with n = floor and f in [0, 1), 2^f as a degree-5 polynomial (coefficients
// fitted for relative error, 3.5e-7 at most in f32) and vscalefps multiplies by 2^n, which is
// exact and gives 0 below about -104 (subnormals on the way down, as std::exp). The rounding of
// x log2(e) adds up to 1e-7 |x|: relative error <= 3.5e-7 + 1e-7 |x| (tested), which for a
// softmax weight e^x <= 1 is an absolute error below 4e-7. The clamp at -150 keeps -inf (a masked
// score) finite on the way. Half of vexp's instructions: in the attention kernels the
// exponentials cost about a third as much as the tile's products. The AVX2 copy has no vscalefps
// (nor vreduceps) and uses vexp.
#if defined(HP_SIMD_512)
HP_ALWAYS_INLINE vf vexp_softmax(vf x) {
  const vf t = vmul(vmax(x, vset1(-150.0f)), vset1(1.44269504088896341f));
  const vf f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // t - floor(t)
  vf p = vset1(1.9310517237e-3f);
  p = vfmadd(p, f, vset1(8.8561279699e-3f));
  p = vfmadd(p, f, vset1(5.5942263454e-2f));
  p = vfmadd(p, f, vset1(2.4011304975e-1f));
  p = vfmadd(p, f, vset1(6.9315749407e-1f));
  p = vfmadd(p, f, vset1(1.0f));
  return _mm512_scalef_ps(p, t);  // p 2^floor(t)
}
#else
HP_ALWAYS_INLINE vf vexp_softmax(vf x) { return vexp(x); }
#endif

// Runs f(i, thread) for i in [0, n): plain loop with one thread, else an OpenMP loop.
template <class F>
void par_for(int64_t n, int threads, F&& f) {
  if (threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i, 0);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) f(i, omp_get_thread_num());
}

}  // namespace HP_SIMD_NS
}  // namespace hp

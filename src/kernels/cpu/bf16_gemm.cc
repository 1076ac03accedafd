// Bf16Gemm: one cached oneDNN matmul primitive per call shape (see bf16_gemm.h). Built with the
// default flags; oneDNN picks its own code for the CPU it runs on (brgemm with AVX512-BF16 here).
#include "kernels/cpu/bf16_gemm.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>
#include <type_traits>
#include <unordered_map>
#include <vector>

#if HP_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "util/error.h"

namespace hp::cpu {
namespace {

// Sets the calling thread's OpenMP thread count while it lives: oneDNN's OpenMP runtime sizes both
// its plan (when a primitive is built) and its parallel regions by omp_get_max_threads(), so the
// two must see the same count, the backend's.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) {
    if (n != saved_) omp_set_num_threads(n);
  }
  ~OmpThreads() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

void check_shape(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                 int64_t ldb, int64_t ldc) {
  HP_CHECK(M >= 0 && N >= 0 && K >= 0, "bf16 gemm: negative size M={} N={} K={}", M, N, K);
  const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  HP_CHECK(lda >= std::max<int64_t>(1, a_cols) && ldb >= std::max<int64_t>(1, b_cols) &&
               ldc >= std::max<int64_t>(1, N),
           "bf16 gemm: leading dimensions lda={} ldb={} ldc={} are smaller than the rows they "
           "hold ({}, {}, {}); pass the row stride of each row-major matrix",
           lda, ldb, ldc, a_cols, b_cols, N);
}

// C = beta * C (K == 0: no products), in C's type.
template <typename C>
void scale_only(int64_t M, int64_t N, float beta, C* c, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      C& x = c[i * ldc + j];
      if constexpr (std::is_same_v<C, float>) {
        x = beta == 0.0f ? 0.0f : beta * x;
      } else {
        x = beta == 0.0f ? bf16{} : to_bf16(beta * to_float(x));
      }
    }
}

}  // namespace

#if HP_HAVE_ONEDNN

namespace {

struct Key {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  DType ct;
  uint32_t alpha, beta;  // bit patterns
  bool operator==(const Key&) const = default;
};

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

dnnl::matmul::primitive_desc make_pd(const Key& k, const dnnl::engine& eng) {
  const dnnl::memory::desc a({k.M, k.K}, dt::bf16, k.ta ? dims{1, k.lda} : dims{k.lda, 1});
  const dnnl::memory::desc b({k.K, k.N}, dt::bf16, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
  const dnnl::memory::desc c({k.M, k.N}, k.ct == DType::kF32 ? dt::f32 : dt::bf16, dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const float alpha = std::bit_cast<float>(k.alpha), beta = std::bit_cast<float>(k.beta);
  // Output scales multiply the f32 accumulator; the sum post-op then adds beta * C to it.
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, eng);
}

}  // namespace

struct Bf16Gemm::Impl {
  // One built primitive with its memory objects (their data pointers are set per call).
  struct Entry {
    Key key;
    dnnl::matmul prim;
    dnnl::memory a, b, c, scratch;
    std::unordered_map<int, dnnl::memory> args;
    size_t scratch_bytes = 0;
    uint64_t last_use = 0;
  };
  static constexpr size_t kMaxEntries = 128;  // past this, the least recently used goes

  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  std::vector<std::unique_ptr<Entry>> entries;
  uint64_t clock = 0;
  int64_t built = 0;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;

  ~Impl() { std::free(scratch); }

  Entry& entry(const Key& k) {
    ++clock;
    for (auto& e : entries)
      if (e->key == k) {
        e->last_use = clock;
        return *e;
      }
    if (entries.size() >= kMaxEntries) {
      auto lru = std::min_element(entries.begin(), entries.end(), [](const auto& x, const auto& y) {
        return x->last_use < y->last_use;
      });
      entries.erase(lru);
    }
    auto e = std::make_unique<Entry>();
    e->key = k;
    const auto pd = make_pd(k, eng);
    e->prim = dnnl::matmul(pd);
    e->a = dnnl::memory(pd.src_desc(), eng, DNNL_MEMORY_NONE);
    e->b = dnnl::memory(pd.weights_desc(), eng, DNNL_MEMORY_NONE);
    e->c = dnnl::memory(pd.dst_desc(), eng, DNNL_MEMORY_NONE);
    e->scratch = dnnl::memory(pd.scratchpad_desc(), eng, DNNL_MEMORY_NONE);
    e->scratch_bytes = pd.scratchpad_desc().get_size();
    e->args = {{DNNL_ARG_SRC, e->a},
               {DNNL_ARG_WEIGHTS, e->b},
               {DNNL_ARG_DST, e->c},
               {DNNL_ARG_SCRATCHPAD, e->scratch}};
    e->last_use = clock;
    ++built;
    entries.push_back(std::move(e));
    return *entries.back();
  }

  void* scratch_of(size_t bytes) {
    if (bytes > scratch_bytes) {
      std::free(scratch);
      scratch_bytes = (bytes + 4095) / 4096 * 4096;
      scratch = std::aligned_alloc(4096, scratch_bytes);
      if (!scratch) throw std::bad_alloc();
    }
    return scratch;
  }
};

Bf16Gemm::Bf16Gemm(int threads) : threads_(std::max(1, threads)), impl_(std::make_unique<Impl>()) {}

bool Bf16Gemm::available() { return true; }

int64_t Bf16Gemm::primitives_built() const { return impl_->built; }

std::string Bf16Gemm::implementation(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                     int64_t lda, int64_t ldb, int64_t ldc, DType c_type) {
  check_shape(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  OmpThreads omp(threads_);
  const Key k{trans_a, trans_b, M, N, K, lda, ldb, ldc, c_type, std::bit_cast<uint32_t>(1.0f), 0};
  return make_pd(k, impl_->eng).impl_info_str();
}

void Bf16Gemm::run_any(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, void* C,
                       DType c_type, int64_t ldc) {
  check_shape(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (c_type == DType::kF32)
      scale_only(M, N, beta, static_cast<float*>(C), ldc);
    else
      scale_only(M, N, beta, static_cast<bf16*>(C), ldc);
    return;
  }
  const Key k{trans_a,
              trans_b,
              M,
              N,
              K,
              lda,
              ldb,
              ldc,
              c_type,
              std::bit_cast<uint32_t>(alpha),
              std::bit_cast<uint32_t>(beta == 0.0f ? 0.0f : beta)};
  OmpThreads omp(threads_);
  try {
    Impl::Entry& e = impl_->entry(k);
    e.a.set_data_handle(const_cast<bf16*>(A));  // oneDNN only reads its sources
    e.b.set_data_handle(const_cast<bf16*>(B));
    e.c.set_data_handle(C);
    e.scratch.set_data_handle(impl_->scratch_of(e.scratch_bytes));
    e.prim.execute(impl_->stream, e.args);
    impl_->stream.wait();
  } catch (const dnnl::error& err) {
    fail(
        "bf16 gemm (oneDNN) failed for trans_a={} trans_b={} M={} N={} K={} lda={} ldb={} "
        "ldc={} into {}: {}",
        trans_a, trans_b, M, N, K, lda, ldb, ldc, dtype_name(c_type), err.what());
  }
}

#else  // no oneDNN in this build

struct Bf16Gemm::Impl {};

Bf16Gemm::Bf16Gemm(int threads) : threads_(std::max(1, threads)) {}

bool Bf16Gemm::available() { return false; }

int64_t Bf16Gemm::primitives_built() const { return 0; }

std::string Bf16Gemm::implementation(bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
                                     int64_t, DType) {
  return "none";
}

void Bf16Gemm::run_any(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float,
                       const bf16*, int64_t lda, const bf16*, int64_t ldb, float beta, void* C,
                       DType c_type, int64_t ldc) {
  check_shape(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  fail(
      "bf16 gemm: this build has no oneDNN; install libdnnl-dev (scripts/install_deps.sh) and "
      "reconfigure, or use precision fp32");
}

#endif

Bf16Gemm::~Bf16Gemm() = default;

void Bf16Gemm::run(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, bf16* C,
                   int64_t ldc) {
  run_any(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, DType::kBF16, ldc);
}

void Bf16Gemm::run(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
                   int64_t ldc) {
  run_any(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, DType::kF32, ldc);
}

}  // namespace hp::cpu

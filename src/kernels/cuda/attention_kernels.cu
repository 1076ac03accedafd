// The __global__ wrappers and launchers of the CUDA attention kernels: grids, block sizes, shared
// memory opt-in. The math lives in attention_mma.cuh and attention_simt.cuh; shape checks and the
// choice of path in flash_attention.cc.
#include "kernels/cuda/attention_launch.h"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_simt.cuh"

namespace hp::cuda::attn {
namespace {

template <int D>
__global__ void __launch_bounds__(MmaFwdCfg<D>::kThreads, MmaFwdCfg<D>::kMinBlocks)
    fwd_mma_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  fwd_mma_body<D>(p, blockIdx.x, blockIdx.y, threadIdx.x, smem);
}

template <int D>
__global__ void __launch_bounds__(MmaBwdCfg<D>::kThreads, 1) bwd_mma_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  bwd_mma_body<D>(p, blockIdx.x, blockIdx.y, threadIdx.x, smem);
}

__global__ void __launch_bounds__(256) dq_convert_kernel(Params p) {
  dq_convert_body(p, static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x);
}

template <typename T>
__global__ void __launch_bounds__(kRowDotWarps * 32) row_dot_kernel(Params p) {
  row_dot_body<T>(p, static_cast<int64_t>(blockIdx.x) * kRowDotWarps + threadIdx.x / 32,
                  threadIdx.x % 32);
}

template <typename T, int NC>
__global__ void __launch_bounds__(kSimtThreads) fwd_simt_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  fwd_simt_body<T, NC>(p, blockIdx.x, blockIdx.y, threadIdx.x, smem);
}

template <typename T, int NC>
__global__ void __launch_bounds__(kSimtThreads) bwd_simt_dkdv_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  bwd_simt_dkdv_body<T, NC>(p, blockIdx.x, blockIdx.y, threadIdx.x, smem);
}

template <typename T, int NC>
__global__ void __launch_bounds__(kSimtThreads) bwd_simt_dq_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  bwd_simt_dq_body<T, NC>(p, blockIdx.x, blockIdx.y, threadIdx.x, smem);
}

// splitmix64 of (seed, index) -> uniform [lo, hi).
template <typename T>
__global__ void fill_uniform_kernel(T* dst, int64_t n, uint64_t seed, float lo, float hi) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
    store_f32(dst + i, lo + (hi - lo) * u);
  }
}

// Launches kernel on grid x block with `smem` dynamic bytes (opting in above 48 KiB).
template <typename Kernel>
cudaError_t launch(Kernel kernel, dim3 grid, int block, int smem, cudaStream_t stream,
                   const Params& p) {
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
  }
  kernel<<<grid, block, smem, stream>>>(p);
  return cudaGetLastError();
}

dim3 dim(const Grid& g) { return dim3(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y)); }

template <int D>
cudaError_t forward_mma(const Params& p, cudaStream_t stream) {
  using C = MmaFwdCfg<D>;
  static_assert(C::kBq == MmaFwdCfg<64>::kBq, "fwd_mma_grid assumes one query tile size");
  return launch(fwd_mma_kernel<D>, dim(fwd_mma_grid(p)), C::kThreads, C::kSmemBytes, stream, p);
}

template <int D>
cudaError_t backward_mma(const Params& p, cudaStream_t stream) {
  using C = MmaBwdCfg<D>;
  const int64_t dq_elems = static_cast<int64_t>(p.batch) * p.seq * p.heads * D;
  cudaError_t e = cudaMemsetAsync(p.dq_acc, 0, dq_elems * sizeof(float), stream);
  if (e != cudaSuccess) return e;
  static_assert(C::kBk == MmaBwdCfg<64>::kBk, "bwd_mma_grid assumes one key tile size");
  e = launch(bwd_mma_kernel<D>, dim(bwd_mma_grid(p)), C::kThreads, C::kSmemBytes, stream, p);
  if (e != cudaSuccess) return e;
  return launch(dq_convert_kernel, dim3(static_cast<unsigned>(ceil_div(dq_elems, 256))), 256, 0,
                stream, p);
}

template <typename T, int NC>
cudaError_t forward_simt_nc(const Params& p, cudaStream_t stream) {
  return launch(fwd_simt_kernel<T, NC>, dim(simt_q_grid(p)), kSimtThreads, simt_fwd_smem_bytes(NC),
                stream, p);
}

template <typename T, int NC>
cudaError_t backward_simt_nc(const Params& p, cudaStream_t stream) {
  const int smem = simt_bwd_smem_bytes(NC);
  const cudaError_t e =
      launch(bwd_simt_dkdv_kernel<T, NC>, dim(simt_kv_grid(p)), kSimtThreads, smem, stream, p);
  if (e != cudaSuccess) return e;
  return launch(bwd_simt_dq_kernel<T, NC>, dim(simt_q_grid(p)), kSimtThreads, smem, stream, p);
}

template <typename T>
cudaError_t forward_simt(const Params& p, cudaStream_t stream) {
  switch (simt_nc(p.head_dim)) {
    case 1:
      return forward_simt_nc<T, 1>(p, stream);
    case 2:
      return forward_simt_nc<T, 2>(p, stream);
    case 3:
      return forward_simt_nc<T, 3>(p, stream);
    case 4:
      return forward_simt_nc<T, 4>(p, stream);
    default:
      return forward_simt_nc<T, 8>(p, stream);
  }
}

template <typename T>
cudaError_t backward_simt(const Params& p, cudaStream_t stream) {
  switch (simt_nc(p.head_dim)) {
    case 1:
      return backward_simt_nc<T, 1>(p, stream);
    case 2:
      return backward_simt_nc<T, 2>(p, stream);
    case 3:
      return backward_simt_nc<T, 3>(p, stream);
    case 4:
      return backward_simt_nc<T, 4>(p, stream);
    default:
      return backward_simt_nc<T, 8>(p, stream);
  }
}

}  // namespace

cudaError_t launch_forward_mma(const Params& p, cudaStream_t stream) {
  if (p.head_dim == 64) return forward_mma<64>(p, stream);
  if (p.head_dim == 128) return forward_mma<128>(p, stream);
  return cudaErrorInvalidValue;
}

cudaError_t launch_forward_simt(bool bf16, const Params& p, cudaStream_t stream) {
  if (p.head_dim > kSimtMaxHeadDim) return cudaErrorInvalidValue;
  return bf16 ? forward_simt<bf16raw>(p, stream) : forward_simt<float>(p, stream);
}

cudaError_t launch_row_dot(bool bf16, const Params& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(row_dot_blocks(p)));
  return bf16 ? launch(row_dot_kernel<bf16raw>, grid, kRowDotWarps * 32, 0, stream, p)
              : launch(row_dot_kernel<float>, grid, kRowDotWarps * 32, 0, stream, p);
}

cudaError_t launch_backward_mma(const Params& p, cudaStream_t stream) {
  if (p.head_dim == 64) return backward_mma<64>(p, stream);
  if (p.head_dim == 128) return backward_mma<128>(p, stream);
  return cudaErrorInvalidValue;
}

cudaError_t launch_backward_simt(bool bf16, const Params& p, cudaStream_t stream) {
  if (p.head_dim > kSimtMaxHeadDim) return cudaErrorInvalidValue;
  return bf16 ? backward_simt<bf16raw>(p, stream) : backward_simt<float>(p, stream);
}

cudaError_t launch_fill_uniform(bool bf16, void* dst, int64_t n, uint64_t seed, float lo, float hi,
                                cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(ceil_div(n, 256) < 4096 ? ceil_div(n, 256) : 4096);
  if (n <= 0) return cudaSuccess;
  if (bf16) {
    fill_uniform_kernel<<<blocks, 256, 0, stream>>>(static_cast<bf16raw*>(dst), n, seed, lo, hi);
  } else {
    fill_uniform_kernel<<<blocks, 256, 0, stream>>>(static_cast<float*>(dst), n, seed, lo, hi);
  }
  return cudaGetLastError();
}

}  // namespace hp::cuda::attn

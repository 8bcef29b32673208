"""
---
id: l2_norm_block_cuda
title: Row-wise L2 normalisation in CUDA C++, one block per row, shared-memory tree reduction
op_family: norm
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [block-per-row, shared-memory-reduction, fp32-accumulate, load-inline]
status: reference
launcher: l2_norm_block_cuda
tuning:
  threads: [256, 128, 512, 1024]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 5, hidden: 3}, {rows: 33, hidden: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
L2 normalisation y = x * rsqrt(sum(x^2) + eps) over the last dimension in CUDA C++ (built with
load_inline), one thread block per row. Each thread sums the squares of its strided elements in
fp32; the block then reduces the THREADS partial sums with a classic shared-memory tree (halve
the active threads each step, one __syncthreads per step, log2(THREADS) steps), and thread 0's
total is read by all after a final barrier. A second pass re-reads the row (an L2 hit) and writes
x * inv_norm rounded once. DRAM traffic is one read and one write per element (4 bytes per bf16
element); about 3 FLOPs per element. It wins for wide rows (thousands of elements, e.g. H = 2048)
with many rows, where a whole block keeps many loads in flight per row. Limits: the tree costs
log2(THREADS) barriers (a shuffle reduction needs only two), decode batches of a few rows fill a
few SMs, scalar loads only, and THREADS must be a power of two.
"""

import torch
from torch.utils.cpp_extension import load_inline

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// blockDim.x is a power of two in 32..1024; dynamic shared memory holds blockDim.x floats
template <typename T>
__global__ void l2_norm_block_kernel(const T* __restrict__ x, T* __restrict__ y, int n,
                                     int64_t stride_x, int64_t stride_y, float eps) {
    extern __shared__ float partial[];
    const int64_t row = blockIdx.x;
    const T* xr = x + row * stride_x;
    T* yr = y + row * stride_y;
    const int tid = threadIdx.x;

    float ss = 0.f;
    for (int c = tid; c < n; c += blockDim.x) {
        const float v = to_f32(xr[c]);
        ss += v * v;
    }
    partial[tid] = ss;
    __syncthreads();
    // tree: the lower half adds the upper half, until one value is left
    for (int active = blockDim.x >> 1; active > 0; active >>= 1) {
        if (tid < active) partial[tid] += partial[tid + active];
        __syncthreads();
    }
    const float inv_norm = rsqrtf(partial[0] + eps);

    for (int c = tid; c < n; c += blockDim.x) yr[c] = from_f32<T>(to_f32(xr[c]) * inv_norm);
}
"""

_CUDA_HOST = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#define AKA_DISPATCH_FLOAT(st, T, ...)                                             \
    switch (st) {                                                                  \
        case at::ScalarType::Float: { using T = float; __VA_ARGS__; break; }       \
        case at::ScalarType::Half: { using T = __half; __VA_ARGS__; break; }       \
        case at::ScalarType::BFloat16: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
        default: TORCH_CHECK(false, "unsupported dtype ", st);                     \
    }

void l2_norm_block_launch(torch::Tensor x, torch::Tensor y, double eps, int64_t threads) {
    const c10::cuda::CUDAGuard guard(x.device());
    const dim3 grid((unsigned)x.size(0));
    const dim3 block((unsigned)threads);
    const size_t smem = sizeof(float) * (size_t)threads;
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        l2_norm_block_kernel<T><<<grid, block, smem, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), (int)x.size(1),
            x.stride(0), y.stride(0), (float)eps);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void l2_norm_block_launch(torch::Tensor x, torch::Tensor y, double eps, int64_t threads);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_l2_norm_block_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["l2_norm_block_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _threads(n: int) -> int:
    """Return threads per row block: about 8 elements per thread, 64 to 1024, a power of two."""
    threads = 64
    while threads < 1024 and threads * 8 < n:
        threads *= 2
    return threads


def l2_norm_block_cuda(
    x: torch.Tensor, eps: float = 1e-6, *, threads: int | None = None
) -> torch.Tensor:
    """Return x / sqrt(sum(x^2) + eps) over the last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32 on a CUDA device; the last dimension is made contiguous.
        eps: Added to the sum of squares before the reciprocal square root.
        threads: Threads per row block, a power of two in 32..1024; None picks by row width.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: x is not a CUDA float tensor with a last dimension, or threads is invalid.
    """
    if not x.is_cuda or x.dtype not in _DTYPES:
        raise ValueError(f"x must be a CUDA fp32/fp16/bf16 tensor; got {x.dtype} on {x.device}")
    n = x.shape[-1] if x.dim() else 0
    if not 1 <= n < 2**31:
        raise ValueError(f"x needs a last dimension of 1..2^31-1; got shape {tuple(x.shape)}")
    block = threads or _threads(n)
    if not 32 <= block <= 1024 or block & (block - 1):
        raise ValueError(f"threads must be a power of two in 32..1024; got {block}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel():
        _EXT.l2_norm_block_launch(x2, y, float(eps), block)
    return y.reshape(x.shape)


def reference(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Return x * rsqrt(sum(x^2) + eps) computed in fp32 and cast to x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(dim=-1, keepdim=True) + eps)).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x", "eps"}`` for ``shape = {"rows", "hidden"}``: x ~ N(0, 1)."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device).to(dtype)
    return {"x": x, "eps": 1e-6}

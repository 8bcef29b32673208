"""
---
id: fused_add_rms_norm_block_cuda
title: Residual add + RMSNorm in CUDA C++, one block per row, shared-memory tree reduction
op_family: norm
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [block-per-row, shared-memory-tree-reduction, fused-residual-add, output-dtype-rounding,
   fp32-accumulate, load-inline]
status: reference
launcher: fused_add_rms_norm_block_cuda
tuning:
  threads: [256, 128, 512, 1024]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  residual: {shape: [..., N], like: x, aliases: [residual_in, res]}
  weight: {shape: [N], like: x, aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: out, shape: [..., N], dtype: x}
  - {name: residual_out, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 7, hidden: 31}, {rows: 33, hidden: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
The pre-norm transformer step h = x + residual; y = RMSNorm(h) * w in one CUDA C++ kernel (built
with load_inline), one block of THREADS threads per row. Pass 1: each thread adds its strided
columns, rounds h to the activation dtype (h is the next layer's residual, so the norm must see the
rounded value), stores h to residual_out and sums h^2 in fp32; the block then reduces the THREADS
partial sums with a classic shared-memory tree (halve the active threads, __syncthreads between
steps). Pass 2: each thread re-reads the h values it wrote itself (L2 hits, no cross-thread
hazard) and stores h * inv_rms * w. Traffic is 2 reads + 2 writes per element (8 bytes in bf16) plus
the weight, against 12 for an unfused add and norm; about 6 FLOPs per element. It wins for wide
rows (N >= 2048) where a warp per row has too few loads in flight. Limits: log2(THREADS)
__syncthreads steps per row cost latency for narrow rows; a decode batch of a few rows uses a few
SMs; scalar (2- or 4-byte) accesses; outputs are fresh tensors (the in-place vLLM variant
overwrites x and residual); the weight must have x's dtype.
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

// THREADS is a power of two (the tree halves it); partials live in dynamic shared memory
template <typename T>
__global__ void fused_add_rms_norm_block_kernel(
    const T* __restrict__ x, const T* __restrict__ res, const T* __restrict__ w,  // inputs
    T* __restrict__ out, T* __restrict__ res_out,                                 // outputs
    int n,                                                                        // row width
    int64_t stride_x, int64_t stride_r, int64_t stride_o, int64_t stride_ro,      // row strides
    float eps) {
    extern __shared__ float partial[];
    const int64_t row = blockIdx.x;  // int64: row * stride can pass 2^31 elements
    const T* xr = x + row * stride_x;
    const T* rr = res + row * stride_r;
    T* hr = res_out + row * stride_ro;
    T* yr = out + row * stride_o;
    const int tid = threadIdx.x;

    // pass 1: h = round(x + residual), stored as the new residual; sum h^2 in fp32
    float ss = 0.f;
    for (int c = tid; c < n; c += blockDim.x) {
        const T h = from_f32<T>(to_f32(xr[c]) + to_f32(rr[c]));
        hr[c] = h;
        const float hf = to_f32(h);
        ss += hf * hf;
    }
    partial[tid] = ss;
    __syncthreads();
    // tree: each step halves the active threads; the barrier orders each level's reads
    for (int half = blockDim.x >> 1; half > 0; half >>= 1) {
        if (tid < half) partial[tid] += partial[tid + half];
        __syncthreads();
    }
    const float inv_rms = rsqrtf(partial[0] / (float)n + eps);

    // pass 2: each thread reads back only the h it wrote itself, so no barrier is needed
    for (int c = tid; c < n; c += blockDim.x) {
        yr[c] = from_f32<T>(to_f32(hr[c]) * inv_rms * to_f32(w[c]));
    }
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

void fused_add_rms_norm_block_launch(torch::Tensor x, torch::Tensor res, torch::Tensor w,
                                     torch::Tensor out, torch::Tensor res_out, double eps,
                                     int64_t threads) {
    const c10::cuda::CUDAGuard guard(x.device());
    const dim3 grid((unsigned)x.size(0));
    const dim3 block((unsigned)threads);
    const size_t smem = (size_t)threads * sizeof(float);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        fused_add_rms_norm_block_kernel<T><<<grid, block, smem, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<const T*>(res.data_ptr()),
            static_cast<const T*>(w.data_ptr()), static_cast<T*>(out.data_ptr()),
            static_cast<T*>(res_out.data_ptr()), (int)x.size(1), x.stride(0), res.stride(0),
            out.stride(0), res_out.stride(0), (float)eps);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void fused_add_rms_norm_block_launch(torch::Tensor x, torch::Tensor res, torch::Tensor w, "
    "torch::Tensor out, torch::Tensor res_out, double eps, int64_t threads);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_fused_add_rms_norm_block_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["fused_add_rms_norm_block_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import (nvcc about a minute the first time, then load_inline's on-disk
# cache): a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _threads(n: int) -> int:
    """Return threads per row block: about 8 elements per thread, 128 to 1024."""
    threads = 128
    while threads < 1024 and threads * 8 < n:
        threads *= 2
    return threads


def fused_add_rms_norm_block_cuda(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (RMSNorm(x + residual) * weight, x + residual), the sum rounded to x's dtype.

    Args:
        x: (..., N) bf16/fp16/fp32 on a CUDA device, last dimension contiguous (else copied).
        residual: same shape, dtype and device as ``x``.
        weight: (N,) same dtype and device as ``x``.
        eps: Added to mean(h^2) before the reciprocal square root.
        threads: Threads per row block, a power of two in 32..1024; None picks by row width.

    Returns:
        out: normalised h, same shape and dtype as ``x``.
        residual_out: h = x + residual (the next layer's residual), same shape and dtype.

    Raises:
        ValueError: The tensors are not matching CUDA float tensors, or threads is not a power
            of two in 32..1024.
    """
    if not x.is_cuda or x.dtype not in _DTYPES:
        raise ValueError(f"x must be a CUDA fp32/fp16/bf16 tensor; got {x.dtype} on {x.device}")
    n = x.shape[-1] if x.dim() else 0
    if n < 1:
        raise ValueError(f"x needs a last dimension of at least 1; got shape {tuple(x.shape)}")
    if residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(
            f"residual must match x {tuple(x.shape)} {x.dtype} on {x.device}; got "
            f"{tuple(residual.shape)} {residual.dtype} on {residual.device}"
        )
    if weight.shape != (n,) or weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(
            f"weight must be ({n},) {x.dtype} on {x.device}; got {tuple(weight.shape)} "
            f"{weight.dtype} on {weight.device}"
        )
    block = threads or _threads(n)
    if block < 32 or block > 1024 or block & (block - 1):
        raise ValueError(f"threads must be a power of two in 32..1024; got {block}")
    x2, r2 = x.reshape(-1, n), residual.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if r2.stride(-1) != 1:
        r2 = r2.contiguous()
    out = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    res_out = torch.empty_like(out)
    if out.numel():
        _EXT.fused_add_rms_norm_block_launch(
            x2, r2, weight.contiguous(), out, res_out, float(eps), block
        )
    return out.reshape(x.shape), res_out.reshape(x.shape)


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (RMSNorm(h) * weight, h) with h = x + residual rounded to x's dtype, norm in fp32."""
    h = (x.float() + residual.float()).to(x.dtype)
    hf = h.float()
    y = hf * torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype), h


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x", "residual", "weight", "eps"}`` for ``shape = {"rows", "hidden"}``."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = (torch.randn(rows, hidden, device=device) * 0.5).to(dtype)
    residual = torch.randn(rows, hidden, device=device).to(dtype)
    weight = (1.0 + 0.1 * torch.randn(hidden, device=device)).to(dtype)
    return {"x": x, "residual": residual, "weight": weight, "eps": 1e-6}

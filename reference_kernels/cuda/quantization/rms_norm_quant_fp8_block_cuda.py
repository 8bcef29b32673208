"""
---
id: rms_norm_quant_fp8_block_cuda
title: Fused residual add + RMSNorm + dynamic per-token FP8 quantisation in CUDA C++, block per row
op_family: quantization
dsl: cuda
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques:
  [block-per-row, fused-residual-add, warp-shuffle-reduction, absmax-reduction, fp8-e4m3,
   saturating-convert, dynamic-scale, load-inline]
status: reference
launcher: rms_norm_quant_fp8_block_cuda
tuning:
  threads: [256, 128, 512, 1024]
args:
  x: {shape: [T, H], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  residual: {shape: [T, H], like: x}
  weight: {shape: [H], like: x, aliases: [w]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, variance_epsilon, rms_norm_eps]}
returns:
  - {name: quantized, shape: [T, H], dtype: fp8_e4m3fn}
  - {name: scale, shape: [T, 1], dtype: fp32}
  - {name: residual_out, shape: [T, H], dtype: x}
problem:
  shapes: [{tokens: 4, hidden: 13}, {tokens: 33, hidden: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
The pre-GEMM block of FP8 serving stacks (atrex30 fused_rmsnorm_quant) in one CUDA C++ launch
(built with load_inline), one thread block per token. Pass 1 adds x + residual, rounds the sum to
the input dtype, stores it as residual_out and accumulates the squares of the rounded values in
fp32. A block reduction (five __shfl_xor_sync steps per warp, one shared slot per warp, then warp
0) gives inv_rms. Pass 2 re-reads residual_out (the thread's own writes, from L1/L2), forms
normed = r * inv_rms * w in fp32 without rounding, and reduces its absmax the same way; the row
scale is absmax / 448 (1 for an all-zero row). Pass 3 recomputes normed and converts
normed / scale with __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3) (round to nearest
even, saturate to +-448). DRAM traffic per bf16 element: 4 bytes read (x, residual), 2 + 1 written
(residual_out, fp8) and the weight from L2, versus about 14 bytes for three separate kernels;
about 10 FLOPs per element. Limits: one block per row (a decode batch of a few tokens fills a few
SMs); normed is recomputed in pass 3 instead of kept (rows are too wide for registers); scalar
loads and 1-byte stores; e4m3fn only.
"""

import torch
from torch.utils.cpp_extension import load_inline

FP8_MAX = 448.0

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
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

// sum (IS_MAX false) or max over the block; every thread gets the result
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float v, float* slots) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int off = 16; off > 0; off >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = IS_MAX ? fmaxf(v, o) : v + o;
    }
    __syncthreads();  // the slots may still be read from a previous reduction
    if (lane == 0) slots[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? slots[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = IS_MAX ? fmaxf(v, o) : v + o;
    }
    return v;
}

template <typename T>
__global__ void rms_norm_quant_fp8_block_kernel(
    const T* __restrict__ x, const T* __restrict__ res, const T* __restrict__ w,
    __nv_fp8_storage_t* __restrict__ q, float* __restrict__ scale, T* res_out, int n,
    int64_t stride_x, int64_t stride_r, int64_t stride_q, int64_t stride_ro, float eps,
    float fp8_max) {
    __shared__ float slots[32];
    const int64_t row = blockIdx.x;
    const T* xr = x + row * stride_x;
    const T* rr = res + row * stride_r;
    T* ro = res_out + row * stride_ro;
    __nv_fp8_storage_t* qr = q + row * stride_q;

    // pass 1: residual add, rounded to T and stored; squares of the rounded sum
    float ss = 0.f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const T r = from_f32<T>(to_f32(xr[c]) + to_f32(rr[c]));
        ro[c] = r;
        const float rf = to_f32(r);
        ss += rf * rf;
    }
    const float inv_rms = rsqrtf(block_reduce<false>(ss, slots) / (float)n + eps);

    // pass 2: absmax of normed (own writes re-read: same thread, same index)
    float amax = 0.f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        amax = fmaxf(amax, fabsf(to_f32(ro[c]) * inv_rms * to_f32(w[c])));
    }
    amax = block_reduce<true>(amax, slots);
    const float s = amax > 0.f ? amax / fp8_max : 1.f;
    if (threadIdx.x == 0) scale[row] = s;

    // pass 3: quantise; SATFINITE saturates to +-448, RN rounding
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float normed = to_f32(ro[c]) * inv_rms * to_f32(w[c]);
        qr[c] = __nv_cvt_float_to_fp8(normed / s, __NV_SATFINITE, __NV_E4M3);
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

void rms_norm_quant_fp8_block_launch(torch::Tensor x, torch::Tensor res, torch::Tensor w,
                                     torch::Tensor q, torch::Tensor scale, torch::Tensor res_out,
                                     double eps, double fp8_max, int64_t threads) {
    const c10::cuda::CUDAGuard guard(x.device());
    const dim3 grid((unsigned)x.size(0));
    const dim3 block((unsigned)threads);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        rms_norm_quant_fp8_block_kernel<T><<<grid, block, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<const T*>(res.data_ptr()),
            static_cast<const T*>(w.data_ptr()), static_cast<__nv_fp8_storage_t*>(q.data_ptr()),
            static_cast<float*>(scale.data_ptr()), static_cast<T*>(res_out.data_ptr()),
            (int)x.size(1), x.stride(0), res.stride(0), q.stride(0), res_out.stride(0),
            (float)eps, (float)fp8_max);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void rms_norm_quant_fp8_block_launch(torch::Tensor x, torch::Tensor res, torch::Tensor w, "
    "torch::Tensor q, torch::Tensor scale, torch::Tensor res_out, double eps, double fp8_max, "
    "int64_t threads);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_rms_norm_quant_fp8_block_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["rms_norm_quant_fp8_block_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _threads(n: int) -> int:
    """Return threads per row block: about 8 elements per thread, 128 to 1024."""
    threads = 128
    while threads < 1024 and threads * 8 < n:
        threads *= 2
    return threads


def rms_norm_quant_fp8_block_cuda(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-5,
    *,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Add the residual, RMS-normalise and quantise each row to float8_e4m3fn.

    Args:
        x: (T, H) bf16/fp16/fp32 on a CUDA device of sm_89 or newer.
        residual: (T, H) same dtype and device as ``x``.
        weight: (H,) same dtype and device as ``x``.
        eps: Added to mean(r^2) before the reciprocal square root.
        threads: Threads per row block, a multiple of 32 in 32..1024; None picks by width.

    Returns:
        quantized: (T, H) float8_e4m3fn, normed / scale, nearest even, saturated to +-448.
        scale: (T, 1) fp32, absmax(normed) / 448, or 1 for an all-zero row.
        residual_out: (T, H) x + residual rounded to x's dtype.

    Raises:
        ValueError: a tensor has the wrong device, dtype or shape, or threads is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES or x.dim() != 2 or not 1 <= x.shape[1] < 2**31:
        raise ValueError(
            f"x must be a 2-D CUDA fp32/fp16/bf16 tensor with rows of >= 1 value; got "
            f"{x.dtype} {tuple(x.shape)} on {x.device}"
        )
    if residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(
            f"residual must be {tuple(x.shape)} {x.dtype} on {x.device}; got "
            f"{tuple(residual.shape)} {residual.dtype} on {residual.device}"
        )
    h = x.shape[1]
    if weight.shape != (h,) or weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(
            f"weight must be ({h},) {x.dtype} on {x.device}; got {tuple(weight.shape)} "
            f"{weight.dtype} on {weight.device}"
        )
    block = threads or _threads(h)
    if block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {block}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    residual = residual if residual.stride(-1) == 1 else residual.contiguous()
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((x.shape[0], 1), dtype=torch.float32, device=x.device)
    res_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _EXT.rms_norm_quant_fp8_block_launch(
            x, residual, weight.contiguous(), q, scale, res_out, float(eps), FP8_MAX, block
        )
    return q, scale, res_out


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (quantized, scale, residual_out) with atrex30's fused_rmsnorm_quant semantics."""
    residual_out = (x.float() + residual.float()).to(x.dtype)
    r = residual_out.float()
    normed = r * torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    amax = normed.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (normed / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale, residual_out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x", "residual", "weight", "eps"}`` for ``shape = {"tokens", "hidden"}``.

    All N(0, 1) as atrex30 draws them; with more than two tokens, token 1 is zero in both x and
    residual (the all-zero row's scale of 1).
    """
    t, h = shape["tokens"], shape["hidden"]
    x = torch.randn(t, h, device=device)
    residual = torch.randn(t, h, device=device)
    if t > 2:
        x[1] = 0.0
        residual[1] = 0.0
    weight = torch.randn(h, device=device)
    return {
        "x": x.to(dtype),
        "residual": residual.to(dtype),
        "weight": weight.to(dtype),
        "eps": 1e-5,
    }

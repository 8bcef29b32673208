"""
---
id: rms_norm_warp_per_row_cuda
title: RMSNorm in CUDA C++ with one warp per row, shuffle reduction and 2-element vector loads
op_family: norm
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [warp-per-row, warp-shuffle-reduction, vectorized-load, fp32-accumulate, load-inline]
status: reference
launcher: rms_norm_warp_per_row_cuda
tuning:
  warps_per_block: [4, 1, 2, 8, 16]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [N], like: x, aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 130, hidden: 129}, {rows: 37, hidden: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
RMSNorm y = x * rsqrt(mean(x^2) + eps) * w in CUDA C++ (built with load_inline), one warp per row
and WARPS_PER_BLOCK rows per block. Each lane walks the row in 2-element packs (bf16x2 / half2 /
float2, one 4- or 8-byte load), sums squares in fp32, and the warp reduces with five
__shfl_xor_sync steps, so no shared memory and no __syncthreads are needed; a second pass re-reads
the row (an L1/L2 hit for rows up to tens of KB) and stores x * inv_rms * w rounded once. DRAM
traffic is one read and one write per element (4 bytes per bf16 element) plus the weight, which
stays in L2; about 4 FLOPs per element. It wins for narrow and medium rows (N up to a few
thousand), where a whole block per row would leave most threads idle or synchronising. Limits:
one warp per row means a wide row (N >= 16384) has few loads in flight per row, and a decode batch
of a handful of rows fills a handful of SMs; odd N or misaligned views fall back to scalar loads;
the weight must have x's dtype.
"""

import torch
from torch.utils.cpp_extension import load_inline

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// 2-element packs: one 4-byte (bf16x2, half2) or 8-byte (float2) load per lane per step
template <typename T> struct Pack2;
template <> struct Pack2<float> { using type = float2; };
template <> struct Pack2<__half> { using type = __half2; };
template <> struct Pack2<__nv_bfloat16> { using type = __nv_bfloat162; };

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
__device__ __forceinline__ float2 unpack2(float2 p) { return p; }
__device__ __forceinline__ float2 unpack2(__half2 p) { return __half22float2(p); }
__device__ __forceinline__ float2 unpack2(__nv_bfloat162 p) { return __bfloat1622float2(p); }
template <typename P> __device__ __forceinline__ P pack2(float2 v);
template <> __device__ __forceinline__ float2 pack2<float2>(float2 v) { return v; }
template <> __device__ __forceinline__ __half2 pack2<__half2>(float2 v) {
    return __float22half2_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat162 pack2<__nv_bfloat162>(float2 v) {
    return __float22bfloat162_rn(v);
}

template <typename T, bool PAIRS>
__global__ void rms_norm_warp_per_row_kernel(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,  // pointers
    int64_t rows, int n,                                                  // sizes
    int64_t stride_x, int64_t stride_y,                                   // row strides (elements)
    float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles keep a full mask
    const T* xr = x + row * stride_x;  // int64: row * stride can pass 2^31 elements
    T* yr = y + row * stride_y;

    // pass 1: sum of squares in fp32, lane-strided so each warp load is one coalesced run
    float ss = 0.f;
    if constexpr (PAIRS) {
        using P = typename Pack2<T>::type;
        const P* xp = reinterpret_cast<const P*>(xr);
        for (int i = lane; i < (n >> 1); i += 32) {
            const float2 v = unpack2(xp[i]);
            ss += v.x * v.x + v.y * v.y;
        }
    } else {
        for (int i = lane; i < n; i += 32) {
            const float v = to_f32(xr[i]);
            ss += v * v;
        }
    }
    // butterfly: after five xor steps every lane holds the row total
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float inv_rms = rsqrtf(ss / (float)n + eps);

    // pass 2: re-read the row (L1/L2 hit) and the weight; (x * inv_rms) * w, one rounding
    if constexpr (PAIRS) {
        using P = typename Pack2<T>::type;
        const P* xp = reinterpret_cast<const P*>(xr);
        const P* wp = reinterpret_cast<const P*>(w);
        P* yp = reinterpret_cast<P*>(yr);
        for (int i = lane; i < (n >> 1); i += 32) {
            const float2 v = unpack2(xp[i]);
            const float2 g = unpack2(wp[i]);
            yp[i] = pack2<P>(make_float2(v.x * inv_rms * g.x, v.y * inv_rms * g.y));
        }
    } else {
        for (int i = lane; i < n; i += 32) {
            yr[i] = from_f32<T>(to_f32(xr[i]) * inv_rms * to_f32(w[i]));
        }
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

static bool aligned(const void* p, int64_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

void rms_norm_warp_per_row_launch(torch::Tensor x, torch::Tensor w, torch::Tensor y, double eps,
                                  int64_t warps_per_block) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0);
    const int n = (int)x.size(1);
    const int64_t pair_bytes = 2 * x.element_size();
    // packs need an even row, even row strides and pair-aligned base pointers
    const bool pairs = n % 2 == 0 && x.stride(0) % 2 == 0 && y.stride(0) % 2 == 0 &&
                       aligned(x.data_ptr(), pair_bytes) && aligned(w.data_ptr(), pair_bytes) &&
                       aligned(y.data_ptr(), pair_bytes);
    const dim3 block((unsigned)(32 * warps_per_block));
    const dim3 grid((unsigned)((rows + warps_per_block - 1) / warps_per_block));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        const T* xp = static_cast<const T*>(x.data_ptr());
        const T* wp = static_cast<const T*>(w.data_ptr());
        T* yp = static_cast<T*>(y.data_ptr());
        if (pairs) {
            rms_norm_warp_per_row_kernel<T, true><<<grid, block, 0, stream>>>(
                xp, wp, yp, rows, n, x.stride(0), y.stride(0), (float)eps);
        } else {
            rms_norm_warp_per_row_kernel<T, false><<<grid, block, 0, stream>>>(
                xp, wp, yp, rows, n, x.stride(0), y.stride(0), (float)eps);
        }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void rms_norm_warp_per_row_launch(torch::Tensor x, torch::Tensor w, torch::Tensor y, "
    "double eps, int64_t warps_per_block);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_rms_norm_warp_per_row_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["rms_norm_warp_per_row_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import (nvcc about a minute the first time, then load_inline's on-disk
# cache): a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _warps_per_block(rows: int) -> int:
    """Return rows (warps) per block: 4 (128 threads) keeps blocks small and SMs busy."""
    return 8 if rows >= 65536 else 4


def rms_norm_warp_per_row_cuda(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    warps_per_block: int | None = None,
) -> torch.Tensor:
    """Return RMSNorm(x) * weight over the last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32 on a CUDA device, last dimension contiguous (else copied).
        weight: (N,) same dtype and device as ``x``.
        eps: Added to mean(x^2) before the reciprocal square root.
        warps_per_block: Rows per block (one warp each), 1 to 32; None picks by row count.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: x is not a CUDA float tensor, the weight does not match, or
            warps_per_block is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES:
        raise ValueError(f"x must be a CUDA fp32/fp16/bf16 tensor; got {x.dtype} on {x.device}")
    n = x.shape[-1] if x.dim() else 0
    if n < 1:
        raise ValueError(f"x needs a last dimension of at least 1; got shape {tuple(x.shape)}")
    if weight.shape != (n,) or weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(
            f"weight must be ({n},) {x.dtype} on {x.device} for x {tuple(x.shape)}; got "
            f"{tuple(weight.shape)} {weight.dtype} on {weight.device}"
        )
    wpb = warps_per_block or _warps_per_block(x.numel() // n)
    if not 1 <= wpb <= 32:
        raise ValueError(f"warps_per_block must be in 1..32 (1024 threads); got {wpb}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    _EXT.rms_norm_warp_per_row_launch(x2, weight.contiguous(), y, float(eps), wpb)
    return y.reshape(x.shape)


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Return RMSNorm(x) * weight computed in fp32 and cast to x's dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x", "weight", "eps"}`` for ``shape = {"rows", "hidden"}``: x ~ N(0, 1)."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = torch.randn(rows, hidden, device=device).to(dtype)
    weight = (1.0 + 0.1 * torch.randn(hidden, device=device)).to(dtype)
    return {"x": x, "weight": weight, "eps": 1e-6}

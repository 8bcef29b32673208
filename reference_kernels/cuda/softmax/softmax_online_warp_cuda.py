"""
---
id: softmax_online_warp_cuda
title: Row softmax in CUDA C++, one warp per row, online max-and-sum over register-held chunks
op_family: softmax
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques:
  [warp-per-row, online-softmax, register-chunks, warp-shuffle-reduction, max-subtraction,
   fp32-accumulate, load-inline]
status: reference
launcher: softmax_online_warp_cuda
tuning:
  warps_per_block: [4, 1, 2, 8, 16]
args:
  x: {shape: [..., N], dtypes: [fp32, fp16, bf16], aliases: [logits, input]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 9, cols: 7}, {rows: 77, cols: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
Softmax over the last dimension in CUDA C++ (built with load_inline), one warp per row and
WARPS_PER_BLOCK rows per block. The row is walked in chunks of 32 x 8 elements: every lane loads
its 8 values of the chunk into registers (lane-strided, so each of the 8 warp loads is one
coalesced run), takes their max, and updates its running (max m, sum s of exp(x - m)) with the
online rescale s = s * exp(m_old - m_new) + sum exp(x - m_new); after the last chunk five
__shfl_xor_sync steps merge the 32 (m, s) pairs with the same rule. Pass 2 re-reads each chunk
(an L1/L2 hit for rows up to tens of KB) and stores exp(x - m) / s. Registers stay bounded
whatever N is, and nothing touches shared memory or a barrier. Traffic: x read twice (the second
read mostly from cache) and y written once, 4 + 2 bytes of DRAM per bf16 element when the row
stays cached; two exponentials per element. It wins for many rows of small to medium width
(attention scores, batched logits). Limits: a single warp per row has few loads in flight for
vocabulary-wide rows (100K+), where a block per row or a split row does better; a row that is
all -inf gives NaN, as torch does; scalar 2- or 4-byte loads.
"""

import torch
from torch.utils.cpp_extension import load_inline

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
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

// merge two (max, sum) states; a state with max -inf holds nothing (avoids exp(-inf + inf))
__device__ __forceinline__ void merge_state(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return;
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

constexpr int VPT = 8;  // values per lane per chunk: 8 registers, a 256-element chunk per warp

template <typename T>
__global__ void softmax_online_warp_kernel(
    const T* __restrict__ x, T* __restrict__ y,   // pointers
    int64_t rows, int n,                          // sizes
    int64_t stride_x, int64_t stride_y) {         // row strides (elements)
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles keep a full mask
    const T* xr = x + row * stride_x;  // int64: row * stride can pass 2^31 elements
    T* yr = y + row * stride_y;

    // pass 1: per-lane online (max, sum) over register-held chunks
    float m = -INFINITY, s = 0.f;
    for (int base = 0; base < n; base += 32 * VPT) {
        float v[VPT];
        float cmax = -INFINITY;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int c = base + i * 32 + lane;
            v[i] = c < n ? to_f32(xr[c]) : -INFINITY;  // padding adds exp(-inf) = 0
            cmax = fmaxf(cmax, v[i]);
        }
        float csum = 0.f;
        if (cmax != -INFINITY) {
#pragma unroll
            for (int i = 0; i < VPT; ++i) csum += expf(v[i] - cmax);
        }
        merge_state(m, s, cmax, csum);
    }
    // warp merge: after five xor steps every lane holds the row's (max, sum)
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge_state(m, s, m2, s2);
    }
    const float inv_s = 1.f / s;  // s >= 1 unless the row is all -inf (then NaN, as torch)

    // pass 2: re-read (cache hit) and normalise
    for (int base = 0; base < n; base += 32 * VPT) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int c = base + i * 32 + lane;
            if (c < n) yr[c] = from_f32<T>(expf(to_f32(xr[c]) - m) * inv_s);
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

void softmax_online_warp_launch(torch::Tensor x, torch::Tensor y, int64_t warps_per_block) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0);
    const dim3 block((unsigned)(32 * warps_per_block));
    const dim3 grid((unsigned)((rows + warps_per_block - 1) / warps_per_block));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        softmax_online_warp_kernel<T><<<grid, block, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), rows,
            (int)x.size(1), x.stride(0), y.stride(0));
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void softmax_online_warp_launch(torch::Tensor x, torch::Tensor y, int64_t warps_per_block);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_softmax_online_warp_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["softmax_online_warp_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import (nvcc about a minute the first time, then load_inline's on-disk
# cache): a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def softmax_online_warp_cuda(
    x: torch.Tensor,
    *,
    warps_per_block: int | None = None,
) -> torch.Tensor:
    """Return softmax(x) over the last dimension.

    Args:
        x: (..., N) fp32/fp16/bf16 on a CUDA device, N < 2^31, last dimension contiguous (else
            copied).
        warps_per_block: Rows per block (one warp each), 1 to 32; None = 4.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: x is not a CUDA float tensor with a non-empty last dimension, or
            warps_per_block is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES:
        raise ValueError(f"x must be a CUDA fp32/fp16/bf16 tensor; got {x.dtype} on {x.device}")
    n = x.shape[-1] if x.dim() else 0
    if not 1 <= n < 2**31:
        raise ValueError(f"x needs a last dimension in 1..2^31-1; got shape {tuple(x.shape)}")
    wpb = warps_per_block or 4
    if not 1 <= wpb <= 32:
        raise ValueError(f"warps_per_block must be in 1..32 (1024 threads); got {wpb}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel():
        _EXT.softmax_online_warp_launch(x2, y, wpb)
    return y.reshape(x.shape)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return softmax(x) over the last dimension computed in fp32 and cast to x's dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "cols"}``: logits 3 * N(0, 1) + a per-row offset."""
    rows, cols = shape["rows"], shape["cols"]
    x = 3.0 * torch.randn(rows, cols, device=device) + 10.0 * torch.randn(rows, 1, device=device)
    return {"x": x.to(dtype)}

"""
---
id: block_scan_cumsum_cuda
title: Inclusive row cumsum in CUDA C++, one block per row, warp-shuffle plus shared-memory scan
op_family: scan
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [block-per-row, hillis-steele-scan, warp-shuffle-scan, smem-warp-totals, carry-loop,
   fp32-accumulate, load-inline]
status: reference
launcher: block_scan_cumsum_cuda
tuning:
  threads: [1024, 256, 512]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [input]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 7, cols: 13}, {rows: 33, cols: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
Inclusive prefix sum along the last dimension in CUDA C++ (built with load_inline), one block per
row. The row is walked in tiles of blockDim elements; in each tile every thread loads one element,
its warp runs a five-step Hillis-Steele scan with __shfl_up_sync, lane 31 writes the warp total to
shared memory, warp 0 scans those (at most 32) totals the same way, and every thread adds its warp's
exclusive offset plus the running carry of earlier tiles, kept in fp32 in a register that all
threads update from the last element of the tile. Two __syncthreads per tile. DRAM traffic is one
read and one write per element; about 12 FLOPs (adds and shuffles) per element. It wins over a
two-kernel (partials, then offsets) scan when rows are many and of modest width (up to about 10^5),
since one pass suffices and no cross-block traffic is needed. Limits: one block per row leaves SMs
idle for a handful of very long rows; the carry is fp32, so very long bf16 rows lose low bits in
the same way torch.cumsum in fp32 does; integer inputs are not supported.
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

// inclusive warp scan: after step d every lane holds the sum of the 2d lanes ending at it
__device__ __forceinline__ float warp_inclusive_scan(float v, int lane) {
    for (int d = 1; d < 32; d <<= 1) {
        const float up = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += up;
    }
    return v;
}

template <typename T>
__global__ void block_scan_cumsum_kernel(const T* __restrict__ x, T* __restrict__ y, int n,
                                         int64_t stride_x, int64_t stride_y) {
    __shared__ float warp_sums[32];
    __shared__ float tile_total;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const T* xr = x + (int64_t)blockIdx.x * stride_x;
    T* yr = y + (int64_t)blockIdx.x * stride_y;
    float carry = 0.f;  // sum of all earlier tiles, identical in every thread
    for (int base = 0; base < n; base += blockDim.x) {
        const int i = base + threadIdx.x;
        float v = i < n ? to_f32(xr[i]) : 0.f;
        v = warp_inclusive_scan(v, lane);
        if (lane == 31) warp_sums[warp] = v;
        __syncthreads();
        if (warp == 0) {
            float s = lane < warps ? warp_sums[lane] : 0.f;
            s = warp_inclusive_scan(s, lane);
            if (lane < warps) warp_sums[lane] = s;  // inclusive totals of warps 0..lane
            if (lane == 31) tile_total = s;
        }
        __syncthreads();
        const float offset = warp > 0 ? warp_sums[warp - 1] : 0.f;
        if (i < n) yr[i] = from_f32<T>(carry + offset + v);
        carry += tile_total;
        __syncthreads();  // warp_sums / tile_total are rewritten by the next tile
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

void block_scan_cumsum_launch(torch::Tensor x, torch::Tensor y, int64_t threads) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0);
    const int n = (int)x.size(1);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        block_scan_cumsum_kernel<T><<<(unsigned)rows, (unsigned)threads, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), n, x.stride(0),
            y.stride(0));
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = "void block_scan_cumsum_launch(torch::Tensor x, torch::Tensor y, int64_t threads);"
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_block_scan_cumsum_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["block_scan_cumsum_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def block_scan_cumsum_cuda(x: torch.Tensor, *, threads: int | None = None) -> torch.Tensor:
    """Return the inclusive cumulative sum of ``x`` along its last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32 on a CUDA device (a non-unit last stride is copied).
        threads: Threads per block, a multiple of 32 in 32..1024; None picks from N.

    Returns:
        y: same shape and dtype as ``x``, contiguous; accumulated in fp32.

    Raises:
        ValueError: x is not a CUDA float tensor or threads is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES:
        raise ValueError(f"x must be a CUDA fp32/fp16/bf16 tensor; got {x.dtype} on {x.device}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension; got a 0-d tensor")
    n = x.shape[-1]
    tpb = threads or (1024 if n > 512 else max(32, (n + 31) // 32 * 32))
    if tpb % 32 or not 32 <= tpb <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {tpb}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    _EXT.block_scan_cumsum_launch(x2, y, tpb)
    return y.reshape(x.shape)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return torch.cumsum over the last dimension in fp32, cast to x's dtype."""
    return torch.cumsum(x.float(), dim=-1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "cols"}``: x ~ N(0, 1)."""
    return {"x": torch.randn(shape["rows"], shape["cols"], device=device).to(dtype)}

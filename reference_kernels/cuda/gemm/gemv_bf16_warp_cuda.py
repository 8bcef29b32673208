"""
---
id: gemv_bf16_warp_cuda
title: Decode GEMV y = x W^T for one row in CUDA C++, one warp per output, 16-byte streaming loads
op_family: gemm
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [warp-per-row, gemv, vectorized-load, streaming-load, warp-shuffle-reduction, fp32-accumulate,
   load-inline]
status: reference
launcher: gemv_bf16_warp_cuda
tuning:
  warps_per_block: [4, 2, 8, 16]
args:
  x: {shape: [1, K], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  weight: {shape: [N, K], like: x, aliases: [w]}
returns:
  - {name: y, shape: [1, N], dtype: x}
problem:
  shapes: [{n: 33, k: 13}, {n: 1000, k: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
The decode-time linear layer with a single activation row, y (1, N) = x (1, K) @ W^T for W (N, K)
in nn.Linear layout, in CUDA C++ (built with load_inline). With M = 1 there is no reuse of W, so
the job is streaming N * K weights through at full bandwidth (2 FLOPs per 2 bytes in bf16: far
below any tensor-core ridge point, so no MMA). One warp per output element, WARPS_PER_BLOCK rows per
block: each lane loads 16 bytes of the weight row (8 bf16) with __ldcs (streaming, evict-first: W
is used once) and the matching 16 bytes of x with __ldg (read-only path: x is re-read by every
warp and stays in L1/L2), four vectors in flight per lane before the fp32 FMAs, so each warp has
2 KB of loads outstanding; five __shfl_xor_sync steps reduce the 32 partial dot products and lane
0 stores y rounded once. Bytes: N * K * 2 of weights plus N * 2 written; 2 FLOPs per weight. It
wins for M = 1 decode GEMVs with K >= 512, where a tiled GEMM wastes most of its tile. Limits: M
must be 1 (a batch of rows re-reads W once per row); K must be a multiple of 16 bytes / element
size with 16-byte aligned rows for the vector path, else scalar loads; the weight must have x's
dtype; no bias or epilogue.
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

constexpr int UNROLL = 4;  // 16-byte vectors in flight per lane before the FMAs

// VEC = 16 / sizeof(T) on the vector path, 1 on the scalar path
template <typename T, int VEC>
__global__ void gemv_warp_kernel(
    const T* __restrict__ w, const T* __restrict__ x, T* __restrict__ y,  // pointers
    int n, int k, int64_t stride_w) {                                    // sizes, W row stride
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= n) return;  // the whole warp leaves together, so the shuffles keep a full mask
    const T* wr = w + row * stride_w;  // int64: row * stride can pass 2^31 elements
    float acc = 0.f;
    if constexpr (VEC > 1) {
        const uint4* wv = reinterpret_cast<const uint4*>(wr);
        const uint4* xv = reinterpret_cast<const uint4*>(x);
        const int nvec = k / VEC;
        for (int base = lane; base < nvec; base += 32 * UNROLL) {
            uint4 a[UNROLL], b[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {  // issue every load first: UNROLL x 16 B in flight
                const int i = base + u * 32;
                a[u] = i < nvec ? __ldcs(wv + i) : make_uint4(0u, 0u, 0u, 0u);
                b[u] = i < nvec ? __ldg(xv + i) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const T* av = reinterpret_cast<const T*>(&a[u]);
                const T* bv = reinterpret_cast<const T*>(&b[u]);
#pragma unroll
                for (int j = 0; j < VEC; ++j) acc = fmaf(to_f32(av[j]), to_f32(bv[j]), acc);
            }
        }
    } else {
        for (int i = lane; i < k; i += 32) acc = fmaf(to_f32(wr[i]), to_f32(x[i]), acc);
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) y[row] = from_f32<T>(acc);
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

void gemv_warp_launch(torch::Tensor x, torch::Tensor w, torch::Tensor y, int64_t warps_per_block) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int n = (int)w.size(0), k = (int)w.size(1);
    const int64_t vec = 16 / x.element_size();
    const bool vector = k % vec == 0 && w.stride(0) % vec == 0 &&
                        reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
    const dim3 block((unsigned)(32 * warps_per_block));
    const dim3 grid((unsigned)((n + warps_per_block - 1) / warps_per_block));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        const T* wp = static_cast<const T*>(w.data_ptr());
        const T* xp = static_cast<const T*>(x.data_ptr());
        T* yp = static_cast<T*>(y.data_ptr());
        if (vector) {
            gemv_warp_kernel<T, 16 / sizeof(T)><<<grid, block, 0, stream>>>(
                wp, xp, yp, n, k, w.stride(0));
        } else {
            gemv_warp_kernel<T, 1><<<grid, block, 0, stream>>>(wp, xp, yp, n, k, w.stride(0));
        }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void gemv_warp_launch(torch::Tensor x, torch::Tensor w, torch::Tensor y, "
    "int64_t warps_per_block);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_gemv_bf16_warp_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["gemv_warp_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import (nvcc about a minute the first time, then load_inline's on-disk
# cache): a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def gemv_bf16_warp_cuda(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    warps_per_block: int | None = None,
) -> torch.Tensor:
    """Return x @ weight.T for a single activation row.

    Args:
        x: (1, K) bf16/fp16/fp32 on a CUDA device (copied if not contiguous).
        weight: (N, K) same dtype and device, rows contiguous (else copied), nn.Linear layout.
        warps_per_block: Output rows per block (one warp each), 1 to 32; None = 4.

    Returns:
        y: (1, N), x's dtype.

    Raises:
        ValueError: The shapes, dtypes or devices do not match, K or N is out of range, or
            warps_per_block is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES or x.dim() != 2 or x.shape[0] != 1:
        raise ValueError(
            f"x must be a (1, K) CUDA fp32/fp16/bf16 tensor (decode GEMV, M = 1); got {x.dtype} "
            f"{tuple(x.shape)} on {x.device}"
        )
    k = x.shape[1]
    if weight.dim() != 2 or weight.shape[1] != k or weight.dtype != x.dtype:
        raise ValueError(
            f"weight must be (N, {k}) {x.dtype}; got {weight.dtype} {tuple(weight.shape)}"
        )
    if weight.device != x.device:
        raise ValueError(f"weight must be on {x.device}; got {weight.device}")
    n = weight.shape[0]
    if not (1 <= k < 2**31 and 0 <= n < 2**31):
        raise ValueError(f"need 1 <= K < 2^31 and N < 2^31; got K = {k}, N = {n}")
    wpb = warps_per_block or 4
    if not 1 <= wpb <= 32:
        raise ValueError(f"warps_per_block must be in 1..32 (1024 threads); got {wpb}")
    x = x.contiguous()
    if weight.stride(-1) != 1:
        weight = weight.contiguous()
    y = torch.empty((1, n), dtype=x.dtype, device=x.device)
    if n:
        _EXT.gemv_warp_launch(x, weight, y, wpb)
    return y


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Return x @ weight.T computed in fp32 and cast to x's dtype."""
    return (x.float() @ weight.float().T).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x", "weight"}`` for ``shape = {"n", "k"}``: N(0, 1) / sqrt(k) weights."""
    n, k = shape["n"], shape["k"]
    x = torch.randn(1, k, device=device).to(dtype)
    weight = (torch.randn(n, k, device=device) / k**0.5).to(dtype)
    return {"x": x, "weight": weight}

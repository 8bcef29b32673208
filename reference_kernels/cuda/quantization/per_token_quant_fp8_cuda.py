"""
---
id: per_token_quant_fp8_cuda
title: Dynamic per-token FP8 e4m3 quantisation in CUDA C++, block amax reduction, saturating cast
op_family: quantization
dsl: cuda
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques:
  [block-per-row, absmax-reduction, warp-shuffle-reduction, fp8-e4m3, saturating-convert,
   dynamic-scale, load-inline]
status: reference
launcher: per_token_quant_fp8_cuda
tuning:
  threads: [256, 128, 512, 1024]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: q, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scale, shape: [T, 1], dtype: fp32}
problem:
  shapes: [{rows: 4, hidden: 13}, {rows: 33, hidden: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
Activation quantisation for FP8 GEMMs in CUDA C++ (built with load_inline): each token row gets
scale = max(absmax(row) / 448, 1e-10) and q = x / scale converted to float8 e4m3 with
__nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3), which rounds to nearest even and saturates
to +-448 in one hardware conversion on sm_89+ (so no separate clamp). One block per token: pass 1
reduces |x| with a per-thread max over strided columns, five __shfl_xor_sync steps per warp and
one shared-memory slot per warp; pass 2 re-reads the row (an L2 hit for rows up to MBs) and
divides by the scale with IEEE division (-O3, no fast math), so q matches PyTorch's x / scale bit
for bit. Bytes per bf16 element: 2 reads of 2 bytes (the second from L2) and a 1-byte write, plus
4 bytes of scale per row; about 3 FLOPs per element.
Limits: one block per row, so decode batches of a few tokens fill a few SMs; scalar 1-byte stores
(a packed __nv_fp8x4 store would cut store instructions 4x); e4m3fn only (no fnuz range); no
static-scale path and no upper bound on the scale; fmaxf skips NaNs in the absmax (torch's amax
propagates them into the scale).
"""

import torch
from torch.utils.cpp_extension import load_inline

FP8_MAX = 448.0
MIN_SCALE = 1e-10

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// THREADS is a multiple of 32 (at most 1024, so at most 32 warp slots)
template <typename T>
__global__ void per_token_quant_fp8_kernel(
    const T* __restrict__ x, __nv_fp8_storage_t* __restrict__ q, float* __restrict__ scale,
    int n,                                     // row width
    int64_t stride_x, int64_t stride_q,        // row strides (elements)
    float fp8_max, float min_scale) {
    __shared__ float warp_max[32];
    __shared__ float row_scale;
    const int64_t row = blockIdx.x;  // int64: row * stride can pass 2^31 elements
    const T* xr = x + row * stride_x;
    __nv_fp8_storage_t* qr = q + row * stride_q;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // pass 1: absmax in fp32 -- thread, then warp (shuffles), then block (one slot per warp)
    float amax = 0.f;
    for (int c = tid; c < n; c += blockDim.x) amax = fmaxf(amax, fabsf(to_f32(xr[c])));
    for (int off = 16; off > 0; off >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    }
    if (lane == 0) warp_max[warp] = amax;
    __syncthreads();
    if (warp == 0) {
        float m = lane < (int)(blockDim.x >> 5) ? warp_max[lane] : 0.f;
        for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        if (lane == 0) {
            const float s = fmaxf(m / fp8_max, min_scale);  // IEEE division, as PyTorch
            row_scale = s;
            scale[row] = s;
        }
    }
    __syncthreads();
    const float s = row_scale;

    // pass 2: divide and convert; SATFINITE saturates to +-448 (the clamp), RN rounding
    for (int c = tid; c < n; c += blockDim.x) {
        qr[c] = __nv_cvt_float_to_fp8(to_f32(xr[c]) / s, __NV_SATFINITE, __NV_E4M3);
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

void per_token_quant_fp8_launch(torch::Tensor x, torch::Tensor q, torch::Tensor scale,
                                double fp8_max, double min_scale, int64_t threads) {
    const c10::cuda::CUDAGuard guard(x.device());
    const dim3 grid((unsigned)x.size(0));
    const dim3 block((unsigned)threads);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        per_token_quant_fp8_kernel<T><<<grid, block, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<__nv_fp8_storage_t*>(q.data_ptr()),
            static_cast<float*>(scale.data_ptr()), (int)x.size(1), x.stride(0), q.stride(0),
            (float)fp8_max, (float)min_scale);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void per_token_quant_fp8_launch(torch::Tensor x, torch::Tensor q, torch::Tensor scale, "
    "double fp8_max, double min_scale, int64_t threads);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_per_token_quant_fp8_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["per_token_quant_fp8_launch"],
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


def per_token_quant_fp8_cuda(
    x: torch.Tensor,
    *,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of x to float8_e4m3fn with its own scale.

    Args:
        x: (T, N) bf16/fp16/fp32 on a CUDA device of sm_89 or newer, last dimension contiguous
            (else copied).
        threads: Threads per row block, a multiple of 32 in 32..1024; None picks by row width.

    Returns:
        q: (T, N) float8_e4m3fn, x / scale rounded to nearest even and saturated to +-448.
        scale: (T, 1) fp32, max(absmax(row) / 448, 1e-10).

    Raises:
        ValueError: x is not a 2-D CUDA float tensor, or threads is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES or x.dim() != 2:
        raise ValueError(
            f"x must be a 2-D CUDA fp32/fp16/bf16 tensor; got {x.dtype} {tuple(x.shape)} "
            f"on {x.device}"
        )
    rows, n = x.shape
    if not 1 <= n < 2**31:
        raise ValueError(f"x's rows must hold 1..2^31-1 elements; got shape {tuple(x.shape)}")
    block = threads or _threads(n)
    if block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {block}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    q = torch.empty((rows, n), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    if rows:
        _EXT.per_token_quant_fp8_launch(x, q, scale, FP8_MAX, MIN_SCALE, block)
    return q, scale


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scale) computed in fp32 PyTorch."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
    q = (xf / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "hidden"}``: N(0, 1), row 1 zero if rows > 2."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    if shape["rows"] > 2:
        x[1] = 0.0  # exercises the minimum scale
    return {"x": x.to(dtype)}

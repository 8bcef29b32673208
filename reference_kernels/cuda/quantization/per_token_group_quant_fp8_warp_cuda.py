"""
---
id: per_token_group_quant_fp8_warp_cuda
title: Per-token-group FP8 e4m3 quantisation in CUDA C++, one warp per group, shuffle amax
op_family: quantization
dsl: cuda
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques:
  [warp-per-group, absmax-reduction, warp-shuffle-reduction, fp8-e4m3, saturating-convert,
   dynamic-scale, load-inline]
status: reference
launcher: per_token_group_quant_fp8_warp_cuda
tuning:
  warps_per_block: [8, 4, 16, 32]
args:
  x: {shape: [T, H], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  group_size: {type: int, default: 128, aliases: [block_size, group]}
returns:
  - {name: quantized, shape: [T, H], dtype: fp8_e4m3fn}
  - {name: scales, shape: [T, '?'], dtype: fp32}
problem:
  shapes: [{tokens: 4, hidden: 300}, {tokens: 7, hidden: 320, group_size: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Activation quantisation for block-scaled FP8 GEMMs (DeepSeek-style 1 x 128 groups; atrex30
per_token_group_quant_fp8) in CUDA C++ (built with load_inline). One warp per (token, group):
with the default group of 128 each lane loads four values, keeps them in registers, takes their
absmax and the warp reduces it with five __shfl_xor_sync max steps (no shared memory, no
barrier); lane 0 writes scale = max(absmax / 448, 1e-10) and every lane converts x / scale (IEEE
division, as PyTorch) with __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3), which rounds to
nearest even and saturates to +-448 in one instruction. A last, shorter group is allowed when H
is not a multiple of the group size. Bytes per bf16 element: 2 read once (registers hold the
group) and 1 written, plus 4 bytes of scale per group; about 3 FLOPs per element. It wins over a
block-per-row design when rows are few (decode), since T * H / 128 warps spread over every SM.
Limits: at most 32 values per lane are cached (group_size <= 1024); scalar loads and 1-byte
stores; e4m3fn only; fmaxf skips NaNs in the absmax (torch's amax would propagate them).
"""

import torch
from torch.utils.cpp_extension import load_inline

FP8_MAX = 448.0
MIN_SCALE = 1e-10
MAX_GROUP = 1024  # 32 lanes x 32 cached values

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// PER_LANE = ceil(group_size / 32) values held in registers by each lane
template <typename T, int PER_LANE>
__global__ void per_token_group_quant_fp8_warp_kernel(
    const T* __restrict__ x, __nv_fp8_storage_t* __restrict__ q, float* __restrict__ scales,
    int64_t tokens, int h, int group_size, int groups, int64_t stride_x, int64_t stride_q,
    float fp8_max, float min_scale) {
    const int lane = threadIdx.x & 31;
    const int64_t job = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (job >= tokens * groups) return;  // whole warps leave together
    const int64_t token = job / groups;
    const int group = (int)(job - token * groups);
    const int start = group * group_size;
    const int len = min(group_size, h - start);  // the last group may be shorter
    const T* xg = x + token * stride_x + start;
    __nv_fp8_storage_t* qg = q + token * stride_q + start;

    float v[PER_LANE];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
        const int i = lane + 32 * j;
        v[j] = i < len ? to_f32(xg[i]) : 0.f;
        amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int off = 16; off > 0; off >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    }
    const float s = fmaxf(amax / fp8_max, min_scale);  // IEEE division, as PyTorch
    if (lane == 0) scales[token * groups + group] = s;
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
        const int i = lane + 32 * j;
        if (i < len) qg[i] = __nv_cvt_float_to_fp8(v[j] / s, __NV_SATFINITE, __NV_E4M3);
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

#define AKA_GROUP_LAUNCH(PL)                                                                \
    per_token_group_quant_fp8_warp_kernel<T, PL><<<grid, block, 0, stream>>>(               \
        static_cast<const T*>(x.data_ptr()), static_cast<__nv_fp8_storage_t*>(q.data_ptr()),  \
        static_cast<float*>(scales.data_ptr()), tokens, h, (int)group_size, groups,        \
        x.stride(0), q.stride(0), (float)fp8_max, (float)min_scale)

void per_token_group_quant_fp8_warp_launch(torch::Tensor x, torch::Tensor q,
                                           torch::Tensor scales, int64_t group_size,
                                           double fp8_max, double min_scale,
                                           int64_t warps_per_block) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t tokens = x.size(0);
    const int h = (int)x.size(1);
    const int groups = (int)scales.size(1);
    const int64_t jobs = tokens * groups;
    const dim3 block((unsigned)(32 * warps_per_block));
    const dim3 grid((unsigned)((jobs + warps_per_block - 1) / warps_per_block));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int per_lane = (int)((group_size + 31) / 32);
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        if (per_lane <= 1) { AKA_GROUP_LAUNCH(1); }
        else if (per_lane <= 2) { AKA_GROUP_LAUNCH(2); }
        else if (per_lane <= 4) { AKA_GROUP_LAUNCH(4); }
        else if (per_lane <= 8) { AKA_GROUP_LAUNCH(8); }
        else if (per_lane <= 16) { AKA_GROUP_LAUNCH(16); }
        else { AKA_GROUP_LAUNCH(32); }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void per_token_group_quant_fp8_warp_launch(torch::Tensor x, torch::Tensor q, "
    "torch::Tensor scales, int64_t group_size, double fp8_max, double min_scale, "
    "int64_t warps_per_block);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_per_token_group_quant_fp8_warp_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["per_token_group_quant_fp8_warp_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def per_token_group_quant_fp8_warp_cuda(
    x: torch.Tensor, group_size: int = 128, *, warps_per_block: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to float8_e4m3fn with one scale per (token, group of columns).

    Args:
        x: (T, H) bf16/fp16/fp32 on a CUDA device of sm_89 or newer; rows are made contiguous.
        group_size: Columns per scale, 1 to 1024; a last, shorter group is allowed.
        warps_per_block: Groups per block (one warp each), 1 to 32; None picks 8.

    Returns:
        quantized: (T, H) float8_e4m3fn, x / scale rounded to nearest even, saturated to +-448.
        scales: (T, ceil(H / group_size)) fp32, max(absmax(group) / 448, 1e-10).

    Raises:
        ValueError: x is not a 2-D CUDA float tensor, or group_size or warps_per_block is out
            of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES or x.dim() != 2:
        raise ValueError(
            f"x must be a 2-D CUDA fp32/fp16/bf16 tensor; got {x.dtype} {tuple(x.shape)} "
            f"on {x.device}"
        )
    if not 1 <= group_size <= MAX_GROUP:
        raise ValueError(f"group_size must be in 1..{MAX_GROUP}; got {group_size}")
    wpb = warps_per_block or 8
    if not 1 <= wpb <= 32:
        raise ValueError(f"warps_per_block must be in 1..32 (1024 threads); got {wpb}")
    tokens, h = x.shape
    x = x if x.stride(-1) == 1 else x.contiguous()
    groups = -(-h // group_size)
    q = torch.empty((tokens, h), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((tokens, groups), dtype=torch.float32, device=x.device)
    if q.numel():
        _EXT.per_token_group_quant_fp8_warp_launch(
            x, q, scales, group_size, FP8_MAX, MIN_SCALE, wpb
        )
    return q, scales


def reference(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (quantized, scales) computed in fp32 PyTorch (atrex30's semantics)."""
    tokens, h = x.shape
    groups = -(-h // group_size)
    padded = torch.nn.functional.pad(x.float(), (0, groups * group_size - h))
    blocks = padded.view(tokens, groups, group_size)
    scales = (blocks.abs().amax(dim=-1) / FP8_MAX).clamp(min=MIN_SCALE)
    q = (blocks / scales[..., None]).clamp(-FP8_MAX, FP8_MAX)
    return q.view(tokens, -1)[:, :h].to(torch.float8_e4m3fn), scales


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x", "group_size"}`` for ``shape = {"tokens", "hidden"[, "group_size"]}``.

    x ~ N(0, 1); with more than two tokens, token 1's first group is zero (minimum scale).
    """
    group = shape.get("group_size", 128)
    x = torch.randn(shape["tokens"], shape["hidden"], device=device)
    if shape["tokens"] > 2:
        x[1, :group] = 0.0
    return {"x": x.to(dtype), "group_size": group}

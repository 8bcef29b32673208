"""
---
id: mrope_cuda
title: Multimodal (t, h, w) sectioned RoPE on q and k in CUDA C++, one block per token
op_family: rope
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [block-per-token, mrope, sectioned-cos-sin, smem-cos-sin, neox-rope, partial-rotary,
   fp32-accumulate, load-inline]
status: reference
launcher: mrope_cuda
tuning:
  threads: [256, 128, 512]
args:
  q: {shape: [T, CQ], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [T, CK], like: q, aliases: [key]}
  cos: {shape: [3, T, R2], dtypes: [fp32]}
  sin: {shape: [3, T, R2], dtypes: [fp32]}
  head_size: {type: int, default: 128, aliases: [head_dim]}
  mrope_section: {type: ['list[int]', str], default: '16,24,24', aliases: [sections]}
returns:
  - {name: q, shape: [T, CQ], dtype: q}
  - {name: k, shape: [T, CK], dtype: q}
problem:
  shapes: [{tokens: 7, heads: 4, kv_heads: 1, head_size: 64, sections: "8,12,12"}, {tokens: 5, heads: 3, kv_heads: 3, head_size: 80, sections: "16,8,8"}]
  dtypes: [fp32, bf16]
measured: []
---
atrex30 mrope in CUDA C++ (built with load_inline): frequency slot j of the rotary_dim / 2 = R2
slots takes its (cos, sin) from position channel 0 (temporal) for the first mrope_section[0] slots,
channel 1 (height) for the next mrope_section[1] and channel 2 (width) for the rest; every q and k
head is then rotated neox-style over its first rotary_dim dims in fp32, the other dims copied. One
block per token: the block gathers the token's R2 sectioned (cos, sin) pairs from the three
channel tables into shared memory once (2 * R2 scattered 4-byte reads instead of one per head), then
its threads walk every (head, pair) slot of q and k with unit-stride loads and stores, and the
pass-through dims. DRAM traffic is one read and one write per element plus 8 * R2 bytes of table
per token; 6 FLOPs per rotated pair. It wins for vision-language decode and prefill, where q and k
of one token are a few KB and per-head table reloads would double the table traffic. Limits: the
non-interleaved neox layout only; sections must sum to R2 <= 256; outputs are new contiguous
tensors (not in place); tokens beyond 2^31 - 1 blocks are not supported.
"""

from collections.abc import Sequence

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

#define MAX_HALF 256

// rotate `heads` heads of one token row x -> y (both contiguous rows of heads * d)
template <typename T>
__device__ __forceinline__ void rotate_row(const T* __restrict__ x, T* __restrict__ y, int heads,
                                           int d, int half, const float* cs, const float* sn) {
    for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
        const int h = idx / half, i = idx - h * half;
        const float x1 = to_f32(x[h * d + i]), x2 = to_f32(x[h * d + i + half]);
        y[h * d + i] = from_f32<T>(x1 * cs[i] - x2 * sn[i]);
        y[h * d + i + half] = from_f32<T>(x2 * cs[i] + x1 * sn[i]);
    }
    const int rest = d - 2 * half;
    for (int idx = threadIdx.x; idx < heads * rest; idx += blockDim.x) {
        const int h = idx / rest, j = 2 * half + (idx - h * rest);
        y[h * d + j] = x[h * d + j];
    }
}

// one block per token; cos/sin are (3, T, half) fp32, contiguous
template <typename T>
__global__ void mrope_kernel(const T* __restrict__ q, const T* __restrict__ k,
                             const float* __restrict__ cos, const float* __restrict__ sin,
                             T* __restrict__ qo, T* __restrict__ ko, int64_t tokens, int hq, int hk,
                             int d, int half, int sec0, int sec1, int64_t stride_q,
                             int64_t stride_k) {
    __shared__ float cs[MAX_HALF], sn[MAX_HALF];
    const int64_t tok = blockIdx.x;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const int64_t ch = i < sec0 ? 0 : (i < sec0 + sec1 ? 1 : 2);  // t, h, w section
        const int64_t off = (ch * tokens + tok) * half + i;
        cs[i] = cos[off];
        sn[i] = sin[off];
    }
    __syncthreads();
    rotate_row<T>(q + tok * stride_q, qo + tok * (int64_t)hq * d, hq, d, half, cs, sn);
    rotate_row<T>(k + tok * stride_k, ko + tok * (int64_t)hk * d, hk, d, half, cs, sn);
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

void mrope_launch(torch::Tensor q, torch::Tensor k, torch::Tensor cos, torch::Tensor sin,
                  torch::Tensor qo, torch::Tensor ko, int64_t d, int64_t sec0, int64_t sec1,
                  int64_t threads) {
    const c10::cuda::CUDAGuard guard(q.device());
    const int64_t tokens = q.size(0);
    const int hq = (int)(q.size(1) / d), hk = (int)(k.size(1) / d);
    const int half = (int)cos.size(2);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(q.scalar_type(), T, {
        mrope_kernel<T><<<(unsigned)tokens, (unsigned)threads, 0, stream>>>(
            static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
            cos.data_ptr<float>(), sin.data_ptr<float>(), static_cast<T*>(qo.data_ptr()),
            static_cast<T*>(ko.data_ptr()), tokens, hq, hk, (int)d, half, (int)sec0, (int)sec1,
            q.stride(0), k.stride(0));
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void mrope_launch(torch::Tensor q, torch::Tensor k, torch::Tensor cos, torch::Tensor sin, "
    "torch::Tensor qo, torch::Tensor ko, int64_t d, int64_t sec0, int64_t sec1, int64_t threads);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_mrope_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["mrope_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _sections(mrope_section: str | Sequence[int]) -> list[int]:
    """Return the three section sizes from "16,24,24" or a sequence of three ints."""
    parts = mrope_section.split(",") if isinstance(mrope_section, str) else mrope_section
    sections = [int(p) for p in parts]
    if len(sections) != 3 or min(sections) < 0:
        raise ValueError(f"mrope_section must be three sizes >= 0 (t, h, w); got {mrope_section!r}")
    return sections


def mrope_cuda(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_size: int = 128,
    mrope_section: str | Sequence[int] = "16,24,24",
    *,
    threads: int = 256,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, k) rotated by the sectioned multimodal RoPE.

    Args:
        q: (T, HQ * head_size) bf16/fp16/fp32 on a CUDA device, last dimension contiguous.
        k: (T, HK * head_size) of q's dtype.
        cos: (3, T, R2) fp32 cosines per position channel (t, h, w); R2 = rotary_dim / 2.
        sin: (3, T, R2) fp32 sines, like ``cos``.
        head_size: Dims per head (>= 2 * R2).
        mrope_section: Three slot counts summing to R2, as "16,24,24" or a sequence.
        threads: Threads per block, a multiple of 32 in 32..1024.

    Returns:
        (q, k): new contiguous tensors with the input shapes and dtype.

    Raises:
        ValueError: a tensor has the wrong shape, dtype or device, or the sections are invalid.
    """
    if not q.is_cuda or q.dtype not in _DTYPES or q.dim() != 2:
        raise ValueError(f"q must be a (T, HQ * D) CUDA float tensor; got {q.dtype} {q.shape}")
    t = q.shape[0]
    if k.dim() != 2 or k.shape[0] != t or k.dtype != q.dtype or k.device != q.device:
        raise ValueError(
            f"k must be ({t}, HK * D) {q.dtype} on {q.device}; got {k.dtype} {k.shape}"
        )
    if head_size < 1 or q.shape[1] % head_size or k.shape[1] % head_size:
        raise ValueError(
            f"q and k widths {q.shape[1]}, {k.shape[1]} must be multiples of head_size {head_size}"
        )
    sections = _sections(mrope_section)
    half = sum(sections)
    for name, table in (("cos", cos), ("sin", sin)):
        if table.shape != (3, t, half) or table.dtype != torch.float32 or table.device != q.device:
            raise ValueError(
                f"{name} must be (3, {t}, {half}) fp32 on {q.device} (sections {sections}); got "
                f"{tuple(table.shape)} {table.dtype} on {table.device}"
            )
    if not 0 < half <= 256 or 2 * half > head_size:
        raise ValueError(f"rotary_dim / 2 = {half} must be in 1..256 and at most head_size / 2")
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {threads}")
    qo, ko = (
        torch.empty_like(q, memory_format=torch.contiguous_format),
        torch.empty_like(k, memory_format=torch.contiguous_format),
    )
    if t > 0:
        _EXT.mrope_launch(
            q if q.stride(1) == 1 else q.contiguous(),
            k if k.stride(1) == 1 else k.contiguous(),
            cos.contiguous(),
            sin.contiguous(),
            qo,
            ko,
            head_size,
            sections[0],
            sections[1],
            threads,
        )
    return qo, ko


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_size: int = 128,
    mrope_section: str | Sequence[int] = "16,24,24",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, k) by the atrex30 mrope semantics, in fp32 PyTorch."""
    sections = _sections(mrope_section)
    rot = 2 * sum(sections)
    cos_t = torch.cat([c[i] for i, c in enumerate(cos.float().split(sections, -1))], -1)[:, None]
    sin_t = torch.cat([s[i] for i, s in enumerate(sin.float().split(sections, -1))], -1)[:, None]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        h = x.float().view(x.shape[0], -1, head_size)
        x1, x2, rest = h[..., : rot // 2], h[..., rot // 2 : rot], h[..., rot:]
        out = torch.cat([x1 * cos_t - x2 * sin_t, x2 * cos_t + x1 * sin_t, rest], dim=-1)
        return out.view(x.shape[0], -1).to(x.dtype)

    return rotate(q), rotate(k)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return kwargs for ``{"tokens", "heads", "kv_heads", "head_size", "sections"}``.

    q, k ~ N(0, 1); cos/sin of N(0, 0.1^2) angles per channel, as the atrex30 suite draws them.
    ``sections`` is passed on as given: a list (atrex30's form) or a "t,h,w" string (the
    header's type takes both; the own-reference problem uses the string).
    """
    t, hq, hk, d = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_size"]
    given = shape["sections"]
    sections = given if isinstance(given, str) else list(given)
    angles = 0.1 * torch.randn(3, t, sum(_sections(sections)), device=device)
    return {
        "q": torch.randn(t, hq * d, device=device).to(dtype),
        "k": torch.randn(t, hk * d, device=device).to(dtype),
        "cos": angles.cos(),
        "sin": angles.sin(),
        "head_size": d,
        "mrope_section": sections,
    }

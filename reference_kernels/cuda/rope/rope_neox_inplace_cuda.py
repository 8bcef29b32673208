"""
---
id: rope_neox_inplace_cuda
title: In-place neox RoPE on q and k in CUDA C++, one block per token, cos/sin row in shared memory
op_family: rope
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [block-per-token, cos-sin-cache-lookup, shared-memory-staging, in-place, partial-rotary,
   fp32-accumulate, load-inline]
status: reference
launcher: rope_neox_inplace_cuda
tuning:
  threads: [128, 64, 256, 512]
args:
  q: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], flattened: true, aliases: [query]}
  k: {shape: [T, HKV, D], like: q, flattened: true, aliases: [key]}
  cos_sin_cache: {shape: [P, R], dtypes: [float], aliases: [cos_sin, rope_cache]}
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
returns:
  - {name: q, alias: q}
  - {name: k, alias: k}
dims:
  D: [head_dim, head_size]
  H: [num_heads, num_q_heads, n_heads]
  HKV: [num_kv_heads, n_kv_heads]
problem:
  shapes: [{tokens: 5, heads: 3, kv_heads: 3, head_dim: 40}, {tokens: 37, heads: 6, kv_heads: 2, head_dim: 64, rot_dim: 32}]
  dtypes: [fp32, bf16]
  in_place: [q, k]
measured: []
---
Neox-style rotary embedding applied IN PLACE to q (T, H, D) and k (T, Hkv, D) in CUDA C++ (built
with load_inline), as vLLM's rotary_embedding does: the launcher returns the same two tensors. The
cache (max_position, rot_dim) holds [cos(p * f_i) | sin(p * f_i)] for i < rot_dim / 2. One block
per token: its threads first copy the token's cos/sin row (looked up through positions[t]) into
shared memory once, since all H + Hkv heads of the token share it, then stride over the
(H + Hkv) * rot_dim / 2 rotation pairs; a thread owns pair (head, i), reads x[i] and
x[i + rot_dim / 2], and writes x1 * cos - x2 * sin and x2 * cos + x1 * sin back in fp32-then-round,
so every element is read and written by exactly one thread (no race in place). Consecutive threads
take consecutive i, so each warp access is a coalesced run. Lanes d >= rot_dim are never touched
(partial rotary). Bytes: one read and one write of rot_dim elements per head (4 bytes per pair
element in bf16), plus one cache row per token; about 6 FLOPs per pair. q and k may be strided
views (e.g. slices of a fused qkv output) as long as the head dimension is contiguous. It wins for
prefill and decode alike (one block covers all heads of a token). Limits: neox layout only (no
GPT-J interleave); positions are not range-checked on the device; the cache must be fp32 or q's
dtype; scalar 2- or 4-byte accesses.
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

// T: q/k dtype; CT: cache dtype; P: position index type (int32 or int64)
template <typename T, typename CT, typename P>
__global__ void rope_neox_inplace_kernel(
    T* __restrict__ q, T* __restrict__ k,                            // updated in place
    const CT* __restrict__ cache, const P* __restrict__ positions,   // lookup
    int hq, int hk, int rot_half,                                    // sizes
    int64_t sq_t, int64_t sq_h, int64_t sk_t, int64_t sk_h,          // strides (elements)
    int64_t s_cache) {
    extern __shared__ float cs[];  // [cos | sin] of this token, 2 * rot_half floats
    const int64_t t = blockIdx.x;
    const CT* cache_row = cache + (int64_t)positions[t] * s_cache;
    for (int i = threadIdx.x; i < 2 * rot_half; i += blockDim.x) cs[i] = to_f32(cache_row[i]);
    __syncthreads();  // the row is shared by every head below

    const int pairs = (hq + hk) * rot_half;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int head = p / rot_half;
        const int i = p - head * rot_half;
        T* x = head < hq ? q + t * sq_t + (int64_t)head * sq_h
                         : k + t * sk_t + (int64_t)(head - hq) * sk_h;
        const float c = cs[i], s = cs[rot_half + i];
        const float x1 = to_f32(x[i]), x2 = to_f32(x[i + rot_half]);
        x[i] = from_f32<T>(x1 * c - x2 * s);
        x[i + rot_half] = from_f32<T>(x2 * c + x1 * s);
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

template <typename T, typename CT, typename P>
static void launch_typed(torch::Tensor q, torch::Tensor k, torch::Tensor cache,
                         torch::Tensor positions, int64_t threads) {
    const int rot_half = (int)(cache.size(1) / 2);
    const size_t smem = 2 * (size_t)rot_half * sizeof(float);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    rope_neox_inplace_kernel<T, CT, P><<<(unsigned)q.size(0), (unsigned)threads, smem, stream>>>(
        static_cast<T*>(q.data_ptr()), static_cast<T*>(k.data_ptr()),
        static_cast<const CT*>(cache.data_ptr()), static_cast<const P*>(positions.data_ptr()),
        (int)q.size(1), (int)k.size(1), rot_half, q.stride(0), q.stride(1), k.stride(0),
        k.stride(1), cache.stride(0));
}

void rope_neox_inplace_launch(torch::Tensor q, torch::Tensor k, torch::Tensor cache,
                              torch::Tensor positions, int64_t threads) {
    const c10::cuda::CUDAGuard guard(q.device());
    const bool cache_f32 = cache.scalar_type() == at::ScalarType::Float;
    const bool pos64 = positions.scalar_type() == at::ScalarType::Long;
    AKA_DISPATCH_FLOAT(q.scalar_type(), T, {
        if (cache_f32 && pos64) launch_typed<T, float, int64_t>(q, k, cache, positions, threads);
        else if (cache_f32) launch_typed<T, float, int32_t>(q, k, cache, positions, threads);
        else if (pos64) launch_typed<T, T, int64_t>(q, k, cache, positions, threads);
        else launch_typed<T, T, int32_t>(q, k, cache, positions, threads);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void rope_neox_inplace_launch(torch::Tensor q, torch::Tensor k, torch::Tensor cache, "
    "torch::Tensor positions, int64_t threads);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_rope_neox_inplace_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["rope_neox_inplace_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import (nvcc about a minute the first time, then load_inline's on-disk
# cache): a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _check(q: torch.Tensor, k: torch.Tensor, cache: torch.Tensor, positions: torch.Tensor) -> None:
    """Raise ValueError naming the first argument that breaks the launcher's contract."""
    if not q.is_cuda or q.dtype not in _DTYPES or q.dim() != 3 or q.stride(-1) != 1:
        raise ValueError(
            f"q must be a (T, H, D) CUDA fp32/fp16/bf16 tensor with a contiguous last dimension; "
            f"got {q.dtype} {tuple(q.shape)} strides {q.stride()} on {q.device}"
        )
    if (
        k.dim() != 3
        or k.shape[0] != q.shape[0]
        or k.shape[2] != q.shape[2]
        or k.dtype != q.dtype
        or k.device != q.device
        or k.stride(-1) != 1
    ):
        raise ValueError(
            f"k must be (T, Hkv, D) = ({q.shape[0]}, *, {q.shape[2]}) {q.dtype} on {q.device} "
            f"with a contiguous last dimension; got {k.dtype} {tuple(k.shape)} on {k.device}"
        )
    rot = cache.shape[-1] if cache.dim() == 2 else 0
    if (
        rot < 2
        or rot % 2
        or rot > q.shape[2]
        or cache.dtype not in (torch.float32, q.dtype)
        or cache.device != q.device
    ):
        raise ValueError(
            f"cos_sin_cache must be (max_position, rot_dim) with an even rot_dim <= D = "
            f"{q.shape[2]}, fp32 or {q.dtype}, on {q.device}; got {cache.dtype} "
            f"{tuple(cache.shape)} on {cache.device}"
        )
    if (
        positions.shape != (q.shape[0],)
        or positions.dtype not in (torch.int32, torch.int64)
        or positions.device != q.device
    ):
        raise ValueError(
            f"positions must be ({q.shape[0]},) int32/int64 on {q.device}; got "
            f"{positions.dtype} {tuple(positions.shape)} on {positions.device}"
        )


def rope_neox_inplace_cuda(
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    *,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k in place (neox layout) by the cache rows of their positions.

    Args:
        q: (T, H, D) bf16/fp16/fp32 on a CUDA device, head dimension contiguous; updated.
        k: (T, Hkv, D) like ``q``; updated.
        cos_sin_cache: (max_position, rot_dim) fp32 or q's dtype, rows [cos | sin], rot_dim even
            and <= D; dimensions from rot_dim on pass through.
        positions: (T,) int32/int64, each in [0, max_position) (not checked on the device).
        threads: Threads per token block, a multiple of 32 in 32..1024; None = 128.

    Returns:
        q and k, the same tensors, rotated.

    Raises:
        ValueError: An argument has the wrong shape, dtype, device or layout, or threads is out
            of range.
    """
    _check(q, k, cos_sin_cache, positions)
    block = threads or 128
    if block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {block}")
    if q.shape[0] and q.shape[1] + k.shape[1]:
        cache = cos_sin_cache if cos_sin_cache.stride(-1) == 1 else cos_sin_cache.contiguous()
        _EXT.rope_neox_inplace_launch(q, k, cache, positions.contiguous(), block)
    return q, k


def reference(
    q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k in place, as the launcher does (fp32 math, cast back); return them."""
    rot = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache[positions.long()].float()[:, None, :].chunk(2, dim=-1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        x1, x2 = xf[..., : rot // 2], xf[..., rot // 2 : rot]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, xf[..., rot:]], dim=-1)
        return out.to(x.dtype)

    q.copy_(rotate(q))
    k.copy_(rotate(k))
    return q, k


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return kwargs for ``shape = {"tokens", "heads", "kv_heads", "head_dim", "rot_dim"}``.

    The cache is built for base 10000 over 512 positions in fp32; positions are random int64.
    """
    t, h, hkv, d = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    rot, max_pos = shape.get("rot_dim", d), 512
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, device=device).float() / rot))
    angles = torch.arange(max_pos, device=device).float()[:, None] * inv_freq
    return {
        "q": torch.randn(t, h, d, device=device).to(dtype),
        "k": torch.randn(t, hkv, d, device=device).to(dtype),
        "cos_sin_cache": torch.cat([angles.cos(), angles.sin()], dim=-1),
        "positions": torch.randint(0, max_pos, (t,), device=device),
    }

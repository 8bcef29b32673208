"""
---
id: fused_qkv_rope_cuda
title: Split packed QKV and apply neox RoPE in CUDA C++, block per token, cos/sin in shared memory
op_family: rope
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [block-per-token, fused-split, neox-rope, partial-rotary, smem-cos-sin, fused-bias,
   fp32-accumulate, load-inline]
status: reference
launcher: fused_qkv_rope_cuda
tuning:
  threads: [256, 128, 512]
args:
  qkv: {shape: [T, C], dtypes: [bf16, fp16, fp32], aliases: [qkv_proj, hidden_states]}
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  qkv_bias: {shape: [C], like: qkv, optional: true, aliases: [bias]}
  num_heads: {type: int, default: 32, aliases: [n_heads, num_attention_heads, num_q_heads]}
  num_kv_heads: {type: int, default: 4, aliases: [n_kv_heads, num_key_value_heads]}
  head_dim: {type: int, default: 128, aliases: [head_size]}
  rope_dim: {type: int, default: 128, aliases: [rotary_dim]}
returns:
  - {name: q, shape: [T, num_heads, head_dim], dtype: qkv}
  - {name: k, shape: [T, num_kv_heads, head_dim], dtype: qkv}
  - {name: v, shape: [T, num_kv_heads, head_dim], dtype: qkv}
problem:
  shapes: [{tokens: 5, heads: 6, kv_heads: 2, head_dim: 64, bias: true}, {tokens: 3, heads: 3, kv_heads: 1, head_dim: 128, rope_dim: 96}]
  dtypes: [fp32, bf16]
measured: []
---
atrex30 fused_qkv_rope in CUDA C++ (built with load_inline): a packed row [q heads | k heads |
v heads] of one token is split into contiguous q, k, v, with the first rope_dim dims of every q and
k head rotated neox-style (halves [x1 | x2] -> [x1 c - x2 s | x2 c + x1 s]) at angle
position * base^(-2i / rope_dim), and the optional bias added first. One block per token: the
block computes the token's rope_dim / 2 (cos, sin) pairs once into shared memory (sincosf on
position * inv_freq, each inv_freq computed in the kernel with the same fp32 operations as the
reference's table, so the angles round alike; int32 or int64 positions are read as they come),
then its threads walk all (head, pair) slots of q and k, the
pass-through dims and v with unit-stride loads and stores. DRAM traffic is one read and one write
per element (4 bytes per bf16 element), about 6 FLOPs per rotated pair, one sincosf per pair per
token instead of per head. It wins for decode and short prefills where the row is a few KB and
one launch covers everything; a head-tiled grid scales better for very many heads per token.
Limits: neox style only; rope_dim even, at most 512 and head_dim; positions below 2^24 (exact in
fp32); T is at most 2^31 - 1 blocks.
"""

import torch
from torch.utils.cpp_extension import load_inline

ROPE_BASE = 10000.0

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

// one block per token; q, k, v outputs are contiguous (T, heads, D); positions int32 or int64
template <typename T, typename P>
__global__ void fused_qkv_rope_kernel(
    const T* __restrict__ qkv, const T* __restrict__ bias, const P* __restrict__ positions,
    float base, T* __restrict__ q, T* __restrict__ k, T* __restrict__ v,
    int heads, int kv_heads, int d, int rope_dim, int64_t stride_t) {
    __shared__ float cs[MAX_HALF], sn[MAX_HALF];
    const int64_t tok = blockIdx.x;
    const int half = rope_dim >> 1;
    const float pos = (float)positions[tok];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        // inv_freq in fp32 as the reference's torch ops round it on the GPU: a tensor divided by a
        // Python scalar is multiplied by the scalar's fp32 reciprocal (ATen's div_true), then
        // base ** exponent (powf) and its reciprocal
        const float exponent = (float)(2 * i) * (1.0f / (float)rope_dim);
        const float inv_freq = 1.0f / powf(base, exponent);
        sincosf(pos * inv_freq, &sn[i], &cs[i]);
    }
    __syncthreads();
    const T* row = qkv + tok * stride_t;
    auto ld = [&](int col) {
        return to_f32(row[col]) + (bias != nullptr ? to_f32(bias[col]) : 0.f);
    };
    auto out_head = [&](int h) {  // destination of rotated head h (q heads first, then k heads)
        return h < heads ? q + (tok * heads + h) * d : k + (tok * kv_heads + (h - heads)) * d;
    };
    const int rot_heads = heads + kv_heads;
    for (int idx = threadIdx.x; idx < rot_heads * half; idx += blockDim.x) {
        const int h = idx / half, i = idx - h * half;
        const float x1 = ld(h * d + i), x2 = ld(h * d + i + half);
        T* o = out_head(h);
        o[i] = from_f32<T>(x1 * cs[i] - x2 * sn[i]);
        o[i + half] = from_f32<T>(x2 * cs[i] + x1 * sn[i]);
    }
    const int rest = d - rope_dim;  // pass-through dims of q and k heads
    for (int idx = threadIdx.x; idx < rot_heads * rest; idx += blockDim.x) {
        const int h = idx / rest, j = rope_dim + (idx - h * rest);
        out_head(h)[j] = from_f32<T>(ld(h * d + j));
    }
    T* vo = v + tok * kv_heads * d;
    const int v_off = rot_heads * d;
    for (int idx = threadIdx.x; idx < kv_heads * d; idx += blockDim.x) {
        vo[idx] = from_f32<T>(ld(v_off + idx));
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

#define AKA_QKV_ROPE_LAUNCH(P)                                                           \
    fused_qkv_rope_kernel<T, P><<<(unsigned)qkv.size(0), (unsigned)threads, 0, stream>>>(   \
        static_cast<const T*>(qkv.data_ptr()), bp, positions.data_ptr<P>(), (float)base,     \
        static_cast<T*>(q.data_ptr()), static_cast<T*>(k.data_ptr()),                        \
        static_cast<T*>(v.data_ptr()), heads, kv_heads, d, (int)rope_dim, qkv.stride(0))

void fused_qkv_rope_launch(torch::Tensor qkv, c10::optional<torch::Tensor> bias,
                           torch::Tensor positions, double base, torch::Tensor q,
                           torch::Tensor k, torch::Tensor v, int64_t rope_dim, int64_t threads) {
    const c10::cuda::CUDAGuard guard(qkv.device());
    const int heads = (int)q.size(1), kv_heads = (int)k.size(1), d = (int)q.size(2);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const bool wide = positions.scalar_type() == at::ScalarType::Long;
    TORCH_CHECK(wide || positions.scalar_type() == at::ScalarType::Int, "positions: int32/int64");
    AKA_DISPATCH_FLOAT(qkv.scalar_type(), T, {
        const T* bp = bias.has_value() ? static_cast<const T*>(bias->data_ptr()) : nullptr;
        if (wide) { AKA_QKV_ROPE_LAUNCH(int64_t); } else { AKA_QKV_ROPE_LAUNCH(int32_t); }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void fused_qkv_rope_launch(torch::Tensor qkv, c10::optional<torch::Tensor> bias, "
    "torch::Tensor positions, double base, torch::Tensor q, torch::Tensor k, "
    "torch::Tensor v, int64_t rope_dim, int64_t threads);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_fused_qkv_rope_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["fused_qkv_rope_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _inv_freq(rope_dim: int, device: torch.device) -> torch.Tensor:
    """Return base^(-2i / rope_dim) in fp32, computed exactly as ``reference`` does."""
    exponent = torch.arange(0, rope_dim, 2, device=device, dtype=torch.float32)
    return 1.0 / (ROPE_BASE ** (exponent / rope_dim))


def fused_qkv_rope_cuda(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    qkv_bias: torch.Tensor | None = None,
    num_heads: int = 32,
    num_kv_heads: int = 4,
    head_dim: int = 128,
    rope_dim: int = 128,
    *,
    threads: int = 256,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, k, v) split from ``qkv`` with neox RoPE applied to q and k.

    Args:
        qkv: (T, (num_heads + 2 * num_kv_heads) * head_dim) bf16/fp16/fp32 on a CUDA device.
        positions: (T,) int32/int64 token positions (below 2^24).
        qkv_bias: optional (C,) bias of qkv's dtype, added before the rotation.
        num_heads: Query heads.
        num_kv_heads: Key/value heads.
        head_dim: Dims per head.
        rope_dim: Rotated leading dims per head: even, at most head_dim and 512.
        threads: Threads per block, a multiple of 32 in 32..1024.

    Returns:
        (q, k, v): (T, num_heads, head_dim), (T, num_kv_heads, head_dim) twice; qkv's dtype.

    Raises:
        ValueError: a tensor has the wrong shape, dtype or device, or a size is invalid.
    """
    if not qkv.is_cuda or qkv.dtype not in _DTYPES or qkv.dim() != 2:
        raise ValueError(f"qkv must be a (T, C) CUDA float tensor; got {qkv.dtype} {qkv.shape}")
    t, width = qkv.shape
    if (
        min(num_heads, num_kv_heads, head_dim) < 1
        or width != (num_heads + 2 * num_kv_heads) * head_dim
    ):
        raise ValueError(
            f"qkv width {width} must be (num_heads {num_heads} + 2 * num_kv_heads "
            f"{num_kv_heads}) * head_dim {head_dim}"
        )
    if rope_dim % 2 or not 0 < rope_dim <= min(head_dim, 512):
        raise ValueError(f"rope_dim must be even and in 2..min(head_dim, 512); got {rope_dim}")
    if positions.shape != (t,) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"positions must be ({t},) int32/int64; got {positions.dtype} {positions.shape}"
        )
    if positions.device != qkv.device:
        raise ValueError(f"positions must be on {qkv.device}; got {positions.device}")
    if qkv_bias is not None and (
        qkv_bias.shape != (width,) or qkv_bias.dtype != qkv.dtype or qkv_bias.device != qkv.device
    ):
        raise ValueError(f"qkv_bias must be ({width},) {qkv.dtype} on {qkv.device}")
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {threads}")
    new = {"dtype": qkv.dtype, "device": qkv.device}
    q = torch.empty(t, num_heads, head_dim, **new)
    k = torch.empty(t, num_kv_heads, head_dim, **new)
    v = torch.empty(t, num_kv_heads, head_dim, **new)
    if t > 0:
        _EXT.fused_qkv_rope_launch(
            qkv if qkv.stride(1) == 1 else qkv.contiguous(),
            None if qkv_bias is None else qkv_bias.contiguous(),
            positions.contiguous(),
            ROPE_BASE,
            q,
            k,
            v,
            rope_dim,
            threads,
        )
    return q, k, v


def reference(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    qkv_bias: torch.Tensor | None = None,
    num_heads: int = 32,
    num_kv_heads: int = 4,
    head_dim: int = 128,
    rope_dim: int = 128,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, k, v) by the atrex30 fused_qkv_rope semantics, in fp32 PyTorch."""
    x = qkv.float() if qkv_bias is None else qkv.float() + qkv_bias.float()
    t, d = qkv.shape[0], head_dim
    q_end, k_end = num_heads * d, (num_heads + num_kv_heads) * d
    angles = positions.float().unsqueeze(-1) * _inv_freq(rope_dim, qkv.device)
    cos, sin = angles.cos().unsqueeze(1), angles.sin().unsqueeze(1)
    half = rope_dim // 2

    def rotate(h: torch.Tensor) -> torch.Tensor:
        x1, x2, rest = h[..., :half], h[..., half:rope_dim], h[..., rope_dim:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1).to(qkv.dtype)

    return (
        rotate(x[:, :q_end].view(t, num_heads, d)),
        rotate(x[:, q_end:k_end].view(t, num_kv_heads, d)),
        x[:, k_end:].reshape(t, num_kv_heads, d).to(qkv.dtype),
    )


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return kwargs for ``{"tokens", "heads", "kv_heads", "head_dim"}`` (+ ``"rope_dim"``).

    N(0, 1) qkv, consecutive positions from a random start in [0, 1024), and a bias when
    ``shape["bias"]`` is true.
    """
    t, h, kv, d = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    width = (h + 2 * kv) * d
    start = int(torch.randint(0, 1024, ()))
    bias = torch.randn(width, device=device).to(dtype) if shape.get("bias") else None
    return {
        "qkv": torch.randn(t, width, device=device).to(dtype),
        "positions": torch.arange(start, start + t, dtype=torch.int32, device=device),
        "qkv_bias": bias,
        "num_heads": h,
        "num_kv_heads": kv,
        "head_dim": d,
        "rope_dim": shape.get("rope_dim", d),
    }

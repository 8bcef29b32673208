"""
---
id: fused_qk_rmsnorm_warp_per_head_cuda
title: Per-head q/k RMSNorm of a packed QKV row in CUDA C++, one warp per (token, head)
op_family: norm
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [warp-per-head, warp-shuffle-reduction, fused-copy, double-rounding, load-inline]
status: reference
launcher: fused_qk_rmsnorm_warp_per_head_cuda
tuning:
  warps_per_block: [4, 2, 8, 16]
args:
  hidden_states: {shape: [T, (HQ+2*HKV)*D], dtypes: [bf16, fp16, fp32], aliases: [qkv]}
  q_weight: {shape: [D], like: hidden_states}
  k_weight: {shape: [D], like: hidden_states}
  head_num: {type: int, aliases: [num_heads, num_q_heads]}
  kv_head_num: {type: int, aliases: [num_kv_heads]}
returns:
  - {name: out, shape: [T, (HQ+2*HKV)*D], dtype: hidden_states}
dims:
  HQ: [head_num, num_heads, num_q_heads]
  HKV: [kv_head_num, num_kv_heads]
problem:
  shapes: [{tokens: 3, heads: 2, kv_heads: 2, head_dim: 17}, {tokens: 7, heads: 5, kv_heads: 1, head_dim: 96}]
  dtypes: [fp32, bf16]
measured: []
---
The q/k normalisation of QK-norm attention layers (atrex30 fused_qk_rmsnorm) in CUDA C++ (built
with load_inline): a packed row [q heads | k heads | v heads] of head size D is rewritten with
every q and k head RMS-normalised on its own and the v heads copied, in one launch. One warp per
(token, head) over all T * (HQ + 2 HKV) heads: a q or k warp sums the squares of its D values
lane-strided, reduces them with five __shfl_xor_sync steps, then writes
round(round(x * inv_rms) * w), the normalised value rounded to the input dtype before the weight
multiply, as the upstream operator does (that product of two 16-bit values is exact in fp32, so
one more rounding gives the 16-bit product); a v warp only copies. The head type is uniform per
warp, so there is no divergence. Traffic: one read and one write per element (4 bytes in
bf16/fp16) plus the two weights from L2; about 4 FLOPs per q/k element. It wins at decode and
small prefill where a head of 64-256 values fits one warp's two or four loads per lane.
Limits: scalar loads; the v copy costs a full read and write (an in-place variant would skip
it); heads larger than a few thousand values leave few loads in flight per warp.
"""

import torch
from torch.utils.cpp_extension import load_inline

EPS = 1e-6

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

template <typename T>
__global__ void fused_qk_rmsnorm_warp_per_head_kernel(
    const T* __restrict__ x, const T* __restrict__ qw, const T* __restrict__ kw,
    T* __restrict__ out, int64_t tokens, int heads_q, int heads_kv, int d,
    int64_t stride_x, int64_t stride_o, float eps) {
    const int lane = threadIdx.x & 31;
    const int heads = heads_q + 2 * heads_kv;
    const int64_t job = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (job >= tokens * heads) return;  // whole warps leave together
    const int64_t token = job / heads;
    const int head = (int)(job - token * heads);
    const T* xh = x + token * stride_x + (int64_t)head * d;
    T* oh = out + token * stride_o + (int64_t)head * d;

    if (head >= heads_q + heads_kv) {  // v head: copy unchanged
        for (int i = lane; i < d; i += 32) oh[i] = xh[i];
        return;
    }
    const T* w = head < heads_q ? qw : kw;
    float ss = 0.f;
    for (int i = lane; i < d; i += 32) {
        const float v = to_f32(xh[i]);
        ss += v * v;
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float inv_rms = rsqrtf(ss / (float)d + eps);
    for (int i = lane; i < d; i += 32) {
        const float normed = to_f32(from_f32<T>(to_f32(xh[i]) * inv_rms));  // cast, as upstream
        oh[i] = from_f32<T>(normed * to_f32(w[i]));
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

void fused_qk_rmsnorm_warp_per_head_launch(torch::Tensor x, torch::Tensor qw, torch::Tensor kw,
                                           torch::Tensor out, int64_t heads_q, int64_t heads_kv,
                                           double eps, int64_t warps_per_block) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t tokens = x.size(0);
    const int64_t jobs = tokens * (heads_q + 2 * heads_kv);
    const dim3 block((unsigned)(32 * warps_per_block));
    const dim3 grid((unsigned)((jobs + warps_per_block - 1) / warps_per_block));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        fused_qk_rmsnorm_warp_per_head_kernel<T><<<grid, block, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<const T*>(qw.data_ptr()),
            static_cast<const T*>(kw.data_ptr()), static_cast<T*>(out.data_ptr()), tokens,
            (int)heads_q, (int)heads_kv, (int)qw.size(0), x.stride(0), out.stride(0),
            (float)eps);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void fused_qk_rmsnorm_warp_per_head_launch(torch::Tensor x, torch::Tensor qw, "
    "torch::Tensor kw, torch::Tensor out, int64_t heads_q, int64_t heads_kv, double eps, "
    "int64_t warps_per_block);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_fused_qk_rmsnorm_warp_per_head_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["fused_qk_rmsnorm_warp_per_head_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def fused_qk_rmsnorm_warp_per_head_cuda(
    hidden_states: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    head_num: int,
    kv_head_num: int,
    *,
    warps_per_block: int | None = None,
) -> torch.Tensor:
    """Return the packed QKV rows with q and k heads RMS-normalised (eps 1e-6), v copied.

    Args:
        hidden_states: (T, (head_num + 2 * kv_head_num) * D) bf16/fp16/fp32 on a CUDA device.
        q_weight: (D,) same dtype and device, the q heads' weight.
        k_weight: (D,) same dtype and device, the k heads' weight.
        head_num: Number of q heads (>= 1).
        kv_head_num: Number of k heads, and of v heads (>= 1).
        warps_per_block: (token, head) pairs per block, one warp each, 1 to 32; None picks 4.

    Returns:
        out: hidden_states' shape and dtype, contiguous.

    Raises:
        ValueError: a tensor has the wrong device, dtype or shape, a head count is below 1,
            or warps_per_block is out of range.
    """
    x = hidden_states
    if not x.is_cuda or x.dtype not in _DTYPES or x.dim() != 2:
        raise ValueError(
            f"hidden_states must be a 2-D CUDA fp32/fp16/bf16 tensor; got {x.dtype} "
            f"{tuple(x.shape)} on {x.device}"
        )
    if head_num < 1 or kv_head_num < 1:
        raise ValueError(f"head_num and kv_head_num must be >= 1; got {head_num}, {kv_head_num}")
    d = q_weight.shape[0] if q_weight.dim() == 1 else 0
    if d < 1 or x.shape[1] != (head_num + 2 * kv_head_num) * d:
        raise ValueError(
            f"hidden_states width must be (head_num + 2 * kv_head_num) * D = "
            f"({head_num} + 2 * {kv_head_num}) * {d}, D from q_weight {tuple(q_weight.shape)}; "
            f"got {tuple(x.shape)}"
        )
    for name, t in (("q_weight", q_weight), ("k_weight", k_weight)):
        if t.shape != (d,) or t.dtype != x.dtype or t.device != x.device:
            raise ValueError(
                f"{name} must be ({d},) {x.dtype} on {x.device}; got {tuple(t.shape)} "
                f"{t.dtype} on {t.device}"
            )
    wpb = warps_per_block or 4
    if not 1 <= wpb <= 32:
        raise ValueError(f"warps_per_block must be in 1..32 (1024 threads); got {wpb}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _EXT.fused_qk_rmsnorm_warp_per_head_launch(
            x, q_weight.contiguous(), k_weight.contiguous(), out, head_num, kv_head_num, EPS, wpb
        )
    return out


def reference(
    hidden_states: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    head_num: int,
    kv_head_num: int,
) -> torch.Tensor:
    """Return atrex30's fused_qk_rmsnorm: fp32 norm, cast, weight in the input dtype."""
    tokens, d = hidden_states.shape[0], q_weight.shape[0]
    q_end, k_end = head_num * d, (head_num + kv_head_num) * d

    def norm(part: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        pf = part.float()
        normed = pf * torch.rsqrt(pf.pow(2).mean(dim=-1, keepdim=True) + EPS)
        return (normed.to(part.dtype) * weight).flatten(1)

    q = norm(hidden_states[:, :q_end].reshape(tokens, head_num, d), q_weight)
    k = norm(hidden_states[:, q_end:k_end].reshape(tokens, kv_head_num, d), k_weight)
    return torch.cat([q, k, hidden_states[:, k_end:]], dim=1)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return the launcher's kwargs for ``shape = {"tokens", "heads", "kv_heads", "head_dim"}``:
    everything N(0, 1), as atrex30 draws it."""
    t, hq, hkv, d = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    return {
        "hidden_states": torch.randn(t, (hq + 2 * hkv) * d, device=device).to(dtype),
        "q_weight": torch.randn(d, device=device).to(dtype),
        "k_weight": torch.randn(d, device=device).to(dtype),
        "head_num": hq,
        "kv_head_num": hkv,
    }

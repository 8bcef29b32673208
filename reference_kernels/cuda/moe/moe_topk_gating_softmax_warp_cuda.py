"""
---
id: moe_topk_gating_softmax_warp_cuda
title: MoE router softmax and top-k in CUDA C++, one warp per token, repeated warp argmax
op_family: moe
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, bf16, fp16, int32]
bound: latency
techniques: [warp-per-row, warp-shuffle-reduction, warp-argmax, shared-memory-staging, load-inline]
status: reference
launcher: moe_topk_gating_softmax_warp_cuda
tuning:
  warps_per_block: [4, 2, 8]
args:
  gating_output: {shape: [T, E], dtypes: [fp32, bf16, fp16], aliases: [router_logits, logits]}
  top_k: {type: int, aliases: [topk, k]}
returns:
  - {name: topk_weights, shape: [T, top_k], dtype: fp32}
  - {name: topk_ids, shape: [T, top_k], dtype: int32}
problem:
  shapes: [{tokens: 7, experts: 24, top_k: 5}, {tokens: 3, experts: 128, top_k: 8}]
  dtypes: [fp32, bf16]
measured: []
---
MoE routing (atrex30 moe_topk_gating_softmax) in CUDA C++ (built with load_inline): softmax of
each token's router logits over E experts in fp32, then the k largest probabilities in
descending order with their expert ids (not renormalised). One warp per token. The warp copies
the row into its own E-float slice of shared memory while taking the max, then replaces each
value by exp(x - max) while summing (two shuffle reductions). Top-k is k rounds of a warp argmax:
each lane scans its strided experts for its best (value, lowest index), five __shfl_xor_sync
steps pick the warp's winner (ties go to the lower expert id), and lane 0 writes
weight = p / sum and the id and marks the slot -1 (probabilities are never negative), with a
__syncwarp between rounds. Work is O(E * (2 + k) / 32) steps per lane, with no sort and no block
barrier; bytes are E * 4 read and k * 8 written per token, so it is latency-bound. It wins for
E up to a few hundred (E = 128 or 256, k = 8) where a sort or a block per token is overkill.
Limits: E <= 1024 (shared memory is 4 * E bytes per warp); k rounds each rescan all E values, so
large k is slow; NaN logits are not handled.
"""

import torch
from torch.utils.cpp_extension import load_inline

MAX_EXPERTS = 1024

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// dynamic shared memory: (blockDim.x / 32) * e floats, one slice per warp
template <typename T>
__global__ void moe_topk_gating_softmax_warp_kernel(
    const T* __restrict__ logits, float* __restrict__ weights, int* __restrict__ ids,
    int64_t tokens, int e, int k, int64_t stride_l) {
    extern __shared__ float probs_all[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t token = (int64_t)blockIdx.x * (blockDim.x >> 5) + warp;
    if (token >= tokens) return;  // whole warps leave together
    float* p = probs_all + (int64_t)warp * e;
    const T* lr = logits + token * stride_l;

    float m = -INFINITY;
    for (int i = lane; i < e; i += 32) {
        const float v = to_f32(lr[i]);
        p[i] = v;
        m = fmaxf(m, v);
    }
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    float sum = 0.f;
    for (int i = lane; i < e; i += 32) {  // each lane rewrites only the slots it wrote
        const float ex = expf(p[i] - m);
        p[i] = ex;
        sum += ex;
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    __syncwarp();

    for (int r = 0; r < k; ++r) {
        float best = -2.f;
        int best_i = e;
        for (int i = lane; i < e; i += 32) {
            const float v = p[i];
            if (v > best) { best = v; best_i = i; }  // ascending scan: ties keep the lower id
        }
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, best, off);
            const int oi = __shfl_xor_sync(0xffffffffu, best_i, off);
            if (ov > best || (ov == best && oi < best_i)) { best = ov; best_i = oi; }
        }
        if (lane == 0) {
            weights[token * k + r] = best / sum;
            ids[token * k + r] = best_i;
            p[best_i] = -1.f;  // taken
        }
        __syncwarp();
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

void moe_topk_gating_softmax_warp_launch(torch::Tensor logits, torch::Tensor weights,
                                         torch::Tensor ids, int64_t warps_per_block) {
    const c10::cuda::CUDAGuard guard(logits.device());
    const int64_t tokens = logits.size(0);
    const int e = (int)logits.size(1);
    const int k = (int)weights.size(1);
    const dim3 block((unsigned)(32 * warps_per_block));
    const dim3 grid((unsigned)((tokens + warps_per_block - 1) / warps_per_block));
    const size_t smem = sizeof(float) * (size_t)e * (size_t)warps_per_block;
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(logits.scalar_type(), T, {
        moe_topk_gating_softmax_warp_kernel<T><<<grid, block, smem, stream>>>(
            static_cast<const T*>(logits.data_ptr()), static_cast<float*>(weights.data_ptr()),
            static_cast<int*>(ids.data_ptr()), tokens, e, k, logits.stride(0));
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void moe_topk_gating_softmax_warp_launch(torch::Tensor logits, torch::Tensor weights, "
    "torch::Tensor ids, int64_t warps_per_block);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_moe_topk_gating_softmax_warp_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["moe_topk_gating_softmax_warp_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def moe_topk_gating_softmax_warp_cuda(
    gating_output: torch.Tensor, top_k: int, *, warps_per_block: int = 4
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the top-k softmax probabilities of each token's router logits and their ids.

    Args:
        gating_output: (T, E) fp32/bf16/fp16 logits on a CUDA device, E <= 1024.
        top_k: Experts kept per token, 1 to E.
        warps_per_block: Tokens per block (one warp each), 1 to 8 (4 * E bytes of shared
            memory per warp, at most 32 KiB per block).

    Returns:
        topk_weights: (T, top_k) fp32, descending (not renormalised over the k).
        topk_ids: (T, top_k) int32 expert ids; equal probabilities go to the lower id.

    Raises:
        ValueError: the logits are not a 2-D CUDA float tensor with 1..1024 experts, or top_k
            or warps_per_block is out of range.
    """
    g = gating_output
    if not g.is_cuda or g.dtype not in _DTYPES or g.dim() != 2:
        raise ValueError(
            f"gating_output must be a 2-D CUDA fp32/fp16/bf16 tensor; got {g.dtype} "
            f"{tuple(g.shape)} on {g.device}"
        )
    tokens, e = g.shape
    if not 1 <= e <= MAX_EXPERTS:
        raise ValueError(f"the number of experts must be in 1..{MAX_EXPERTS}; got {e}")
    if not 1 <= top_k <= e:
        raise ValueError(f"top_k must be in 1..{e} (the number of experts); got {top_k}")
    if not 1 <= warps_per_block <= 8:
        raise ValueError(f"warps_per_block must be in 1..8; got {warps_per_block}")
    g = g if g.stride(-1) == 1 else g.contiguous()
    weights = torch.empty((tokens, top_k), dtype=torch.float32, device=g.device)
    ids = torch.empty((tokens, top_k), dtype=torch.int32, device=g.device)
    if tokens:
        _EXT.moe_topk_gating_softmax_warp_launch(g, weights, ids, warps_per_block)
    return weights, ids


def reference(gating_output: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (topk_weights, topk_ids) from an fp32 softmax and a sorted torch.topk."""
    probs = torch.softmax(gating_output.float(), dim=-1)
    weights, ids = probs.topk(top_k, dim=-1, largest=True, sorted=True)
    return weights, ids.to(torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"gating_output", "top_k"}`` for ``shape = {"tokens", "experts", "top_k"}``.

    fp32 logits are N(0, 1). 16-bit logits would tie often, so each row is instead a random
    permutation of the grid (i - E/2) / 32, exact in bf16/fp16 for E <= 256: no ties, a
    well-defined order.
    """
    t, e = shape["tokens"], shape["experts"]
    if dtype == torch.float32:
        logits = torch.randn(t, e, device=device)
    else:
        ranks = torch.argsort(torch.rand(t, e, device=device), dim=-1).float()
        logits = ((ranks - e // 2) / 32.0).to(dtype)
    return {"gating_output": logits, "top_k": shape["top_k"]}

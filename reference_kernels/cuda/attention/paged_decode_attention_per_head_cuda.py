"""
---
id: paged_decode_attention_per_head_cuda
title: Paged KV decode attention in CUDA C++, block per (sequence, head), warp-per-token softmax
op_family: attention
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [paged-kv-gather, online-softmax, warp-per-token, warp-shuffle-reduction, smem-warp-merge,
   decode-gemv, fp32-accumulate, load-inline]
status: reference
launcher: paged_decode_attention_per_head_cuda
tuning:
  warps: [4, 2, 8]
args:
  query: {shape: [S, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [q]}
  k_cache: {shape: [NB, HKV, PAGE, D], like: query, aliases: [key_cache]}
  v_cache: {shape: [NB, HKV, PAGE, D], like: query, aliases: [value_cache]}
  block_tables: {shape: [S, '?'], dtypes: [int32], aliases: [block_table]}
  seq_lens: {shape: [S], dtypes: [int32], aliases: [context_lens, seqused_k]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [S, HQ, D], dtype: query}
problem:
  shapes: [{seq_lens: [37, 300, 5], num_heads_q: 8, num_heads_kv: 2, head_dim: 64}, {seq_lens: [17, 40], num_heads_q: 3, num_heads_kv: 3, head_dim: 80, page_size: 8}]
  dtypes: [fp32, bf16]
measured: []
---
Decode attention (one query token per sequence) over a paged KV cache in CUDA C++ (built with
load_inline). Block (head h, sequence s) reads its query into registers (lane l holds dims l,
l + 32, ... of D <= 256) and its WARPS warps split the sequence's tokens round-robin: warp w takes
tokens w, w + WARPS, ..., finds each token's physical page through block_tables (page = table[s,
t / PAGE], slot t % PAGE) and the KV head h / (HQ / HKV), computes q.k with a coalesced row load
and five __shfl_xor_sync steps, and folds the token into its own online-softmax state (running
max m, sum l and a D-wide accumulator of p * v, rescaled by exp(m_old - m_new) when the max
grows). At the end the warps write (m, l, acc) to shared memory and the block merges them into the
normalised output. Per token: 2 * D elements of K and V read (4D bytes in bf16) and about 4D
FLOPs, so decode is bandwidth bound. It wins for long contexts with few heads per KV head, where
one block per head already fills the GPU; with GQA every query head re-reads its KV head (an L2
hit at best), which a grouped-heads kernel avoids, and short contexts with few sequences leave SMs
idle (split-KV helps there). Limits: D <= 256; the page size and table are int32; sequences of
length 0 give a zero output; HQ must be a multiple of HKV.
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

#define MAX_D 256
#define PER_LANE (MAX_D / 32)
#define MAX_WARPS 16

// grid (HQ, S); block WARPS * 32 threads; k/v cache (NB, HKV, PAGE, D) contiguous
template <typename T>
__global__ void paged_decode_attention_per_head_kernel(
    const T* __restrict__ query, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ seq_lens, T* __restrict__ out,
    int hq, int hkv, int page, int d, int64_t table_stride, float scale) {
    __shared__ float sm_m[MAX_WARPS], sm_l[MAX_WARPS];
    __shared__ float sm_acc[MAX_WARPS][MAX_D];
    const int h = blockIdx.x, s = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int kvh = h / (hq / hkv);
    const int len = seq_lens[s];
    const T* qp = query + ((int64_t)s * hq + h) * d;
    float q[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
        const int c = lane + 32 * j;
        q[j] = c < d ? to_f32(qp[c]) * scale : 0.f;  // fold the softmax scale into q
        acc[j] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const int* table = block_tables + (int64_t)s * table_stride;
    for (int t = warp; t < len; t += warps) {
        const int64_t phys = table[t / page];
        const int64_t row = ((phys * hkv + kvh) * page + (t % page)) * (int64_t)d;
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) {
            const int c = lane + 32 * j;
            if (c < d) dot += q[j] * to_f32(k_cache[row + c]);
        }
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        const float m_new = fmaxf(m, dot);
        const float alpha = expf(m - m_new);  // 0 on the first token (m = -inf)
        const float p = expf(dot - m_new);
        l = l * alpha + p;
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) {
            const int c = lane + 32 * j;
            acc[j] = acc[j] * alpha + (c < d ? p * to_f32(v_cache[row + c]) : 0.f);
        }
        m = m_new;
    }
    if (lane == 0) { sm_m[warp] = m; sm_l[warp] = l; }
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
        const int c = lane + 32 * j;
        if (c < d) sm_acc[warp][c] = acc[j];
    }
    __syncthreads();
    float big = -INFINITY;
    for (int w = 0; w < warps; ++w) big = fmaxf(big, sm_m[w]);
    float total = 0.f;
    for (int w = 0; w < warps; ++w) total += sm_l[w] > 0.f ? sm_l[w] * expf(sm_m[w] - big) : 0.f;
    T* op = out + ((int64_t)s * hq + h) * d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float o = 0.f;
        for (int w = 0; w < warps; ++w) {
            if (sm_l[w] > 0.f) o += sm_acc[w][c] * expf(sm_m[w] - big);
        }
        op[c] = from_f32<T>(total > 0.f ? o / total : 0.f);
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

void paged_decode_attention_per_head_launch(torch::Tensor query, torch::Tensor k_cache,
                                            torch::Tensor v_cache, torch::Tensor block_tables,
                                            torch::Tensor seq_lens, torch::Tensor out,
                                            double scale, int64_t warps) {
    const c10::cuda::CUDAGuard guard(query.device());
    const int hq = (int)query.size(1), d = (int)query.size(2);
    const int hkv = (int)k_cache.size(1), page = (int)k_cache.size(2);
    const dim3 grid((unsigned)hq, (unsigned)query.size(0));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(query.scalar_type(), T, {
        paged_decode_attention_per_head_kernel<T><<<grid, (unsigned)(32 * warps), 0, stream>>>(
            static_cast<const T*>(query.data_ptr()), static_cast<const T*>(k_cache.data_ptr()),
            static_cast<const T*>(v_cache.data_ptr()), block_tables.data_ptr<int>(),
            seq_lens.data_ptr<int>(), static_cast<T*>(out.data_ptr()), hq, hkv, page, d,
            block_tables.stride(0), (float)scale);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void paged_decode_attention_per_head_launch(torch::Tensor query, torch::Tensor k_cache, "
    "torch::Tensor v_cache, torch::Tensor block_tables, torch::Tensor seq_lens, "
    "torch::Tensor out, double scale, int64_t warps);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_paged_decode_attention_per_head_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["paged_decode_attention_per_head_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def paged_decode_attention_per_head_cuda(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    warps: int = 4,
) -> torch.Tensor:
    """Return softmax(q K^T * scale) V per sequence and query head over the paged cache.

    Args:
        query: (S, HQ, D) bf16/fp16/fp32 on a CUDA device, D <= 256.
        k_cache: (NB, HKV, PAGE, D) of query's dtype; HQ a multiple of HKV.
        v_cache: like ``k_cache``.
        block_tables: (S, max_pages) int32 physical page per logical page.
        seq_lens: (S,) int32 cached lengths (0 gives a zero output).
        softmax_scale: Logit scale; None means D ** -0.5.
        warps: Warps per block (tokens in flight per head), 1..16.

    Returns:
        out: (S, HQ, D) in query's dtype.

    Raises:
        ValueError: a tensor has the wrong shape, dtype or device, or warps is out of range.
    """
    if not query.is_cuda or query.dtype not in _DTYPES or query.dim() != 3:
        raise ValueError(
            f"query must be a (S, HQ, D) CUDA float tensor; got {query.dtype} {query.shape}"
        )
    s, hq, d = query.shape
    if not 1 <= d <= 256:
        raise ValueError(f"head dim D must be in 1..256; got {d}")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.dim() != 4 or cache.shape[3] != d or cache.shape != k_cache.shape:
            raise ValueError(
                f"{name} must be (NB, HKV, PAGE, {d}) like k_cache; got {tuple(cache.shape)}"
            )
        if cache.dtype != query.dtype or cache.device != query.device:
            raise ValueError(f"{name} must be {query.dtype} on {query.device}; got {cache.dtype}")
    if hq % k_cache.shape[1]:
        raise ValueError(f"HQ {hq} must be a multiple of HKV {k_cache.shape[1]}")
    for name, t in (("block_tables", block_tables), ("seq_lens", seq_lens)):
        if t.dtype != torch.int32 or t.device != query.device:
            raise ValueError(f"{name} must be int32 on {query.device}; got {t.dtype} on {t.device}")
    if block_tables.dim() != 2 or block_tables.shape[0] != s or seq_lens.shape != (s,):
        raise ValueError(
            f"block_tables must be ({s}, max_pages) and seq_lens ({s},); got "
            f"{tuple(block_tables.shape)} and {tuple(seq_lens.shape)}"
        )
    if not 1 <= warps <= 16:
        raise ValueError(f"warps must be in 1..16; got {warps}")
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    out = torch.empty((s, hq, d), dtype=query.dtype, device=query.device)
    if out.numel() > 0:
        _EXT.paged_decode_attention_per_head_launch(
            query.contiguous(),
            k_cache.contiguous(),
            v_cache.contiguous(),
            block_tables if block_tables.stride(1) == 1 else block_tables.contiguous(),
            seq_lens.contiguous(),
            out,
            float(scale),
            warps,
        )
    return out


def reference(query, k_cache, v_cache, block_tables, seq_lens, softmax_scale=None):
    """Gather each sequence's pages and run softmax attention for its one query in fp32."""
    _, hkv, page_size, d = k_cache.shape
    group = query.shape[1] // hkv
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    out = torch.zeros_like(query)
    for i in range(query.shape[0]):
        pos = torch.arange(int(seq_lens[i]), device=query.device)
        pages = block_tables[i, pos // page_size].long()
        k = k_cache[pages, :, pos % page_size].float().repeat_interleave(group, 1).transpose(0, 1)
        v = v_cache[pages, :, pos % page_size].float().repeat_interleave(group, 1).transpose(0, 1)
        p = (torch.einsum("hd,hld->hl", query[i].float(), k) * scale).softmax(-1)
        out[i] = torch.einsum("hl,hld->hd", p, v).to(query.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return decode queries and a shuffled paged cache in the (blocks, HKV, page, D) layout.

    ``shape``: ``seq_lens`` (list of cached lengths, >= 1), ``num_heads_q``, ``num_heads_kv``,
    ``head_dim``, optional ``page_size`` (16).
    """
    lens = list(shape["seq_lens"])
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    page_size = shape.get("page_size", 16)
    pages_per_seq = [(n + page_size - 1) // page_size for n in lens]
    num_blocks = sum(pages_per_seq) + 3  # spare pages nobody points at
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)  # shuffled physical pages
    block_tables = torch.zeros((len(lens), max(pages_per_seq)), dtype=torch.int32, device=device)
    start = 0
    for i, n in enumerate(pages_per_seq):
        block_tables[i, :n] = perm[start : start + n]
        start += n
    return {
        "query": torch.randn(len(lens), hq, d, device=device).to(dtype),
        "k_cache": torch.randn(num_blocks, hkv, page_size, d, device=device).to(dtype),
        "v_cache": torch.randn(num_blocks, hkv, page_size, d, device=device).to(dtype),
        "block_tables": block_tables,
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
    }

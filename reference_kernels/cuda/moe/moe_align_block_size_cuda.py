"""
---
id: moe_align_block_size_cuda
title: MoE align-block-size in CUDA C++, one block, shared-memory atomic counts, scan and scatter
op_family: moe
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32]
bound: latency
techniques:
  [single-block, shared-memory-atomics, padded-prefix-sum, warp-match-rank, stable-scatter,
   padding-sentinel, load-inline]
status: reference
launcher: moe_align_block_size_cuda
tuning:
  warps: [16, 8, 32, 4]
args:
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
  block_size: {type: int, aliases: [block_m]}
  num_experts: {type: int, aliases: [n_experts, experts, n_routed_experts]}
returns:
  - {name: sorted_token_ids, shape: ['?'], dtype: int32}
  - {name: expert_ids, shape: ['?'], dtype: int32}
  - {name: num_tokens_post_pad, shape: [1], dtype: int32}
problem:
  shapes: [{tokens: 11, top_k: 4, num_experts: 9, block_size: 8}, {tokens: 1, top_k: 8, num_experts: 128, block_size: 128}]
measured: []
---
The routing step before a grouped MoE GEMM, in one CUDA C++ launch (built with load_inline) of a
single block; the concept follows vLLM's moe_align_block_size, the code is written here. The T*k
flat indices are cut into one contiguous segment per warp. Phase 1: each warp counts its segment's
experts into its own row of a (warps x E) shared-memory table with shared-memory atomicAdd (no
global atomics). Phase 2: warp 0 sums each expert's column, rounds it up to whole blocks and takes
the exclusive prefix sum of the padded counts with __shfl_up_sync, 32 experts per step, giving each
expert's padded start and the total; the table's entries become per-(warp, expert) write cursors.
Phase 3: each warp walks its segment in order, 32 indices at a time; __match_any_sync groups the
lanes that chose the same expert, a lane's rank is the popcount of its lower peers, and the lowest
peer advances the cursor, so within an expert the output order is ascending flat index
(deterministic, equal to the stable sort of the reference) without any global atomic. Phase 4
writes the sentinel T*k into each expert's padding and the expert id of every block (a binary
search over the starts). Bytes: topk_ids read twice (the second time from L1/L2), 4 bytes written
per output slot. It wins for decode and medium batches, where the whole job is a few microseconds
and one launch beats a multi-kernel pipeline. Limits: one SM does all the work, so very long
prefills (T*k in the millions) are better served by a multi-block count; the table needs
warps * E * 4 bytes of shared memory (E up to about 12K); ids outside [0, E) are dropped; trimming
the variable-length outputs reads num_tokens_post_pad back to the host (one sync).
"""

import torch
from torch.utils.cpp_extension import load_inline

_SMEM_LIMIT_BYTES = 48 * 1024  # default dynamic shared memory without an opt-in

_CUDA_KERNELS = r"""
#include <stdint.h>

__global__ void moe_align_block_size_kernel(
    const int32_t* __restrict__ ids,                                     // (T*k,) expert ids
    int32_t* __restrict__ sorted_ids, int32_t* __restrict__ expert_ids,  // outputs
    int32_t* __restrict__ num_post,
    int numel, int num_experts, int block_size) {
    extern __shared__ int32_t smem[];
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int E = num_experts;
    int32_t* cnt = smem;             // (nw, E): counts, then write cursors
    int32_t* start = smem + nw * E;  // (E + 1,): padded start of each expert; start[E] = total
    for (int i = threadIdx.x; i < nw * E; i += blockDim.x) cnt[i] = 0;
    __syncthreads();

    // each warp owns one contiguous segment, so segment order = flat-index order
    const int seg = (numel + nw - 1) / nw;
    const int lo = min(warp * seg, numel), hi = min(lo + seg, numel);

    // phase 1: per-warp expert histogram with shared-memory atomics
    for (int f = lo + lane; f < hi; f += 32) {
        const int e = ids[f];
        if (e >= 0 && e < E) atomicAdd(&cnt[warp * E + e], 1);
    }
    __syncthreads();

    // phase 2: warp 0 pads the counts to whole blocks and scans them, 32 experts per step
    if (warp == 0) {
        int carry = 0;
        for (int e0 = 0; e0 < E; e0 += 32) {
            const int e = e0 + lane;
            int total = 0;
            if (e < E) for (int w = 0; w < nw; ++w) total += cnt[w * E + e];
            const int padded = (total + block_size - 1) / block_size * block_size;
            int incl = padded;
            for (int off = 1; off < 32; off <<= 1) {
                const int v = __shfl_up_sync(0xffffffffu, incl, off);
                if (lane >= off) incl += v;
            }
            if (e < E) {
                int cursor = carry + incl - padded;  // exclusive prefix: this expert's start
                start[e] = cursor;
                for (int w = 0; w < nw; ++w) {  // counts become per-warp write cursors
                    const int c = cnt[w * E + e];
                    cnt[w * E + e] = cursor;
                    cursor += c;
                }
            }
            carry += __shfl_sync(0xffffffffu, incl, 31);
        }
        if (lane == 0) {
            start[E] = carry;
            num_post[0] = carry;
        }
    }
    __syncthreads();

    // phase 3: ordered scatter; peers with the same expert take consecutive slots by lane rank
    for (int base = lo; base < hi; base += 32) {  // warp-uniform bounds: full-mask syncs are safe
        const int f = base + lane;
        const int e = f < hi ? ids[f] : -1;
        const bool ok = e >= 0 && e < E;
        const unsigned peers = __match_any_sync(0xffffffffu, ok ? e : -1);
        const unsigned lower = peers & ((1u << lane) - 1u);
        if (ok) sorted_ids[cnt[warp * E + e] + __popc(lower)] = f;
        __syncwarp();  // every lane read its cursor before the leader moves it
        if (ok && lower == 0) cnt[warp * E + e] += __popc(peers);
        __syncwarp();
    }
    __syncthreads();

    // phase 4: sentinel into each expert's padding (the last warp's cursor ends its pairs)
    for (int e = warp; e < E; e += nw) {
        for (int p = cnt[(nw - 1) * E + e] + lane; p < start[e + 1]; p += 32) sorted_ids[p] = numel;
    }
    // expert of every block: the last expert whose start is <= the block's first slot
    const int blocks = start[E] / block_size;
    for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
        const int slot = b * block_size;
        int l = 0, r = E - 1;
        while (l < r) {
            const int mid = (l + r + 1) >> 1;
            if (start[mid] <= slot) l = mid; else r = mid - 1;
        }
        expert_ids[b] = l;
    }
}
"""

_CUDA_HOST = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

void moe_align_block_size_launch(torch::Tensor ids, torch::Tensor sorted_ids,
                                 torch::Tensor expert_ids, torch::Tensor num_post,
                                 int64_t block_size, int64_t num_experts, int64_t warps) {
    const c10::cuda::CUDAGuard guard(ids.device());
    const size_t smem = ((size_t)warps * num_experts + num_experts + 1) * sizeof(int32_t);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    moe_align_block_size_kernel<<<1, (unsigned)(32 * warps), smem, stream>>>(
        static_cast<const int32_t*>(ids.data_ptr()), static_cast<int32_t*>(sorted_ids.data_ptr()),
        static_cast<int32_t*>(expert_ids.data_ptr()), static_cast<int32_t*>(num_post.data_ptr()),
        (int)ids.numel(), (int)num_experts, (int)block_size);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void moe_align_block_size_launch(torch::Tensor ids, torch::Tensor sorted_ids, "
    "torch::Tensor expert_ids, torch::Tensor num_post, int64_t block_size, int64_t num_experts, "
    "int64_t warps);"
)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_moe_align_block_size_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["moe_align_block_size_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import (nvcc about a minute the first time, then load_inline's on-disk
# cache): a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _warps(requested: int, num_experts: int) -> int:
    """Return the warps to use: the request, lowered until the count table fits in 48 KB."""
    fits = (_SMEM_LIMIT_BYTES // 4 - num_experts - 1) // num_experts
    return min(requested, fits)


def moe_align_block_size_cuda(
    topk_ids: torch.Tensor,
    block_size: int,
    num_experts: int,
    *,
    warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group the (token, slot) pairs by expert, each expert padded to whole blocks.

    Args:
        topk_ids: (T, k) int32 expert ids in [0, num_experts) on a CUDA device, contiguous,
            T * k < 2^31.
        block_size: Slots per block of the grouped GEMM that consumes the result (>= 1).
        num_experts: Number of experts E (>= 1).
        warps: Warps of the single block, 1..32 (lowered if the count table would not fit in
            48 KB of shared memory); None = 16.

    Returns:
        sorted_token_ids: (num_tokens_post_pad,) int32 flat indices grouped by expert, each group
            padded with the sentinel T * k.
        expert_ids: (num_tokens_post_pad // block_size,) int32 expert of each block.
        num_tokens_post_pad: (1,) int32.

    Raises:
        ValueError: topk_ids is not a contiguous (T, k) int32 CUDA tensor, a size is out of
            range, or the count table cannot fit in shared memory.
    """
    if (
        not topk_ids.is_cuda
        or topk_ids.dim() != 2
        or topk_ids.dtype != torch.int32
        or not topk_ids.is_contiguous()
    ):
        raise ValueError(
            f"need topk_ids as a contiguous (T, k) int32 CUDA tensor; got {topk_ids.dtype} "
            f"{tuple(topk_ids.shape)} on {topk_ids.device}"
        )
    if block_size < 1 or num_experts < 1:
        raise ValueError(f"need block_size, num_experts >= 1; got {block_size}, {num_experts}")
    n = topk_ids.numel()
    if n >= 2**31 - num_experts * block_size:
        raise ValueError(f"T * k = {n} is too large for int32 slot indices")
    requested = warps or 16
    if not 1 <= requested <= 32:
        raise ValueError(f"warps must be in 1..32 (one block of at most 1024 threads); got {warps}")
    nw = _warps(requested, num_experts)
    if nw < 1:
        raise ValueError(
            f"num_experts = {num_experts} needs more than 48 KB of shared memory for the count "
            "table; use a multi-block variant (moe_align_block_size_atomic)"
        )
    device = topk_ids.device
    # worst case: every pair plus block_size - 1 padding for each expert that can be non-empty
    max_len = max(n + min(num_experts, n) * (block_size - 1), 1)
    sorted_ids = torch.empty((max_len,), dtype=torch.int32, device=device)
    expert_ids = torch.empty(((max_len + block_size - 1) // block_size,), dtype=torch.int32,
                             device=device)  # fmt: skip
    num_post = torch.zeros((1,), dtype=torch.int32, device=device)
    if n:
        _EXT.moe_align_block_size_launch(
            topk_ids, sorted_ids, expert_ids, num_post, block_size, num_experts, nw
        )
    total = int(num_post.item())  # one sync: the outputs' lengths depend on the data
    return sorted_ids[:total], expert_ids[: total // block_size], num_post


def reference(
    topk_ids: torch.Tensor, block_size: int, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (sorted_token_ids, expert_ids, num_tokens_post_pad) by a stable PyTorch sort."""
    device = topk_ids.device
    flat = topk_ids.reshape(-1).long()
    sentinel = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    padded_start = torch.cumsum(padded, 0) - padded
    count_start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(sentinel, device=device) - count_start[expert_of]
    total = int(padded.sum())
    sorted_ids = torch.full((total,), sentinel, dtype=torch.int32, device=device)
    sorted_ids[padded_start[expert_of] + rank] = order.to(torch.int32)
    experts = torch.arange(num_experts, device=device, dtype=torch.int32)
    expert_ids = experts.repeat_interleave(padded // block_size)
    return sorted_ids, expert_ids, torch.tensor([total], dtype=torch.int32, device=device)


def make_inputs(shape: dict, dtype: torch.dtype = torch.int32, device: str = "cuda") -> dict:
    """Return inputs for ``{"tokens", "top_k", "num_experts", "block_size"}`` (dtype unused)."""
    t, k, e = shape["tokens"], shape["top_k"], shape["num_experts"]
    ids = torch.randint(0, e, (t, k), dtype=torch.int32, device=device)
    return {"topk_ids": ids, "block_size": shape["block_size"], "num_experts": e}

"""
---
id: gemm_bf16_candidate
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16]
bound: compute
techniques: [tiled-tl-dot, grouped-program-order, fp32-accumulate, shape-bucketed-config]
status: candidate
measured: []
---
Tiled GEMM C = A @ B^T as in the Triton matmul tutorial: each program owns a (BLOCK_M, BLOCK_N)
tile of C, walks K in BLOCK_K steps with tl.dot on bf16 tiles into an fp32 accumulator, and
programs are ordered in groups of GROUP_M row-tiles so neighbouring programs share B tiles in L2.
B is read as (N, K) through strides, no transpose copy. Block sizes come from three buckets of M
(decode M <= 16, M <= 64, prefill). Reads 2 bytes per A and B element once per tile pass and writes
2 bytes per C element. Limits: no split-K, so M = 1..16 with small N leaves SMs idle; no autotune.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_kernel(
    # pointers
    a_ptr,
    b_ptr,
    c_ptr,
    # sizes
    M,
    N,
    K,
    # strides (elements)
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # grouped order: GROUP_M row-tiles run next to each other and reuse each B tile from L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    # rows and columns past M / N wrap onto valid ones (their results are never stored), so the
    # loads in the K loop need only the K mask; int64 base offsets as M * K can pass 2^31
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    # B is (N, K): a (BLOCK_K, BLOCK_N) tile of B^T is read through its strides
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulation
    for k_start in range(0, K, BLOCK_K):
        k_mask = offs_k < K - k_start
        a = tl.load(a_ptrs, mask=k_mask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_mask[:, None], other=0.0)
        if UPCAST:
            # CPU interpreter only: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            # GPU: bf16 tensor-core MMA, fp32 accumulator
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # store the tile, masking the rows and columns that wrapped above
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    c_mask = (rows < M)[:, None] & (cols < N)[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


def _launch_config(m: int) -> dict[str, int]:
    """Return block sizes, warps and stages for one of three M buckets (decode to prefill)."""
    if m <= 16:  # GEMV-like: stream B with narrow N tiles so more programs share the work
        return {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "GROUP_M": 1,
                "num_warps": 4, "num_stages": 4}  # fmt: skip
    if m <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1,
                "num_warps": 4, "num_stages": 4}  # fmt: skip
    return {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
            "num_warps": 8, "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_bf16(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return A @ B^T for A (M, K) and B (N, K) as a new (M, N) tensor of A's dtype."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    # K = 0 needs no special case: the K loop does not run and the zero accumulator is stored
    cfg = _launch_config(m)
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    _gemm_kernel[grid](
        a, b, c,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        UPCAST=_interpreting(),
        **cfg,
    )  # fmt: skip
    return c


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return gemm_bf16(a, b)

"""
---
id: gemm_batched
title: Batched GEMM C[b] = A[b] @ B[b] on a (tile, batch) grid with per-batch strides
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tiled-tl-dot, batch-grid-axis, grouped-program-order, masked-k-loop,
  fp32-accumulate, broadcast-batch-stride]
status: reference
launcher: gemm_batched
tuning:
  block_m: [64, 32, 128]
  block_n: [64, 32, 128]
  block_k: [32, 16, 64]
  group_m: [8, 1, 16]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [BATCH, M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [input, batch1, x]}
  b: {shape: [BATCH, K, N], like: a, layout: any, aliases: [mat2, batch2, other]}
returns:
  - {name: c, shape: [BATCH, M, N], dtype: a}
problem:
  shapes: [{batch: 3, m: 33, n: 40, k: 72}, {batch: 1, m: 1, n: 17, k: 200}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
torch.bmm semantics: C[b] = A[b] @ B[b] for A (BATCH, M, K) and B (BATCH, K, N). The grid is 2D:
axis 0 enumerates the output tiles of one product in grouped order (GROUP_M row tiles side by side
down a column of tiles, so the B tiles they share stay in L2), axis 1 is the batch index, which
only offsets the three base pointers by its batch stride. Each program walks K in BLOCK_K steps
with tl.dot into an fp32 accumulator and casts once at the store. Any strides work, including a
zero batch stride (one weight broadcast over the batch, as expand() gives) and transposed views,
so attention-score style products need no copies. FLOPs 2*BATCH*M*N*K; bytes per product A and B
once from HBM (each re-read cdiv(N, BLOCK_N) / cdiv(M, BLOCK_M) times from L2) plus C once. Wins
over a loop of single GEMMs when each product is too small to fill the GPU (many heads, short
sequences). Limits: every product has the same M, N, K (no ragged batches; see the grouped MoE
kernels); a batch above 65535 exceeds the grid's second axis; no split-K for tiny M*N.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_batched_kernel(
    # pointers
    a_ptr,
    b_ptr,
    c_ptr,
    # sizes
    M,
    N,
    K,
    # strides (elements; batch strides may be 0 for a broadcast operand)
    stride_ab,
    stride_am,
    stride_ak,
    stride_bb,
    stride_bk,
    stride_bn,
    stride_cb,
    stride_cm,
    stride_cn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    # grouped ordering inside one product: GROUP_M row tiles share each column of B tiles
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N

    # the batch index only moves the base pointers (int64: BATCH * M * K can pass 2^31)
    a_ptrs = a_ptr + batch * stride_ab + offs_m[:, None].to(tl.int64) * stride_am
    a_ptrs += offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + offs_n[None, :].to(tl.int64) * stride_bn
    b_ptrs += offs_k[:, None] * stride_bk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)  # bf16/fp16 MMA (TF32 for fp32) into fp32
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + batch * stride_cb + offs_m[:, None].to(tl.int64) * stride_cm
    c_ptrs += offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return tiles, group, warps and stages: 128x128 for big products, 64x64 otherwise."""
    if m >= 512 and n >= 512:
        return {"block_m": 128, "block_n": 128, "block_k": 32, "group_m": 8, "num_warps": 8,
                "num_stages": 3}  # fmt: skip
    return {"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4,
            "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_batched(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = bmm(A, B).

    Args:
        a: (BATCH, M, K) bf16/fp16/fp32, any strides (a zero batch stride broadcasts).
        b: (BATCH, K, N) same dtype as ``a``, any strides.
        block_m: Rows of C per program (power of two >= 16); None picks by size.
        block_n: Columns of C per program (power of two >= 16); None picks by size.
        block_k: K step of the inner loop (power of two >= 16); None picks by size.
        group_m: Row tiles per group of the grouped program order; None = 8.
        num_warps: Warps per program; None picks by size.
        num_stages: Software-pipelining depth on the GPU; None picks by size.

    Returns:
        C: (BATCH, M, N) in ``a``'s dtype, contiguous, accumulated in fp32.

    Raises:
        ValueError: The shapes or dtypes do not fit, or the batch exceeds 65535.
    """
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ValueError(
            f"need A (BATCH, M, K) and B (BATCH, K, N); got A {tuple(a.shape)}, B {tuple(b.shape)}"
        )
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need matching bf16/fp16/fp32 inputs; got {a.dtype} and {b.dtype}")
    batch, m, k = a.shape
    n = b.shape[2]
    if batch > 65535:
        raise ValueError(f"batch {batch} > 65535 does not fit the grid's second axis; split it")
    c = torch.empty((batch, m, n), dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]), batch)
    _gemm_batched_kernel[grid](
        a, b, c,
        m, n, k,
        a.stride(0), a.stride(1), a.stride(2),
        b.stride(0), b.stride(1), b.stride(2),
        c.stride(0), c.stride(1), c.stride(2),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return bmm(A, B) computed in fp32 and cast to A's dtype."""
    return torch.bmm(a.float(), b.float()).to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "b"}`` for ``{"batch", "m", "n", "k"}``: N(0, 1) A, K^-0.5-scaled B."""
    batch, m, n, k = shape["batch"], shape["m"], shape["n"], shape["k"]
    a = torch.randn(batch, m, k, device=device).to(dtype)
    b = (torch.randn(batch, k, n, device=device) * k**-0.5).to(dtype)
    return {"a": a, "b": b}

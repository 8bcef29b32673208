"""
---
id: gemm_grouped_swizzle
title: Tiled GEMM C = A @ B^T with grouped-M program ordering for L2 reuse
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tiled-tl-dot, grouped-program-order, l2-reuse, wrapped-edge-tiles,
  even-k-specialisation, fp32-accumulate]
status: reference
launcher: gemm_grouped_swizzle
tuning:
  group_m: [8, 1, 4, 16]
  block_m: [128, 64]
  block_n: [128, 64, 256]
  block_k: [64, 32]
  num_warps: [8, 4]
  num_stages: [3, 4]
args:
  a: {shape: [M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input, mat1]}
  b: {shape: [N, K], like: a, layout: any, aliases: [w, weight, mat2]}
returns:
  - {name: c, shape: [M, N], dtype: a}
problem:
  shapes: [{m: 33, n: 48, k: 96}, {m: 1, n: 17, k: 200}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
C = A @ B^T (B in the (N, K) weight layout) on a 1D grid whose program ids are remapped so that
GROUP_M consecutive row tiles run side by side down a column of tiles: the B tiles they share stay
in L2 instead of being fetched once per row tile, which for big square problems cuts DRAM traffic
for B by up to GROUP_M times (A traffic grows a little, since a group walks all its columns). Edge
tiles wrap their row and column offsets modulo M and N, so the inner loop loads need no M/N masks
(the wrapped rows are computed but never stored); when K is a multiple of BLOCK_K a constexpr also
drops the K mask. fp32 accumulation, one cast at the store; fp32 inputs run as TF32 on the GPU.
Bytes: A and B once per tile pass (2 B/elt for bf16/fp16), C once. Limits: no split-K (bad for M <=
16 with large K), edge tiles waste work on wrapped rows, no persistent grid, GROUP_M has no effect
when there is one row tile.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_grouped_swizzle_kernel(
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
    EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # remap the linear id: GROUP_M row tiles share each column tile, walked column by column
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    group = pid // pids_per_group
    first_pid_m = group * GROUP_M
    rows_in_group = min(num_pid_m - first_pid_m, GROUP_M)  # the last group may be short
    pid_in_group = pid % pids_per_group
    pid_m = first_pid_m + pid_in_group % rows_in_group
    pid_n = pid_in_group // rows_in_group

    # wrapped edge tiles: every loaded row/column is valid, so only K can need a mask
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulation
    for k_start in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            mask_k = offs_k < K - k_start
            a = tl.load(a_ptrs, mask=mask_k[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=mask_k[:, None], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)  # GPU tensor cores, fp32 accumulator
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # store: recompute the unwrapped indices so wrapped rows/columns are masked off
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    mask_c = (rows < M)[:, None] & (cols < N)[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_c)


def _launch_config(m: int) -> dict[str, int]:
    """Return the default tile: 128x128x64 with 8 warps, narrowed to 64 rows for small M."""
    if m <= 64:
        return {"group_m": 8, "block_m": 64, "block_n": 128, "block_k": 64,
                "num_warps": 4, "num_stages": 4}  # fmt: skip
    return {"group_m": 8, "block_m": 128, "block_n": 128, "block_k": 64,
            "num_warps": 8, "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_grouped_swizzle(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    group_m: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = A @ B^T with grouped program ordering.

    Args:
        a: (M, K) bf16/fp16/fp32, any strides.
        b: (N, K) same dtype as ``a`` (weight layout), any strides.
        group_m: Row tiles per group sharing B tiles in L2; None = 8.
        block_m: Rows of C per program (power of two >= 16); None picks by M.
        block_n: Columns of C per program (power of two >= 16); None picks by M.
        block_k: K step (power of two >= 16); None picks by M.
        num_warps: Warps per program; None picks by M.
        num_stages: Software-pipelining depth on the GPU; None picks by M.

    Returns:
        C: (M, N) in ``a``'s dtype, contiguous, accumulated in fp32.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need matching bf16/fp16/fp32 inputs; got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    cfg = _launch_config(m)
    given = {"group_m": group_m, "block_m": block_m, "block_n": block_n, "block_k": block_k,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _gemm_grouped_swizzle_kernel[grid](
        a, b, c,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], EVEN_K=k % cfg["block_k"] == 0, UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return A @ B^T computed in fp32 and cast to A's dtype."""
    return (a.float() @ b.float().T).to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "b"}`` for ``{"m", "n", "k"}``: N(0, 1) activations, K^-0.5 weights."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    a = torch.randn(m, k, device=device).to(dtype)
    b = (torch.randn(n, k, device=device) * k**-0.5).to(dtype)
    return {"a": a, "b": b}

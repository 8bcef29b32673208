"""
---
id: gemm_residual_add_epilogue
title: GEMM C = A @ B^T + residual, the residual tile read and added in the fp32 epilogue
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tl-dot, fp32-accumulate, residual-epilogue, grouped-program-order, single-rounding]
status: reference
launcher: gemm_residual_add_epilogue
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 32, 128]
  block_k: [32, 16, 64]
  group_m: [8, 1, 16]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input, hidden_states]}
  b: {shape: [N, K], like: a, layout: any, aliases: [w, weight]}
  residual: {shape: [M, N], like: a, layout: any, aliases: [res, skip]}
returns:
  - {name: c, shape: [M, N], dtype: a}
problem:
  shapes: [{m: 33, n: 40, k: 72}, {m: 1, n: 17, k: 200}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
The output projection of a transformer block with its skip connection: C = A @ B^T + residual,
with A (M, K) activations, B (N, K) a linear layer's weight and residual (M, N). Each program owns
one (BLOCK_M, BLOCK_N) tile of C (tiles visited in groups of GROUP_M row tiles so a column of B
tiles is reused from L2); the K loop is a tensor-core tl.dot into an fp32 accumulator, and the
epilogue loads the matching residual tile, adds it in fp32 and rounds once to the output dtype.
Compared with a GEMM followed by an add kernel this saves writing C and reading it back: per output
element 2 B (bf16) instead of 2 + 2 + 2 + 2 B, i.e. the whole second pass over M*N. FLOPs: 2*M*N*K
plus M*N adds. It wins whenever M*N is large next to M*N*K / (tile reuse), i.e. small K or a
memory-bound decode GEMM, where the extra pass would be a visible share of the time. Limits: the
residual must have C's dtype (no fp32 residual stream); no split-K, so decode M (few row tiles)
leaves SMs idle; not in place (C is a fresh tensor, the residual is only read).
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_residual_add_kernel(
    # pointers
    a_ptr,
    b_ptr,
    r_ptr,
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
    stride_rm,
    stride_rn,
    stride_cm,
    stride_cn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # grouped order: GROUP_M row tiles walk the column tiles together (L2 reuse of B)
    pid = tl.program_id(0)
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
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # epilogue: + residual in fp32, one rounding to the output dtype
    mask = mask_m[:, None] & mask_n[None, :]
    r_ptrs = r_ptr + offs_m[:, None].to(tl.int64) * stride_rm + offs_n[None, :] * stride_rn
    acc += tl.load(r_ptrs, mask=mask, other=0.0).to(tl.float32)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return tiles by size: narrow row tiles for decode M, 128x128 for big problems."""
    if m >= 512 and n >= 512:
        return {"block_m": 128, "block_n": 128, "block_k": 32, "group_m": 8, "num_warps": 8,
                "num_stages": 3}  # fmt: skip
    block_m = 16 if m <= 16 else (32 if m <= 32 else 64)
    return {"block_m": block_m, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4,
            "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_residual_add_epilogue(
    a: torch.Tensor,
    b: torch.Tensor,
    residual: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = A @ B^T + residual, accumulated in fp32 and rounded once.

    Args:
        a: (M, K) bf16/fp16/fp32, any strides.
        b: (N, K) same dtype (a linear layer's weight), any strides.
        residual: (M, N) same dtype, any strides; only read.
        block_m: Rows of C per program (power of two >= 16); None picks by M.
        block_n: Columns of C per program (power of two >= 16); None picks by size.
        block_k: K step (power of two >= 16); None = 32.
        group_m: Row tiles per group of the grouped order; None = 8.
        num_warps: Warps per program; None picks by size.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        C: (M, N) in ``a``'s dtype, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype not in (torch.bfloat16, torch.float16, torch.float32) or b.dtype != a.dtype:
        raise ValueError(f"need matching bf16/fp16/fp32 A and B; got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    if tuple(residual.shape) != (m, n) or residual.dtype != a.dtype:
        raise ValueError(
            f"need residual ({m}, {n}) {a.dtype} for A {tuple(a.shape)} and B {tuple(b.shape)}; "
            f"got {tuple(residual.shape)} {residual.dtype}"
        )
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _gemm_residual_add_kernel[grid](
        a, b, residual, c,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        residual.stride(0), residual.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def reference(a: torch.Tensor, b: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """Return (A @ B^T + residual) computed in fp32 and cast to A's dtype."""
    return (a.float() @ b.float().T + residual.float()).to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "b", "residual"}`` for ``{"m", "n", "k"}``: N(0, 1) A, K^-1/2-scaled B."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    return {
        "a": torch.randn(m, k, device=device).to(dtype),
        "b": (torch.randn(n, k, device=device) * k**-0.5).to(dtype),
        "residual": torch.randn(m, n, device=device).to(dtype),
    }

"""
---
id: gemm_swap_ab_small_m
title: Swap-AB GEMM for M <= 16, tiles of C^T = B A^T so the weight's N fills the MMA's M side
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [swap-ab, decode-gemm, tiled-tl-dot, transposed-store, fp32-accumulate,
  weight-layout-b]
status: reference
launcher: gemm_swap_ab_small_m
tuning:
  block_n: [64, 32, 128]
  block_k: [128, 64, 256]
  num_warps: [4, 2, 8]
  num_stages: [4, 3, 5]
args:
  a: {shape: [M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input, mat1]}
  b: {shape: [N, K], like: a, layout: any, aliases: [w, weight, mat2]}
returns:
  - {name: c, shape: [M, N], dtype: a}
problem:
  shapes: [{m: 1, n: 70, k: 96}, {m: 13, n: 32, k: 200}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
C = A @ B^T for decode-sized M (1 to 16 rows). A tensor-core MMA has a 16- or 64-row M side and an
N side as narrow as 8; with M = 1..4 tokens a normal (BLOCK_M >= 16) tile wastes most of each MMA
on zero rows. Swapping the operands computes the transposed tile C^T[n, m] = sum_k B[n, k] A[m, k]:
the weight rows fill the MMA's M side (BLOCK_N = 64 or 128 of them) and the few tokens become the
narrow N side (BLOCK_M = next power of two of M, at least 16 for tl.dot but every row computed is
a real token up to that padding), so each program issues full-height MMAs while streaming a
(BLOCK_N, BLOCK_K) slab of B, which is the whole cost: 2 B per weight element read once, the tiny
A reread from L2 by every program. The grid is 1-D over N tiles only (all M rows in one program),
and the fp32 (BLOCK_N, BLOCK_M) accumulator is stored transposed into C. Wins for decode GEMVs and
small batches where weight bandwidth rules and N / BLOCK_N fills the SMs. Limits: M > 16 is refused
(use a normal tiled GEMM); for small N too few programs run (use split-K); no epilogue fusion;
fp32 inputs run exact fp32 dots (no TF32).
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_swap_ab_kernel(
    # pointers
    a_ptr,  # (M, K)
    b_ptr,  # (N, K)
    c_ptr,  # (M, N)
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
    BLOCK_M: tl.constexpr,  # all tokens, the MMA's narrow side
    BLOCK_N: tl.constexpr,  # weight rows, the MMA's M side
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    mask_n = offs_n < N
    mask_m = offs_m < M
    # B as the left operand (BLOCK_N, BLOCK_K); A^T as the right (BLOCK_K, BLOCK_M)
    b_ptrs = b_ptr + offs_n[:, None].to(tl.int64) * stride_bn + offs_k[None, :] * stride_bk
    at_ptrs = a_ptr + offs_m[None, :].to(tl.int64) * stride_am + offs_k[:, None] * stride_ak

    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # C^T tile
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        b = tl.load(b_ptrs, mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        at = tl.load(at_ptrs, mask=mask_k[:, None] & mask_m[None, :], other=0.0)
        if UPCAST:
            # interpreter (wrong bf16 dots) or fp32 inputs (no TF32): exact fp32 products
            acc = tl.dot(b.to(tl.float32), at.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(b, at, acc)
        b_ptrs += BLOCK_K * stride_bk
        at_ptrs += BLOCK_K * stride_ak

    # transposed store: element (n, m) of the tile goes to C[m, n]
    c_ptrs = c_ptr + offs_m[None, :].to(tl.int64) * stride_cm + offs_n[:, None] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_n[:, None] & mask_m[None, :])


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_swap_ab_small_m(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = A @ B^T for M <= 16 by computing C^T tiles.

    Args:
        a: (M, K) bf16/fp16/fp32 with 1 <= M <= 16, any strides.
        b: (N, K) same dtype (weight layout), any strides.
        block_n: Weight rows per program (power of two >= 16); None = 64.
        block_k: K step (power of two >= 16); None = 128.
        num_warps: Warps per program; None = 4.
        num_stages: Software-pipelining depth on the GPU; None = 4.

    Returns:
        C: (M, N) in ``a``'s dtype, contiguous, accumulated in fp32.

    Raises:
        ValueError: The shapes, dtypes or tiles do not fit, or M > 16.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need a (M, K) and b (N, K); got a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need a and b of one dtype in bf16/fp16/fp32; got {a.dtype}, {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    if m > 16:
        raise ValueError(f"gemm_swap_ab_small_m serves M <= 16; got M={m} (use a tiled GEMM)")
    cfg = {"block_n": 64, "block_k": 128, "num_warps": 4, "num_stages": 4}
    given = {"block_n": block_n, "block_k": block_k, "num_warps": num_warps,
             "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    for name in ("block_n", "block_k"):
        if cfg[name] < 16 or cfg[name] & (cfg[name] - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot); got {cfg[name]}")
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    upcast = _interpreting() or a.dtype == torch.float32  # fp32: exact dots, no TF32
    _gemm_swap_ab_kernel[(triton.cdiv(n, cfg["block_n"]),)](
        a, b, c,
        m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=16, BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"], UPCAST=upcast,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return A @ B^T in fp32, cast to a's dtype."""
    return (a.float() @ b.float().T).to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "b"}`` for ``{"m", "n", "k"}``: a ~ N(0, 1), b ~ N(0, 1) / sqrt(K)."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    return {"a": torch.randn(m, k, device=device).to(dtype),
            "b": (torch.randn(n, k, device=device) * k**-0.5).to(dtype)}  # fmt: skip

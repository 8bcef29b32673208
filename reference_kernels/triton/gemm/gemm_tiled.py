"""
---
id: gemm_tiled
title: Plain 2D-tiled GEMM C = A @ B^T with a (row-tile, column-tile) grid and masked loads
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tiled-tl-dot, 2d-grid, masked-k-loop, fp32-accumulate, weight-layout-b]
status: reference
launcher: gemm_tiled
tuning:
  block_m: [64, 32, 128]
  block_n: [64, 32, 128]
  block_k: [32, 16, 64]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
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
The textbook tiled GEMM for C = A @ B^T with B in the (N, K) weight layout of a linear layer:
program (pid_m, pid_n) of a 2D grid owns one (BLOCK_M, BLOCK_N) tile of C, walks K in BLOCK_K steps
with tl.dot into an fp32 accumulator, and casts once to the input dtype at the store. Every load is
masked on M, N and K, so any shape works with no padding. Each A element is read cdiv(N, BLOCK_N)
times and each B element cdiv(M, BLOCK_M) times (2 bytes for bf16/fp16, 4 for fp32), mostly from L2;
C is written once. fp32 inputs use TF32 tensor cores on the GPU (about 1e-3 relative error). Limits:
the grid walks row-major (pid_m fastest), so large problems thrash L2 compared with grouped
ordering; small M with large K leaves SMs idle (no split-K); no persistent scheduling or TMA.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_tiled_kernel(
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
    UPCAST: tl.constexpr,
):
    # one program per output tile; axis 0 walks row tiles, axis 1 column tiles
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N

    # int64 row offsets: M * K can pass 2^31 elements for large activations
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    # B is (N, K); the (BLOCK_K, BLOCK_N) tile of B^T is read through its strides, no transpose copy
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulation
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            # GPU: bf16/fp16 MMA (TF32 for fp32 inputs) with the fp32 accumulator
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return block sizes, warps and stages: 128x128 tiles for big problems, 64x64 otherwise."""
    if m >= 512 and n >= 512:
        return {"block_m": 128, "block_n": 128, "block_k": 32, "num_warps": 8, "num_stages": 3}
    return {"block_m": 64, "block_n": 64, "block_k": 32, "num_warps": 4, "num_stages": 3}


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_tiled(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = A @ B^T.

    Args:
        a: (M, K) bf16/fp16/fp32, any strides.
        b: (N, K) same dtype as ``a`` (a linear layer's weight layout), any strides.
        block_m: Rows of C per program (power of two >= 16); None picks by size.
        block_n: Columns of C per program (power of two >= 16); None picks by size.
        block_k: K step of the inner loop (power of two >= 16); None picks by size.
        num_warps: Warps per program; None picks by size.
        num_stages: Software-pipelining depth on the GPU; None picks by size.

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
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]), triton.cdiv(n, cfg["block_n"]))
    _gemm_tiled_kernel[grid](
        a, b, c,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        UPCAST=_interpreting(),
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

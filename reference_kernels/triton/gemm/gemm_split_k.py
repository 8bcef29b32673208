"""
---
id: gemm_split_k
title: Split-K GEMM C = A @ B^T for small M and large K with fp32 atomic reduction
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [split-k, fp32-atomic-add, tiled-tl-dot, decode-gemm, fp32-accumulate]
status: reference
launcher: gemm_split_k
tuning:
  split_k: [4, 1, 2, 8, 16]
  block_m: [16, 32, 64]
  block_n: [64, 32, 128]
  block_k: [128, 64, 256]
  num_warps: [4, 2, 8]
  num_stages: [4, 3]
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
C = A @ B^T (B in the (N, K) weight layout) for decode-like shapes (M = 1..64, K in the thousands)
where a plain tiled grid has too few (M, N) tiles to fill 132 SMs: a second grid axis cuts K into
SPLIT_K contiguous slices (each a multiple of BLOCK_K), each program reduces its slice into an fp32
tile with tl.dot, and the partial tiles are summed with fp32 atomic adds into a zeroed fp32 (M, N)
workspace. The reduction order across slices is therefore not deterministic (bitwise results can
differ run to run by fp32 rounding). For an fp32 output the workspace is the result; for bf16/fp16
the host casts it (one extra M*N pass: 4 B read + 2 B written per element, negligible next to B).
Bytes: B (N*K, 2 B/elt for bf16) is streamed exactly once when one row tile covers M, which is what
bounds this kernel; A is re-read per column tile from L2. Limits: atomics cost SPLIT_K * M * N fp32
RMWs, so large M or N should use split_k = 1 or a plain tiled GEMM; the zero-fill is an extra
launch.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_split_k_kernel(
    # pointers
    a_ptr,
    b_ptr,
    acc_ptr,  # fp32 (M, N) workspace, zeroed by the host
    # sizes
    M,
    N,
    K,
    K_PER_SPLIT,  # a multiple of BLOCK_K
    # strides (elements)
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_accm,
    stride_accn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # axis 0: output tile, row tiles fastest so a column's few row tiles share each B slice;
    # axis 1: K slice
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_pid_m
    pid_n = pid // num_pid_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N

    # this program's K slice [k_lo, k_hi); a slice past K is empty and adds zeros
    k_lo = pid_k * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = (a_ptr + offs_m[:, None].to(tl.int64) * stride_am
              + (k_lo + offs_k[None, :]) * stride_ak)  # fmt: skip
    b_ptrs = (b_ptr + offs_n[None, :].to(tl.int64) * stride_bn
              + (k_lo + offs_k[:, None]) * stride_bk)  # fmt: skip

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 partial sum of this slice
    for k_start in range(k_lo, k_hi, BLOCK_K):
        mask_k = offs_k < k_hi - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)  # GPU tensor cores, fp32 accumulator
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # reduce across K slices: relaxed fp32 atomics (order-free sum, not bitwise deterministic)
    acc_ptrs = acc_ptr + offs_m[:, None].to(tl.int64) * stride_accm + offs_n[None, :] * stride_accn
    tl.atomic_add(acc_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :], sem="relaxed")


@triton.jit
def _cast_epilogue_kernel(src_ptr, dst_ptr, numel, BLOCK: tl.constexpr):
    # the split-K epilogue: the fp32 sum the atomics built, rounded to the output dtype
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask).to(dst_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def _launch_config(m: int, n: int, k: int, itemsize: int = 2) -> dict[str, int]:
    """Return tiles, warps and a split count that gives about two programs per SM (132 SMs).

    fp32 operands take 3 pipeline stages: 4 stages of 64x128 fp32 A and B tiles need 256 KiB of
    shared memory, more than the 227 KiB a Hopper block may use.
    """
    block_m = 16 if m <= 16 else (32 if m <= 32 else 64)
    block_n, block_k = 64, 128
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    k_blocks = triton.cdiv(k, block_k)
    split_k = max(1, min(16, k_blocks, triton.cdiv(2 * 132, tiles)))
    return {"split_k": split_k, "block_m": block_m, "block_n": block_n, "block_k": block_k,
            "num_warps": 4, "num_stages": 4 if itemsize <= 2 else 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_split_k(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    split_k: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = A @ B^T with K split across programs and reduced by fp32 atomics.

    Args:
        a: (M, K) bf16/fp16/fp32, any strides; meant for small M.
        b: (N, K) same dtype as ``a`` (weight layout), any strides.
        split_k: Number of K slices (>= 1); None aims at two programs per SM.
        block_m: Rows of C per program (power of two >= 16); None picks by M.
        block_n: Columns of C per program (power of two >= 16); None = 64.
        block_k: K step (power of two >= 16); None = 128.
        num_warps: Warps per program; None = 4.
        num_stages: Software-pipelining depth on the GPU; None = 4 (3 for fp32).

    Returns:
        C: (M, N) in ``a``'s dtype, contiguous.

    Raises:
        ValueError: The shapes, dtypes or split count do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need matching bf16/fp16/fp32 inputs; got {a.dtype} and {b.dtype}")
    if split_k is not None and split_k < 1:
        raise ValueError(f"split_k must be >= 1, got {split_k}")
    m, k = a.shape
    n = b.shape[0]
    acc = torch.zeros((m, n), dtype=torch.float32, device=a.device)  # atomics need a zeroed target
    if m == 0 or n == 0:
        return torch.empty((m, n), dtype=a.dtype, device=a.device)
    cfg = _launch_config(m, n, k, a.element_size())
    given = {"split_k": split_k, "block_m": block_m, "block_n": block_n, "block_k": block_k,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    k_per_split = triton.cdiv(triton.cdiv(k, cfg["block_k"]), cfg["split_k"]) * cfg["block_k"]
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]), cfg["split_k"])
    _gemm_split_k_kernel[grid](
        a, b, acc,
        m, n, k, k_per_split,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        acc.stride(0), acc.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    if a.dtype == torch.float32:
        return acc
    # the atomics reduced in fp32; one cast pass (its own small kernel) for bf16/fp16 outputs
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    numel = m * n
    _cast_epilogue_kernel[(triton.cdiv(numel, 1024),)](acc, out, numel, BLOCK=1024)
    return out


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return A @ B^T computed in fp32 and cast to A's dtype."""
    return (a.float() @ b.float().T).to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "b"}`` for ``{"m", "n", "k"}``: N(0, 1) activations, K^-0.5 weights."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    a = torch.randn(m, k, device=device).to(dtype)
    b = (torch.randn(n, k, device=device) * k**-0.5).to(dtype)
    return {"a": a, "b": b}

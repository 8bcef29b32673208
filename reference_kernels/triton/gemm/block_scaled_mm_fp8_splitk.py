"""
---
id: block_scaled_mm_fp8_splitk
title: Split-K FP8 block-scaled GEMM for decode with a deterministic second reduce pass
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, fp32]
bound: memory
techniques: [split-k, two-pass-reduction, fp8-tl-dot, block-scaled-dequant, decode-gemm,
  fp32-accumulate]
status: reference
launcher: block_scaled_mm_fp8_splitk
tuning:
  split_k: [4, 1, 2, 8, 16]
  block_m: [16, 32, 64]
  block_n: [64, 32, 128]
  num_warps: [4, 2, 8]
  num_stages: [3, 4]
args:
  a: {shape: [M, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [x, input]}
  b: {shape: [N, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [w, weight]}
  a_scales:
    {shape: [M, ceil(K / 128)], dtypes: [fp32], layout: any, aliases: [a_scale, scale_a]}
  b_scales:
    {shape: [ceil(N / 128), ceil(K / 128)], dtypes: [fp32], layout: any, aliases: [b_scale]}
returns:
  - {name: out, shape: [M, N], dtype: fp32}
problem:
  shapes: [{m: 5, n: 200, k: 384}, {m: 33, n: 48, k: 200}]
  dtypes: [fp8_e4m3fn]
measured: []
---
The block-scaled FP8 GEMM out = sum_kb (a_kb @ b_kb^T) * a_scale[m, kb] * b_scale[n // 128, kb] (a
e4m3fn per 1x128 group, b e4m3fn per 128x128 block, e4m3fn max 448, fp32 scales and output) for
decode batches, M = 1..64, where one 128-wide N tile per program gives only N / 128 programs. A
second grid axis splits the K blocks into SPLIT_K contiguous runs; each program computes its fp8
dots with the per-block rescale into an fp32 tile and stores it to its own slice of an fp32
(SPLIT_K, M, N) workspace (every slice element is written, an empty run writes zeros, so no
zero-fill launch). A second, vectorised kernel sums the SPLIT_K slices in a fixed order, so results
are bitwise deterministic. Bytes: b (1 B/elt) is streamed once and bounds the kernel; the workspace
costs 2 * SPLIT_K * M * N * 4 B, small while M * N << N * K. Limits: one extra launch (~3 us); for
prefill M the workspace traffic outgrows the gain, so use split_k = 1 or the tiled sibling there.
"""

import os

import torch
import triton
import triton.language as tl

GROUP_SIZE = 128  # scale group along K (a and b) and along N (b)
FP8_MAX = 448.0  # e4m3fn
REDUCE_BLOCK = 1024  # outputs per program of the reduce pass


@triton.jit
def _block_scaled_mm_fp8_splitk_kernel(
    # pointers
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    ws_ptr,  # fp32 (SPLIT_K, M, N) partials, contiguous
    # sizes
    M,
    N,
    K,
    KB_PER_SPLIT,  # K blocks (of 128) per split
    # strides (elements)
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # == the 128-wide scale group
    GROUP_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # axis 0: output tile, row tiles fastest (they share each b tile); axis 1: run of K blocks
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_pid_m
    pid_n = pid // num_pid_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N

    # K blocks [kb_lo, kb_hi) of this split; pointers start at the first one
    num_kb = tl.cdiv(K, BLOCK_K)
    kb_lo = pid_k * KB_PER_SPLIT
    kb_hi = tl.minimum(kb_lo + KB_PER_SPLIT, num_kb)
    k_lo = kb_lo * BLOCK_K
    a_ptrs = (a_ptr + offs_m[:, None].to(tl.int64) * stride_am
              + (k_lo + offs_k[None, :]) * stride_ak)  # fmt: skip
    b_ptrs = (b_ptr + offs_n[None, :].to(tl.int64) * stride_bn
              + (k_lo + offs_k[:, None]) * stride_bk)  # fmt: skip
    as_ptrs = a_scale_ptr + offs_m * stride_asm + kb_lo * stride_ask
    bs_ptrs = b_scale_ptr + (offs_n // GROUP_N) * stride_bsn + kb_lo * stride_bsk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 partial of this K run
    for kb in range(kb_lo, kb_hi):
        mask_k = offs_k < K - kb * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        a_s = tl.load(as_ptrs, mask=mask_m, other=0.0).to(tl.float32)
        b_s = tl.load(bs_ptrs, mask=mask_n, other=0.0).to(tl.float32)
        if UPCAST:
            # CPU interpreter: dequantise the fp8 codes to fp32 and multiply exactly
            part = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            part = tl.dot(a, b)  # GPU: fp8 x fp8 tensor-core MMA, fp32 result
        acc += part * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        as_ptrs += stride_ask
        bs_ptrs += stride_bsk

    # plain store into this split's slice: no atomics, no zero-fill needed
    ws_ptrs = (ws_ptr + pid_k.to(tl.int64) * M * N
               + offs_m[:, None].to(tl.int64) * N + offs_n[None, :])  # fmt: skip
    tl.store(ws_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _block_scaled_mm_fp8_splitk_reduce_kernel(
    ws_ptr,  # fp32 (SPLIT_K, M * N)
    out_ptr,  # fp32 (M * N), contiguous
    NUMEL,  # M * N
    SPLIT_K: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # each program sums SPLIT_K partials for BLOCK consecutive outputs, in split order
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < NUMEL
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in tl.static_range(SPLIT_K):
        total += tl.load(ws_ptr + split * NUMEL + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, total, mask=mask)


def _launch_config(m: int, n: int, k: int) -> dict[str, int]:
    """Return decode tiles and a split count giving about two programs per SM (132 SMs)."""
    block_m = 16 if m <= 16 else (32 if m <= 32 else 64)
    block_n = 64
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    split_k = max(1, min(16, triton.cdiv(k, GROUP_SIZE), triton.cdiv(2 * 132, tiles)))
    return {"split_k": split_k, "block_m": block_m, "block_n": block_n,
            "num_warps": 4, "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def block_scaled_mm_fp8_splitk(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    *,
    split_k: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return the block-scaled product sum_kb (a_kb @ b_kb^T) * a_scales * b_scales in fp32.

    Args:
        a: (M, K) fp8 e4m3fn activations, any strides; meant for small M.
        b: (N, K) fp8 e4m3fn weights, any strides.
        a_scales: (M, cdiv(K, 128)) fp32, one scale per row and 128-wide K group.
        b_scales: (cdiv(N, 128), cdiv(K, 128)) fp32, one scale per 128x128 block of b.
        split_k: Runs of K blocks reduced separately (>= 1); None aims at two programs per SM.
        block_m: Rows per program (power of two >= 16); None picks by M.
        block_n: Columns per program (power of two >= 16); None = 64.
        num_warps: Warps per program of the GEMM pass; None = 4.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (M, N) fp32, contiguous.

    Raises:
        ValueError: The shapes, dtypes or split count do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need a (M, K) and b (N, K); got a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"need fp8 e4m3fn a and b; got {a.dtype} and {b.dtype}")
    if split_k is not None and split_k < 1:
        raise ValueError(f"split_k must be >= 1, got {split_k}")
    m, k = a.shape
    n = b.shape[0]
    kb, nb = triton.cdiv(k, GROUP_SIZE), triton.cdiv(n, GROUP_SIZE)
    if tuple(a_scales.shape) != (m, kb) or tuple(b_scales.shape) != (nb, kb):
        raise ValueError(
            f"need a_scales ({m}, {kb}) and b_scales ({nb}, {kb}) for a {tuple(a.shape)}, "
            f"b {tuple(b.shape)}; got {tuple(a_scales.shape)} and {tuple(b_scales.shape)}"
        )
    out = torch.empty((m, n), dtype=torch.float32, device=a.device)
    if m == 0 or n == 0:
        return out
    cfg = _launch_config(m, n, k)
    given = {"split_k": split_k, "block_m": block_m, "block_n": block_n,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    kb_per_split = triton.cdiv(kb, cfg["split_k"])
    ws = torch.empty((cfg["split_k"], m, n), dtype=torch.float32, device=a.device)
    a_s, b_s = a_scales, b_scales  # any float dtype: upcast to fp32 on load, in the kernel
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]), cfg["split_k"])
    _block_scaled_mm_fp8_splitk_kernel[grid](
        a, b, a_s, b_s, ws,
        m, n, k, kb_per_split,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        a_s.stride(0), a_s.stride(1),
        b_s.stride(0), b_s.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=GROUP_SIZE,
        GROUP_N=GROUP_SIZE, UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    _block_scaled_mm_fp8_splitk_reduce_kernel[(triton.cdiv(m * n, REDUCE_BLOCK),)](
        ws, out, m * n, SPLIT_K=cfg["split_k"], BLOCK=REDUCE_BLOCK, num_warps=4
    )
    return out


def reference(
    a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor
) -> torch.Tensor:
    """Return the block-scaled product in fp32 by dequantising a and b and one fp32 matmul."""
    m, k = a.shape
    n = b.shape[0]
    a_deq = a.float() * a_scales.float().repeat_interleave(GROUP_SIZE, 1)[:, :k]
    b_full = b_scales.float().repeat_interleave(GROUP_SIZE, 0).repeat_interleave(GROUP_SIZE, 1)
    b_deq = b.float() * b_full[:n, :k]
    return a_deq @ b_deq.T


def _quantize_groups(x: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise fp32 ``x`` to e4m3fn with one absmax scale per (rows x cols) block."""
    m, k = x.shape
    mb, kb = triton.cdiv(m, rows), triton.cdiv(k, cols)
    padded = torch.zeros(mb * rows, kb * cols, device=x.device)
    padded[:m, :k] = x
    blocks = padded.view(mb, rows, kb, cols)
    scale = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp_min(1e-10)  # (mb, kb)
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(mb * rows, kb * cols)[:m, :k].to(torch.float8_e4m3fn)
    return q.contiguous(), scale


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return quantised ``{"a", "b", "a_scales", "b_scales"}`` for ``shape = {"m", "n", "k"}``.

    ``dtype`` is the storage dtype of a and b and must be torch.float8_e4m3fn; both come from
    N(0, 1) fp32 with scale = max(absmax / 448, 1e-10) per 1x128 (a) and 128x128 (b) block.
    """
    if dtype != torch.float8_e4m3fn:
        raise ValueError(
            f"block_scaled_mm_fp8_splitk stores fp8 e4m3fn operands; got dtype {dtype}"
        )
    m, n, k = shape["m"], shape["n"], shape["k"]
    a, a_scales = _quantize_groups(torch.randn(m, k, device=device), 1, GROUP_SIZE)
    b, b_scales = _quantize_groups(torch.randn(n, k, device=device), GROUP_SIZE, GROUP_SIZE)
    return {"a": a, "b": b, "a_scales": a_scales, "b_scales": b_scales}

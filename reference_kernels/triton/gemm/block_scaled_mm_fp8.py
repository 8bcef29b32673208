"""
---
id: block_scaled_mm_fp8
title: FP8 block-scaled GEMM (1x128 activation, 128x128 weight scales), fp32 rescale per K block
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, fp32]
bound: compute
techniques: [fp8-tl-dot, block-scaled-dequant, per-k-block-rescale, grouped-program-order,
  fp32-accumulate]
status: reference
launcher: block_scaled_mm_fp8
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [128, 64, 32]
  group_m: [8, 1, 16]
  num_warps: [4, 8]
  num_stages: [3, 2, 4]
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
DeepSeek-style block-scaled FP8 GEMM out = sum_kb (a_kb @ b_kb^T) * a_scale[m, kb] * b_scale[n //
128, kb] with a (M, K) e4m3fn quantized per 1x128 token group and b (N, K) e4m3fn per 128x128 block
(e4m3fn: max 448, scales fp32). BLOCK_K equals the 128-wide scale group, so each K step is one fp8
tensor-core dot into a fresh fp32 partial that is rescaled by the outer product of the BLOCK_M row
scales and the BLOCK_N column scales (the column scale is gathered per column as n // 128, so
BLOCK_N need not align with the 128-row weight blocks) and added to the fp32 accumulator;
dequantisation costs two vector loads and one FMA per accumulator element per K block. Programs use
grouped-M ordering so row tiles share b tiles in L2. Bytes: 1 B per a and b element per tile pass, 4
B per scale (1/128 of the operands), 4 B per fp32 output. Limits: fp8 MMA needs sm_89+; one rescale
per 128-deep K step keeps the MMA pipeline from running long K chains; no split-K, so decode M
leaves SMs idle (see the split-K sibling); K that is not a multiple of 128 is zero-padded by masks.
"""

import os

import torch
import triton
import triton.language as tl

GROUP_SIZE = 128  # scale group along K (a and b) and along N (b)
FP8_MAX = 448.0  # e4m3fn


@triton.jit
def _block_scaled_mm_fp8_kernel(
    # pointers
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    out_ptr,
    # sizes
    M,
    N,
    K,
    # strides (elements)
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    stride_om,
    stride_on,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # == the 128-wide scale group
    GROUP_N: tl.constexpr,  # rows of b per scale block
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # grouped ordering: GROUP_M row tiles walk a column of tiles together for L2 reuse of b
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    first_pid_m = (pid // pids_per_group) * GROUP_M
    rows_in_group = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % pids_per_group) % rows_in_group
    pid_n = (pid % pids_per_group) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N

    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk
    # per-row scales of a, per-column (block n // GROUP_N) scales of b; advanced one group per step
    as_ptrs = a_scale_ptr + offs_m * stride_asm
    bs_ptrs = b_scale_ptr + (offs_n // GROUP_N) * stride_bsn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulation of rescaled partials
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
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

    out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int) -> dict[str, int]:
    """Return tiles by M bucket: narrow row tiles for decode, 128x128 for prefill."""
    block_m = 16 if m <= 16 else (32 if m <= 32 else (64 if m <= 64 else 128))
    num_warps = 8 if block_m == 128 else 4
    return {"block_m": block_m, "block_n": 128, "group_m": 8,
            "num_warps": num_warps, "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def block_scaled_mm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return the block-scaled product sum_kb (a_kb @ b_kb^T) * a_scales * b_scales in fp32.

    Args:
        a: (M, K) fp8 e4m3fn activations, any strides.
        b: (N, K) fp8 e4m3fn weights, any strides.
        a_scales: (M, cdiv(K, 128)) fp32, one scale per row and 128-wide K group.
        b_scales: (cdiv(N, 128), cdiv(K, 128)) fp32, one scale per 128x128 block of b.
        block_m: Rows per program (power of two >= 16); None picks by M.
        block_n: Columns per program (power of two >= 16); None = 128.
        group_m: Row tiles per L2 group; None = 8.
        num_warps: Warps per program; None picks by M.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (M, N) fp32, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need a (M, K) and b (N, K); got a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"need fp8 e4m3fn a and b; got {a.dtype} and {b.dtype}")
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
    cfg = _launch_config(m)
    given = {"block_m": block_m, "block_n": block_n, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    a_s, b_s = a_scales, b_scales  # any float dtype: upcast to fp32 on load, in the kernel
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _block_scaled_mm_fp8_kernel[grid](
        a, b, a_s, b_s, out,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        a_s.stride(0), a_s.stride(1),
        b_s.stride(0), b_s.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=GROUP_SIZE,
        GROUP_N=GROUP_SIZE, GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
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
        raise ValueError(f"block_scaled_mm_fp8 stores fp8 e4m3fn operands; got dtype {dtype}")
    m, n, k = shape["m"], shape["n"], shape["k"]
    a, a_scales = _quantize_groups(torch.randn(m, k, device=device), 1, GROUP_SIZE)
    b, b_scales = _quantize_groups(torch.randn(n, k, device=device), GROUP_SIZE, GROUP_SIZE)
    return {"a": a, "b": b, "a_scales": a_scales, "b_scales": b_scales}

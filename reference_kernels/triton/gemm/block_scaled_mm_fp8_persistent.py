"""
---
id: block_scaled_mm_fp8_persistent
title: FP8 block-scaled GEMM on a persistent grid, any power-of-two scale groups (atrex30)
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, fp32]
bound: compute
techniques: [fp8-tl-dot, block-scaled-dequant, per-k-block-rescale, persistent-grid,
  grouped-program-order, fp32-accumulate]
status: reference
launcher: block_scaled_mm_fp8_persistent
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [128, 32, 64]
  block_k: [128, 32, 64]
  group_m: [8, 1]
  programs_per_sm: [1, 2]
  num_warps: [4, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [M, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [x, input]}
  b: {shape: [N, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [w, weight]}
  a_scales: {shape: [M, ceil(K / group_k)], dtypes: [fp32], layout: any, aliases: [a_scale]}
  b_scales:
    {shape: [ceil(N / group_n), ceil(K / group_k)], dtypes: [fp32], layout: any,
     aliases: [b_scale]}
  group_n: {type: int, default: 128, aliases: [block_n_scale]}
  group_k: {type: int, default: 128, aliases: [block_k_scale]}
returns:
  - {name: out, shape: [M, N], dtype: fp32}
problem:
  shapes: [{m: 37, n: 200, k: 320}, {m: 5, n: 96, k: 192, group_n: 32, group_k: 64}]
  dtypes: [fp8_e4m3fn]
  atol: 0.001
  rtol: 0.0001
measured:
  - {device: NVIDIA H200, shape: block_scaled_mm/0, dtype: fp8_e4m3fn, latency_us: 25.44, sol_fraction: 0.1182, date: '2026-12-03'}
---
The atrex30 block_scaled_mm: out (M, N) fp32 = sum over K groups kg of (a[:, kg] @ b[:, kg]^T) *
a_scales[m, kg] * b_scales[n // group_n, kg], with a (M, K) e4m3fn scaled per 1 x group_k and b
(N, K) e4m3fn per group_n x group_k block (128 x 128 in DeepSeek-V3; any powers of two here). The
grid is persistent: min(tiles, programs_per_sm * SMs) programs, each walking output tiles t = pid,
pid + grid, ... in grouped-M order, so a whole prefill GEMM runs in one wave with no tail of
half-filled waves and the per-program setup (scale pointers, masks) is paid once per SM. BLOCK_K
divides group_k, so every K step lies in one scale group: its fp8 tensor-core dot lands in a fresh
fp32 partial that is multiplied by the outer product of the row scales a_scales[:, k // group_k]
and the column scales b_scales[n // group_n, k // group_k] (gathered per column, so BLOCK_N need
not align with group_n) and added to the fp32 accumulator. Bytes: 1 B per operand element per
tile pass, scales 1/group_k of that, 4 B per output. Limits: fp8 MMA needs sm_89+ and BLOCK_K >=
32 there; group_k must be a power of two >= 16 and a multiple of BLOCK_K (BLOCK_K is clipped to
it); decode M (one row tile) leaves SMs idle, as without persistence (see the split-K sibling).
"""

import os

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # e4m3fn


@triton.jit
def _block_scaled_mm_persistent_kernel(
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
    GROUP_N: tl.constexpr,  # rows of b per scale block
    GROUP_K: tl.constexpr,  # columns per scale group (a multiple of BLOCK_K)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    offs_k = tl.arange(0, BLOCK_K)
    # persistent loop over output tiles
    for tile in range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0)):
        first_m = (tile // per_group) * GROUP_M
        rows_in_group = min(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (tile % per_group) % rows_in_group
        pid_n = (tile % per_group) // rows_in_group
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_m = offs_m < M
        mask_n = offs_n < N
        a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk
        as_ptrs = a_scale_ptr + offs_m * stride_asm
        bs_ptrs = b_scale_ptr + (offs_n // GROUP_N) * stride_bsn

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k_start in range(0, K, BLOCK_K):
            mask_k = offs_k < K - k_start
            a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            kg = k_start // GROUP_K  # the scale group this whole K step lies in
            a_s = tl.load(as_ptrs + kg * stride_ask, mask=mask_m, other=0.0)
            b_s = tl.load(bs_ptrs + kg * stride_bsk, mask=mask_n, other=0.0)
            if UPCAST:
                # CPU interpreter: dequantise the fp8 codes to fp32 and multiply exactly
                part = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
            else:
                part = tl.dot(a, b)  # fp8 x fp8 tensor-core MMA, fp32 result
            acc += part * a_s[:, None] * b_s[None, :]
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk

        o_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :] * stride_on
        tl.store(o_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _launch_config(m: int) -> dict[str, int]:
    """Return tiles by M bucket (narrow row tiles for decode), one program per SM."""
    block_m = 16 if m <= 16 else (32 if m <= 32 else (64 if m <= 64 else 128))
    return {"block_m": block_m, "block_n": 128, "block_k": 128, "group_m": 8,
            "programs_per_sm": 1, "num_warps": 8 if block_m == 128 else 4,
            "num_stages": 3}  # fmt: skip


def block_scaled_mm_fp8_persistent(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    group_n: int = 128,
    group_k: int = 128,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return sum_kg (a_kg @ b_kg^T) * a_scales[:, kg] * b_scales[n // group_n, kg] in fp32.

    Args:
        a: (M, K) fp8 e4m3fn, any strides.
        b: (N, K) fp8 e4m3fn, any strides.
        a_scales: (M, cdiv(K, group_k)) fp32.
        b_scales: (cdiv(N, group_n), cdiv(K, group_k)) fp32.
        group_n: Rows of b per scale block (>= 1).
        group_k: Columns per scale group (power of two >= 16).
        block_m: Rows per program (power of two >= 16); None picks by M.
        block_n: Columns per program (power of two >= 16); None = 128.
        block_k: K step (power of two, clipped to group_k); None = 128.
        group_m: Row tiles per L2 group; None = 8.
        programs_per_sm: Persistent programs per SM; None = 1.
        num_warps: Warps per program; None picks by M.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (M, N) fp32, contiguous.

    Raises:
        ValueError: The shapes, dtypes or scale groups do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need a (M, K) and b (N, K); got a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"need fp8 e4m3fn a and b; got {a.dtype} and {b.dtype}")
    if group_n < 1 or group_k < 16 or group_k & (group_k - 1):
        raise ValueError(
            f"need group_n >= 1 and group_k a power of two >= 16; got {group_n}, {group_k}"
        )
    m, k = a.shape
    n = b.shape[0]
    kb, nb = triton.cdiv(k, group_k), triton.cdiv(n, group_n)
    if tuple(a_scales.shape) != (m, kb) or tuple(b_scales.shape) != (nb, kb):
        raise ValueError(
            f"need a_scales ({m}, {kb}) and b_scales ({nb}, {kb}) for a {tuple(a.shape)}, "
            f"b {tuple(b.shape)}, groups {group_n}x{group_k}; got {tuple(a_scales.shape)} and "
            f"{tuple(b_scales.shape)}"
        )
    if a_scales.dtype != torch.float32 or b_scales.dtype != torch.float32:
        raise ValueError(f"need fp32 scales; got {a_scales.dtype} and {b_scales.dtype}")
    out = torch.empty((m, n), dtype=torch.float32, device=a.device)
    if m == 0 or n == 0:
        return out
    cfg = _launch_config(m)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "programs_per_sm": programs_per_sm, "num_warps": num_warps,
             "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    block_k_eff = min(cfg["block_k"], group_k)  # a K step never straddles two scale groups
    if not _interpreting() and block_k_eff < 32:  # fp8 MMA takes K steps of 32 or more
        if group_k < 32:
            raise ValueError(f"fp8 tensor-core MMA needs K steps >= 32: group_k {group_k} < 32")
        block_k_eff = 32
    a_s, b_s = a_scales, b_scales
    tiles = triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"])
    grid = (min(tiles, cfg["programs_per_sm"] * _num_sms(a.device)),)
    _block_scaled_mm_persistent_kernel[grid](
        a, b, a_s, b_s, out,
        m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        a_s.stride(0), a_s.stride(1), b_s.stride(0), b_s.stride(1),
        out.stride(0), out.stride(1),
        GROUP_N=group_n, GROUP_K=group_k,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=block_k_eff,
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return out


def reference(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    group_n: int = 128,
    group_k: int = 128,
) -> torch.Tensor:
    """Return the product of the dequantised operands (scales repeated over their groups)."""
    m, k = a.shape
    n = b.shape[0]
    a_full = a_scales.float().repeat_interleave(group_k, 1)[:, :k]
    b_full = b_scales.float().repeat_interleave(group_n, 0)[:n].repeat_interleave(group_k, 1)
    return (a.float() * a_full) @ (b.float() * b_full[:, :k]).T


def _quantize(x: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise fp32 ``x`` to e4m3fn with one absmax scale per (rows x cols) block."""
    m, k = x.shape
    mb, kb = triton.cdiv(m, rows), triton.cdiv(k, cols)
    padded = torch.zeros(mb * rows, kb * cols, device=x.device)
    padded[:m, :k] = x
    blocks = padded.view(mb, rows, kb, cols)
    scale = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp_min(1e-10)
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).view(mb * rows, kb * cols)
    return q[:m, :k].to(torch.float8_e4m3fn).contiguous(), scale


def make_inputs(shape: dict, dtype: torch.dtype = torch.float8_e4m3fn, device: str = "cpu") -> dict:
    """Return quantised operands for ``{"m", "n", "k"}`` (+ ``"group_n"``, ``"group_k"``, 128).

    ``dtype`` must be torch.float8_e4m3fn; a and b come from N(0, 1), as in atrex30.
    """
    if dtype != torch.float8_e4m3fn:
        raise ValueError(f"block_scaled_mm_fp8_persistent stores fp8 e4m3fn operands; got {dtype}")
    gn, gk = shape.get("group_n", 128), shape.get("group_k", 128)
    a, a_scales = _quantize(torch.randn(shape["m"], shape["k"], device=device), 1, gk)
    b, b_scales = _quantize(torch.randn(shape["n"], shape["k"], device=device), gn, gk)
    return {"a": a, "b": b, "a_scales": a_scales, "b_scales": b_scales,
            "group_n": gn, "group_k": gk}  # fmt: skip

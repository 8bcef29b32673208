"""
---
id: gemm_w8a8_int8_per_token_channel
title: W8A8 int8 GEMM on a swizzled 2-D grid with exact int32 split-K atomics, bf16 dequant out
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int8, fp32, bf16]
bound: compute
techniques: [int8-tl-dot, int32-accumulate, swizzle2d-grid, split-k, int32-atomic-add,
  deterministic-split-k, dequant-epilogue, per-token-scale, per-channel-scale]
status: reference
launcher: gemm_w8a8_int8_per_token_channel
tuning:
  split_k: [1, 2, 4, 8]
  block_m: [32, 16, 64, 128]
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  group_m: [8, 1, 4]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [M, K], dtypes: [int8], layout: any, aliases: [x, input, x_q]}
  b: {shape: [N, K], dtypes: [int8], layout: any, aliases: [w, weight, w_q]}
  a_scale: {shape: [M], dtypes: [fp32], aliases: [scale_a, x_scale, input_scale]}
  b_scale: {shape: [N], dtypes: [fp32], aliases: [scale_b, w_scale, weight_scale]}
returns:
  - {name: c, shape: [M, N], dtype: bf16}
problem:
  shapes: [{m: 5, n: 40, k: 300}, {m: 33, n: 70, k: 64}]
  dtypes: [int8]
measured: []
---
C (M, N) bf16 = (A @ B^T) * a_scale[:, None] * b_scale[None, :] for int8 A (per-token scales) and
int8 B (per-output-channel scales). The launch grid is 3-D, (row tiles, column tiles, K slices),
and tl.swizzle2d remaps each (row, column) program pair so that GROUP_M consecutive row tiles sweep
a column band together (L2 reuse of B without the 1-D pid arithmetic). The K loop is int8 x int8
tl.dot into int32. What sets it apart from gemm_int8_dequant_epilogue (1-D grouped grid, one
program per tile, no split-K) is decode support: with SPLIT_K > 1 each program sums one K slice and
adds its int32 partial into an int32 (M, N) workspace with atomics; integer addition is exact and
associative, so unlike fp32 split-K the result is bitwise deterministic whatever order the atomics
land in. A second elementwise kernel then applies both scales in fp32 and rounds once to bf16. With
SPLIT_K = 1 the first kernel dequantises in its own epilogue and no workspace exists. Bytes: 1 B
per A and B element, 4 B per scale, 2 B per output (+ 8 B per output through the workspace when
split). Limits: exact int32 sums need K * 127 * 128 < 2^31 (K < 131072); the split workspace costs
M*N int32 atomics per slice, so split only when M is small; no zero points (symmetric only).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _w8a8_int8_kernel(
    # pointers
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    c_ptr,  # bf16 (M, N) when SPLIT_K == 1, else the int32 (M, N) workspace
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
    stride_cm,
    stride_cn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    # 2-D grid remapped in groups of GROUP_M row tiles
    pid_m, pid_n = tl.swizzle2d(
        tl.program_id(0), tl.program_id(1), tl.num_programs(0), tl.num_programs(1), GROUP_M
    )
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    k_lo = tl.program_id(2) * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = (a_ptr + offs_m[:, None].to(tl.int64) * stride_am
              + (k_lo + offs_k[None, :]) * stride_ak)  # fmt: skip
    b_ptrs = (b_ptr + offs_n[None, :].to(tl.int64) * stride_bn
              + (k_lo + offs_k[:, None]) * stride_bk)  # fmt: skip

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)  # exact
    for k_start in range(k_lo, k_hi, BLOCK_K):
        mask_k = offs_k < k_hi - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)  # int8 MMA into int32
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    mask = mask_m[:, None] & mask_n[None, :]
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    if SPLIT_K == 1:
        a_s = tl.load(a_scale_ptr + offs_m, mask=mask_m, other=0.0)
        b_s = tl.load(b_scale_ptr + offs_n, mask=mask_n, other=0.0)
        out = acc.to(tl.float32) * a_s[:, None] * b_s[None, :]
        tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        # integer atomics: exact and order-free, so the split sum is deterministic
        tl.atomic_add(c_ptrs, acc, mask=mask, sem="relaxed")


@triton.jit
def _w8a8_dequant_kernel(
    acc_ptr, a_scale_ptr, b_scale_ptr, c_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    # the split path's epilogue over the contiguous int32 workspace
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    mask = mask_m[:, None] & mask_n[None, :]
    idx = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    acc = tl.load(acc_ptr + idx, mask=mask, other=0)
    a_s = tl.load(a_scale_ptr + offs_m, mask=mask_m, other=0.0)
    b_s = tl.load(b_scale_ptr + offs_n, mask=mask_n, other=0.0)
    out = acc.to(tl.float32) * a_s[:, None] * b_s[None, :]
    tl.store(c_ptr + idx, out.to(c_ptr.dtype.element_ty), mask=mask)


def _launch_config(m: int, n: int, k: int) -> dict[str, int]:
    """Return tiles by M, and a split count when the tile grid is below ~2 programs per SM."""
    block_m = 16 if m <= 16 else (32 if m <= 32 else (64 if m <= 64 else 128))
    block_n, block_k = (128, 64) if m > 64 else (64, 128)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    split_k = 1 if tiles >= 264 else max(1, min(8, triton.cdiv(k, block_k), 264 // tiles))
    return {"split_k": split_k, "block_m": block_m, "block_n": block_n, "block_k": block_k,
            "group_m": 8, "num_warps": 8 if block_m == 128 else 4, "num_stages": 3}  # fmt: skip


def gemm_w8a8_int8_per_token_channel(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    *,
    split_k: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = (A @ B^T) * a_scale[:, None] * b_scale[None, :] in bf16.

    Args:
        a: (M, K) int8 activations, any strides.
        b: (N, K) int8 weights, any strides.
        a_scale: (M,) fp32 per-token scales.
        b_scale: (N,) fp32 per-output-channel scales.
        split_k: K slices (>= 1; > 1 adds the int32 workspace pass); None picks by grid size.
        block_m: Rows per program (power of two >= 16); None picks by M.
        block_n: Columns per program (power of two >= 16); None picks by M.
        block_k: K step (power of two >= 32); None picks by M.
        group_m: Row tiles per swizzle group; None = 8.
        num_warps: Warps per program; None picks by tile.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        C: (M, N) bf16, contiguous.

    Raises:
        ValueError: The shapes, dtypes or split count do not fit, or K could overflow int32.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype != torch.int8 or b.dtype != torch.int8:
        raise ValueError(f"need int8 A and B; got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    if tuple(a_scale.shape) != (m,) or tuple(b_scale.shape) != (n,):
        raise ValueError(
            f"need a_scale ({m},) and b_scale ({n},); got {tuple(a_scale.shape)} and "
            f"{tuple(b_scale.shape)} (flatten (M, 1) scales with .view(-1))"
        )
    if a_scale.dtype != torch.float32 or b_scale.dtype != torch.float32:
        raise ValueError(f"need fp32 scales; got {a_scale.dtype} and {b_scale.dtype}")
    if k * 128 * 128 >= 2**31:
        raise ValueError(f"K = {k} could overflow the int32 accumulator; K must be < 131072")
    if split_k is not None and split_k < 1:
        raise ValueError(f"split_k must be >= 1, got {split_k}")
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if m == 0 or n == 0:
        return c
    cfg = _launch_config(m, n, k)
    given = {"split_k": split_k, "block_m": block_m, "block_n": block_n, "block_k": block_k,
             "group_m": group_m, "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    a_s, b_s = a_scale.contiguous(), b_scale.contiguous()
    split = cfg["split_k"]
    k_per_split = triton.cdiv(triton.cdiv(k, cfg["block_k"]), split) * cfg["block_k"]
    target = c if split == 1 else torch.zeros((m, n), dtype=torch.int32, device=a.device)
    tiles = (triton.cdiv(m, cfg["block_m"]), triton.cdiv(n, cfg["block_n"]))
    _w8a8_int8_kernel[(*tiles, split)](
        a, b, a_s, b_s, target,
        m, n, k, k_per_split,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), target.stride(0), target.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], SPLIT_K=split,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    if split > 1:
        grid = (triton.cdiv(m, 32), triton.cdiv(n, 128))
        _w8a8_dequant_kernel[grid](target, a_s, b_s, c, m, n, BLOCK_M=32, BLOCK_N=128)
    return c


def reference(
    a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor
) -> torch.Tensor:
    """Return the exact integer product (fp64 holds it) scaled in fp32, rounded to bf16."""
    acc = (a.double() @ b.double().T).float()
    return (acc * a_scale.float()[:, None] * b_scale.float()[None, :]).to(torch.bfloat16)


def make_inputs(shape: dict, dtype: torch.dtype = torch.int8, device: str = "cpu") -> dict:
    """Return int8 ``a``, ``b`` and fp32 scales for ``{"m", "n", "k"}`` (absmax per row).

    ``dtype`` is the operands' storage dtype and must be torch.int8.
    """
    if dtype != torch.int8:
        raise ValueError(f"gemm_w8a8_int8_per_token_channel stores int8 operands; got {dtype}")
    m, n, k = shape["m"], shape["n"], shape["k"]
    x, w = torch.randn(m, k, device=device), torch.randn(n, k, device=device) * k**-0.5
    x_s = x.abs().amax(dim=1).clamp_min(1e-8) / 127.0
    w_s = w.abs().amax(dim=1).clamp_min(1e-8) / 127.0
    return {"a": torch.round(x / x_s[:, None]).to(torch.int8),
            "b": torch.round(w / w_s[:, None]).to(torch.int8),
            "a_scale": x_s, "b_scale": w_s}  # fmt: skip

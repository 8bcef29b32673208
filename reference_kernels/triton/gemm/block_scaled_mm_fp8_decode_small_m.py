"""
---
id: block_scaled_mm_fp8_decode_small_m
title: FP8 block-scaled GEMM for M <= 16 on a (N tile, K group) grid with CUDA-core dots and atomics
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_89, sm_90]
dtypes: [fp8_e4m3fn, fp32]
bound: memory
techniques: [gemv, cuda-core-dot, no-tensor-cores, split-k, k-group-grid, atomic-add-reduction,
  block-scaled-dequant, per-group-rescale, decode-gemm, fp32-accumulate]
status: reference
launcher: block_scaled_mm_fp8_decode_small_m
tuning:
  block_n: [32, 16, 64]
  block_k: [64, 32, 128]
  block_m: [16, 1, 4]
  num_warps: [4, 1, 8]
args:
  a: {shape: [M, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [x, input]}
  b: {shape: [N, K], dtypes: [fp8_e4m3fn], aliases: [w, weight]}
  a_scales: {shape: [M, KB], dtypes: [fp32], layout: any, aliases: [a_scale, scale_a]}
  b_scales: {shape: [NB, KB], dtypes: [fp32], layout: any, aliases: [b_scale, scale_b]}
  group_n: {type: int, default: 128, aliases: [block_size_n]}
  group_k: {type: int, default: 128, aliases: [block_size_k]}
returns:
  - {name: out, shape: [M, N], dtype: fp32}
problem:
  shapes: [{m: 5, n: 96, k: 192, group_n: 32, group_k: 64}, {m: 1, n: 40, k: 130, group_n: 16, group_k: 64}]
  dtypes: [fp8_e4m3fn]
  atol: 0.001
  rtol: 0.0001
measured:
  - {device: NVIDIA H200, shape: block_scaled_mm/0, dtype: fp8_e4m3fn, latency_us: 589.696, sol_fraction: 0.0047, date: '2026-12-03'}
---
atrex30's block_scaled_mm (out[i, j] = sum over K groups g of (a[i, g] . b[j, g]) * a_scales[i,
g] * b_scales[j // group_n, g]; fp8 e4m3fn operands, fp32 scales and output; any group_n,
group_k, ragged tails allowed) for decode, M <= 16 rows. At such M a tensor-core tile is mostly
padding and the step streams b (N * K bytes) once; the work is split over N and over K groups so
that even a small N fills the GPU: program (j, g, i) owns BLOCK_N columns, the g-th group of
group_k columns of K, and up to BLOCK_M rows. It loads (BLOCK_N, BLOCK_K) tiles of b (rows of the
(N, K) layout, contiguous along K), upcasts them to fp32 once, and serves every row of the block:
a BLOCK_K slice of a times the tile, reduced along K on the CUDA cores into an fp32 (BLOCK_M,
BLOCK_N) accumulator (exact fp32 products of fp8 values, so the only rounding is fp32 summation:
well inside the tensor-core tolerance). As the group is uniform in scale, the partial is rescaled
once by a_scales[i, g] * b_scales[j // group_n, g] and atomically added into the zeroed fp32
output. Grid cdiv(N, BLOCK_N) * ceil(K / group_k) * cdiv(M, BLOCK_M); e.g. N = 4096, K = 7168,
BLOCK_N 32: 128 * 56 programs. Bytes: b once (1 B per element), a once per column tile (small),
out M * N * 4 B per K group in atomics (L2). Limits: fp32 atomics make the summation order and so
the last bits nondeterministic run to run; FLOPs at CUDA-core rate, so beyond M ~ 16 use the
tl.dot designs (block_scaled_mm_fp8, block_scaled_mm_fp8_splitk).
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # e4m3fn


@triton.jit
def _bsmm_small_m_kernel(
    a_ptr, b_ptr, as_ptr, bs_ptr, out_ptr,
    M, N, K, GN, GK,
    stride_am, stride_ak, stride_bn, stride_asm, stride_ask, stride_bsn, stride_bsk,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    g = tl.program_id(1)
    row0 = tl.program_id(2) * BLOCK_M
    rows = row0 + tl.arange(0, BLOCK_M)
    mn = cols < N
    k_lo = g * GK
    k_hi = tl.minimum(k_lo + GK, K)
    kk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k = k0 + kk
        mk = k < k_hi
        w = tl.load(
            b_ptr + cols[:, None].to(tl.int64) * stride_bn + k[None, :],
            mask=mn[:, None] & mk[None, :],
            other=0.0,
        ).to(tl.float32)  # (BLOCK_N, BLOCK_K), shared by every row of the block
        for r in tl.static_range(BLOCK_M):
            x = tl.load(
                a_ptr + (row0 + r).to(tl.int64) * stride_am + k * stride_ak,
                mask=mk & (row0 + r < M),
                other=0.0,
            ).to(tl.float32)
            part = tl.sum(w * x[None, :], axis=1)  # CUDA-core dot products
            acc = tl.where((rows == row0 + r)[:, None], acc + part[None, :], acc)

    # the group's scales are constant over it: rescale once, then add into the output
    mm = rows < M
    sa = tl.load(as_ptr + rows.to(tl.int64) * stride_asm + g * stride_ask, mask=mm, other=0.0)
    sb = tl.load(bs_ptr + (cols // GN) * stride_bsn + g * stride_bsk, mask=mn, other=0.0)
    acc = acc * sa[:, None] * sb[None, :]
    out = out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :]
    tl.atomic_add(out, acc, mask=mm[:, None] & mn[None, :])


def block_scaled_mm_fp8_decode_small_m(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    group_n: int = 128,
    group_k: int = 128,
    *,
    block_n: int = 32,
    block_k: int = 64,
    block_m: int = 16,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return the block-scaled fp8 product a @ b^T in fp32, split over N tiles and K groups.

    Args:
        a: (M, K) float8_e4m3fn, any strides (M <= 16 is the target).
        b: (N, K) float8_e4m3fn, rows contiguous.
        a_scales: (M, ceil(K / group_k)) fp32, one scale per row and K group.
        b_scales: (ceil(N / group_n), ceil(K / group_k)) fp32, one per (group_n x group_k) block.
        group_n: Rows of b per scale block.
        group_k: Columns of K per scale group.
        block_n: Output columns per program (power of two).
        block_k: K step inside a group (power of two).
        block_m: Rows per program sharing each b tile (power of two).
        num_warps: Warps per program.

    Returns:
        out: (M, N) fp32, contiguous.

    Raises:
        ValueError: The shapes, dtypes, group sizes or block sizes do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need a (M, K) and b (N, K); got {tuple(a.shape)}, {tuple(b.shape)}")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"a and b must be float8_e4m3fn; got {a.dtype}, {b.dtype}")
    if group_n < 1 or group_k < 1:
        raise ValueError(f"group_n and group_k must be >= 1; got {group_n}, {group_k}")
    m, k = a.shape
    n = b.shape[0]
    kb, nb = triton.cdiv(k, group_k), triton.cdiv(n, group_n)
    if a_scales.shape != (m, kb) or b_scales.shape != (nb, kb):
        raise ValueError(
            f"need a_scales ({m}, {kb}) and b_scales ({nb}, {kb}) for groups {group_n}x{group_k}; "
            f"got {tuple(a_scales.shape)}, {tuple(b_scales.shape)}"
        )
    if a_scales.dtype != torch.float32 or b_scales.dtype != torch.float32:
        raise ValueError(f"scales must be fp32; got {a_scales.dtype}, {b_scales.dtype}")
    for name, value in (("block_n", block_n), ("block_k", block_k), ("block_m", block_m)):
        if value < 1 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two; got {value}")
    if b.stride(1) != 1:
        b = b.contiguous()
    out = torch.zeros((m, n), dtype=torch.float32, device=a.device)  # the atomics add into it
    if out.numel() == 0 or k == 0:
        return out
    grid = (triton.cdiv(n, block_n), kb, triton.cdiv(m, block_m))
    _bsmm_small_m_kernel[grid](
        a, b, a_scales, b_scales, out,
        m, n, k, group_n, group_k,
        a.stride(0), a.stride(1), b.stride(0),
        a_scales.stride(0), a_scales.stride(1), b_scales.stride(0), b_scales.stride(1),
        BLOCK_N=block_n, BLOCK_K=block_k, BLOCK_M=block_m, num_warps=num_warps,
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
    """Return the block-scaled product in fp32: dequantise a and b, one fp32 matmul (atrex30)."""
    m, k = a.shape
    n = b.shape[0]
    a_deq = a.float() * a_scales.float().repeat_interleave(group_k, 1)[:, :k]
    b_full = b_scales.float().repeat_interleave(group_n, 0).repeat_interleave(group_k, 1)
    return a_deq @ (b.float() * b_full[:n, :k]).T


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
    return q, scale


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return quantised operands for ``{"m", "n", "k"}`` and optional ``"group_n"``, ``"group_k"``.

    ``dtype`` must be torch.float8_e4m3fn (the storage of a and b); both come from N(0, 1) fp32
    with scale = max(absmax / 448, 1e-10) per 1 x group_k (a) and group_n x group_k (b) block.
    """
    if dtype != torch.float8_e4m3fn:
        raise ValueError(f"block_scaled_mm_fp8_decode_small_m stores e4m3fn operands; got {dtype}")
    m, n, k = shape["m"], shape["n"], shape["k"]
    gn, gk = shape.get("group_n", 128), shape.get("group_k", 128)
    a, a_scales = _quantize_groups(torch.randn(m, k, device=device), 1, gk)
    b, b_scales = _quantize_groups(torch.randn(n, k, device=device), gn, gk)
    return {
        "a": a,
        "b": b,
        "a_scales": a_scales,
        "b_scales": b_scales,
        "group_n": gn,
        "group_k": gk,
    }

"""
---
id: block_scaled_mm_fp8_k_major_scales_vectorised
title: FP8 block-scaled GEMM with K-major scale rows, one per-tile b scale and one fused rescale
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, fp32]
bound: compute
techniques: [fp8-tl-dot, block-scaled-dequant, k-major-scales, scalar-b-scale-per-tile,
  fused-rescale, per-k-block-rescale, grouped-program-order, fp32-accumulate]
status: reference
launcher: block_scaled_mm_fp8_k_major_scales_vectorised
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [128, 32, 64]
  group_m: [8, 1, 16]
  num_warps: [4, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [M, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [x, input]}
  b: {shape: [N, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [w, weight]}
  a_scales: {shape: [M, ceil(K / group_k)], dtypes: [fp32], layout: any, aliases: [a_scale]}
  b_scales:
    {shape: [ceil(N / group_n), ceil(K / group_k)], dtypes: [fp32], layout: any,
     aliases: [b_scale]}
  group_n: {type: int, default: 128, aliases: [block_size_n]}
  group_k: {type: int, default: 128, aliases: [block_size_k]}
returns:
  - {name: out, shape: [M, N], dtype: fp32}
problem:
  shapes: [{m: 5, n: 96, k: 192, group_n: 32, group_k: 64}, {m: 20, n: 40, k: 80, group_n: 32, group_k: 32}]
  dtypes: [fp8_e4m3fn]
  atol: 0.001
  rtol: 0.001
measured:
  - {device: NVIDIA H200, shape: block_scaled_mm/0, dtype: fp8_e4m3fn, latency_us: 14.944, sol_fraction: 0.1863, date: '2026-12-04'}
---
atrex30's block_scaled_mm (out[i, j] = sum over K groups g of (a[i, g] . b[j, g]) * a_scales[i,
g] * b_scales[j // group_n, g], fp8 e4m3fn operands, fp32 scales and output, ragged tails allowed)
with the scale traffic cut to the minimum. a_scales is read through its K-major view (KB, M) at
its own strides, with no copy: when its storage is K-major (as DeepGEMM stores them, a (KB, M)
buffer handed over transposed) the M stride is 1, Triton specialises it, and the BLOCK_M row
scales of K group g are one contiguous vector load per K step instead of BLOCK_M loads strided by
KB; row-major scales are read strided (a gather of BLOCK_M values per K step, from L2). BLOCK_N
is chosen to divide group_n, so all columns of a tile share one b block: its scale is a single
scalar load per K step, not a gathered vector.
BLOCK_K equals group_k, so each K step is one fp8 tensor-core dot into a fresh fp32 partial; the
row-scale vector is first multiplied by the b scalar (BLOCK_M multiplies) and the partial is then
folded into the accumulator with one fused multiply-add per element (acc += part * s[:, None]),
where the plain design spends two multiplies per element on an outer product of two vectors.
Bytes: 1 B per a and b element per pass, 4 B per row scale (contiguous) and one 4 B b scale per
tile and K step; 4 B per fp32 output. Grouped-M ordering shares b tiles in L2. Limits: group_k must
be a power of two >= 16 and group_n a multiple of 16 (BLOCK_N is the largest power of two
dividing it, at most the tuned value); the vector load needs K-major a_scales storage.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _bsmm_kmajor_kernel(
    # pointers
    a_ptr,
    b_ptr,
    as_ptr,  # fp32 (KB, M) view: row g holds every row's scale of K group g
    bs_ptr,  # fp32 (NB, KB)
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
    stride_asg,  # a scales: between K groups
    stride_asm,  # a scales: between rows (1 for K-major storage: one vector load)
    stride_bsn,
    stride_bsk,
    stride_om,
    stride_on,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # divides GROUP_N: one b scale per tile
    BLOCK_K: tl.constexpr,  # == group_k
    GROUP_N: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
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
    as_ptrs = as_ptr + offs_m * stride_asm  # a contiguous vector when stride_asm == 1
    bs_ptr_tile = bs_ptr + ((pid_n * BLOCK_N) // GROUP_N) * stride_bsn  # one b block per tile

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(0, tl.cdiv(K, BLOCK_K)):
        mask_k = offs_k < K - g * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        s = tl.load(as_ptrs + g * stride_asg, mask=mask_m, other=0.0)
        s = s * tl.load(bs_ptr_tile + g * stride_bsk)  # fold the b scalar into the row vector
        if UPCAST:
            # CPU interpreter: fp8 codes to fp32, exact products
            part = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            part = tl.dot(a, b)  # fp8 tensor cores into a fresh fp32 partial
        acc = tl.fma(part, s[:, None], acc)  # one fused rescale-and-add per element
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def block_scaled_mm_fp8_k_major_scales_vectorised(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    group_n: int = 128,
    group_k: int = 128,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return sum_g (a_g @ b_g^T) * a_scales[:, g] * b_scales[n // group_n, g] in fp32.

    Args:
        a: (M, K) fp8 e4m3fn, any strides.
        b: (N, K) fp8 e4m3fn, any strides.
        a_scales: (M, cdiv(K, group_k)) fp32.
        b_scales: (cdiv(N, group_n), cdiv(K, group_k)) fp32.
        group_n: Rows of b per scale block (a multiple of 16).
        group_k: Columns per scale group (a power of two >= 16).
        block_m: Rows per program (power of two >= 16); None picks by M.
        block_n: Upper bound on columns per program; None = 128 (then capped to divide group_n).
        group_m: Row tiles per L2 group; None = 8.
        num_warps: Warps per program; None picks by M.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (M, N) fp32, contiguous.

    Raises:
        ValueError: The shapes, dtypes or groups do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need a (M, K) and b (N, K); got a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"need fp8 e4m3fn a and b; got {a.dtype} and {b.dtype}")
    if group_k < 16 or group_k & (group_k - 1) or group_n < 16 or group_n % 16:
        raise ValueError(
            f"need group_k a power of two >= 16 and group_n a multiple of 16; got group_k="
            f"{group_k}, group_n={group_n}"
        )
    if a_scales.dtype != torch.float32 or b_scales.dtype != torch.float32:
        raise ValueError(f"need fp32 a_scales and b_scales; got {a_scales.dtype}, {b_scales.dtype}")
    m, k = a.shape
    n = b.shape[0]
    kb, nb = triton.cdiv(k, group_k), triton.cdiv(n, group_n)
    if tuple(a_scales.shape) != (m, kb) or tuple(b_scales.shape) != (nb, kb):
        raise ValueError(
            f"need a_scales ({m}, {kb}) and b_scales ({nb}, {kb}) for groups ({group_n}, "
            f"{group_k}); got {tuple(a_scales.shape)} and {tuple(b_scales.shape)}"
        )
    bm = block_m or (16 if m <= 16 else (32 if m <= 32 else (64 if m <= 64 else 128)))
    bn = block_n or 128
    if bm < 16 or bm & (bm - 1) or bn < 16 or bn & (bn - 1):
        raise ValueError(f"block_m and block_n must be powers of two >= 16; got {bm}, {bn}")
    bn = min(bn, group_n & -group_n)  # largest power of two dividing group_n: one b block per tile
    out = torch.empty((m, n), dtype=torch.float32, device=a.device)
    if m == 0 or n == 0:
        return out
    a_s_kmajor = a_scales.t()  # (KB, M) view at the caller's strides: no copy on the timed path
    b_s = b_scales
    warps = num_warps or (8 if bm == 128 else 4)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _bsmm_kmajor_kernel[grid](
        a, b, a_s_kmajor, b_s, out,
        m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        a_s_kmajor.stride(0), a_s_kmajor.stride(1), b_s.stride(0), b_s.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=group_k, GROUP_N=group_n, GROUP_M=group_m or 8,
        UPCAST=_interpreting(), num_warps=warps, num_stages=num_stages or 3,
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
    """Return the product of the dequantised operands in fp32."""
    m, k = a.shape
    n = b.shape[0]
    a_deq = a.float() * a_scales.float().repeat_interleave(group_k, 1)[:, :k]
    full = b_scales.float().repeat_interleave(group_n, 0).repeat_interleave(group_k, 1)
    return a_deq @ (b.float() * full[:n, :k]).T


def _quantize(x: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise fp32 ``x`` to e4m3fn with one absmax scale per (rows x cols) block."""
    m, k = x.shape
    mb, kb = triton.cdiv(m, rows), triton.cdiv(k, cols)
    padded = torch.zeros(mb * rows, kb * cols, device=x.device)
    padded[:m, :k] = x
    blocks = padded.view(mb, rows, kb, cols)
    scale = (blocks.abs().amax(dim=(1, 3)) / 448.0).clamp_min(1e-10)
    q = (blocks / scale[:, None, :, None]).clamp(-448.0, 448.0).view(mb * rows, kb * cols)
    return q[:m, :k].to(torch.float8_e4m3fn).contiguous(), scale


def make_inputs(shape: dict, dtype: torch.dtype = torch.float8_e4m3fn, device: str = "cpu") -> dict:
    """Return quantised inputs for ``{"m", "n", "k"}`` (+ ``"group_n"``, ``"group_k"``: 128)."""
    if dtype != torch.float8_e4m3fn:
        raise ValueError(f"this kernel stores fp8 e4m3fn operands; got dtype {dtype}")
    gn, gk = shape.get("group_n", 128), shape.get("group_k", 128)
    a, a_s = _quantize(torch.randn(shape["m"], shape["k"], device=device), 1, gk)
    b, b_s = _quantize(torch.randn(shape["n"], shape["k"], device=device), gn, gk)
    return {"a": a, "b": b, "a_scales": a_s, "b_scales": b_s, "group_n": gn, "group_k": gk}

"""
---
id: block_scaled_mm_fp8_stream_k
title: Stream-K FP8 block-scaled GEMM, scale groups split evenly over SMs, fp32 atomic tile fix-up
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, fp32]
bound: compute
techniques: [stream-k, persistent-grid, even-work-split, atomic-fixup, fp8-tl-dot,
  block-scaled-dequant, per-k-block-rescale, fp32-accumulate]
status: reference
launcher: block_scaled_mm_fp8_stream_k
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [128, 32, 64]
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
  group_n: {type: int, default: 128, aliases: [block_size_n]}
  group_k: {type: int, default: 128, aliases: [block_size_k]}
returns:
  - {name: out, shape: [M, N], dtype: fp32}
problem:
  shapes: [{m: 5, n: 96, k: 192, group_n: 32, group_k: 64}, {m: 37, n: 200, k: 320, group_n: 128, group_k: 128}]
  dtypes: [fp8_e4m3fn]
  atol: 0.001
  rtol: 0.001
measured:
  - {device: NVIDIA H200, shape: block_scaled_mm/0, dtype: fp8_e4m3fn, latency_us: 17.888, sol_fraction: 0.1628, date: '2026-12-03'}
---
atrex30's block_scaled_mm (out[i, j] = sum over K groups g of (a[i, g] . b[j, g]) * a_scales[i,
g] * b_scales[j // group_n, g], fp8 e4m3fn operands, fp32 scales and output, ragged tails allowed)
with stream-K scheduling. The unit of work is one scale group (BLOCK_K = group_k columns of K) of
one output tile: one fp8 MMA into a fresh fp32 partial, rescaled by the row scales of a and the
per-column scales of b and added to the tile's accumulator. All tiles * KB units are laid end to
end and cut into P = programs_per_sm * SMs ranges differing by at most one unit, so every SM gets
the same number of MMAs whatever the tile count (no partial last wave: a 1.3-wave grid of 128x128
tiles on 132 SMs loses ~35% to idling otherwise). A program walks its range tile by tile; a tile it
covers whole is stored directly, a tile it covers only in part is fixed up by adding its partial
with fp32 atomics into the zero-initialised output. Because the output is already fp32 no workspace,
tile counter or last-arriver epilogue is needed (unlike the bf16-out stream-K GEMM): the fix-up is
the atomic itself. Bytes: 1 B per a and b element per pass, 4 B per scale (1/group_k of the
operands), 4 B per output plus 4 B more per element of each split tile. Limits: split tiles are not
bitwise deterministic; the output memset is an extra launch; when tiles are many multiples of the
SM count plain tiling is as good.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _bsmm_stream_k_kernel(
    a_ptr, b_ptr, as_ptr, bs_ptr, out_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk,
    stride_asm, stride_ask, stride_bsn, stride_bsk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_N: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_iters = tl.cdiv(K, BLOCK_K)  # one unit = one scale group of one tile
    total = tl.cdiv(M, BLOCK_M) * tiles_n * k_iters
    base = total // num_programs
    extra = total % num_programs
    it = pid * base + tl.minimum(pid, extra)
    end = it + base + (pid < extra).to(tl.int32)
    offs_k = tl.arange(0, BLOCK_K)
    while it < end:
        tile = it // k_iters
        k_lo = it % k_iters
        k_hi = tl.minimum(k_iters, k_lo + (end - it))
        offs_m = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_m = offs_m < M
        mask_n = offs_n < N
        as_ptrs = as_ptr + offs_m * stride_asm
        bs_ptrs = bs_ptr + (offs_n // GROUP_N) * stride_bsn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for g in range(k_lo, k_hi):
            kk = g * BLOCK_K + offs_k
            mask_k = kk < K
            a = tl.load(a_ptr + offs_m[:, None].to(tl.int64) * stride_am + kk[None, :] * stride_ak,
                        mask=mask_m[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
            b = tl.load(b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + kk[:, None] * stride_bk,
                        mask=mask_k[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
            a_s = tl.load(as_ptrs + g * stride_ask, mask=mask_m, other=0.0)
            b_s = tl.load(bs_ptrs + g * stride_bsk, mask=mask_n, other=0.0)
            if UPCAST:
                # CPU interpreter: fp8 codes to fp32, exact products
                part = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
            else:
                part = tl.dot(a, b)  # fp8 tensor cores into a fresh fp32 partial
            acc += part * a_s[:, None] * b_s[None, :]
        out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :] * stride_on
        mask_c = mask_m[:, None] & mask_n[None, :]
        if (k_lo == 0) & (k_hi == k_iters):
            tl.store(out_ptrs, acc, mask=mask_c)  # whole tile: no fix-up
        else:
            tl.atomic_add(out_ptrs, acc, mask=mask_c, sem="relaxed")  # split tile: fp32 fix-up
        it += k_hi - k_lo


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def block_scaled_mm_fp8_stream_k(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    group_n: int = 128,
    group_k: int = 128,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return sum_g (a_g @ b_g^T) * a_scales[:, g] * b_scales[n // group_n, g] in fp32.

    Args:
        a: (M, K) fp8 e4m3fn, any strides.
        b: (N, K) fp8 e4m3fn, any strides.
        a_scales: (M, cdiv(K, group_k)) fp32.
        b_scales: (cdiv(N, group_n), cdiv(K, group_k)) fp32.
        group_n: Rows of b per scale block (>= 1).
        group_k: Columns per scale group, the unit of work (a power of two >= 16).
        block_m: Rows per tile (power of two >= 16); None picks by M.
        block_n: Columns per tile (power of two >= 16); None = 128.
        programs_per_sm: Programs per SM; None = 1.
        num_warps: Warps per program; None picks by M.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (M, N) fp32, contiguous.

    Raises:
        ValueError: The shapes, dtypes or groups do not fit, or K is 0.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need a (M, K) and b (N, K); got a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"need fp8 e4m3fn a and b; got {a.dtype} and {b.dtype}")
    if group_k < 16 or group_k & (group_k - 1) or group_n < 1:
        raise ValueError(
            f"need group_k a power of two >= 16 and group_n >= 1; got {group_k}, {group_n}"
        )
    m, k = a.shape
    n = b.shape[0]
    if k == 0:
        raise ValueError(f"K is 0 (a {tuple(a.shape)}): there are no iterations to split")
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
    out = torch.zeros((m, n), dtype=torch.float32, device=a.device)  # split tiles add into it
    if m == 0 or n == 0:
        return out
    units = triton.cdiv(m, bm) * triton.cdiv(n, bn) * kb
    grid = (min(units, (programs_per_sm or 1) * _num_sms(a.device)),)
    _bsmm_stream_k_kernel[grid](
        a, b, a_scales, b_scales, out,
        m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        a_scales.stride(0), a_scales.stride(1), b_scales.stride(0), b_scales.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=group_k, GROUP_N=group_n, UPCAST=_interpreting(),
        num_warps=num_warps or (8 if bm == 128 else 4), num_stages=num_stages or 3,
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

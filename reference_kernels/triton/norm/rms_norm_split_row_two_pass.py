"""
---
id: rms_norm_split_row_two_pass
title: RMSNorm of very wide rows split over (row, chunk) programs in two launches
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [split-row, two-pass, deterministic-partials, fp32-accumulate]
status: reference
launcher: rms_norm_split_row_two_pass
tuning:
  block_n: [4096, 1024, 2048, 8192]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: rms_norm/0, dtype: bf16, latency_us: 10.368, sol_fraction: 0.2901, date: '2026-12-03'}
---
RMSNorm y = x * rsqrt(mean(x^2) + eps) * w for few, very wide rows (a decode batch of 1..8 tokens
with N = 16k..128k): one program per row would leave almost every SM idle and hold a huge row in
registers. Instead the row is cut into C = cdiv(N, BLOCK_N) chunks and both launches use a (row,
chunk) grid. Stage 1: each program reduces its chunk's sum of squares in fp32 and writes it to a
(M, C) fp32 scratch (no atomics, so the result is deterministic). Stage 2: each program reads its
row's C partials (a few hundred bytes, L2-resident), sums them in a fixed order, and normalises and
stores its chunk. Bytes per element: x is read twice (once per stage; the second read often hits
L2 when M * N is small) and y written once, so 6 bytes per bf16 element instead of 4, traded for
M * C programs of parallelism. Limits: two launches (about 2 x the launch floor, which dominates at
small sizes); for many rows or N <= 8192 the one-pass kernels win; C must fit one block (N / BLOCK_N
<= 65536).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_partial_sumsq_kernel(
    x_ptr,
    part_ptr,
    N,
    stride_xm,
    stride_pm,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    chunk = tl.program_id(1)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(part_ptr + row * stride_pm + chunk, tl.sum(x * x, axis=0))


@triton.jit
def _rms_normalize_chunk_kernel(
    x_ptr,
    w_ptr,
    part_ptr,
    y_ptr,
    N,
    C,
    stride_xm,
    stride_pm,
    stride_ym,
    eps,
    BLOCK_N: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    # every chunk of a row sums the same partials in the same order: identical inv_rms
    offs_c = tl.arange(0, BLOCK_C)
    part = tl.load(part_ptr + row * stride_pm + offs_c, mask=offs_c < C, other=0.0)
    inv_rms = tl.rsqrt(tl.sum(part, axis=0) / N + eps)

    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(
        y_ptr + row * stride_ym + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask
    )


def _launch_config(n: int) -> dict[str, int]:
    """Return a chunk of at most 4096 elements (at least 16) and its warps."""
    block_n = max(16, min(triton.next_power_of_2(n), 4096))
    return {"block_n": block_n, "num_warps": min(max(block_n // 512, 1), 8)}


def rms_norm_split_row_two_pass(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return RMSNorm(x) * weight over the last dimension, each row split into chunks.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (N,) any float dtype.
        eps: Added to mean(x^2) before the reciprocal square root.
        block_n: Chunk width (power of two); None = min(next_pow2(N), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        y: same shape and dtype as ``x``, contiguous; fp32 math rounded once.

    Raises:
        ValueError: The weight's shape does not match, block_n is not a power of two, or the row
            has more than 65536 chunks.
    """
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    chunks = triton.cdiv(n, cfg["block_n"])
    if chunks > 65536:
        raise ValueError(f"row width {n} makes {chunks} chunks of {cfg['block_n']}; raise block_n")
    partials = torch.empty((m, chunks), dtype=torch.float32, device=x.device)
    grid = (m, chunks)
    _rms_partial_sumsq_kernel[grid](
        x2, partials, n, x2.stride(0), partials.stride(0),
        BLOCK_N=cfg["block_n"], num_warps=cfg["num_warps"],
    )  # fmt: skip
    _rms_normalize_chunk_kernel[grid](
        x2, weight.contiguous(), partials, y,
        n, chunks,
        x2.stride(0), partials.stride(0), y.stride(0),
        eps,
        BLOCK_N=cfg["block_n"], BLOCK_C=triton.next_power_of_2(chunks),
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Return RMSNorm(x) * weight computed in fp32 and cast to x's dtype (atrex30 rms_norm)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight"}`` for ``shape = {"rows", "hidden"}``: x ~ 0.02 N, w ~ 1 + 0.02 N."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = (torch.randn(rows, hidden, device=device) * 0.02).to(dtype)
    weight = (1.0 + 0.02 * torch.randn(hidden, device=device)).to(dtype)
    return {"x": x, "weight": weight}

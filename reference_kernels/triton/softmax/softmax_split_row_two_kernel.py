"""
---
id: softmax_split_row_two_kernel
title: Softmax of very long rows split across programs, partial (max, sum) then a normalise kernel
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques: [split-row, two-kernel, partial-reduction, online-softmax, fp32-accumulate]
status: reference
launcher: softmax_split_row_two_kernel
tuning:
  block_n: [4096, 1024, 2048, 8192]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [M, N], dtypes: [fp32, fp16, bf16], aliases: [logits, input]}
returns:
  - {name: y, shape: [M, N], dtype: x}
problem:
  shapes: [{rows: 2, vocab: 1000}, {rows: 3, vocab: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Softmax of a few very long rows (a decode batch of 1-8 rows over a 128K-256K vocabulary), where one
program per row would leave all but a handful of SMs idle. The row is cut into S = ceil(N / BLOCK_N)
chunks and the grid is (M, S) in both kernels. Kernel 1: each program reads its chunk once and
writes the chunk's max m_j and sum s_j = sum(exp(x - m_j)) to an fp32 (M, S) scratch. Kernel 2:
each program loads the row's S partials, combines them (m = max m_j, s = sum s_j * exp(m_j - m)),
re-reads its chunk and stores exp(x - m) / s. Every chunk program redoes the tiny combine instead of
a third launch. Traffic: x read twice (the second read mostly from L2) plus one write, 8 bytes of
scratch per chunk; two exponentials per element. Wins when M * S programs fill the GPU and M alone
does not. Limits: S is capped at 16384 chunks (the combine loads all partials at once); for many
rows it costs a second launch that softmax_online does not pay; an all -inf row gives NaN.
"""

import torch
import triton
import triton.language as tl

MAX_CHUNKS = 16384


@triton.jit
def _softmax_partials_kernel(
    # pointers
    x_ptr,
    pmax_ptr,
    psum_ptr,
    # sizes
    N,
    S,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may pass 2^31
    chunk = tl.program_id(1)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # an all -inf chunk contributes sum 0
    s = tl.sum(tl.exp(x - m_safe), axis=0)
    tl.store(pmax_ptr + row * S + chunk, m)
    tl.store(psum_ptr + row * S + chunk, s)


@triton.jit
def _softmax_normalise_kernel(
    # pointers
    x_ptr,
    y_ptr,
    pmax_ptr,
    psum_ptr,
    # sizes
    N,
    S,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # meta
    BLOCK_N: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    # combine the row's S partials (every chunk program does it: cheaper than a third launch)
    offs_s = tl.arange(0, BLOCK_S)
    mask_s = offs_s < S
    pm = tl.load(pmax_ptr + row * S + offs_s, mask=mask_s, other=float("-inf"))
    ps = tl.load(psum_ptr + row * S + offs_s, mask=mask_s, other=0.0)
    m = tl.max(pm, axis=0)
    scale = tl.where(pm == float("-inf"), 0.0, tl.exp(pm - m))
    s = tl.sum(ps * scale, axis=0)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=float("-inf")).to(tl.float32)
    y = tl.exp(x - m) / s
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax_split_row_two_kernel(
    x: torch.Tensor,
    *,
    block_n: int = 4096,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return softmax(x) over the last dimension, each row split over ceil(N / block_n) programs.

    Args:
        x: (M, N) fp32/fp16/bf16, last dimension contiguous.
        block_n: Elements per chunk program (a power of two).
        num_warps: Warps per program; None picks by block_n.

    Returns:
        y: (M, N), dtype of ``x``.

    Raises:
        ValueError: x not 2-D or of another dtype, a bad block_n, or more than 16384 chunks per row.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (M, N); got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"x must be fp32/fp16/bf16; got {x.dtype}")
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n must be a power of two >= 16; got {block_n}")
    m, n = x.shape
    chunks = triton.cdiv(n, block_n)
    if chunks > MAX_CHUNKS:
        raise ValueError(f"{chunks} chunks of block_n {block_n} > {MAX_CHUNKS}; raise block_n")
    if x.stride(-1) != 1:
        x = x.contiguous()
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    pmax = torch.empty((m, chunks), dtype=torch.float32, device=x.device)
    psum = torch.empty((m, chunks), dtype=torch.float32, device=x.device)
    warps = num_warps or min(max(block_n // 512, 1), 8)
    grid = (m, chunks)
    _softmax_partials_kernel[grid](
        x, pmax, psum, n, chunks, x.stride(0), BLOCK_N=block_n, num_warps=warps
    )
    _softmax_normalise_kernel[grid](
        x, y, pmax, psum,
        n, chunks,
        x.stride(0), y.stride(0),
        BLOCK_N=block_n, BLOCK_S=triton.next_power_of_2(chunks),
        num_warps=warps,
    )  # fmt: skip
    return y


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return softmax over the last dimension computed in fp32 and cast to x's dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "vocab"}``: logits ~ 4 * N(0, 1)."""
    return {"x": (4.0 * torch.randn(shape["rows"], shape["vocab"], device=device)).to(dtype)}

"""
---
id: softmax_looped_three_pass
title: Row softmax for wide rows in three chunked passes, max, then sum of exp, then the write
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques: [row-per-program, three-pass, chunked-row-loop, max-subtraction, fp32-accumulate]
status: reference
launcher: softmax_looped_three_pass
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [fp32, fp16, bf16], aliases: [logits, input]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, cols: 1000}, {rows: 2, cols: 129}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Softmax over the last dimension for rows wider than one register block, the textbook three-pass
form: one program per row loops over it in BLOCK_N chunks three times. Pass 1 keeps a per-lane
running max and reduces it to the row max m; pass 2 re-reads the row and sums exp(x - m) (one
exponential per element, no rescaling); pass 3 re-reads it and stores exp(x - m) / sum. Against the
online two-pass softmax it trades one more read of the row for one fewer exponential and multiply
per element in the first pass (the online form pays exp(m_old - m_new) for every element): the
extra reads come from L2 for rows up to a few MB, so it wins where the SFU, not DRAM, is the limit
(fp32 rows that stay in L2, older parts with slow exp). Bytes per element: 3 reads (2 usually from
L2) and one write; 2 exponentials. Limits: one program per row, so a few wide rows leave SMs idle;
rows far beyond L2 pay three DRAM reads; logits of -inf are fine, NaNs propagate.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_looped_three_pass_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_N)

    # pass 1: per-lane max, one cross-lane reduction after the loop
    m_lane = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_lane = tl.maximum(m_lane, x)
    row_max = tl.max(m_lane, axis=0)
    # a row of only -inf has no finite max: subtract 0 instead (every exp is then 0, the sum 0)
    row_max = tl.where(row_max == float("-inf"), 0.0, row_max)

    # pass 2: per-lane sum of exp(x - max); padding loads -inf and adds exp(-inf) = 0
    s_lane = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        s_lane += tl.exp(x - row_max)
    inv_sum = 1.0 / tl.sum(s_lane, axis=0)

    # pass 3: normalise and store, rounded once
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(
            y_row + cols, (tl.exp(x - row_max) * inv_sum).to(y_ptr.dtype.element_ty), mask=mask
        )


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk width (at most 1024, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(n), 1024)
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 8)}


def softmax_looped_three_pass(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return softmax(x) over the last dimension, reading each row three times in chunks.

    Args:
        x: (..., N) fp32/fp16/bf16, last dimension contiguous (copied otherwise).
        block_n: Chunk width (power of two); None = min(next_pow2(N), 1024).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        y: same shape and dtype as ``x``, contiguous; computed in fp32, rounded once.

    Raises:
        ValueError: x has no dimension, is not floating point, its row is empty, or block_n is not
            a power of two.
    """
    if x.dim() == 0 or not x.is_floating_point():
        raise ValueError(f"x must be a float tensor with >= 1 dimension; got {x.dtype} {x.shape}")
    n = x.shape[-1]
    if n == 0:
        raise ValueError(f"row width must be at least 1; x is {tuple(x.shape)}")
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _softmax_looped_three_pass_kernel[(x2.shape[0],)](
        x2, y,
        n,
        x2.stride(0), y.stride(0),
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return softmax(x) over the last dimension computed in fp32 and cast to x's dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "cols"}``: logits 3 * N(0, 1) + a per-row offset."""
    rows, cols = shape["rows"], shape["cols"]
    x = 3.0 * torch.randn(rows, cols, device=device) + 10.0 * torch.randn(rows, 1, device=device)
    return {"x": x.to(dtype)}

"""
---
id: softmax_online
title: Row softmax for wide rows, an online max-and-sum pass then a normalising pass, chunked
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques: [row-per-program, online-softmax, chunked-row-loop, max-subtraction, fp32-accumulate]
status: reference
launcher: softmax_online
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [fp32, fp16, bf16], aliases: [logits, input]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, cols: 1000}, {rows: 33, cols: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Softmax over the last dimension for rows of any width (vocabulary-sized logits): one program per
row loops over it in BLOCK_N chunks twice. Pass 1 keeps, per lane, a running max m and a running sum
s of exp(x - m), rescaling s by exp(m_old - m_new) whenever the max grows (the online softmax), and
combines the lanes once after the loop; pass 2 re-reads the row and stores exp(x - m) / s.
Registers are bounded by BLOCK_N whatever the width. Cost: x is read twice (the second read usually
hits L2 for rows up to a few MB), so DRAM traffic is 4 + 4 bytes per fp32 element when the row stays
in L2 and 8 + 4 when it does not, and each element takes two exponentials. Limits: one program per
row, so a few wide rows leave SMs idle (a split-row reduction would fix that); logits below -1e30
are treated as -inf; for rows that fit in registers softmax_rowwise reads x only once.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_online_kernel(
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

    # pass 1: per-lane running max and rescaled sum; a finite floor instead of -inf avoids
    # exp(-inf - -inf) = NaN on lanes that only ever see padding
    m = tl.full((BLOCK_N,), -1e30, dtype=tl.float32)
    s = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    # combine the lanes once: every lane's sum rescaled to the row max
    row_max = tl.max(m, axis=0)
    inv_sum = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)

    # pass 2: reload (mostly from L2), normalise, store
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - row_max) * inv_sum
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(n), 4096)
    num_warps = min(max(block_n // 256, 1), 8)
    return {"block_n": block_n, "num_warps": num_warps}


def softmax_online(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return softmax(x) over the last dimension, looping over each row in chunks.

    Args:
        x: (..., N) fp32/fp16/bf16, last dimension contiguous (copied otherwise); N may be large.
        block_n: Chunk width (power of two); None picks min(next_pow2(N), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        y: same shape and dtype as ``x``, contiguous; computed in fp32, rounded once.

    Raises:
        ValueError: x has no dimension, its row is empty, or block_n is not a power of two.
    """
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the softmax runs over the last)")
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
    _softmax_online_kernel[(x2.shape[0],)](
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

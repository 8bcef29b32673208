"""
---
id: cummax_rowwise_assoc
title: Row running maximum and its index by tl.associative_scan over (value, index) pairs
op_family: scan
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, associative-scan, tuple-combine-fn, carried-prefix]
status: reference
launcher: cummax_rowwise_assoc
tuning:
  block_n: [1024, 16, 64, 256, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [M, N], dtypes: [bf16, fp16, fp32], aliases: [input, values]}
returns:
  - {name: values, shape: [M, N], dtype: x}
  - {name: indices, shape: [M, N], dtype: int64}
problem:
  shapes: [{rows: 3, cols: 300, levels: 2}, {rows: 2, cols: 5}]
  dtypes: [fp32, bf16]
measured: []
---
values[m, i] = max(x[m, :i+1]) and indices[m, i] = where it occurred, exactly as torch.cummax(x,
dim=-1): on ties the latest index wins, and a NaN, once seen, is the maximum (latest NaN index).
One program per row walks it in BLOCK_N chunks. Each chunk is scanned in registers by
tl.associative_scan over the pair (value, column) with the combine fn "take the right pair if its
value is >= the left one or is NaN", which is the max under the total order (value with NaN on top,
then column) and hence associative; the scan is a log-depth shuffle network, not a serial loop. The
carry (the previous chunks' winner) is then combined into every element with the same rule (its
column is lower than the chunk's, so order is kept), and the chunk's last pair becomes the carry.
Values are compared in fp32 (exact for bf16/fp16) and stored as loaded, so the output is bit-exact.
Bytes: one read (2 B in bf16) and a 2 + 8 B write per element. Limits: one program per row (a long
1-D running max would want a reduce-then-scan split); -0.0 and +0.0 compare equal, so the later
one's index and sign are kept, as in torch.
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _take_right(v_left, i_left, v_right, i_right):
    """Combine fn: the right pair wins on >= or NaN (max with NaN on top, later index on ties)."""
    right = (v_right >= v_left) | (v_right != v_right)
    return tl.where(right, v_right, v_left), tl.where(right, i_right, i_left)


@triton.jit
def _cummax_rowwise_assoc_kernel(
    # pointers
    x_ptr,
    val_ptr,
    idx_ptr,  # int64
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_vm,
    stride_im,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    carry_v = tl.full((), float("-inf"), tl.float32)
    carry_i = tl.zeros((), tl.int32)  # replaced by column 0 (>= -inf always holds)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=float("-inf"))
        v, i = tl.associative_scan((x.to(tl.float32), cols), 0, _take_right)
        v, i = _take_right(carry_v, carry_i, v, i)  # the carry comes before the whole chunk
        tl.store(val_ptr + row * stride_vm + cols, v.to(val_ptr.dtype.element_ty), mask=mask)
        tl.store(idx_ptr + row * stride_im + cols, i.to(tl.int64), mask=mask)
        # masked tail lanes hold -inf, which never beats the last real pair: take the last lane
        last = offs == BLOCK_N - 1
        carry_v = tl.sum(tl.where(last, v, 0.0), axis=0)
        carry_i = tl.sum(tl.where(last, i, 0), axis=0)


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk (at most 1024, at least the row) and warps (about 8 elements a thread)."""
    block_n = min(1024, max(triton.next_power_of_2(n), 16))
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 16)}


def cummax_rowwise_assoc(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (values, indices) of the running maximum along the last dim, as torch.cummax.

    Args:
        x: (M, N) bf16/fp16/fp32 (a non-contiguous last dim is copied); N < 2^31.
        block_n: Columns per loop step (power of two); None = min(1024, next_pow2(N)).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        values: (M, N) in x's dtype; indices: (M, N) int64.

    Raises:
        ValueError: x is not 2D bf16/fp16/fp32.
    """
    if x.dim() != 2 or x.dtype not in _FLOATS:
        raise ValueError(f"x must be (M, N) bf16/fp16/fp32; got {tuple(x.shape)} {x.dtype}")
    x2 = x if x.stride(-1) == 1 else x.contiguous()
    m, n = x2.shape
    values = torch.empty((m, n), dtype=x.dtype, device=x.device)
    indices = torch.empty((m, n), dtype=torch.int64, device=x.device)
    if values.numel() == 0:
        return values, indices
    cfg = _launch_config(n)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _cummax_rowwise_assoc_kernel[(m,)](
        x2, values, indices,
        n,
        x2.stride(0), values.stride(0), indices.stride(0),
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return values, indices


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return torch.cummax(x, dim=-1) as a (values, indices) tuple."""
    values, indices = torch.cummax(x, dim=-1)
    return values, indices


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``{"rows", "cols"}``; ``"levels"`` rounds to few values (many ties)."""
    x = torch.randn(shape["rows"], shape["cols"], device=device)
    if shape.get("levels"):
        x = torch.round(x * shape["levels"]) / shape["levels"]
    return {"x": x.to(dtype)}

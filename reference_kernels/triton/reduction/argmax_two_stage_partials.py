"""
---
id: argmax_two_stage_partials
title: Row argmax split over column blocks, per-block (max, first index) partials then a 2nd reduce
op_family: reduction
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [split-row, two-pass-reduction, 2d-grid, lowest-index-tie-break,
  deterministic-reduction]
status: reference
launcher: argmax_two_stage_partials
tuning:
  num_splits: [16, 1, 4, 64, 256]
  block_n: [1024, 64, 256, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, N], dtypes: [bf16, fp16, fp32], aliases: [input, logits, scores]}
returns:
  - {name: indices, shape: [M], dtype: int64}
problem:
  shapes: [{rows: 3, cols: 1000}, {rows: 2, cols: 3000, levels: 1}]
  dtypes: [fp32, bf16]
measured: []
---
indices[m] = argmax over n of x[m, n], ties going to the lowest index (torch.argmax). Stage 1 runs
a (M, S) grid: program (m, s) walks its contiguous span of row m in BLOCK_N chunks, takes each
chunk's max and the lowest column holding it, and keeps the running best, replaced only by a
strictly larger chunk max (earlier chunks have lower columns, so the first maximum survives); it
writes one fp32 value and one int32 column per program. Stage 2 is one program per row that loads
its S partials (S <= 1024, one register tile), takes their max and the minimum column among the
partials equal to it; spans are ordered, so that is the row's first maximum. Every comparison is
exact (bf16/fp16 upcast to fp32 losslessly) and no atomics are used, so the result is deterministic
and bit-exact. Bytes: one read per element (2 B in bf16) plus 8 B per partial and 8 B per row out.
When it wins: a few very long rows (decode argmax over a 150K vocab, argmax of a flattened tensor),
where one program per row would leave most SMs idle. Limits: NaNs are not treated as the maximum
(torch.argmax picks the first NaN); N < 2^31; the second launch costs a few microseconds.
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)
_MAX_SPLITS = 1024


@triton.jit
def _argmax_partials_kernel(
    # pointers
    x_ptr,
    pval_ptr,  # fp32 (M, S)
    pidx_ptr,  # int32 (M, S)
    # sizes
    N,
    S,
    span,  # columns per split, a multiple of BLOCK_N
    # strides (elements; the last dim is contiguous)
    stride_xm,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    split = tl.program_id(1)
    offs = tl.arange(0, BLOCK_N)
    x_row = x_ptr + row * stride_xm
    start = split * span
    end = tl.minimum(start + span, N)
    best = tl.full((), float("-inf"), tl.float32)
    best_idx = start  # a span is never empty; an all -inf span reports its first column
    for c in range(start, end, BLOCK_N):
        cols = c + offs
        mask = cols < end
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        cmax = tl.max(x, axis=0)
        cidx = tl.min(tl.where(mask & (x == cmax), cols, 2147483647), axis=0)
        better = cmax > best  # strictly larger: the earlier (lower) column wins ties
        best_idx = tl.where(better, cidx, best_idx)
        best = tl.maximum(best, cmax)
    tl.store(pval_ptr + row * S + split, best)
    tl.store(pidx_ptr + row * S + split, best_idx)


@triton.jit
def _argmax_final_kernel(
    # pointers
    pval_ptr,  # fp32 (M, S)
    pidx_ptr,  # int32 (M, S)
    out_ptr,  # int64 (M,)
    # sizes
    S,
    # meta
    BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_S)
    mask = offs < S
    vals = tl.load(pval_ptr + row * S + offs, mask=mask, other=float("-inf"))
    idxs = tl.load(pidx_ptr + row * S + offs, mask=mask, other=2147483647)
    vmax = tl.max(vals, axis=0)
    win = tl.min(tl.where(mask & (vals == vmax), idxs, 2147483647), axis=0)
    tl.store(out_ptr + row, win.to(tl.int64))


def _launch_config(n: int) -> dict[str, int]:
    """Return splits (16), chunk (<= 1024, at least 16) and warps."""
    return {"num_splits": 16, "block_n": min(1024, max(triton.next_power_of_2(n), 16)),
            "num_warps": 4}  # fmt: skip


def argmax_two_stage_partials(
    x: torch.Tensor,
    *,
    num_splits: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the column of every row's maximum (lowest column on ties), as int64.

    Args:
        x: (M, N) bf16/fp16/fp32 with N >= 1 (a non-contiguous last dim is copied).
        num_splits: Stage-1 programs per row, 1..1024 (clamped to the chunk count); None = 16.
        block_n: Columns per loop step (power of two); None = min(1024, next_pow2(N)).
        num_warps: Warps per stage-1 program; None = 4.

    Returns:
        indices: (M,) int64.

    Raises:
        ValueError: x is not 2D bf16/fp16/fp32, N is 0 or >= 2^31, or num_splits is out of range.
    """
    if x.dim() != 2 or x.dtype not in _FLOATS:
        raise ValueError(f"x must be (M, N) bf16/fp16/fp32; got {tuple(x.shape)} {x.dtype}")
    m, n = x.shape
    if not 1 <= n < 2**31:
        raise ValueError(f"argmax needs 1 <= N < 2^31 columns; got N = {n}")
    cfg = _launch_config(n)
    given = {"num_splits": num_splits, "block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    if not 1 <= cfg["num_splits"] <= _MAX_SPLITS:
        raise ValueError(f"num_splits must be in [1, {_MAX_SPLITS}]; got {cfg['num_splits']}")
    out = torch.empty((m,), dtype=torch.int64, device=x.device)
    if m == 0:
        return out
    x2 = x if x.stride(-1) == 1 else x.contiguous()
    chunks = triton.cdiv(n, cfg["block_n"])
    span = triton.cdiv(chunks, min(cfg["num_splits"], chunks)) * cfg["block_n"]
    s = triton.cdiv(n, span)  # every split is non-empty
    pval = torch.empty((m, s), dtype=torch.float32, device=x.device)
    pidx = torch.empty((m, s), dtype=torch.int32, device=x.device)
    _argmax_partials_kernel[(m, s)](
        x2, pval, pidx,
        n, s, span,
        x2.stride(0),
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    _argmax_final_kernel[(m,)](
        pval, pidx, out, s, BLOCK_S=max(triton.next_power_of_2(s), 16), num_warps=1
    )  # fmt: skip
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return torch.argmax(x, dim=-1) (int64; first maximum on ties)."""
    return torch.argmax(x.float(), dim=-1)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``{"rows", "cols"}``; ``"levels"`` > 0 rounds to few values (ties)."""
    x = torch.randn(shape["rows"], shape["cols"], device=device)
    if shape.get("levels"):
        x = torch.round(x * shape["levels"]) / shape["levels"]
    return {"x": x.to(dtype)}

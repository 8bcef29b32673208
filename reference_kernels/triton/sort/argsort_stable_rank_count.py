"""
---
id: argsort_stable_rank_count
title: Stable row sort by counting each element's rank over the row, then scattering it into place
op_family: sort
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [rank-counting, comparison-tile, scatter-store, order-preserving-int-key, 2d-grid]
status: reference
launcher: argsort_stable_rank_count
tuning:
  block_i: [64, 16, 32, 128]
  block_j: [64, 16, 32, 128, 256]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, scores, values]}
  descending: {type: bool, default: false, aliases: [reverse]}
returns:
  - {name: values, shape: [T, N], dtype: x}
  - {name: indices, shape: [T, N], dtype: int64}
problem:
  shapes: [{rows: 3, cols: 100}, {rows: 2, cols: 50, descending: true}]
  dtypes: [fp32, bf16]
measured: []
---
torch.sort(x, dim=-1, stable=True, descending=descending) without a sorting network: the final
position of element i of a row is its rank, the number of elements that must precede it, i.e.
rank(i) = #{j: key_j < key_i} + #{j < i: key_j == key_i}, and the stable sort is the scatter
values[rank(i)] = x[i], indices[rank(i)] = i. Keys are int32s whose order is the float order
(negative floats have their 31 low bits flipped), with -0.0 folded into +0.0 (torch treats them as
equal) and every NaN mapped to the largest key, so NaNs go last in an ascending sort and first in a
descending one (the key is bit-inverted), as in torch. The grid is (T, cdiv(N, BLOCK_I)): each
program ranks BLOCK_I elements of one row against the whole row in (BLOCK_I x BLOCK_J) comparison
tiles (a row sum of the tile's predicate per step), so one row is spread over several programs and
there is no inter-program communication: ranks are unique, so the scatters never collide. Work:
N^2 compare-adds per row (compute-bound, not memory-bound: about N / BLOCK_J tile steps per
element); bytes: N * (N / BLOCK_I) key reads per row, mostly L1/L2 hits, plus one value and 8 B of
index written per element. When it wins: short and medium rows (N up to a few thousand) with few
rows, where a bitonic network (argsort_rowwise_packed) is limited to one program per row and
N <= 1024; it loses to a radix or merge sort for long rows. Limits: O(N^2); N < 2^31.
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _sort_key(x, DESCENDING: tl.constexpr):
    """int32 key whose signed order is the float order; -0.0 == +0.0, NaN largest."""
    x = x.to(tl.float32)
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    key = tl.where(x == 0.0, 0, key)  # -0.0 gets +0.0's key (no reliance on x + 0.0)
    key = tl.where(x != x, 2147483647, key)
    if DESCENDING:
        key = ~key  # order reversed; ties are still broken by ascending column
    return key


@triton.jit
def _argsort_rank_count_kernel(
    # pointers
    x_ptr,
    val_ptr,
    idx_ptr,  # int64
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_x,
    stride_v,
    stride_i,
    # meta
    DESCENDING: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    ii = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    i_mask = ii < N
    x_row = x_ptr + row * stride_x
    xi = tl.load(x_row + ii, mask=i_mask, other=0.0)
    ki = _sort_key(xi, DESCENDING)
    rank = tl.zeros((BLOCK_I,), tl.int32)
    jj0 = tl.arange(0, BLOCK_J)
    for start in range(0, N, BLOCK_J):
        jj = start + jj0
        kj = _sort_key(tl.load(x_row + jj, mask=jj < N, other=0.0), DESCENDING)
        before = (kj[None, :] < ki[:, None]) | (
            (kj[None, :] == ki[:, None]) & (jj[None, :] < ii[:, None])
        )
        before = before & (jj < N)[None, :]
        rank += tl.sum(before.to(tl.int32), axis=1)
    tl.store(val_ptr + row * stride_v + rank, xi, mask=i_mask)  # ranks are a permutation
    tl.store(idx_ptr + row * stride_i + rank, ii.to(tl.int64), mask=i_mask)


def argsort_stable_rank_count(
    x: torch.Tensor,
    descending: bool = False,
    *,
    block_i: int | None = None,
    block_j: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (values, indices) of a stable sort of every row, as torch.sort(stable=True).

    Args:
        x: (T, N) bf16/fp16/fp32 (a non-contiguous last dim is copied).
        descending: Sort largest first (NaNs first), ties still in column order.
        block_i: Elements ranked per program (power of two); None = min(64, next_pow2(N)).
        block_j: Columns compared per loop step (power of two); None = min(64, next_pow2(N)).
        num_warps: Warps per program; None = 4.

    Returns:
        values: (T, N) in x's dtype; indices: (T, N) int64.

    Raises:
        ValueError: x is not 2D bf16/fp16/fp32.
    """
    if x.dim() != 2 or x.dtype not in _FLOATS:
        raise ValueError(f"x must be (T, N) bf16/fp16/fp32; got {tuple(x.shape)} {x.dtype}")
    x2 = x if x.stride(-1) == 1 else x.contiguous()
    t, n = x2.shape
    values = torch.empty((t, n), dtype=x.dtype, device=x.device)
    indices = torch.empty((t, n), dtype=torch.int64, device=x.device)
    if values.numel() == 0:
        return values, indices
    tile = min(64, max(triton.next_power_of_2(n), 16))
    cfg = {"block_i": tile, "block_j": tile, "num_warps": 4}
    given = {"block_i": block_i, "block_j": block_j, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _argsort_rank_count_kernel[(t, triton.cdiv(n, cfg["block_i"]))](
        x2, values, indices,
        n,
        x2.stride(0), values.stride(0), indices.stride(0),
        DESCENDING=bool(descending),
        BLOCK_I=cfg["block_i"], BLOCK_J=cfg["block_j"], num_warps=cfg["num_warps"],
    )  # fmt: skip
    return values, indices


def reference(x: torch.Tensor, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Return torch.sort(x, dim=-1, descending=descending, stable=True) as a tuple."""
    values, indices = torch.sort(x, dim=-1, descending=descending, stable=True)
    return values, indices


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x", "descending"}`` for ``{"rows", "cols"}``: N(0, 1) rounded to 1/4 (ties)."""
    x = torch.round(torch.randn(shape["rows"], shape["cols"], device=device) * 4) / 4
    return {"x": x.to(dtype), "descending": shape.get("descending", False)}

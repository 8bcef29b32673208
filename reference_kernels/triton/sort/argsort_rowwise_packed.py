"""
---
id: argsort_rowwise_packed
title: Stable argsort of short rows by one tl.sort of packed (value key, index) int64 words
op_family: sort
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: latency
techniques: [multi-row-tile, in-register-sort, bitonic-sort, packed-sort-key,
  order-preserving-int-key]
status: reference
launcher: argsort_rowwise_packed
tuning:
  block_m: [1, 2, 4, 8]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, scores, values]}
  descending: {type: bool, default: false, aliases: [reverse]}
returns:
  - {name: values, shape: [T, N], dtype: x}
  - {name: indices, shape: [T, N], dtype: int64}
problem:
  shapes: [{rows: 3, cols: 100}, {rows: 5, cols: 33, descending: true}]
  dtypes: [fp32, bf16]
measured: []
---
Sorts every row of x (N <= 1024) and returns the sorted values and their original column indices,
stable like torch.sort(stable=True). Each element becomes one int64 word: the high 32 bits are an
int32 key whose signed order is the float order (negative floats have their 31 low bits flipped;
-0.0 is folded into +0.0 and every NaN gets the largest key, so NaNs sort last as in torch; for a
descending sort the key is bit-inverted), the low 32 bits are the column. Equal values then differ
only in the column, so a single ascending tl.sort of the words (Triton's bitonic network over
registers and shuffles; it carries no payload, hence the packing) gives a stable argsort; the
column is the low word and the value is gathered back from x (exact, sign of zero and NaN payloads
kept). Each program sorts BLOCK_M rows at once (a (BLOCK_M, next_pow2(N)) tile sorted along axis
1). Bytes: one read, one gather (L1 hits) and a 2 + 8 B write per element in bf16; work is
O(N log^2 N) compare-exchanges per row, so it is latency-bound. Limits: N <= 1024 (registers);
padding lanes carry the largest word and sort past N; in Triton's interpreter tl.sort runs the same
network elementwise in NumPy (about 1 s per 1K elements), so CPU tests use short rows.
"""

import torch
import triton
import triton.language as tl

_MAX_N = 1024


@triton.jit
def _ordered_key(x):
    """Map fp32 to int32 whose signed order is the float order (-0.0 -> +0.0, NaN largest)."""
    x = tl.where(x == 0.0, 0.0, x)  # -0.0 and +0.0 compare equal, as in torch.sort
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return tl.where(x != x, 0x7FFFFFFF, key)


@triton.jit
def _argsort_rowwise_packed_kernel(
    # pointers
    x_ptr,
    vals_ptr,
    idx_ptr,  # int64 (T, N)
    # sizes
    T,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_vm,
    stride_im,
    # meta
    DESCENDING: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < T)[:, None] & (cols < N)[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    x = tl.load(x_ptr + rows64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    key = _ordered_key(x)
    if DESCENDING:
        key = ~key  # reverses the signed order; the column still breaks ties upward (stable)
    packed = (key.to(tl.int64) << 32) | cols[None, :].to(tl.int64)
    packed = tl.where(mask, packed, 0x7FFFFFFFFFFFFFFF)  # padding sorts past column N - 1
    ranked = tl.sort(packed, dim=1)  # ascending along each row

    src = (ranked & 0x7FFFFFFF).to(tl.int32)  # the low word is the original column (< 2^31)
    vals = tl.load(x_ptr + rows64 * stride_xm + src, mask=mask, other=0.0)  # exact gather
    tl.store(vals_ptr + rows64 * stride_vm + cols[None, :], vals, mask=mask)
    tl.store(idx_ptr + rows64 * stride_im + cols[None, :], src.to(tl.int64), mask=mask)


def _launch_config(t: int, n: int) -> dict[str, int]:
    """Return the tile (up to 1024 elements, at most the row count) and warps."""
    block_n = triton.next_power_of_2(n)
    block_m = max(1, min(1024 // block_n, triton.next_power_of_2(t), 8))
    return {"block_m": block_m, "block_n": block_n, "num_warps": 4}


def argsort_rowwise_packed(
    x: torch.Tensor,
    descending: bool = False,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (values, indices) of a stable sort of every row of x.

    Args:
        x: (T, N) bf16/fp16/fp32 with N <= 1024, last dimension contiguous.
        descending: Sort largest first (ties still in column order).
        block_m: Rows per program (power of two); None picks up to 1024 elements per tile.
        num_warps: Warps per program; None = 4.

    Returns:
        values: (T, N) in x's dtype; indices: (T, N) int64 original columns.

    Raises:
        ValueError: x is not 2D floating point, or N > 1024.
    """
    if x.dim() != 2 or x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"x must be (T, N) bf16/fp16/fp32; got {tuple(x.shape)} {x.dtype}")
    if x.shape[1] > _MAX_N:
        raise ValueError(
            f"row length N = {x.shape[1]} > {_MAX_N} does not fit in one tile; use torch.sort "
            "or a merge of sorted chunks"
        )
    x = x if x.stride(-1) == 1 else x.contiguous()
    t, n = x.shape
    values = torch.empty((t, n), dtype=x.dtype, device=x.device)
    indices = torch.empty((t, n), dtype=torch.int64, device=x.device)
    if values.numel() == 0:
        return values, indices
    cfg = _launch_config(t, n)
    given = {"block_m": block_m, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _argsort_rowwise_packed_kernel[(triton.cdiv(t, cfg["block_m"]),)](
        x, values, indices,
        t, n,
        x.stride(0), values.stride(0), indices.stride(0),
        DESCENDING=bool(descending), BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return values, indices


def reference(x: torch.Tensor, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Return torch.sort(x, dim=-1, descending=descending, stable=True) as (values, indices)."""
    out = torch.sort(x, dim=-1, descending=descending, stable=True)
    return out.values, out.indices


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x", "descending"}`` for ``{"rows", "cols"}`` (+ optional ``"descending"``).

    Values are N(0, 1) rounded to multiples of 0.25, so rows hold ties that test stability.
    """
    x = torch.round(torch.randn(shape["rows"], shape["cols"], device=device) * 4.0) / 4.0
    return {"x": x.to(dtype), "descending": shape.get("descending", False)}

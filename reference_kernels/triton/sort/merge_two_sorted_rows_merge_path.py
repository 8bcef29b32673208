"""
---
id: merge_two_sorted_rows_merge_path
title: Stable merge of two sorted rows per batch, every output placed by a merge-path binary search
op_family: sort
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, int32, int64]
bound: latency
techniques: [merge-path, binary-search, vectorized-search, gather-loads, 2d-grid]
status: reference
launcher: merge_two_sorted_rows_merge_path
tuning:
  block: [256, 16, 64, 1024]
  num_warps: [4, 1, 2, 8]
args:
  a: {shape: [R, NA], dtypes: [bf16, fp16, fp32, int32, int64], aliases: [x, left]}
  b: {shape: [R, NB], dtypes: [bf16, fp16, fp32, int32, int64], like: a, aliases: [y, right]}
returns:
  - {name: values, shape: [R, 'NA + NB'], dtype: a}
  - {name: indices, shape: [R, 'NA + NB'], dtype: int64}
problem:
  shapes: [{rows: 3, na: 100, nb: 57}, {rows: 2, na: 40, nb: 0}]
  dtypes: [fp32, bf16]
measured: []
---
Merges row r of a (ascending) with row r of b (ascending) into values (R, NA + NB), stable with a
first on ties, and returns indices into cat([a, b], -1) (column i of a is i, column j of b is
NA + j): exactly torch.sort(torch.cat([a, b], -1), stable=True) for sorted inputs, without a
sort. The grid is (R, cdiv(NA + NB, BLOCK)); every lane owns one output position k and finds, by
binary search along the k-th cross diagonal of the merge matrix (merge path), how many elements of a
precede it: the smallest i in [max(0, k - NB), min(k, NA)] with a[i] > b[k - 1 - i]. Then
j = k - i and the output is a[i] if a[i] <= b[j] (or b is exhausted), else b[j]. All lanes search
in lockstep for ceil(log2(min(NA, NB) + 1)) + 1 steps of two gathered loads each, so there is no
divergence, no shared memory and no dependence between programs: each BLOCK of outputs is written
once, contiguously. Bytes: about 2 * log2(N) gathered reads per output (mostly L1/L2 hits) plus
one write of the value and 8 B of index. Comparisons are exact (bf16/fp16 upcast losslessly), so
the output is bit-exact. When it wins: merging sorted candidate lists (top-k of two shards, two
sorted score lists) where a full re-sort would cost O(N log^2 N). Limits: NaNs are not ordered
(sorted inputs with NaNs give an unspecified merge); rows must already be sorted (unchecked).
"""

import torch
import triton
import triton.language as tl

_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.int32, torch.int64)


@triton.jit
def _merge_path_kernel(
    # pointers
    a_ptr,
    b_ptr,
    val_ptr,
    idx_ptr,  # int64
    # sizes
    NA,
    NB,
    iters,  # binary-search steps: enough for a range of min(NA, NB) + 1
    # strides (elements; the last dim is contiguous)
    stride_a,
    stride_b,
    stride_v,
    stride_i,
    # meta
    UPCAST: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    out_mask = k < NA + NB
    a_row = a_ptr + row * stride_a
    b_row = b_ptr + row * stride_b
    lo = tl.maximum(k - NB, 0)
    hi = tl.minimum(k, NA)
    for _ in range(iters):  # lanes whose range is empty just skip their loads
        active = (lo < hi) & out_mask
        mid = (lo + hi) // 2
        av = tl.load(a_row + mid, mask=active, other=0)
        bv = tl.load(b_row + (k - 1 - mid), mask=active, other=0)
        if UPCAST:
            av = av.to(tl.float32)
            bv = bv.to(tl.float32)
        a_first = av <= bv  # a[mid] is among the first k outputs (a wins ties: stable)
        lo = tl.where(active & a_first, mid + 1, lo)
        hi = tl.where(active & ~a_first, mid, hi)
    i = lo
    j = k - i
    has_a = out_mask & (i < NA)
    has_b = out_mask & (j < NB)
    av = tl.load(a_row + i, mask=has_a, other=0)
    bv = tl.load(b_row + j, mask=has_b, other=0)
    if UPCAST:
        take_a = has_a & (~has_b | (av.to(tl.float32) <= bv.to(tl.float32)))
    else:
        take_a = has_a & (~has_b | (av <= bv))
    tl.store(val_ptr + row * stride_v + k, tl.where(take_a, av, bv), mask=out_mask)
    src = tl.where(take_a, i, NA + j).to(tl.int64)
    tl.store(idx_ptr + row * stride_i + k, src, mask=out_mask)


def merge_two_sorted_rows_merge_path(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    block: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (values, indices) of the stable row-wise merge of sorted a and b.

    Args:
        a: (R, NA) ascending rows; bf16/fp16/fp32/int32/int64 (last dim made contiguous).
        b: (R, NB) ascending rows, same dtype and R as a.
        block: Outputs per program (power of two); None = min(256, next_pow2(NA + NB)).
        num_warps: Warps per program; None = 4.

    Returns:
        values: (R, NA + NB) in a's dtype; indices: (R, NA + NB) int64 into cat([a, b], -1).

    Raises:
        ValueError: a and b are not 2-D with the same row count and a supported, equal dtype.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(
            f"a and b must be (R, NA) and (R, NB) with the same R; "
            f"got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a.dtype not in _DTYPES or b.dtype != a.dtype:
        raise ValueError(f"a and b need one dtype among {_DTYPES}; got {a.dtype} and {b.dtype}")
    a2 = a if a.stride(-1) == 1 else a.contiguous()
    b2 = b if b.stride(-1) == 1 else b.contiguous()
    r, na = a2.shape
    nb = b2.shape[1]
    values = torch.empty((r, na + nb), dtype=a.dtype, device=a.device)
    indices = torch.empty((r, na + nb), dtype=torch.int64, device=a.device)
    if values.numel() == 0:
        return values, indices
    cfg = {"block": min(256, max(triton.next_power_of_2(na + nb), 16)), "num_warps": 4}
    given = {"block": block, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    iters = (min(na, nb) + 1).bit_length() + 1
    grid = (r, triton.cdiv(na + nb, cfg["block"]))
    _merge_path_kernel[grid](
        a2, b2, values, indices,
        na, nb, iters,
        a2.stride(0), b2.stride(0), values.stride(0), indices.stride(0),
        UPCAST=a.dtype in (torch.bfloat16, torch.float16),
        BLOCK=cfg["block"], num_warps=cfg["num_warps"],
    )  # fmt: skip
    return values, indices


def reference(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return torch.sort(cat([a, b], -1), stable=True) as (values, indices)."""
    values, indices = torch.sort(torch.cat([a, b], dim=-1), dim=-1, stable=True)
    return values, indices


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return sorted ``{"a", "b"}`` for ``{"rows", "na", "nb"}``; few distinct values (ties)."""
    r = shape["rows"]
    if dtype in (torch.int32, torch.int64):
        a = torch.randint(-50, 50, (r, shape["na"]), device=device, dtype=dtype)
        b = torch.randint(-50, 50, (r, shape["nb"]), device=device, dtype=dtype)
    else:
        a = (torch.round(torch.randn(r, shape["na"], device=device) * 8) / 8).to(dtype)
        b = (torch.round(torch.randn(r, shape["nb"], device=device) * 8) / 8).to(dtype)
    return {"a": torch.sort(a, dim=-1).values, "b": torch.sort(b, dim=-1).values}

"""
---
id: topk_radix_select
title: Per-row top-k values and ids by 8-bit radix select (4 histogram passes), then a gather
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, int64]
bound: memory
techniques:
  [row-per-program, radix-select, histogram, order-preserving-int-key, chunked-loop,
   stream-compaction]
status: reference
launcher: topk_radix_select
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  logits: {shape: [T, V], dtypes: [fp32], aliases: [x, scores, input]}
  k: {type: int, default: 50, aliases: [top_k, topk]}
returns:
  - {name: values, shape: [T, k], dtype: fp32}
  - {name: ids, shape: [T, k], dtype: int64}
problem:
  shapes: [{rows: 3, vocab: 1000, k: 17}, {rows: 2, vocab: 300, k: 300}]
  dtypes: []
measured: []
---
Top-k selection (values and ids, like torch.topk with sorted=False) without sorting: each fp32 is
mapped to a uint32 key with the same order (sign bit set -> all bits flipped, else the sign bit
set), and one program per row finds the k-th largest key one byte at a time, most significant
first. Pass p (4 passes) streams the row in BLOCK_V chunks and builds a 256-bin tl.histogram of
byte p of the keys whose higher bytes equal the prefix found so far; a suffix count over the 256
bins picks the bin that holds the remaining k-th element and how many larger elements lie above it.
After 4 passes the threshold key is exact, along with c, the number of keys strictly above it. A
fifth pass compacts: keys above the threshold and the first k - c keys equal to it (lowest index
first, so ties are deterministic) are written with a running offset plus a within-chunk prefix sum,
giving values and int64 ids in ascending-id order (not sorted by value). Cost: 5 reads of the row
(4 bytes each; from L2 for vocab rows up to ~1 MB) versus 33 for a bit-by-bit bisection, and no
data-dependent trip counts. Limits: 1 <= k <= V; NaN is not supported; one program per row, so few
rows leave SMs idle (split the row for decode batches of 1).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _ordered_key(x):
    """Map fp32 to uint32 keys of the same order (negatives flipped, positives get the sign bit)."""
    bits = x.to(tl.uint32, bitcast=True)
    flip = tl.where((bits >> 31) == 1, 0xFFFFFFFF, 0x80000000).to(tl.uint32)
    return bits ^ flip


@triton.jit
def _topk_radix_select_kernel(
    # pointers
    x_ptr,
    val_ptr,
    id_ptr,
    # sizes
    V,
    K,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    offs = tl.arange(0, BLOCK_V)
    bins = tl.arange(0, 256)

    prefix = tl.zeros((), dtype=tl.uint32)  # bytes of the threshold found so far
    known = tl.zeros((), dtype=tl.uint32)  # mask of those bytes
    remaining = K  # rank of the threshold among keys matching the prefix
    for p in tl.static_range(4):
        shift = 24 - 8 * p  # constexpr: p comes from static_range
        hist = tl.zeros((256,), dtype=tl.int32)
        for start in range(0, V, BLOCK_V):
            cols = start + offs
            key = _ordered_key(tl.load(x_row + cols, mask=cols < V, other=0.0))
            match = (cols < V) & ((key & known) == prefix)
            digit = ((key >> shift) & 0xFF).to(tl.int32)
            hist += tl.histogram(digit, 256, mask=match)
        # above[b] = count in bins > b; the threshold's bin is the one with above < rem <= above+h
        above = tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0)
        hit = (above < remaining) & (above + hist >= remaining)
        chosen = tl.max(tl.where(hit, bins, -1), axis=0)
        remaining -= tl.sum(tl.where(bins == chosen, above, 0), axis=0)
        prefix = prefix | (chosen.to(tl.uint32) << shift)
        known = known | (tl.full((), 0xFF, tl.uint32) << shift)

    # compaction: keys above the threshold, then the first `remaining` keys equal to it
    written = tl.zeros((), dtype=tl.int32)
    ties_taken = tl.zeros((), dtype=tl.int32)
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        valid = cols < V
        x = tl.load(x_row + cols, mask=valid, other=0.0)
        key = _ordered_key(x)
        tie = valid & (key == prefix)
        tie_rank = ties_taken + tl.cumsum(tie.to(tl.int32), axis=0)
        take = (valid & (key > prefix)) | (tie & (tie_rank <= remaining))
        pos = written + tl.cumsum(take.to(tl.int32), axis=0) - 1
        tl.store(val_ptr + row * stride_om + pos, x, mask=take)
        tl.store(id_ptr + row * stride_om + pos, cols.to(tl.int64), mask=take)
        written += tl.sum(take.to(tl.int32), axis=0)
        ties_taken += tl.sum(tie.to(tl.int32), axis=0)


def topk_radix_select(
    logits: torch.Tensor,
    k: int = 50,
    *,
    block_v: int = 1024,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the k largest values of each row and their column ids, in ascending-id order.

    Args:
        logits: (T, V) fp32, last dimension contiguous, no NaN.
        k: How many to select per row, 1 <= k <= V.
        block_v: Chunk width of the row loops (power of two).
        num_warps: Warps per program.

    Returns:
        (values, ids): (T, k) fp32 and (T, k) int64; ties at the k-th value keep the lowest ids.

    Raises:
        ValueError: logits is not 2-D fp32, k is out of range, or block_v is bad.
    """
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"logits must be (T, V) fp32; got {logits.dtype} {tuple(logits.shape)}")
    t, v = logits.shape
    if not 1 <= k <= v:
        raise ValueError(f"k = {k} must be in [1, V = {v}]")
    if block_v < 256 or block_v & (block_v - 1):
        raise ValueError(f"block_v {block_v} must be a power of two >= 256")
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    values = torch.empty((t, k), dtype=torch.float32, device=logits.device)
    ids = torch.empty((t, k), dtype=torch.int64, device=logits.device)
    if t == 0:
        return values, ids
    _topk_radix_select_kernel[(t,)](
        logits, values, ids,
        v, k,
        logits.stride(0), values.stride(0),
        BLOCK_V=block_v,
        num_warps=num_warps,
    )  # fmt: skip
    return values, ids


def reference(logits: torch.Tensor, k: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """Return torch.topk's values and ids reordered by ascending id (ties: lowest ids, stable)."""
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :k]
    ids = torch.sort(order, dim=-1).values
    return torch.gather(logits, 1, ids), ids


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "vocab", "k"}``: N(0, 1) logits, mixed signs."""
    logits = torch.randn(shape["rows"], shape["vocab"], device=device, dtype=torch.float32)
    return {"logits": logits, "k": shape.get("k", 50)}

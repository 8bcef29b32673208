"""
---
id: bitonic_topk_small_k
title: Row top-k (k <= 64) streaming chunk sorts of packed keys into a bitonic-merged running top-k
op_family: sort
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: latency
techniques: [row-per-program, chunked-loop, packed-sort-key, bitonic-merge,
  order-preserving-int-key]
status: reference
launcher: bitonic_topk_small_k
tuning:
  block_n: [512, 64, 128, 256, 1024]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, scores, logits]}
  k: {type: int, default: 8, aliases: [top_k, topk]}
returns:
  - {name: values, shape: [T, k], dtype: x}
  - {name: indices, shape: [T, k], dtype: int64}
problem:
  shapes: [{rows: 3, cols: 200, k: 8}, {rows: 2, cols: 50, k: 50}]
  dtypes: [fp32, bf16]
measured: []
---
The k largest entries of every row, largest first, with their columns (torch.topk(sorted=True); for
equal values the lower column comes first), for k <= 64. Neither tl.topk nor a full-row sort: one
program per row keeps a running top-K (K = next_pow2(k)) of int64 words sorted descending. A word
is an order-preserving int32 key of the value (NaN largest, -0.0 folded into +0.0) in the high 32
bits and 2^31 - 1 - column in the low bits, so words are unique and larger means "ranks first".
Each BLOCK_N chunk is sorted ascending with tl.sort; viewing it as (BLOCK_N / K, K) rows, the max
over axis 0 is its last row, the chunk's top K in ascending order. The elementwise maximum of the
descending running top-K and that ascending list is a bitonic sequence holding exactly the top K of
both (the half-cleaner step of a bitonic merge), and a K-wide tl.sort restores the order. After the
loop the low words give the columns and the values are gathered back from x (exact). Work per
chunk: a BLOCK_N sort (O(BLOCK_N log^2 BLOCK_N)) plus a K sort; bytes: one read per element plus
k gathers and 2 + 8 B per output in bf16. Rows of any length work (the chunk loop streams them),
and the sort of small chunks keeps registers low, so it suits top-k over vocab or expert scores with
few rows; iterative max extraction would cost k full-row reductions instead. Limits: k <= 64 and
k <= N; one program per row; in Triton's interpreter tl.sort runs the bitonic network in NumPy
(about 1 s per 1K elements), so CPU tests use short rows.
"""

import torch
import triton
import triton.language as tl

_MAX_K = 64


@triton.jit
def _ordered_key(x):
    """Map fp32 to int32 whose signed order is the float order (-0.0 -> +0.0, NaN largest)."""
    x = tl.where(x == 0.0, 0.0, x)  # -0.0 and +0.0 are equal values
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return tl.where(x != x, 0x7FFFFFFF, key)


@triton.jit
def _bitonic_topk_small_k_kernel(
    # pointers
    x_ptr,
    vals_ptr,
    idx_ptr,  # int64 (T, k)
    # sizes
    N,
    k,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_vm,
    stride_im,
    # meta
    K_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    x_row = x_ptr + row * stride_xm
    offs = tl.arange(0, BLOCK_N)
    lowest = -0x7FFFFFFFFFFFFFFF - 1  # int64 minimum: padding and the empty top-k

    top = tl.full((K_PAD,), lowest, tl.int64)  # running top-K words, descending
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        # high word: value key; low word: 2^31 - 1 - column, so ties rank the lower column first
        word = (_ordered_key(x).to(tl.int64) << 32) | (0x7FFFFFFF - cols).to(tl.int64)
        word = tl.where(mask, word, lowest)
        ranked = tl.sort(word)  # ascending
        # the last of the (BLOCK_N / K) rows of K is the chunk's top K, ascending
        chunk_top = tl.max(tl.reshape(ranked, (BLOCK_N // K_PAD, K_PAD)), axis=0)
        # descending vs ascending: the elementwise max holds the top K of both (bitonic)
        top = tl.sort(tl.maximum(top, chunk_top), descending=True)

    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < k
    src = 0x7FFFFFFF - (top & 0x7FFFFFFF).to(tl.int32)  # original columns (all < N for rank < k)
    vals = tl.load(x_row + src, mask=mask_k, other=0.0)  # exact gather of the values
    tl.store(vals_ptr + row * stride_vm + offs_k, vals, mask=mask_k)
    tl.store(idx_ptr + row * stride_im + offs_k, src.to(tl.int64), mask=mask_k)


def _launch_config(n: int, k_pad: int) -> dict[str, int]:
    """Return the chunk width (up to 512, at least 2 * K) and warps."""
    block_n = max(min(triton.next_power_of_2(n), 512), 2 * k_pad)
    return {"block_n": block_n, "num_warps": 4}


def bitonic_topk_small_k(
    x: torch.Tensor,
    k: int = 8,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (values, indices) of the k largest entries of every row, largest first.

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous.
        k: Entries per row, 1 <= k <= min(64, N).
        block_n: Chunk per loop step (power of two, raised to at least 2 * next_pow2(k)); None
            = max(min(next_pow2(N), 512), 2 * next_pow2(k)).
        num_warps: Warps per program; None = 4.

    Returns:
        values: (T, k) in x's dtype; indices: (T, k) int64 columns.

    Raises:
        ValueError: x is not 2D floating point, or k is outside [1, min(64, N)].
    """
    if x.dim() != 2 or x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"x must be (T, N) bf16/fp16/fp32; got {tuple(x.shape)} {x.dtype}")
    if not 1 <= k <= min(_MAX_K, x.shape[1]):
        raise ValueError(
            f"k must be in [1, min({_MAX_K}, N = {x.shape[1]})]; got {k} (larger k: sort the row)"
        )
    x = x if x.stride(-1) == 1 else x.contiguous()
    t, n = x.shape
    values = torch.empty((t, k), dtype=x.dtype, device=x.device)
    indices = torch.empty((t, k), dtype=torch.int64, device=x.device)
    if t == 0:
        return values, indices
    k_pad = max(triton.next_power_of_2(k), 2)
    cfg = _launch_config(n, k_pad)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    cfg["block_n"] = max(cfg["block_n"], 2 * k_pad)  # the chunk must hold at least two K-rows
    _bitonic_topk_small_k_kernel[(t,)](
        x, values, indices,
        n, k,
        x.stride(0), values.stride(0), indices.stride(0),
        K_PAD=k_pad, BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return values, indices


def reference(x: torch.Tensor, k: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the top k per row, largest first, ties to the lower column (via a stable sort)."""
    out = torch.sort(x, dim=-1, descending=True, stable=True)
    return out.values[:, :k], out.indices[:, :k]


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x", "k"}`` for ``{"rows", "cols", "k"}``; N(0, 1) values in ``dtype``."""
    return {"x": torch.randn(shape["rows"], shape["cols"], device=device).to(dtype),
            "k": shape.get("k", 8)}  # fmt: skip

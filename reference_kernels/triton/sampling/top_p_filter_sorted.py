"""
---
id: top_p_filter_sorted
title: Top-p (nucleus) mask on descending-sorted probabilities by an in-program chunked cumsum
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, carried-prefix-sum, predicated-loads, early-cutoff]
status: reference
launcher: top_p_filter_sorted
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  sorted_probs: {shape: [T, V], dtypes: [bf16, fp16, fp32], aliases: [probs, probs_sort]}
  top_p: {type: float, default: 0.9, aliases: [p, topp]}
returns:
  - {name: out, shape: [T, V], dtype: sorted_probs}
problem:
  shapes: [{rows: 3, vocab: 1000}, {rows: 9, vocab: 64, top_p: 0.5}]
  dtypes: [fp32, bf16]
measured: []
---
Nucleus filtering of probabilities that the caller already sorted in descending order along each
row (the sort's indices map the result back): entry i is kept while the sum of the entries before it
is below top_p, so the first entry whose running sum reaches top_p is the last one kept (entry 0 is
always kept); the rest become 0 (not renormalised). One program per row walks the row in BLOCK_V
chunks: tl.cumsum gives the chunk's inclusive prefix in fp32, a scalar carry adds the earlier
chunks, and the exclusive prefix (carry + inclusive - p) decides each entry. Once the carry has
reached top_p the remaining chunks load nothing (the loads are predicated off) and only write
zeros, so a peaked distribution reads a few chunks and writes the row. Bytes: at most one read and
one write per entry (2 + 2 B in bf16). Limits: the input must be sorted (not checked); the fp32
running sum can differ from another summation order by a few ulps, which moves the cut only when a
prefix lies within that distance of top_p; one program per row.
Not atrex30's topk_filter: that operator keeps each row's k largest logits
(a rank cut on unsorted logits, the rest -inf), while this is a nucleus (top-p) cut on sorted
probabilities (the rest 0).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _top_p_filter_sorted_kernel(
    # pointers
    p_ptr,
    out_ptr,
    # sizes
    V,
    # strides (elements; the last dim is contiguous)
    stride_pm,
    stride_om,
    # scalars
    top_p,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_V)

    carry = tl.zeros((), tl.float32)  # fp32 sum of all earlier chunks
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        mask = cols < V
        # past the cut every entry is dropped: skip the loads, still write the zeros
        # (the carry is broadcast by hand: the interpreter cannot & a 0-d bool with a vector)
        live = mask & (tl.full((BLOCK_V,), 0.0, tl.float32) + carry < top_p)
        p = tl.load(p_ptr + row * stride_pm + cols, mask=live, other=0.0).to(tl.float32)
        before = carry + tl.cumsum(p, axis=0) - p  # exclusive prefix sum of the row
        keep = before < top_p
        tl.store(out_ptr + row * stride_om + cols, tl.where(keep, p, 0.0), mask=mask)
        carry += tl.sum(p, axis=0)


def _launch_config(v: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_v = min(triton.next_power_of_2(v), 4096)
    return {"block_v": block_v, "num_warps": min(max(block_v // 256, 1), 16)}


def top_p_filter_sorted(
    sorted_probs: torch.Tensor,
    top_p: float = 0.9,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Zero every sorted probability after the first one whose running sum reaches top_p.

    Args:
        sorted_probs: (T, V) bf16/fp16/fp32, each row sorted descending, last dim contiguous.
        top_p: Nucleus mass in (0, 1]; 1.0 keeps every entry whose predecessors sum below 1.
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        out: (T, V) in ``sorted_probs``' dtype, contiguous; dropped entries are 0.

    Raises:
        ValueError: sorted_probs is not 2D floating point, or top_p is outside (0, 1].
    """
    dtypes = (torch.bfloat16, torch.float16, torch.float32)
    if sorted_probs.dim() != 2 or sorted_probs.dtype not in dtypes:
        raise ValueError(
            f"sorted_probs must be (T, V) bf16/fp16/fp32; got {tuple(sorted_probs.shape)} "
            f"{sorted_probs.dtype}"
        )
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")
    p = sorted_probs if sorted_probs.stride(-1) == 1 else sorted_probs.contiguous()
    t, v = p.shape
    out = torch.empty((t, v), dtype=p.dtype, device=p.device)
    if out.numel() == 0:
        return out
    cfg = _launch_config(v)
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _top_p_filter_sorted_kernel[(t,)](
        p, out,
        v,
        p.stride(0), out.stride(0),
        float(top_p),
        BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(sorted_probs: torch.Tensor, top_p: float = 0.9) -> torch.Tensor:
    """Zero entries whose exclusive fp32 prefix sum is >= top_p (entry 0 always kept)."""
    p = sorted_probs.float()
    before = torch.cumsum(p, dim=-1) - p
    return p.masked_fill(before >= top_p, 0.0).to(sorted_probs.dtype)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"sorted_probs", "top_p"}`` for ``{"rows", "vocab"}`` (+ optional ``"top_p"``).

    Probabilities are softmax(N(0, 1) * 2) rows sorted descending; top_p defaults to 0.9.
    """
    logits = torch.randn(shape["rows"], shape["vocab"], device=device) * 2.0
    probs = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True).values.to(dtype)
    return {"sorted_probs": probs, "top_p": shape.get("top_p", 0.9)}

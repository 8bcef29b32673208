"""
---
id: cross_entropy_rowwise
title: Per-row cross-entropy loss with ignore_index in one pass over the vocab, fp32 accumulate
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques:
  [row-per-program, online-softmax, log-sum-exp, single-pass, chunked-row-loop, fp32-accumulate]
status: reference
launcher: cross_entropy_rowwise
tuning:
  block_v: [2048, 256, 512, 1024, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  logits: {shape: [T, V], dtypes: [fp32, fp16, bf16], aliases: [x, input, scores]}
  labels: {shape: [T], dtypes: [int32, int64], aliases: [target, targets]}
  ignore_index: {type: int, default: -100}
returns:
  - {name: loss, shape: [T], dtype: fp32}
problem:
  shapes: [{rows: 4, vocab: 1000}, {rows: 9, vocab: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Unreduced cross entropy: loss[t] = logsumexp(logits[t]) - logits[t, labels[t]], and 0 where
labels[t] == ignore_index (as torch's reduction="none"). One program per row reads the row exactly
once: in BLOCK_V chunks it updates a per-lane running max and rescaled sum of exponentials and, in
the same loop, picks the label's logit out of the chunk by comparing column indices with the label
(a masked sum, no separate gather), so there is no second pass and no scattered load. Ignored rows
exit before touching the row. Traffic: 2 or 4 bytes per logit read once, 4 bytes per row written;
one exp per logit plus one per lane per chunk. Limits: a label outside [0, V) other than
ignore_index gets loss NaN from the kernel (the launcher never reads labels on the host; the
separate check_inputs does, with a sync, and raises); one program per row, so a few long rows leave
most SMs idle; no reduction over rows (sum the result).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _cross_entropy_rowwise_kernel(
    # pointers
    x_ptr,
    labels_ptr,
    loss_ptr,
    # sizes
    V,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    # scalars
    ignore_index,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may pass 2^31
    label = tl.load(labels_ptr + row).to(tl.int64)
    if label == ignore_index:
        tl.store(loss_ptr + row, 0.0)
    elif (label < 0) | (label >= V):  # a bad label: NaN, as visible as torch's error
        tl.store(loss_ptr + row, float("nan"))
    else:
        x_row = x_ptr + row * stride_xm
        offs = tl.arange(0, BLOCK_V)
        m = tl.full((BLOCK_V,), float("-inf"), tl.float32)
        s = tl.zeros((BLOCK_V,), tl.float32)
        picked = tl.zeros((BLOCK_V,), tl.float32)
        for start in range(0, V, BLOCK_V):
            cols = start + offs
            x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
            picked += tl.where(cols == label, x, 0.0)  # the label's logit, in the same read
            m_new = tl.maximum(m, x)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
            m = m_new
        row_max = tl.max(m, axis=0)
        lane_scale = tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max))
        lse = row_max + tl.log(tl.sum(s * lane_scale, axis=0))
        tl.store(loss_ptr + row, lse - tl.sum(picked, axis=0))


def cross_entropy_rowwise(
    logits: torch.Tensor,
    labels: torch.Tensor,
    ignore_index: int = -100,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the per-row cross-entropy loss (reduction="none") in fp32.

    Args:
        logits: (T, V) fp32/fp16/bf16, last dimension contiguous.
        labels: (T,) int32/int64 in [0, V) or equal to ``ignore_index``.
        ignore_index: Label value whose row gets loss 0.
        block_v: Chunk width (a power of two); None = min(next_pow2(V), 2048).
        num_warps: Warps per program; None picks by block_v.

    Returns:
        loss: (T,) fp32.

    Raises:
        ValueError: Bad shapes or dtypes or a bad block_v (a label out of range gives a NaN
            loss; check_inputs raises for it).
    """
    if logits.dim() != 2 or logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(
            f"logits must be 2-D fp32/fp16/bf16; got {tuple(logits.shape)} {logits.dtype}"
        )
    t, v = logits.shape
    if labels.shape != (t,) or labels.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"labels must be ({t},) int32/int64; got {tuple(labels.shape)} {labels.dtype}"
        )
    if block_v is None:
        block_v = min(triton.next_power_of_2(max(v, 1)), 2048)
    if block_v < 1 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two; got {block_v}")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    labels = labels.contiguous()
    loss = torch.empty((t,), dtype=torch.float32, device=logits.device)
    if t == 0:
        return loss
    _cross_entropy_rowwise_kernel[(t,)](
        logits, labels, loss,
        v,
        logits.stride(0),
        ignore_index,
        BLOCK_V=block_v,
        num_warps=num_warps or min(max(block_v // 256, 1), 8),
    )  # fmt: skip
    return loss


def check_inputs(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> None:
    """Raise ValueError if a label is outside [0, V) and not ignore_index (reads labels: a sync).

    Outside the timed path: the launcher does not read labels on the host; its kernel writes NaN
    for such a row instead.
    """
    v = logits.shape[-1]
    live = labels[labels != ignore_index]
    if live.numel() and (int(live.min()) < 0 or int(live.max()) >= v):
        raise ValueError(f"labels must lie in [0, {v}) or equal ignore_index={ignore_index}")


def reference(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Return torch's unreduced cross entropy over fp32 logits."""
    return torch.nn.functional.cross_entropy(
        logits.float(), labels.long(), ignore_index=ignore_index, reduction="none"
    )


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"logits", "labels"}`` for ``shape = {"rows", "vocab"}``; some ignored."""
    logits = (4.0 * torch.randn(shape["rows"], shape["vocab"], device=device)).to(dtype)
    labels = torch.randint(0, shape["vocab"], (shape["rows"],), device=device)
    labels[1::3] = -100
    return {"logits": logits, "labels": labels}

"""
---
id: exclusive_offsets_from_counts
title: int32 counts to cu_seqlens-style offsets and total in one launch, a ticketed chained scan
op_family: scan
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32]
bound: latency
techniques: [single-pass-scan, chained-scan, atomic-ticket, spin-wait, packed-flag-word,
  block-per-program]
status: reference
launcher: exclusive_offsets_from_counts
tuning:
  block: [4096, 16, 64, 256, 1024]
  num_warps: [4, 1, 2, 8]
args:
  counts: {shape: [B], dtypes: [int32], aliases: [seqlens, lengths, seq_lens, tokens_per_expert]}
returns:
  - {name: offsets, shape: ['B + 1'], dtype: int32}
  - {name: total, shape: [], dtype: int32}
problem:
  shapes: [{size: 3000}, {size: 1}]
  dtypes: [int32]
measured: []
---
offsets[0] = 0 and offsets[b + 1] = counts[0] + ... + counts[b] (int32, exact), i.e. cu_seqlens
from per-sequence lengths or expert offsets from per-expert token counts, plus total = offsets[B],
in a single launch (torch needs cumsum, a cast and a pad: three). Each program first takes a ticket
with an atomic_add on a counter, so ticket order is start order and a program's predecessor is
already running (no deadlock whatever order the hardware schedules programs in). Program t sums its
BLOCK counts, spins until word t - 1 of a status array is non-zero, reads it, and publishes its own
inclusive prefix as one int64 word prefix + 2^32 with atomic_xchg (flag and value in one store, so
no ordering between two stores is needed); then it writes its block of offsets from tl.cumsum plus
the predecessor's prefix. Program 0 also writes offsets[0] = 0. Bytes: 4 B read and 4 B written per
count, 8 B per block of status. When it wins: the usual B of 1..100K counts, where the launch count
dominates (one block of 4096 counts is one program). Limits: the chain is serial across blocks (one
L2 round trip each, about 1 us), so for millions of counts a decoupled look-back or the
three-kernel scan is faster; the total must fit in int32 (no overflow check on the device).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _exclusive_offsets_kernel(
    # pointers
    counts_ptr,  # int32 (B,)
    offsets_ptr,  # int32 (B + 1,)
    ticket_ptr,  # int32 (1,), zeroed
    status_ptr,  # int64 (num_blocks,), zeroed: 0 = not ready, else inclusive prefix + 2^32
    # sizes
    B,
    # meta
    BLOCK: tl.constexpr,
):
    t = tl.atomic_add(ticket_ptr, 1)  # start order, not program_id: the predecessor is running
    idx = t.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < B
    c = tl.load(counts_ptr + idx, mask=mask, other=0)
    prev = tl.zeros((), tl.int32)
    if t > 0:
        word = tl.atomic_add(status_ptr + t - 1, 0)
        while word == 0:  # spin until the predecessor publishes
            word = tl.atomic_add(status_ptr + t - 1, 0)
        prev = (word - 4294967296).to(tl.int32)
    inclusive = tl.cumsum(c, axis=0) + prev
    block_total = prev + tl.sum(c, axis=0)
    tl.atomic_xchg(status_ptr + t, block_total.to(tl.int64) + 4294967296)
    tl.store(offsets_ptr + idx + 1, inclusive, mask=mask)
    if t == 0:
        tl.store(offsets_ptr, 0)


def exclusive_offsets_from_counts(
    counts: torch.Tensor,
    *,
    block: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (offsets, total): the exclusive int32 scan of counts with the total appended.

    Args:
        counts: (B,) int32, non-negative in normal use (contiguous copy taken if needed).
        block: Counts per program (power of two); None = min(4096, next_pow2(B)).
        num_warps: Warps per program; None = 4.

    Returns:
        offsets: (B + 1,) int32; total: 0-d int32, a view of offsets[B].

    Raises:
        ValueError: counts is not a 1-D int32 tensor.
    """
    if counts.dim() != 1 or counts.dtype != torch.int32:
        raise ValueError(f"counts must be 1-D int32; got {tuple(counts.shape)} {counts.dtype}")
    b = counts.shape[0]
    offsets = torch.zeros((b + 1,), dtype=torch.int32, device=counts.device)
    if b == 0:
        return offsets, offsets[-1]
    cfg = {"block": min(4096, max(triton.next_power_of_2(b), 16)), "num_warps": 4}
    given = {"block": block, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    blocks = triton.cdiv(b, cfg["block"])
    ticket = torch.zeros((1,), dtype=torch.int32, device=counts.device)
    status = torch.zeros((blocks,), dtype=torch.int64, device=counts.device)
    _exclusive_offsets_kernel[(blocks,)](
        counts.contiguous(), offsets, ticket, status, b,
        BLOCK=cfg["block"], num_warps=cfg["num_warps"],
    )  # fmt: skip
    return offsets, offsets[-1]


def reference(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (cat([0], cumsum(counts)) as int32, its last entry)."""
    offsets = torch.zeros((counts.shape[0] + 1,), dtype=torch.int32, device=counts.device)
    offsets[1:] = torch.cumsum(counts, dim=0).to(torch.int32)
    return offsets, offsets[-1]


def make_inputs(shape: dict, dtype: torch.dtype = torch.int32, device: str = "cpu") -> dict:
    """Return ``{"counts"}`` of length ``shape["size"]``: ints in [0, ``"max_count"`` = 2048)."""
    high = shape.get("max_count", 2048)
    counts = torch.randint(0, high, (shape["size"],), device=device, dtype=torch.int32)
    return {"counts": counts}

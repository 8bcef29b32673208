"""
---
id: embedding_bag_sum_offsets
title: EmbeddingBag (sum or mean) with an offsets tensor, one program per (bag, hidden tile)
op_family: embedding
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [segment-per-program, gather, multi-row-gather, dynamic-loop-bounds, fp32-accumulate]
status: reference
launcher: embedding_bag_sum_offsets
tuning:
  block_l: [8, 1, 4, 16]
  block_d: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  input: {shape: [L], dtypes: [int32, int64], aliases: [indices, ids, input_ids]}
  weight: {shape: [V, D], dtypes: [bf16, fp16, fp32], aliases: [embedding, table]}
  offsets: {shape: [B], dtypes: [int32, int64], aliases: [bag_offsets]}
  mode: {type: str, default: sum}
returns:
  - {name: out, shape: [B, D], dtype: weight}
problem:
  shapes: [{vocab: 50, dim: 100, bags: 6, max_bag: 12}, {vocab: 20, dim: 33, bags: 4, max_bag: 5, mode: mean}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
torch.nn.functional.embedding_bag(input, weight, offsets, mode="sum" | "mean") for a flat index
list cut into B bags: bag b holds input[offsets[b] : offsets[b + 1]] (the last bag runs to the end
of input) and out[b] is the sum, or the mean, of those table rows; an empty bag gives zeros.
Program (b, j) owns bag b and the hidden columns j*BLOCK_D..: it reads its two offsets, then walks
the bag BLOCK_L ids at a time, gathering a (BLOCK_L x BLOCK_D) tile of table rows in one masked load
(BLOCK_L independent row reads in flight) and summing it in fp32 into one accumulator; the mean
divides once by the bag size, and the result is rounded once. Nothing is materialised per index
(eager embedding + segment sum writes an (L, D) intermediate). Bytes per output element: bag-size
reads of the table (2 B each in bf16, hot rows hit L2) + 4-8 B per id per hidden tile + one write.
Limits: ids and offsets are not bounds-checked (torch raises; here out-of-range ids read out of
bounds); no per_sample_weights, max mode, padding_idx or include_last_offset; a very long bag is
serial within its program (a split-bag atomic form would spread it).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _embedding_bag_sum_offsets_kernel(
    # pointers
    ids_ptr,
    w_ptr,
    off_ptr,
    out_ptr,
    # sizes
    L,
    B,
    D,
    # strides (elements; the last dim is contiguous)
    stride_wv,
    stride_ob,
    # meta
    MEAN: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    bag = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    start = tl.load(off_ptr + bag).to(tl.int32)
    # the last bag ends at L (no include_last_offset)
    end = tl.load(off_ptr + bag + 1, mask=bag + 1 < B, other=L).to(tl.int32)
    offs_l = tl.arange(0, BLOCK_L)

    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for i in range(start, end, BLOCK_L):
        pos = i + offs_l
        pos_mask = pos < end
        ids = tl.load(ids_ptr + pos, mask=pos_mask, other=0).to(tl.int64)  # int64 row offsets
        tile_mask = pos_mask[:, None] & col_mask[None, :]
        rows = tl.load(w_ptr + ids[:, None] * stride_wv + cols[None, :], mask=tile_mask, other=0.0)
        acc += tl.sum(rows.to(tl.float32), axis=0)
    if MEAN:
        count = (end - start).to(tl.float32)
        acc = acc / tl.maximum(count, 1.0)  # an empty bag stays 0
    out_ptrs = out_ptr + bag.to(tl.int64) * stride_ob + cols
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=col_mask)


def _launch_config(d: int) -> dict[str, int]:
    """Return 8 ids per gather step and up to 256 hidden columns per program."""
    return {"block_l": 8, "block_d": min(256, triton.next_power_of_2(d)), "num_warps": 4}


def embedding_bag_sum_offsets(
    input: torch.Tensor,  # noqa: A002 (torch's name for the indices)
    weight: torch.Tensor,
    offsets: torch.Tensor,
    mode: str = "sum",
    *,
    block_l: int | None = None,
    block_d: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the per-bag sum or mean of ``weight`` rows, bags cut from ``input`` by ``offsets``.

    Args:
        input: (L,) int32/int64 row ids into ``weight``.
        weight: (V, D) bf16/fp16/fp32 table, last dimension contiguous (copied otherwise).
        offsets: (B,) int32/int64 start of each bag in ``input``, non-decreasing, offsets[0] = 0.
        mode: "sum" or "mean" (an empty bag gives zeros in both).
        block_l: Ids gathered per step (power of two); None = 8.
        block_d: Hidden columns per program (power of two); None = min(256, next_pow2(D)).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (B, D) in weight's dtype; accumulated in fp32, rounded once.

    Raises:
        ValueError: Shapes, dtypes or the mode do not fit, or a block size is not a power of two.
    """
    if mode not in ("sum", "mean"):
        raise ValueError(f"mode must be 'sum' or 'mean'; got {mode!r}")
    if input.dim() != 1 or offsets.dim() != 1:
        raise ValueError(
            f"input and offsets must be 1-D; got {tuple(input.shape)} and {tuple(offsets.shape)}"
        )
    int_types = (torch.int32, torch.int64)
    if input.dtype not in int_types or offsets.dtype not in int_types:
        raise ValueError(
            f"input and offsets must be int32/int64; got {input.dtype}, {offsets.dtype}"
        )
    if weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(f"weight must be a float (V, D) table; got {weight.dtype} {weight.shape}")
    for name, value in (("block_l", block_l), ("block_d", block_d)):
        if value is not None and (value < 1 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two; got {value}")
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    ids, offs = input.contiguous(), offsets.contiguous()
    b, d = offs.shape[0], w.shape[1]
    out = torch.empty((b, d), dtype=w.dtype, device=w.device)
    if out.numel() == 0:
        return out
    cfg = _launch_config(d)
    given = {"block_l": block_l, "block_d": block_d, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _embedding_bag_sum_offsets_kernel[(b, triton.cdiv(d, cfg["block_d"]))](
        ids, w, offs, out,
        ids.shape[0], b, d,
        w.stride(0), out.stride(0),
        MEAN=mode == "mean",
        BLOCK_L=cfg["block_l"], BLOCK_D=cfg["block_d"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(
    input: torch.Tensor,  # noqa: A002
    weight: torch.Tensor,
    offsets: torch.Tensor,
    mode: str = "sum",
) -> torch.Tensor:
    """Return F.embedding_bag in fp32 (the same ids and offsets), cast to weight's dtype."""
    out = torch.nn.functional.embedding_bag(input, weight.float(), offsets.long(), mode=mode)
    return out.to(weight.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"vocab", "dim", "bags", "max_bag"}`` (+ ``"mode"``).

    L = bags * max_bag // 2 ids (a fixed count, so every seed gives the same shapes) are cut into
    bags at sorted uniform offsets in [0, L] (offsets[0] = 0; equal cuts make empty bags);
    weight ~ N(0, 1) in ``dtype``.
    """
    bags = shape["bags"]
    total = bags * shape["max_bag"] // 2
    cuts = torch.randint(0, total + 1, (bags - 1,), device=device).sort().values
    offsets = torch.cat([torch.zeros(1, dtype=cuts.dtype, device=device), cuts])
    ids = torch.randint(0, shape["vocab"], (total,), device=device)
    weight = torch.randn(shape["vocab"], shape["dim"], device=device).to(dtype)
    return {"input": ids, "weight": weight, "offsets": offsets, "mode": shape.get("mode", "sum")}

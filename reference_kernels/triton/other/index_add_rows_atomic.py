"""
---
id: index_add_rows_atomic
title: In-place out.index_add_(0, index, src) with fp32 atomic adds, duplicate indices allowed
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: memory
techniques: [scatter-add, atomic-add, 2d-tile, in-place, int64-offsets]
status: reference
launcher: index_add_rows_atomic
tuning:
  block_r: [4, 1, 2, 8, 16]
  block_c: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  out: {shape: [R, C], dtypes: [fp32], aliases: [input, self, dst, accumulator]}
  index: {shape: [M], dtypes: [int32, int64], aliases: [indices, idx, ids]}
  src: {shape: [M, C], dtypes: [bf16, fp16, fp32], aliases: [source, updates, values]}
  alpha: {type: float, default: 1.0, aliases: [scale]}
returns:
  - {name: out, alias: out}
problem:
  shapes: [{rows: 8, src_rows: 40, cols: 100, alpha: 0.5}]
  dtypes: [fp32]
  in_place: [out]
measured: []
---
out[index[i], :] += alpha * src[i, :] for every i, in place on an fp32 out (torch's index_add_ along
dim 0), as in embedding-gradient accumulation, MoE un-permute with a sum and graph message passing.
Program (i, j) owns a (BLOCK_R, BLOCK_C) tile of src: it loads the tile's BLOCK_R indices once,
upcasts the src tile to fp32, scales it and issues one fp32 atomic add per element to the
destination rows, so any number of src rows may target the same out row. Bytes per src element: one
read (2-4 B) plus a 4-byte read-modify-write performed at L2 by the atomic unit. Wins when the
duplicates are few or spread out; many duplicates of one hot row serialise on its cache lines (sort
by index and segment-reduce first, or accumulate per program, when that dominates). The fp32 sum
order of duplicates is not deterministic (results match torch up to rounding, not bitwise). Limits:
fp32 out only; indices must lie in [0, R): the kernel drops a src row whose index does not (masked,
never written out of bounds), and the launcher never reads index on the host (the separate
check_inputs does, with a sync, and raises).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _index_add_kernel(
    # pointers
    out_ptr,
    idx_ptr,
    src_ptr,
    # sizes
    M,
    C,
    R,  # rows of out: an index outside [0, R) is masked off
    # strides (elements; the last dim is contiguous)
    stride_om,
    stride_sm,
    # scalars
    alpha,
    # meta
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    pid_r = tl.program_id(0).to(tl.int64)
    pid_c = tl.program_id(1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    row_ok = rows < M
    dest = tl.load(idx_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    row_ok = row_ok & (dest >= 0) & (dest < R)  # a bad index adds nothing, writes nowhere
    mask = row_ok[:, None] & (cols < C)[None, :]
    vals = tl.load(src_ptr + rows[:, None] * stride_sm + cols[None, :], mask=mask, other=0.0)
    vals = vals.to(tl.float32) * alpha
    tl.atomic_add(
        out_ptr + dest[:, None] * stride_om + cols[None, :], vals, mask=mask, sem="relaxed"
    )


def _launch_config(c: int) -> dict[str, int]:
    """Return rows per tile, columns per tile (<= 256, >= the row) and warps."""
    return {"block_r": 4, "block_c": min(triton.next_power_of_2(c), 256), "num_warps": 4}


def index_add_rows_atomic(
    out: torch.Tensor,
    index: torch.Tensor,
    src: torch.Tensor,
    alpha: float = 1.0,
    *,
    block_r: int | None = None,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Add ``alpha * src[i]`` to ``out[index[i]]`` for every i, in place; return ``out``.

    Args:
        out: (R, C) fp32 with a contiguous last dimension; updated in place.
        index: (M,) int32/int64 in [0, R); duplicates accumulate.
        src: (M, C) bf16/fp16/fp32.
        alpha: Scale applied to src before adding.
        block_r: Source rows per tile (power of two); None = 4.
        block_c: Columns per tile (power of two); None = min(next_pow2(C), 256).
        num_warps: Warps per program; None = 4.

    Returns:
        out: the updated tensor itself.

    Raises:
        ValueError: Bad dtypes, shapes or a strided out (an index outside [0, R) is skipped;
            check_inputs raises for it).
    """
    if out.dim() != 2 or out.dtype != torch.float32 or out.stride(-1) != 1:
        raise ValueError(f"out must be (R, C) fp32 with stride 1 in C; got {out.dtype} {out.shape}")
    if index.dim() != 1 or index.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"index must be (M,) int32/int64; got {index.dtype} {tuple(index.shape)}")
    if src.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"src must be fp32/fp16/bf16; got {src.dtype}")
    if src.shape != (index.numel(), out.shape[1]):
        raise ValueError(f"src must be ({index.numel()}, {out.shape[1]}); got {tuple(src.shape)}")
    m, c = src.shape
    if m == 0 or c == 0:
        return out
    src = src if src.stride(-1) == 1 else src.contiguous()
    cfg = _launch_config(c)
    given = {"block_r": block_r, "block_c": block_c, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_r"]), triton.cdiv(c, cfg["block_c"]))
    _index_add_kernel[grid](
        out, index.contiguous(), src,
        m, c, out.shape[0],
        out.stride(0), src.stride(0),
        float(alpha),
        BLOCK_R=cfg["block_r"], BLOCK_C=cfg["block_c"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def check_inputs(out: torch.Tensor, index: torch.Tensor) -> None:
    """Raise ValueError if an index lies outside [0, R) (reads index on the host: a sync).

    Outside the timed path: the launcher does not read index on the host; its kernel skips the
    src rows of such indices instead.
    """
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= out.shape[0]):
        raise ValueError(f"index values must lie in [0, {out.shape[0]})")


def reference(
    out: torch.Tensor, index: torch.Tensor, src: torch.Tensor, alpha: float = 1.0
) -> torch.Tensor:
    """Run ``out.index_add_(0, index, src.float(), alpha=alpha)`` (in place, as the kernel)."""
    return out.index_add_(0, index.long(), src.float(), alpha=alpha)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"rows", "src_rows", "cols"}``; indices repeat."""
    out = torch.randn(shape["rows"], shape["cols"], device=device)
    index = torch.randint(0, shape["rows"], (shape["src_rows"],), device=device)
    src = torch.randn(shape["src_rows"], shape["cols"], device=device).to(dtype)
    return {"out": out, "index": index, "src": src, "alpha": shape.get("alpha", 1.0)}

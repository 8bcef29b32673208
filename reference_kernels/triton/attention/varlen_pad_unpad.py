"""
---
id: varlen_pad_unpad
title: Pad packed varlen tokens to (B, S_max, H, D) and unpad back, per (sequence, row tile)
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [varlen, cu-seqlens, pad-unpad, row-tile-copy, zero-fill]
status: reference
launcher: varlen_pad
tuning:
  block_s: [16, 4, 8, 32, 64]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [TOTAL, H, D], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, packed]}
  cu_seqlens: {shape: [B1], dtypes: [int32], aliases: [cu_seqlens_q, cu_seqlens_k]}
  max_seqlen: {type: int, aliases: [max_seqlen_q, seqlen]}
returns:
  - {name: padded, shape: ['B1 - 1', max_seqlen, H, D], dtype: x}
problem:
  shapes: [{lens: [5, 0, 37, 16], heads: 3, head_dim: 20, max_seqlen: 40}, {lens: [1], heads: 1, head_dim: 8}]
  dtypes: [fp32, bf16]
measured: []
---
Moves tokens between the packed varlen layout (TOTAL, H, D) indexed by cu_seqlens (B + 1 prefix
sums, the flash-attention varlen convention) and a padded batch (B, S_max, H, D), both ways: two
kernels, varlen_pad (the launcher) writes every padded row, zero rows past each sequence's
length, and varlen_unpad reads only the valid rows back. The grid is (B, cdiv(S_max, BLOCK_S)):
a program copies a tile of BLOCK_S rows of H * D contiguous elements (one row is H * D wide, so
the copy is one 2-D masked load and store, coalesced along the row), reading its sequence's start
and length from cu_seqlens once. Tiles wholly past a sequence's end do no loads (pad: store zeros
only; unpad: return at once), so short sequences in a long-padded batch cost only the zero-fill.
Bytes per element: one read and one write of the valid tokens, plus one write per padding element
in pad. Limits: H * D <= 16384 per row tile; rows must be contiguous in (H, D); the padded side
is always a fresh contiguous tensor. Neither launcher reads cu_seqlens on the host: max_seqlen and
unpad's total_tokens are the caller's host-side counts (flash-attn's convention), check_inputs
verifies them with a sync outside the launch, and the kernels clip instead (rows past max_seqlen,
past TOTAL or past total_tokens are neither read nor written; a negative length copies nothing).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _varlen_pad_kernel(
    x_ptr,
    out_ptr,
    cu_ptr,
    row_width,  # H * D
    max_seqlen,
    total,  # rows of x: never read past
    stride_xt,
    stride_ob,
    stride_os,
    BLOCK_S: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    seq = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    start = tl.load(cu_ptr + seq).to(tl.int64)
    length = tl.load(cu_ptr + seq + 1).to(tl.int64) - start
    cols = tl.arange(0, BLOCK_W)
    in_row = rows < max_seqlen
    valid = (rows < length) & (start + rows < total)
    mask_w = cols[None, :] < row_width
    # rows past the length load nothing (masked) and store zeros: the padding
    vals = tl.load(x_ptr + (start + rows[:, None]) * stride_xt + cols[None, :],
                   mask=valid[:, None] & mask_w, other=0.0)  # fmt: skip
    out = out_ptr + seq.to(tl.int64) * stride_ob + rows[:, None] * stride_os + cols[None, :]
    tl.store(out, vals, mask=in_row[:, None] & mask_w)


@triton.jit
def _varlen_unpad_kernel(
    padded_ptr,
    out_ptr,
    cu_ptr,
    row_width,
    max_seqlen,  # S_max of padded: never read past
    total,  # rows of out: never written past
    stride_pb,
    stride_ps,
    stride_ot,
    BLOCK_S: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    seq = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    start = tl.load(cu_ptr + seq).to(tl.int64)
    length = tl.load(cu_ptr + seq + 1).to(tl.int64) - start
    if tl.program_id(1) * BLOCK_S < length:  # tiles past the sequence end do nothing
        cols = tl.arange(0, BLOCK_W)
        ok = (rows < length) & (rows < max_seqlen) & (start + rows < total)
        mask = ok[:, None] & (cols[None, :] < row_width)
        src = padded_ptr + seq.to(tl.int64) * stride_pb + rows[:, None] * stride_ps + cols[None, :]
        vals = tl.load(src, mask=mask)
        tl.store(out_ptr + (start + rows[:, None]) * stride_ot + cols[None, :], vals, mask=mask)


def _check_cu(cu_seqlens: torch.Tensor, where: str) -> None:
    """Raise ValueError unless cu_seqlens is a 1-D int32 tensor of >= 2 entries."""
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype != torch.int32:
        raise ValueError(
            f"{where}: cu_seqlens must be 1-D int32 (B + 1 prefix sums); got "
            f"{tuple(cu_seqlens.shape)} {cu_seqlens.dtype}"
        )


def _block_w(row_width: int) -> int:
    """Return the padded row width, refusing rows that would not fit one tile."""
    if row_width > 16384:
        raise ValueError(f"H * D = {row_width} > 16384 does not fit one row tile")
    return triton.next_power_of_2(max(row_width, 1))


def varlen_pad(
    x: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    *,
    block_s: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return (B, max_seqlen, H, D) with sequence b's tokens at rows 0..len_b - 1, zeros after.

    Args:
        x: (TOTAL, H, D) packed tokens, bf16/fp16/fp32, each token's (H, D) block contiguous.
        cu_seqlens: (B + 1,) int32 prefix sums of the lengths (cu_seqlens[-1] <= TOTAL).
        max_seqlen: Padded length S_max (>= every length; longer sequences are cut at it).
        block_s: Rows per program (power of two); None = 16.
        num_warps: Warps per program; None = 4.

    Returns:
        (B, max_seqlen, H, D) contiguous tensor of x's dtype.

    Raises:
        ValueError: x or cu_seqlens is malformed, or max_seqlen < 0 (check_inputs checks the
            cu_seqlens values).
    """
    _check_cu(cu_seqlens, "varlen_pad")
    if x.dim() != 3 or x.stride(2) != 1 or x.stride(1) != x.shape[2]:
        raise ValueError(
            f"varlen_pad: x must be (TOTAL, H, D) with contiguous (H, D); got {tuple(x.shape)}"
        )
    if max_seqlen < 0:
        raise ValueError(f"varlen_pad: max_seqlen must be >= 0; got {max_seqlen}")
    b = cu_seqlens.numel() - 1
    h, d = x.shape[1], x.shape[2]
    out = torch.empty(b, max_seqlen, h, d, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    bs = block_s or 16
    _varlen_pad_kernel[(b, triton.cdiv(max_seqlen, bs))](
        x, out, cu_seqlens, h * d, max_seqlen, x.shape[0],
        x.stride(0), out.stride(0), out.stride(1),
        BLOCK_S=bs, BLOCK_W=_block_w(h * d), num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def varlen_unpad(
    padded: torch.Tensor,
    cu_seqlens: torch.Tensor,
    total_tokens: int,
    *,
    block_s: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the packed (cu_seqlens[-1], H, D) tokens of a padded (B, S_max, H, D) batch.

    Args:
        padded: (B, S_max, H, D), each row's (H, D) block contiguous.
        cu_seqlens: (B + 1,) int32 prefix sums of the lengths (each length <= S_max).
        total_tokens: cu_seqlens[-1], the packed token count, known on the host.
        block_s: Rows per program (power of two); None = 16.
        num_warps: Warps per program; None = 4.

    Returns:
        (total_tokens, H, D) contiguous tensor of padded's dtype.

    Raises:
        ValueError: padded or cu_seqlens is malformed, or total_tokens < 0 (check_inputs checks
            the cu_seqlens values).
    """
    _check_cu(cu_seqlens, "varlen_unpad")
    if padded.dim() != 4 or padded.shape[0] != cu_seqlens.numel() - 1:
        raise ValueError(
            f"varlen_unpad: padded must be (B, S_max, H, D) with B = len(cu_seqlens) - 1; got "
            f"{tuple(padded.shape)} and {cu_seqlens.numel()} cu_seqlens entries"
        )
    if padded.stride(3) != 1 or padded.stride(2) != padded.shape[3]:
        raise ValueError("varlen_unpad: each padded row's (H, D) block must be contiguous")
    if total_tokens < 0:
        raise ValueError(f"varlen_unpad: total_tokens must be >= 0; got {total_tokens}")
    b, s, h, d = padded.shape
    out = torch.empty(total_tokens, h, d, dtype=padded.dtype, device=padded.device)
    if out.numel() == 0:
        return out
    bs = block_s or 16
    _varlen_unpad_kernel[(b, triton.cdiv(s, bs))](
        padded, out, cu_seqlens, h * d, s, total_tokens,
        padded.stride(0), padded.stride(1), out.stride(0),
        BLOCK_S=bs, BLOCK_W=_block_w(h * d), num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def check_inputs(
    cu_seqlens: torch.Tensor, max_seqlen: int, total: int, total_tokens: int | None = None
) -> None:
    """Raise ValueError unless cu_seqlens fits max_seqlen, TOTAL and the given token count.

    Reads cu_seqlens on the host (a sync), so it stays out of both launchers.

    Args:
        cu_seqlens: (B + 1,) int32 prefix sums.
        max_seqlen: S_max of the padded side.
        total: TOTAL, the rows of the packed side.
        total_tokens: unpad's token count, checked to equal cu_seqlens[-1] when given.
    """
    lens = cu_seqlens.diff().tolist()
    if int(cu_seqlens[0]) != 0 or any(n < 0 for n in lens) or int(cu_seqlens[-1]) > total:
        raise ValueError(
            f"cu_seqlens {cu_seqlens.tolist()} needs a 0 start, nondecreasing entries and "
            f"last <= TOTAL = {total}"
        )
    if max(lens, default=0) > max_seqlen:
        raise ValueError(f"lengths {lens} must be <= max_seqlen = {max_seqlen}")
    if total_tokens is not None and total_tokens != int(cu_seqlens[-1]):
        raise ValueError(f"total_tokens {total_tokens} != cu_seqlens[-1] {int(cu_seqlens[-1])}")


def reference(x, cu_seqlens, max_seqlen):
    """Pad with a Python loop over the sequences."""
    b = cu_seqlens.numel() - 1
    out = x.new_zeros(b, max_seqlen, *x.shape[1:])
    for i in range(b):
        lo, hi = int(cu_seqlens[i]), int(cu_seqlens[i + 1])
        out[i, : hi - lo] = x[lo:hi]
    return out


def reference_unpad(padded, cu_seqlens, total_tokens=None):
    """Unpad by concatenating each sequence's valid rows (total_tokens: unused)."""
    lens = cu_seqlens.diff().tolist()
    return torch.cat([padded[i, :n] for i, n in enumerate(lens)], dim=0)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return packed N(0, 1) tokens for ``shape = {"lens": [...], "heads", "head_dim"}``."""
    lens = shape["lens"]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    return {
        "x": torch.randn(sum(lens), shape["heads"], shape["head_dim"], device=device).to(dtype),
        "cu_seqlens": cu.to(device),
        "max_seqlen": shape.get("max_seqlen", max(lens)),
    }

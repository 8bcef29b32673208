"""
---
id: presence_frequency_penalty
title: OpenAI presence and frequency penalties from per-row token counts, 2-D tiled
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tile, elementwise, per-row-scalars, fp32-math]
status: reference
launcher: presence_frequency_penalty
tuning:
  block_m: [4, 1, 2, 8, 16]
  block_v: [512, 128, 256, 1024, 2048]
  num_warps: [4, 1, 2, 8]
args:
  logits: {shape: [T, V], dtypes: [bf16, fp16, fp32], aliases: [x, scores]}
  counts: {shape: [T, V], dtypes: [int32, int64], aliases: [output_token_counts, token_counts]}
  presence_penalty: {shape: [T], dtypes: [float], aliases: [presence_penalties]}
  frequency_penalty: {shape: [T], dtypes: [float], aliases: [frequency_penalties]}
returns:
  - {name: out, shape: [T, V], dtype: logits}
problem:
  shapes: [{rows: 5, vocab: 300}]
  dtypes: [fp32]
measured: []
---
The OpenAI API's sampling penalties (as vLLM applies them): out[t, v] = logits[t, v] -
frequency_penalty[t] * counts[t, v] - presence_penalty[t] * (counts[t, v] > 0), where counts are
how often token v already appeared in request t's output and each request carries its own two
penalties (positive values discourage repetition, negative encourage it). Unlike the
multiplicative repetition penalty driven by a list of token ids, this is additive and dense, so
the kernel is a pure streaming 2-D elementwise op: program (i, j) owns a (BLOCK_M, BLOCK_V) tile,
loads the BLOCK_M penalty pairs once and the tile's logits and counts, computes in fp32 and writes
the logits dtype. Bytes per element: the logit (2-4), the count (4-8) and the output (2-4), no
reuse; 3 FLOPs. When it wins: batched decode with per-request penalties, fused in one pass rather
than three torch ops with two temporaries. Limits: counts must be dense (T, V); producing them from
token id lists is a separate bincount; out-of-place (a copy of the logits).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _presence_frequency_penalty_kernel(
    # pointers
    x_ptr,
    cnt_ptr,
    pres_ptr,
    freq_ptr,
    y_ptr,
    # sizes
    T,
    V,
    # strides (elements; last dims contiguous)
    stride_xm,
    stride_cm,
    stride_ym,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    r_ok = rows < T
    mask = r_ok[:, None] & (cols < V)[None, :]
    pres = tl.load(pres_ptr + rows, mask=r_ok, other=0.0).to(tl.float32)[:, None]
    freq = tl.load(freq_ptr + rows, mask=r_ok, other=0.0).to(tl.float32)[:, None]
    r64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + r64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    cnt = tl.load(cnt_ptr + r64 * stride_cm + cols[None, :], mask=mask, other=0)
    y = x - freq * cnt.to(tl.float32) - tl.where(cnt > 0, pres, 0.0)
    tl.store(y_ptr + r64 * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def presence_frequency_penalty(
    logits: torch.Tensor,
    counts: torch.Tensor,
    presence_penalty: torch.Tensor,
    frequency_penalty: torch.Tensor,
    *,
    block_m: int | None = None,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return logits - frequency_penalty * counts - presence_penalty * (counts > 0), per row.

    Args:
        logits: (T, V) bf16/fp16/fp32, last dim contiguous (copied otherwise).
        counts: (T, V) int32/int64 output-token counts.
        presence_penalty: (T,) float, one per row.
        frequency_penalty: (T,) float, one per row.
        block_m: Rows per tile (power of two); None = min(next_pow2(T), 4).
        block_v: Vocab columns per tile (power of two); None = min(next_pow2(V), 512).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, V) with logits' dtype, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(f"logits must be (T, V) float; got {tuple(logits.shape)} {logits.dtype}")
    t, v = logits.shape
    if counts.shape != (t, v) or counts.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"counts must be ({t}, {v}) int32/int64; got {tuple(counts.shape)} {counts.dtype}"
        )
    for name, pen in (
        ("presence_penalty", presence_penalty),
        ("frequency_penalty", frequency_penalty),
    ):
        if pen.shape != (t,) or not pen.dtype.is_floating_point:
            raise ValueError(f"{name} must be ({t},) float; got {tuple(pen.shape)} {pen.dtype}")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    cnt = counts if counts.stride(-1) == 1 else counts.contiguous()
    y = torch.empty((t, v), dtype=logits.dtype, device=logits.device)
    if y.numel() == 0:
        return y
    cfg = {"block_m": min(triton.next_power_of_2(t), 4), "num_warps": 4,
           "block_v": min(triton.next_power_of_2(v), 512)}  # fmt: skip
    given = {"block_m": block_m, "block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(t, cfg["block_m"]), triton.cdiv(v, cfg["block_v"]))
    _presence_frequency_penalty_kernel[grid](
        x, cnt, presence_penalty.contiguous(), frequency_penalty.contiguous(), y,
        t, v,
        x.stride(0), cnt.stride(0), y.stride(0),
        BLOCK_M=cfg["block_m"], BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y


def reference(
    logits: torch.Tensor,
    counts: torch.Tensor,
    presence_penalty: torch.Tensor,
    frequency_penalty: torch.Tensor,
) -> torch.Tensor:
    """Apply both penalties in fp32 and cast back to logits' dtype."""
    c = counts.float()
    out = logits.float() - frequency_penalty.float()[:, None] * c
    out = out - presence_penalty.float()[:, None] * (counts > 0).float()
    return out.to(logits.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"rows", "vocab"}``.

    N(0, 1) logits, sparse counts 0..3, penalties in [-1, 2) (negative ones encourage repetition).
    """
    t, v = shape["rows"], shape["vocab"]
    counts = torch.randint(0, 4, (t, v), device=device) * (torch.rand(t, v, device=device) < 0.3)
    return {
        "logits": torch.randn(t, v, device=device).to(dtype),
        "counts": counts.to(torch.int32),
        "presence_penalty": torch.rand(t, device=device) * 3 - 1,
        "frequency_penalty": torch.rand(t, device=device) * 3 - 1,
    }

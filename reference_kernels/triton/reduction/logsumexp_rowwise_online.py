"""
---
id: logsumexp_rowwise_online
title: Row logsumexp in one pass with lane-wise online (running max, rescaled sum) accumulators
op_family: reduction
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, online-softmax, lane-wise-accumulator, exp2-math,
  fp32-accumulate]
status: reference
launcher: logsumexp_rowwise_online
tuning:
  block_n: [1024, 32, 128, 256, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [M, N], dtypes: [bf16, fp16, fp32], aliases: [input, logits, scores]}
returns:
  - {name: lse, shape: [M], dtype: x}
problem:
  shapes: [{rows: 3, cols: 1000}, {rows: 4, cols: 33, scale: 30.0}]
  dtypes: [fp32, bf16]
measured: []
---
lse[m] = log(sum over n of exp(x[m, n])) (torch.logsumexp(x, dim=-1)) reading each row once. One
program per row walks it in BLOCK_N chunks, and every lane keeps its own running max m and sum
s = sum exp(x - m) of the elements it has seen: on a new element m' = max(m, x) and
s = s * exp(m - m') + exp(x - m'). No cross-lane reduction happens inside the loop (a chunk-wise
online update would need a max reduction per chunk); after the loop one max over the lanes gives M
and one sum of s * exp(m - M) gives the row sum, so lse = M + log(sum). The exponentials use exp2
with log2(e) pre-scaled inputs. Bytes: one read per element (2 B in bf16) and one scalar write per
row; 2 exp2 per element (the rescale and the new term), so at fp32 it is memory-bound on an H200.
Lanes that never saw a finite value keep m = -inf and are guarded (no inf - inf), so rows of all
-inf give -inf as torch does. Limits: +inf or NaN inputs give NaN (torch gives inf for +inf); one
program per row, so a few very long rows use few SMs (a split-row form with a merge of (m, s)
partials spreads them).
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _logsumexp_rowwise_online_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    x_row = x_ptr + row * stride_xm
    # per-lane running max and sum, both in log2 units (x * log2(e))
    m = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        x = x * 1.4426950408889634  # log2(e): exp(v) = exp2(v * log2(e))
        m_new = tl.maximum(m, x)
        finite = m_new > float("-inf")  # a lane with only -inf so far: keep s = 0
        safe = tl.where(finite, m_new, 0.0)
        s = tl.where(finite, s * tl.exp2(m - safe) + tl.exp2(x - safe), 0.0)
        m = m_new
    big = tl.max(m, axis=0)
    safe_big = tl.where(big > float("-inf"), big, 0.0)
    total = tl.sum(s * tl.exp2(m - safe_big), axis=0)  # lanes at -inf add 0
    # total >= 1 unless every lane stayed at -inf (then lse = -inf, without evaluating log2(0))
    lse = tl.where(total > 0, (safe_big + tl.log2(tl.maximum(total, 1.0))) * 0.6931471805599453,
                   float("-inf"))  # fmt: skip
    tl.store(out_ptr + row, lse.to(out_ptr.dtype.element_ty))


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk (at most 1024, at least the row) and warps (about 8 elements a thread)."""
    block_n = min(1024, max(triton.next_power_of_2(n), 16))
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 16)}


def logsumexp_rowwise_online(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return log(sum(exp(x))) of every row, computed in fp32, in x's dtype.

    Args:
        x: (M, N) bf16/fp16/fp32 (a non-contiguous last dim is copied).
        block_n: Columns per loop step (power of two); None = min(1024, next_pow2(N)).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        lse: (M,) in x's dtype (-inf for N = 0, as torch.logsumexp).

    Raises:
        ValueError: x is not 2D bf16/fp16/fp32.
    """
    if x.dim() != 2 or x.dtype not in _FLOATS:
        raise ValueError(f"x must be (M, N) bf16/fp16/fp32; got {tuple(x.shape)} {x.dtype}")
    m, n = x.shape
    if n == 0:
        return torch.full((m,), float("-inf"), dtype=x.dtype, device=x.device)
    out = torch.empty((m,), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    cfg = _launch_config(n)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    x2 = x if x.stride(-1) == 1 else x.contiguous()
    _logsumexp_rowwise_online_kernel[(m,)](
        x2, out, n, x2.stride(0), BLOCK_N=cfg["block_n"], num_warps=cfg["num_warps"]
    )  # fmt: skip
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return torch.logsumexp over the last dim in fp32, cast to x's dtype."""
    return torch.logsumexp(x.float(), dim=-1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``{"rows", "cols"}``: N(0, 1) * ``"scale"`` (default 4) logits."""
    x = torch.randn(shape["rows"], shape["cols"], device=device) * shape.get("scale", 4.0)
    return {"x": x.to(dtype)}

"""
---
id: log_softmax_rowwise
title: Log-softmax (logprobs) per row, one program per row, online max and log-sum-exp then write
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques: [row-per-program, online-softmax, log-sum-exp, chunked-row-loop, fp32-accumulate]
status: reference
launcher: log_softmax_rowwise
tuning:
  block_n: [2048, 256, 512, 1024, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [..., N], dtypes: [fp32, fp16, bf16], aliases: [logits, input]}
returns:
  - {name: logprobs, shape: [..., N], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 1000}, {rows: 9, vocab: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Log-softmax over the last dimension, as a sampler computes logprobs of the whole vocabulary: y = x -
m - log(sum(exp(x - m))), m the row max, written in fp32 whatever x's dtype (logprobs of rare tokens
lose all precision in bf16). One program per row walks the row in BLOCK_N chunks twice: pass 1 keeps
a per-lane running max and a per-lane sum of exp(x - max) rescaled when the max grows, folded into
one log-sum-exp after the loop; pass 2 re-reads x and stores x - lse. Unlike softmax the write pass
needs no exponential: one exp per element in total, and no division. Traffic: x read twice (the
second from L2 for rows of a few MB) plus a 4-byte write per element. Limits: one program per row,
so a single long row runs on one SM (see softmax_split_row_two_kernel for the split form); an
all -inf row gives NaN as torch does.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _log_softmax_rowwise_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may pass 2^31
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_N)

    # pass 1: per-lane online max and rescaled sum
    m = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # lanes that saw only -inf
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    row_max = tl.max(m, axis=0)
    lane_scale = tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max))
    lse = row_max + tl.log(tl.sum(s * lane_scale, axis=0))

    # pass 2: x - lse, no exponential
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, x - lse, mask=mask)


def log_softmax_rowwise(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return log_softmax(x) over the last dimension in fp32.

    Args:
        x: (..., N) fp32/fp16/bf16.
        block_n: Chunk width (a power of two); None = min(next_pow2(N), 2048).
        num_warps: Warps per program; None picks by block_n.

    Returns:
        logprobs: same shape as ``x``, fp32, contiguous.

    Raises:
        ValueError: Unsupported dtype, a 0-d x or a bad block_n.
    """
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"x must be fp32/fp16/bf16; got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("x must be at least 1-D (log-softmax runs over the last dimension)")
    n = x.shape[-1]
    if block_n is None:
        block_n = min(triton.next_power_of_2(max(n, 1)), 2048)
    if block_n < 1 or block_n & (block_n - 1):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=torch.float32, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    _log_softmax_rowwise_kernel[(m,)](
        x2, y,
        n,
        x2.stride(0), y.stride(0),
        BLOCK_N=block_n,
        num_warps=num_warps or min(max(block_n // 256, 1), 8),
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return log_softmax over the last dimension in fp32."""
    return torch.log_softmax(x.float(), dim=-1)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "vocab"}``: logits ~ 4 * N(0, 1)."""
    return {"x": (4.0 * torch.randn(shape["rows"], shape["vocab"], device=device)).to(dtype)}

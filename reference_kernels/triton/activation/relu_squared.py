"""
---
id: relu_squared
title: Squared ReLU (Primer / Nemotron MLP activation) on a flat 1-D grid of vector blocks
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [flat-grid, vectorized-loads, contiguity-hints, elementwise]
status: reference
launcher: relu_squared
tuning:
  block: [4096, 1024, 2048, 8192]
  num_warps: [8, 2, 4, 16]
args:
  x:
    {shape: [..., N], dtypes: [bf16, fp16, fp32], layout: contiguous,
     aliases: [input, hidden_states]}
returns:
  - {name: out, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 1, hidden: 77}]
  dtypes: [fp32, bf16]
measured: []
---
Squared ReLU, out = max(x, 0)^2, the activation of Primer and of Nemotron-H / Nemotron-4 MLPs (no
gate: the MLP is up -> relu^2 -> down). The tensor is treated as one flat run of numel elements and
program p owns elements [p * BLOCK, (p + 1) * BLOCK); tl.multiple_of / tl.max_contiguous tell the
compiler that each thread's slice is contiguous and aligned, so loads and stores become 16-byte
vectors (8 bf16 per access). The square is taken in fp32 and rounded once; since relu is exact this
equals the eager bf16 result. Bytes per element: 1 read + 1 write (4 bytes in bf16); 2 FLOPs, so it
is a pure copy-bandwidth kernel. Limits: needs a contiguous input (a strided one is copied first);
offsets are int64 only past 2^31 elements (the launcher switches); no fusion with the up projection
(a GEMM epilogue would save the round trip).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _relu_squared_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    numel,
    # meta
    BLOCK: tl.constexpr,
    WIDE: tl.constexpr,  # numel >= 2^31: int64 offsets
):
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)  # aligned contiguous block
    mask = offs < numel
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.maximum(x, 0.0)
    tl.store(out_ptr + offs, (r * r).to(out_ptr.dtype.element_ty), mask=mask)


def relu_squared(
    x: torch.Tensor,
    *,
    block: int = 4096,
    num_warps: int = 8,
) -> torch.Tensor:
    """Return relu(x) ** 2 elementwise, in x's dtype.

    Args:
        x: Any shape, bf16/fp16/fp32 (copied first if not contiguous).
        block: Elements per program (power of two, >= 32 * num_warps for full vectors).
        num_warps: Warps per program.

    Returns:
        out: same shape and dtype as x, contiguous.

    Raises:
        ValueError: x is not a float tensor, or block is not a power of two.
    """
    if not x.is_floating_point():
        raise ValueError(f"x must be a float tensor; got {x.dtype}")
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two; got {block}")
    xc = x.contiguous()
    out = torch.empty_like(xc)
    numel = xc.numel()
    if numel > 0:
        _relu_squared_kernel[(triton.cdiv(numel, block),)](
            xc, out, numel, BLOCK=block, WIDE=numel >= 2**31 - block, num_warps=num_warps
        )
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return relu(x) ** 2 computed in fp32 and cast to x's dtype."""
    return torch.relu(x.float()).square().to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "hidden"}``: x ~ N(0, 1) * 3."""
    return {"x": (torch.randn(shape["rows"], shape["hidden"], device=device) * 3).to(dtype)}

"""
---
id: global_l2_norm_partials
title: Overflow-safe whole-tensor L2 norm, per-block (amax, scaled sum of squares) partials
op_family: reduction
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [two-pass-reduction, block-per-program, scaled-sum-of-squares, fp32-accumulate,
  deterministic-reduction, chunked-loop]
status: reference
launcher: global_l2_norm_partials
tuning:
  block: [2048, 256, 512, 1024, 4096, 8192]
  block_p: [1024, 16, 64, 256, 4096]
  num_warps: [8, 1, 2, 4, 16]
args:
  x: {shape: ['...'], dtypes: [bf16, fp16, fp32], layout: any, aliases: [input, grad, grads]}
returns:
  - {name: norm, shape: [], dtype: fp32}
problem:
  shapes: [{size: [3, 1000]}, {size: [37]}]
  dtypes: [fp32, bf16]
  atol: 0.01
  rtol: 0.01
measured: []
---
norm = sqrt(sum x^2) over every element in fp32, the total-norm step of gradient clipping, without
overflow: a plain fp32 sum of squares overflows once |x| passes ~1.8e19 (bf16 and fp32 reach
3.4e38). Stage 1 gives each BLOCK-wide block its own program (no grid stride, so the grid is
cdiv(numel, BLOCK)); the program writes two fp32 partials: a = max |x| of its block and
s = sum (x / a)^2 (every term <= 1, so s <= BLOCK), as the reference BLAS nrm2 does with a running
scale. Stage 2 is one program that walks all partials in BLOCK_P chunks twice: first the global
A = max a, then S = sum s * (a / A)^2, and writes A * sqrt(S). Any number of partials is handled,
and the order of every sum is fixed, so the result is bit-for-bit repeatable (unlike atomics).
Bytes: one read per element (2 B in bf16), 8 B per block of partials, read twice by stage 2. FLOPs:
a divide and a multiply-add per element. Limits: the divide costs a little ALU time (still far
below the memory time); NaN/inf inputs give NaN or inf as torch does only loosely (an inf block has
a = inf and s = NaN); non-contiguous x is copied first; the finishing program is a single CTA, so
for very small blocks (many partials) stage 2 becomes visible.
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _l2_partials_kernel(
    # pointers
    x_ptr,
    amax_ptr,  # fp32 (P,)
    ssq_ptr,  # fp32 (P,): sum of (x / amax)^2
    # sizes
    n,
    # meta
    BLOCK: tl.constexpr,
):
    blk = tl.program_id(0).to(tl.int64)  # int64: blk * BLOCK can pass 2^31 elements
    idx = blk * BLOCK + tl.arange(0, BLOCK)
    x = tl.abs(tl.load(x_ptr + idx, mask=idx < n, other=0.0).to(tl.float32))
    a = tl.max(x, axis=0)
    inv = 1.0 / tl.where(a > 0, a, 1.0)  # an all-zero block gives y = 0, s = 0 (no 1 / 0)
    y = x * inv
    tl.store(amax_ptr + blk, a)
    tl.store(ssq_ptr + blk, tl.sum(y * y, axis=0))


@triton.jit
def _l2_finish_kernel(
    # pointers
    amax_ptr,
    ssq_ptr,
    out_ptr,  # fp32 (1,)
    # sizes
    P,
    # meta
    BLOCK_P: tl.constexpr,
):
    offs = tl.arange(0, BLOCK_P)
    big = tl.zeros((BLOCK_P,), tl.float32)
    for start in range(0, P, BLOCK_P):  # pass 1: the global scale
        big = tl.maximum(big, tl.load(amax_ptr + start + offs, mask=start + offs < P, other=0.0))
    scale = tl.max(big, axis=0)
    inv = 1.0 / tl.where(scale > 0, scale, 1.0)  # all zero: every a and s is 0
    acc = tl.zeros((BLOCK_P,), tl.float32)
    for start in range(0, P, BLOCK_P):  # pass 2: rescale every block's sum to that scale
        mask = start + offs < P
        a = tl.load(amax_ptr + start + offs, mask=mask, other=0.0) * inv
        acc += tl.load(ssq_ptr + start + offs, mask=mask, other=0.0) * a * a
    tl.store(out_ptr, scale * tl.sqrt(tl.sum(acc, axis=0)))


def _launch_config(n: int) -> dict[str, int]:
    """Return the block (2048, less for tiny tensors), the stage-2 chunk and warps."""
    block = min(2048, max(triton.next_power_of_2(n), 16))
    p = triton.cdiv(max(n, 1), block)
    return {"block": block, "block_p": min(1024, max(triton.next_power_of_2(p), 16)),
            "num_warps": 8}  # fmt: skip


def global_l2_norm_partials(
    x: torch.Tensor,
    *,
    block: int | None = None,
    block_p: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the L2 norm of all elements of x as a 0-d fp32 tensor (0 for an empty x).

    Args:
        x: Any shape, bf16/fp16/fp32 (non-contiguous input is copied).
        block: Elements per stage-1 program (power of two); None = min(2048, next_pow2(numel)).
        block_p: Partials per stage-2 loop step (power of two); None = min(1024, next_pow2(P)).
        num_warps: Warps per stage-1 program; None = 8.

    Returns:
        norm: 0-d fp32 tensor.

    Raises:
        ValueError: Unsupported dtype, or block/block_p not a power of two >= 16.
    """
    if x.dtype not in _FLOATS:
        raise ValueError(f"x must be bf16/fp16/fp32; got {x.dtype}")
    cfg = _launch_config(x.numel())
    given = {"block": block, "block_p": block_p, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    for key in ("block", "block_p"):
        if cfg[key] < 16 or cfg[key] & (cfg[key] - 1):
            raise ValueError(f"{key} must be a power of two >= 16; got {cfg[key]}")
    flat = x.reshape(-1).contiguous()
    out = torch.zeros((1,), dtype=torch.float32, device=x.device)
    n = flat.numel()
    if n == 0:
        return out.reshape(())
    p = triton.cdiv(n, cfg["block"])
    amax = torch.empty((p,), dtype=torch.float32, device=x.device)
    ssq = torch.empty((p,), dtype=torch.float32, device=x.device)
    _l2_partials_kernel[(p,)](flat, amax, ssq, n, BLOCK=cfg["block"], num_warps=cfg["num_warps"])
    _l2_finish_kernel[(1,)](amax, ssq, out, p, BLOCK_P=cfg["block_p"], num_warps=4)
    return out.reshape(())


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return the L2 norm of x computed in fp64, as a 0-d fp32 tensor."""
    return torch.linalg.vector_norm(x.double()).float()


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x"}`` of size ``shape["size"]`` (a list): N(0, 1) times ``shape["scale"]``."""
    x = torch.randn(*shape["size"], device=device) * shape.get("scale", 1.0)
    return {"x": x.to(dtype)}

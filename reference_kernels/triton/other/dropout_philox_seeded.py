"""
---
id: dropout_philox_seeded
title: Seeded dropout, mask regenerated from Philox (tl.rand) at seed and element offset
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [flat-1d, counter-based-rng, philox, maskless-recompute, fused-scale]
status: reference
launcher: dropout_philox_seeded
tuning:
  block: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [...], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  p: {type: float, default: 0.5, aliases: [dropout_p, rate]}
  seed: {type: int, default: 0, aliases: [philox_seed]}
  offset: {type: int, default: 0, aliases: [philox_offset]}
returns:
  - {name: y, shape: [...], dtype: x}
problem:
  shapes: [{rows: 4, cols: 1000, p: 0.5}]
  dtypes: [fp32]
measured: []
---
y[i] = x[i] / (1 - p) where u(seed, offset + i) >= p, else 0, over x flattened, with u Triton's
counter-based Philox4x32-10 uniform (tl.rand). Each program handles BLOCK contiguous elements: it
computes their counters (offset + i), runs 10 Philox rounds in registers, compares and scales, so
no mask tensor is ever stored: the backward pass regenerates the same mask from (seed, offset)
instead of reading a byte per element, and a second call with the same seed and offset is
bit-identical. Bytes per element: one read and one write; about 40 integer multiply-xor steps per
element, which stays under the memory time on sm_80+. p = 0 is the identity, p = 1 zeroes
everything. Limits: one 32-bit Philox output per element (randint4x would give four per counter,
cheaper when compute-bound); the stream depends on the flat element order of the contiguous input;
Triton's mapping from counter to float is what the reference reproduces, so a Triton change of that
mapping changes the masks.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _dropout_kernel(
    x_ptr,
    y_ptr,
    numel,
    p,
    scale,
    seed,
    offset,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.rand(seed, offset + offs)  # int64 counters: hi word used past 2^32
    y = tl.where(u >= p, x * scale, 0.0)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def dropout_philox_seeded(
    x: torch.Tensor,
    p: float = 0.5,
    seed: int = 0,
    offset: int = 0,
    *,
    block: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return dropout(x, p) with the mask drawn from Philox at (seed, offset + flat index).

    Args:
        x: Any shape, bf16/fp16/fp32.
        p: Drop probability in [0, 1].
        seed: Philox key, in [0, 2^63).
        offset: Counter of the first element, in [0, 2^62); advance it between calls.
        block: Elements per program (power of two); None = 1024.
        num_warps: Warps per program; None = 4.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: A non-float x, p outside [0, 1], or a negative seed or offset.
    """
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"x must be fp32/fp16/bf16; got {x.dtype}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1]; got {p}")
    if not 0 <= seed < 2**63 or not 0 <= offset < 2**62:
        raise ValueError(f"seed and offset must be non-negative 63-bit ints; got {seed}, {offset}")
    xc = x.contiguous()
    y = torch.empty_like(xc)
    if xc.numel() == 0:
        return y
    blk = block or 1024
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    _dropout_kernel[(triton.cdiv(xc.numel(), blk),)](
        xc, y, xc.numel(), float(p), scale, seed, offset, BLOCK=blk, num_warps=num_warps or 4
    )
    return y


_MASK32 = 0xFFFFFFFF


def _umul(a: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (high, low) 32-bit words of a * b for 32-bit unsigned values held in int64."""
    a0, a1, b0, b1 = a & 0xFFFF, a >> 16, b & 0xFFFF, b >> 16
    mid = a1 * b0 + a0 * b1  # < 2^33
    low = (mid << 16) + a0 * b0  # < 2^50: exact in int64
    return a1 * b1 + (low >> 32), low & _MASK32


def philox_uniform(seed: int, counters: torch.Tensor) -> torch.Tensor:
    """Return tl.rand(seed, counters) in torch: Philox4x32-10 word 0 mapped to [0, 1)."""
    c0, c1 = counters & _MASK32, (counters >> 32) & _MASK32
    c2, c3 = torch.zeros_like(c0), torch.zeros_like(c0)
    k0, k1 = seed & _MASK32, (seed >> 32) & _MASK32
    for _ in range(10):
        hi_b, lo_b = _umul(c2, 0xCD9E8D57)
        hi_a, lo_a = _umul(c0, 0xD2511F53)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + 0x9E3779B9) & _MASK32, (k1 + 0xBB67AE85) & _MASK32
    signed = torch.where(c0 >= 2**31, c0 - 2**32, c0)  # the int32 bit pattern
    signed = torch.where(signed < 0, -signed - 1, signed).to(torch.int32)
    return signed.to(torch.float32) * torch.tensor(4.6566127342e-10, dtype=torch.float32)


def reference(x: torch.Tensor, p: float = 0.5, seed: int = 0, offset: int = 0) -> torch.Tensor:
    """Return x * keep / (1 - p) with keep = philox_uniform(seed, offset + i) >= p, in fp32."""
    counters = offset + torch.arange(x.numel(), dtype=torch.int64, device=x.device)
    keep = (philox_uniform(seed, counters) >= p).reshape(x.shape)
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    return torch.where(keep, x.float() * scale, 0.0).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "p", "seed", "offset"}`` for ``shape = {"rows", "cols"}``; N(0, 1) x."""
    x = torch.randn(shape["rows"], shape["cols"], device=device).to(dtype)
    return {"x": x, "p": shape.get("p", 0.5), "seed": shape.get("seed", 1234), "offset": 0}

"""
---
id: hadamard_transform_fwht
title: Row-wise fast Walsh-Hadamard transform, constant-geometry butterflies in registers
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multirow-tile, constant-geometry-butterfly, in-register, split-join, fp32-accumulate]
status: reference
launcher: hadamard_transform_fwht
tuning:
  block_m: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  normalize: {type: bool, default: false, aliases: [orthonormal]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 5, n: 256}]
  dtypes: [fp32]
measured: []
---
y = x @ H_N per row, H_N the Sylvester Hadamard matrix of order N (a power of two, 2..32768),
times 1/sqrt(N) when normalize is set (then the transform is orthonormal and its own inverse), as
used to rotate activations before low-bit quantisation (QuaRot/QuIP-style incoherence). Each program
loads a (BLOCK_M, N) tile once, upcasts to fp32 and runs log2(N) butterfly stages entirely in
registers. The stages have constant geometry: every stage splits each row into the pairs of its
lowest index bit (reshape to (N/2, 2), tl.split), forms (a + b, a - b) and joins the results with
the new bit moved to the top (join, permute, reshape). After log2(N) stages every bit was
transformed once and the rotation has come full circle, so the natural order is restored with no
bit-reversal pass and every stage has the same shapes (one unrolled code block). Per element: one
read, one write, log2(N) adds; the FLOPs are negligible, so it is a memory-bound kernel when the
per-stage register shuffles (layout conversions through shared memory, which Triton inserts for
the permute) stay cheaper than HBM traffic, true up to a few thousand columns. Limits: N must be a
power of two (pad otherwise); rows above 32768 do not fit in registers; a large BLOCK_M with a wide
row spills.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _fwht_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    M,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    scale,
    # meta
    N: tl.constexpr,
    LOG_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, N)
    mask = (rows < M)[:, None]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)
    # constant-geometry stage: butterfly on the lowest index bit, then rotate that bit to the top
    for _ in tl.static_range(LOG_N):
        a, b = tl.split(tl.reshape(x, (BLOCK_M, N // 2, 2)))
        x = tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 2, 1)), (BLOCK_M, N))
    y = (x * scale).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y, mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return rows per program (about 4K elements per tile) and warps (by tile size)."""
    block_m = max(1, min(16, 4096 // n))
    return {"block_m": block_m, "num_warps": min(max(block_m * n // 1024, 1), 8)}


def hadamard_transform_fwht(
    x: torch.Tensor,
    normalize: bool = False,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the Walsh-Hadamard transform of each row of ``x`` (natural, Sylvester order).

    Args:
        x: (..., N) bf16/fp16/fp32, N a power of two in [2, 32768]; last dimension contiguous.
        normalize: Multiply by 1/sqrt(N) (orthonormal transform).
        block_m: Rows per program (power of two); None = about 4096 elements per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: x is not a float tensor, or N is not a power of two in [2, 32768].
    """
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"x must be fp32/fp16/bf16; got {x.dtype}")
    n = x.shape[-1] if x.dim() > 0 else 0
    if n < 2 or n > 32768 or n & (n - 1):
        raise ValueError(f"last dim of x {tuple(x.shape)} must be a power of two in [2, 32768]")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    given = {"block_m": block_m, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    scale = 1.0 / math.sqrt(n) if normalize else 1.0
    _fwht_kernel[(triton.cdiv(m, cfg["block_m"]),)](
        x2, y,
        m,
        x2.stride(0), y.stride(0),
        scale,
        N=n, LOG_N=n.bit_length() - 1, BLOCK_M=cfg["block_m"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor, normalize: bool = False) -> torch.Tensor:
    """Return x @ H_N in fp32 (butterflies over index bits, high bit first), cast to x's dtype."""
    n = x.shape[-1]
    y = x.float().reshape(-1, n)
    h = n // 2
    while h >= 1:
        blocks = y.reshape(-1, n // (2 * h), 2, h)
        a, b = blocks[:, :, 0, :], blocks[:, :, 1, :]
        y = torch.stack((a + b, a - b), dim=2).reshape(-1, n)
        h //= 2
    if normalize:
        y = y / math.sqrt(n)
    return y.reshape(x.shape).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "normalize"}`` for ``shape = {"rows", "n"}`` (n a power of two); N(0, 1)."""
    x = torch.randn(shape["rows"], shape["n"], device=device).to(dtype)
    return {"x": x, "normalize": shape.get("normalize", False)}

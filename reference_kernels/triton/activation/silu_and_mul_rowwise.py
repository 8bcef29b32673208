"""
---
id: silu_and_mul_rowwise
title: SwiGLU gate silu(gate) * up, one program per row looping over column chunks
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, fused-gate, double-rounding, exp2]
status: reference
launcher: silu_and_mul_rowwise
tuning:
  round_act: [true, false]
  block_n: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32]}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 3, d: 1000}, {rows: 33, d: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
The SwiGLU activation of a gated MLP: x (..., 2d) holds [gate | up] and out = silu(gate) * up (...,
d). Numerics follow the eager PyTorch expression silu(gate.float()).to(dtype) * up: SiLU is
evaluated in fp32 (through exp2), ROUNDED to the output dtype, and only then multiplied by up in
fp32 and rounded again. The double rounding is deliberate: it tracks that reference to the last bit
except where the fp32 SiLU itself differs in its last bit, while a single rounding differs by one
ulp on ~25% of bf16 outputs of N(0, 1) data; round_act=False gives that single rounding, for
references computed wholly in fp32. One program per row walks the row's d output columns in
BLOCK_N chunks, reading the gate and up halves of each chunk as two contiguous runs. Bytes per
output element: 2 reads + 1 write (6 bytes in bf16). Limits: one program per row, so decode (T =
1..8 rows) runs on a few SMs (silu_and_mul_flat spreads it); needs an even last dimension.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_rowwise_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    D,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # meta
    ROUND_ACT: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    gate_row = x_ptr + row * stride_xm
    up_row = gate_row + D  # the up half follows the gate half in the same row
    out_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK_N)

    for start in range(0, D, BLOCK_N):
        cols = start + offs
        mask = cols < D
        gate = tl.load(gate_row + cols, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(up_row + cols, mask=mask, other=0.0).to(tl.float32)
        act = gate / (1.0 + tl.exp2(-gate * 1.4426950408889634))  # silu in fp32
        if ROUND_ACT:
            # rounded to the output dtype BEFORE the multiply, as the eager expression does
            act = act.to(out_ptr.dtype.element_ty).to(tl.float32)
        out = act * up
        tl.store(out_row + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _launch_config(d: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(d), 4096)
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 8)}


def silu_and_mul_rowwise(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
    round_act: bool = True,
) -> torch.Tensor:
    """Return silu(x[..., :d]) * x[..., d:], by default with the SiLU rounded to x's dtype first.

    Args:
        x: (..., 2d) bf16/fp16/fp32, last dimension contiguous; [gate | up].
        block_n: Output columns per loop step (power of two); None = min(next_pow2(d), 4096).
        round_act: Round silu(gate) to x's dtype before the multiply (eager PyTorch's double
            rounding); False keeps it in fp32 and rounds once (an fp32 reference's numerics).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        out: (..., d) in x's dtype, contiguous.

    Raises:
        ValueError: The last dimension is odd or zero.
    """
    two_d = x.shape[-1]
    if two_d % 2 or two_d == 0:
        raise ValueError(f"last dimension must be even and > 0 ([gate | up]); got {tuple(x.shape)}")
    d = two_d // 2
    x2 = x.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        cfg = _launch_config(d)
        given = {"block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        _silu_and_mul_rowwise_kernel[(x2.shape[0],)](
            x2, out,
            d,
            x2.stride(0), out.stride(0),
            ROUND_ACT=round_act,
            BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out.reshape(*x.shape[:-1], d)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return silu(gate.float()).to(dtype) * up, the eager PyTorch expression (double rounding)."""
    gate, up = x.chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate.float()).to(x.dtype).float() * up.float()).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1) as in atrex."""
    return {"x": torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)}

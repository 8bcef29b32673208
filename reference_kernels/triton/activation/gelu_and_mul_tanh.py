"""
---
id: gelu_and_mul_tanh
title: GeGLU with tanh-approximate GELU, one program per row looping over column chunks
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, fused-gate, sigmoid-form-tanh, exp2, fp32-accumulate]
status: reference
launcher: gelu_and_mul_tanh
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 3, d: 1000}, {rows: 5, d: 64}]
  dtypes: [fp32, bf16]
measured: []
---
GeGLU as in Gemma-style gated MLPs: x (..., 2d) holds [gate | up] and out = gelu_tanh(gate) * up,
with gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). The kernel uses the identity
0.5 (1 + tanh(u)) = sigmoid(2u), so gelu_tanh(g) = g / (1 + exp2(-2u log2 e)): one exp2 and one
division per element, no tanh intrinsic, and no cancellation (the exp saturates to inf or 0 and the
quotient goes to 0 or g, never NaN). Everything is evaluated in fp32 and rounded once at the store
(the numerics of an fp32 reference, as vLLM's gelu_tanh_and_mul computes). One program per row walks
the d output columns in BLOCK_N chunks, reading the gate and up halves of each chunk as two
contiguous runs. Bytes per output element: 2 reads + 1 write (6 bytes in bf16); about 10 FLOPs.
Limits: one program per row, so decode batches (a few rows) use a few SMs (gelu_and_mul_erf_2d tiles
the columns too); needs an even last dimension.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gelu_and_mul_tanh_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    D,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # meta
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
        # u = sqrt(2/pi) * (g + 0.044715 g^3); gelu = g * sigmoid(2u), sigmoid through exp2
        u = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        act = gate / (1.0 + tl.exp2(-2.0 * 1.4426950408889634 * u))
        tl.store(out_row + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


def _launch_config(d: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(d), 4096)
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 8)}


def gelu_and_mul_tanh(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return gelu_tanh(x[..., :d]) * x[..., d:], computed in fp32 and rounded once.

    Args:
        x: (..., 2d) bf16/fp16/fp32, last dimension contiguous; [gate | up].
        block_n: Output columns per loop step (power of two); None = min(next_pow2(d), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        out: (..., d) in x's dtype, contiguous.

    Raises:
        ValueError: The last dimension is odd or zero, or block_n is not a power of two.
    """
    two_d = x.shape[-1] if x.dim() else 0
    if two_d % 2 or two_d == 0:
        raise ValueError(f"last dimension must be even and > 0 ([gate | up]); got {tuple(x.shape)}")
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    d = two_d // 2
    x2 = x.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        cfg = _launch_config(d)
        given = {"block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        _gelu_and_mul_tanh_kernel[(x2.shape[0],)](
            x2, out,
            d,
            x2.stride(0), out.stride(0),
            BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out.reshape(*x.shape[:-1], d)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return gelu(gate, approximate="tanh") * up in fp32, cast once to x's dtype."""
    gate, up = x.float().chunk(2, dim=-1)
    return (torch.nn.functional.gelu(gate, approximate="tanh") * up).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1) * 2."""
    return {"x": (torch.randn(shape["rows"], 2 * shape["d"], device=device) * 2).to(dtype)}

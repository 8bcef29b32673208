"""
---
id: gelu_and_mul_sigmoid_approx
title: GeGLU with the sigmoid GELU approximation x * sigmoid(1.702 x) (quick-gelu), gate/up halves
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tiles, fused-gate, sigmoid-approx-gelu, exp2, fp32-accumulate]
status: reference
launcher: gelu_and_mul_sigmoid_approx
tuning:
  block_m: [4, 1, 2, 8, 16]
  block_n: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  alpha: {type: float, default: 1.702, aliases: [quick_gelu_alpha]}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 7, d: 149}, {rows: 3, d: 500, alpha: 1.0}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Gated GELU with the sigmoid approximation gelu(g) ~ g * sigmoid(1.702 g) ("quick-gelu", used in
CLIP's and some ViT MLPs): out = g * sigmoid(alpha * g) * u for x (..., 2d) = [g | u] halves. It
costs one exp2 and one division per output (tanh-GELU needs a tanh, erf-GELU a polynomial erf),
and is within about 0.02 of exact GELU everywhere. Program (i, j) owns a (BLOCK_M rows x BLOCK_N
columns) output tile and reads the matching gate tile and the up tile d columns to its right, no
loop and no index div/mod; the math is fp32, rounded once at the store (no intermediate rounding).
Bytes per output: 2 reads + 1 write (6 B in bf16), about 6 FLOPs. Limits: the last dimension must
be even (halves layout; for interleaved gate/up see silu_and_mul_interleaved_gate_up's split);
BLOCK_N below 64 gives short memory transactions; it is NOT the exact or tanh GELU (use
gelu_and_mul_erf_2d or gelu_and_mul_tanh where a model expects those).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gelu_and_mul_sigmoid_approx_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    M,
    D,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # scalars
    alpha_log2e,  # alpha * log2(e)
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < D)[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    gate_ptrs = x_ptr + rows64 * stride_xm + cols[None, :]
    gate = tl.load(gate_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + D, mask=mask, other=0.0).to(tl.float32)  # up: d columns right
    act = gate / (1.0 + tl.exp2(-alpha_log2e * gate))  # g * sigmoid(alpha * g)
    out = act * up
    tl.store(
        out_ptr + rows64 * stride_om + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask
    )


def _launch_config(m: int, d: int) -> dict[str, int]:
    """Return a tile of about 1024 outputs: BLOCK_N up to 256 columns, BLOCK_M rows for the rest."""
    block_n = min(triton.next_power_of_2(d), 256)
    block_m = max(1, min(1024 // block_n, triton.next_power_of_2(m), 16))
    return {"block_m": block_m, "block_n": block_n, "num_warps": 4}


def gelu_and_mul_sigmoid_approx(
    x: torch.Tensor,
    alpha: float = 1.702,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return x[..., :d] * sigmoid(alpha * x[..., :d]) * x[..., d:].

    Args:
        x: (..., 2d) bf16/fp16/fp32, last dimension contiguous (copied otherwise); [gate | up].
        alpha: The sigmoid slope (1.702 approximates GELU).
        block_m: Rows per tile (power of two); None fills about 1024 outputs per tile.
        block_n: Columns per tile (power of two); None = min(256, next_pow2(d)).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (..., d) in x's dtype, contiguous; computed in fp32, rounded once.

    Raises:
        ValueError: x is not float, its last dimension is odd or zero, or a block size is not a
            power of two.
    """
    if x.dim() == 0 or not x.is_floating_point():
        raise ValueError(f"x must be a float tensor (..., 2d); got {x.dtype} {tuple(x.shape)}")
    two_d = x.shape[-1]
    if two_d % 2 or two_d == 0:
        raise ValueError(f"last dimension must be even and > 0 ([gate | up]); got {tuple(x.shape)}")
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value is not None and (value < 1 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two; got {value}")
    d = two_d // 2
    x2 = x.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    out = torch.empty((m, d), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        cfg = _launch_config(m, d)
        given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        grid = (triton.cdiv(m, cfg["block_m"]), triton.cdiv(d, cfg["block_n"]))
        _gelu_and_mul_sigmoid_approx_kernel[grid](
            x2, out,
            m, d,
            x2.stride(0), out.stride(0),
            float(alpha) * 1.4426950408889634,
            BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out.reshape(*x.shape[:-1], d)


def reference(x: torch.Tensor, alpha: float = 1.702) -> torch.Tensor:
    """Return g * sigmoid(alpha * g) * u in fp32, rounded once to x's dtype."""
    gate, up = x.float().chunk(2, dim=-1)
    return (gate * torch.sigmoid(alpha * gate) * up).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "alpha"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1)."""
    x = torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)
    return {"x": x, "alpha": shape.get("alpha", 1.702)}

"""
---
id: silu_and_mul_interleaved_gate_up
title: SwiGLU silu(gate) * up for an interleaved [g0, u0, g1, u1, ...] layout, split in registers
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tiles, register-deinterleave, fused-gate, double-rounding, exp2]
status: reference
launcher: silu_and_mul_interleaved_gate_up
tuning:
  round_act: [true, false]
  block_m: [4, 1, 2, 8, 16]
  block_n: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  gate_up: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [x_interleaved]}
returns:
  - {name: out, shape: [..., D], dtype: gate_up}
problem:
  shapes: [{rows: 7, d: 149}, {rows: 2, d: 600}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
SwiGLU out[..., i] = silu(gate_up[..., 2i]) * gate_up[..., 2i + 1] for checkpoints and fused
gate/up GEMMs that store the two projections INTERLEAVED column by column (gpt-oss style, or a
weight permuted so that one GEMM tile holds matching gate and up columns). Program (i, j) owns a
(BLOCK_M rows x BLOCK_N outputs) tile: it loads the 2*BLOCK_N contiguous inputs of each row as one
vector run, reshapes the tile to (BLOCK_M, BLOCK_N, 2) and tl.split-s gate and up lanes in
registers, so no stride-2 loads that would waste half of every memory transaction. Numerics as the
atrex30 silu_and_mul: SiLU in fp32 (via exp2), rounded to the output dtype, then the product
rounded again (round_act=False rounds once). Bytes per output: 2 reads + 1 write (6 B in bf16).
Limits: the layout must be truly interleaved (for [gate | up] halves use a halves kernel: this one
gives wrong numbers there); the last dimension must be even; no clamp or alpha (see
swiglu_clamped_oai for gpt-oss's clamped variant).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_interleaved_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    M,
    D,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # meta
    ROUND_ACT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    col0 = tl.program_id(1) * BLOCK_N
    cols = col0 + tl.arange(0, BLOCK_N)
    cols2 = 2 * col0 + tl.arange(0, 2 * BLOCK_N)  # the tile's interleaved input lanes
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements
    row_ok = (rows < M)[:, None]

    pairs = tl.load(
        x_ptr + rows64 * stride_xm + cols2[None, :],
        mask=row_ok & (cols2 < 2 * D)[None, :],
        other=0.0,
    )
    gate, up = tl.split(tl.reshape(pairs.to(tl.float32), (BLOCK_M, BLOCK_N, 2)))
    act = gate / (1.0 + tl.exp2(-gate * 1.4426950408889634))  # silu in fp32
    if ROUND_ACT:
        act = act.to(out_ptr.dtype.element_ty).to(tl.float32)  # rounded before the product
    out = act * up
    tl.store(
        out_ptr + rows64 * stride_om + cols[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=row_ok & (cols < D)[None, :],
    )


def _launch_config(m: int, d: int) -> dict[str, int]:
    """Return a tile of about 1024 outputs: BLOCK_N up to 256 columns, BLOCK_M rows for the rest."""
    block_n = min(triton.next_power_of_2(d), 256)
    block_m = max(1, min(1024 // block_n, triton.next_power_of_2(m), 16))
    return {"block_m": block_m, "block_n": block_n, "num_warps": 4}


def silu_and_mul_interleaved_gate_up(
    gate_up: torch.Tensor,
    *,
    round_act: bool = True,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return silu(gate_up[..., 0::2]) * gate_up[..., 1::2].

    Args:
        gate_up: (..., 2d) bf16/fp16/fp32, interleaved [g0, u0, g1, u1, ...], last dimension
            contiguous (copied otherwise).
        round_act: Round silu(gate) to the dtype before the multiply (double rounding, as atrex30
            silu_and_mul); False keeps it in fp32 and rounds once.
        block_m: Rows per tile (power of two); None fills about 1024 outputs per tile.
        block_n: Output columns per tile (power of two); None = min(256, next_pow2(d)).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (..., d) in gate_up's dtype, contiguous.

    Raises:
        ValueError: gate_up is not float, its last dimension is odd or zero, or a block size is not
            a power of two.
    """
    if gate_up.dim() == 0 or not gate_up.is_floating_point():
        raise ValueError(f"gate_up must be float (..., 2d); got {gate_up.dtype} {gate_up.shape}")
    two_d = gate_up.shape[-1]
    if two_d % 2 or two_d == 0:
        raise ValueError(f"last dimension must be even and > 0 (gate/up pairs); got {two_d}")
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value is not None and (value < 1 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two; got {value}")
    d = two_d // 2
    x2 = gate_up.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    out = torch.empty((m, d), dtype=gate_up.dtype, device=gate_up.device)
    if out.numel() > 0:
        cfg = _launch_config(m, d)
        given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        grid = (triton.cdiv(m, cfg["block_m"]), triton.cdiv(d, cfg["block_n"]))
        _silu_and_mul_interleaved_kernel[grid](
            x2, out,
            m, d,
            x2.stride(0), out.stride(0),
            ROUND_ACT=round_act,
            BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out.reshape(*gate_up.shape[:-1], d)


def reference(gate_up: torch.Tensor) -> torch.Tensor:
    """Return silu(even lanes).to(dtype) * odd lanes, rounded again (double rounding)."""
    gate, up = gate_up[..., 0::2], gate_up[..., 1::2]
    act = torch.nn.functional.silu(gate.float()).to(gate_up.dtype)
    return (act.float() * up.float()).to(gate_up.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"gate_up"}`` for ``shape = {"rows", "d"}``: (rows, 2d) ~ N(0, 1), interleaved."""
    return {"gate_up": torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)}

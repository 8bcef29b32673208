"""
---
id: silu_and_mul_persistent_grid_stride
title: SwiGLU silu(gate) * up on a persistent grid striding over (token, column-block) tiles
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [persistent-grid, grid-stride-tiles, fused-gate, double-rounding, exp2]
status: reference
launcher: silu_and_mul_persistent_grid_stride
tuning:
  round_act: [true, false]
  programs_per_sm: [4, 1, 2, 8]
  block_n: [1024, 256, 512, 2048]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 7, d: 149}, {rows: 3, d: 1000}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
The atrex30 silu_and_mul: out = silu(gate) * up for x (..., 2d) = [gate | up], with the SiLU
computed in fp32, ROUNDED to x's dtype, and the product rounded again (upstream's double rounding;
round_act=False rounds once); a last dimension of 1 falls back to plain SiLU like the reference,
an odd width >= 3 is rejected. The grid is persistent: min(tiles, programs_per_sm * SMs) programs,
where the work is the list of T * cdiv(d, BLOCK_N) tiles (token t, column block c), and program p
handles tiles p, p + grid, p + 2 * grid, ... (tile -> (t, c) by one div/mod). Each tile is a
contiguous BLOCK_N run of the gate and the same run d columns to the right for up. Against a
T x cdiv(d, BLOCK_N) launch this bounds the number of programs for prefill batches of 100K+ tiles
(no tail wave, no per-program launch cost) and still spreads a decode step's few tiles over SMs.
Bytes per output: 2 reads + 1 write (6 B in bf16), about 6 FLOPs and one exp2. Limits: the loop
has no software pipelining across tiles beyond what the warp scheduler overlaps; with BLOCK_N much
larger than d most lanes idle (pick block_n near d for small experts).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_persistent_kernel(
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
    HAS_UP: tl.constexpr,
    ROUND_ACT: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    col_blocks = tl.cdiv(D, BLOCK_N)
    num_tiles = M * col_blocks
    offs = tl.arange(0, BLOCK_N)
    # persistent loop over the flattened (token, column block) tile list
    for tile in range(pid, num_tiles, num_programs):
        row = (tile // col_blocks).to(tl.int64)  # int64: row * stride can pass 2^31 elements
        cols = (tile % col_blocks) * BLOCK_N + offs
        mask = cols < D
        x_row = x_ptr + row * stride_xm
        gate = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        out = gate / (1.0 + tl.exp2(-gate * 1.4426950408889634))  # silu in fp32
        if HAS_UP:
            if ROUND_ACT:
                out = out.to(out_ptr.dtype.element_ty).to(tl.float32)  # rounded before the product
            up = tl.load(x_row + D + cols, mask=mask, other=0.0).to(tl.float32)
            out = out * up
        tl.store(out_ptr + row * stride_om + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _launch_config(d: int) -> dict[str, int]:
    """Return up to 1024 columns per tile, 4 programs per SM, warps by tile width."""
    block_n = min(1024, triton.next_power_of_2(d))
    return {"block_n": block_n, "programs_per_sm": 4, "num_warps": min(max(block_n // 256, 1), 4)}


def silu_and_mul_persistent_grid_stride(
    x: torch.Tensor,
    *,
    round_act: bool = True,
    programs_per_sm: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return silu(x[..., :d]) * x[..., d:] (atrex30 silu_and_mul), on a persistent grid.

    Args:
        x: (..., 2d) bf16/fp16/fp32, last dimension contiguous (copied otherwise); [gate | up].
            A last dimension of 1 returns silu(x) (the reference's fallback).
        round_act: Round silu(gate) to x's dtype before the multiply (the reference's double
            rounding); False keeps it in fp32 and rounds once.
        programs_per_sm: Persistent programs per SM (grid = min(tiles, this * SMs)); None = 4.
        block_n: Columns per tile (power of two); None = min(1024, next_pow2(d)).
        num_warps: Warps per program; None picks by tile width.

    Returns:
        out: (..., d) in x's dtype, contiguous.

    Raises:
        ValueError: x is not float, its last dimension is 0 or odd (>= 3), block_n is not a power
            of two, or programs_per_sm < 1.
    """
    if x.dim() == 0 or not x.is_floating_point():
        raise ValueError(f"x must be a float tensor (..., 2d); got {x.dtype} {tuple(x.shape)}")
    width = x.shape[-1]
    if width == 0 or (width > 1 and width % 2):
        raise ValueError(f"x's last dimension {width} must be 1 or even ([gate | up] halves)")
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    if programs_per_sm is not None and programs_per_sm < 1:
        raise ValueError(f"programs_per_sm must be >= 1; got {programs_per_sm}")
    has_up = width > 1
    d = width // 2 if has_up else 1
    x2 = x.reshape(-1, width)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    out = torch.empty((m, d), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        cfg = _launch_config(d)
        given = {"programs_per_sm": programs_per_sm, "block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        tiles = m * triton.cdiv(d, cfg["block_n"])
        grid = (min(tiles, cfg["programs_per_sm"] * _num_sms(x.device)),)
        _silu_and_mul_persistent_kernel[grid](
            x2, out,
            m, d,
            x2.stride(0), out.stride(0),
            HAS_UP=has_up, ROUND_ACT=round_act,
            BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out.reshape(*x.shape[:-1], d)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return silu(gate.float()).to(dtype) * up rounded again (atrex30 silu_and_mul)."""
    if x.shape[-1] < 2:
        return torch.nn.functional.silu(x.float()).to(x.dtype)
    gate, up = x.chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate.float()).to(x.dtype).float() * up.float()).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1) as in atrex."""
    return {"x": torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)}

"""
---
id: per_token_group_quant_fp8_ue8m0
title: Per-token-group FP8 quantisation with power-of-two (UE8M0) scales over flat tiles of groups
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90, sm_100]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques:
  [flat-group-tiles, group-quant, absmax-reduction, fp8-e4m3, ue8m0-scale, exponent-bit-math]
status: reference
launcher: per_token_group_quant_fp8_ue8m0
tuning:
  groups_per_program: [16, 1, 4, 64]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  group_size: {type: int, default: 128, aliases: [group, quant_group_size]}
returns:
  - {name: q, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scales, shape: [T, ceil(N / group_size)], dtype: fp32}
problem:
  shapes: [{rows: 3, hidden: 256, group_size: 128}, {rows: 5, hidden: 96, group_size: 32}]
  dtypes: [fp32, bf16]
measured: []
---
DeepSeek-V3 / DeepGEMM-on-Blackwell style activation quantisation: every group of G consecutive
values in a row gets a scale that is a power of two, scale = 2^ceil(log2(max(absmax, 1e-10) / 448)),
so the scale fits an unsigned 8-bit exponent (UE8M0) and x / scale is an exact exponent shift before
the single rounding to float8_e4m3fn (q = clamp(x / scale, -448, 448)). The ceiling never lets the
largest value of a group exceed 448, so nothing saturates. Design: the (T, N) input is a flat
sequence of T * ceil(N / G) groups (group i is row i // ceil(N / G), column group i % ceil(N / G);
when G divides N these are T * N / G contiguous runs), and program p owns GROUPS_PER_PROGRAM
consecutive groups (which may cross row boundaries) as one (GROUPS_PER_PROGRAM, G) tile, masked
past N in a shorter last group of a row (masked lanes read 0, which never raises an absmax): one
load, an absmax reduction along axis 1, the ceiling computed exactly on the fp32 bit pattern
(exponent field, +1 when any mantissa bit is set; no log2 approximation), one multiply by the
reciprocal power of two and one store. Scales are written contiguously (T, ceil(N / G)) in fp32 (every value an exact power
of two). Bytes: 2 read + 1 written per bf16 element plus 4 per group. Limits: G must be a power of
two; no packed 4-per-int32 UE8M0 scale layout; e4m3fn only. The rounded-up power-of-two scale is a
different operation from atrex30's per_token_group_quant_fp8, whose scale is absmax / 448 itself
(its fp32 scales check cannot pass).
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
MIN_AMAX = 1e-10  # keeps all-zero groups finite


@triton.jit
def _group_quant_ue8m0_kernel(
    # pointers
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    num_groups,
    N,
    groups_per_row,
    # scalars
    fp8_max,
    min_amax,
    # meta
    GROUP: tl.constexpr,
    GROUPS_PER_PROGRAM: tl.constexpr,
):
    groups = tl.program_id(0) * GROUPS_PER_PROGRAM + tl.arange(0, GROUPS_PER_PROGRAM)
    gmask = groups < num_groups
    # int64 element offsets: T * N can pass 2^31
    groups64 = groups.to(tl.int64)
    cols = (groups64 % groups_per_row)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    offs = (groups64 // groups_per_row)[:, None] * N + cols
    mask = gmask[:, None] & (cols < N)  # a row's shorter last group stops at N
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)

    ratio = tl.maximum(tl.max(tl.abs(x), axis=1), min_amax) / fp8_max  # (GPP,), > 0, normal
    bits = ratio.to(tl.int32, bitcast=True)
    exponent = (bits >> 23) & 0xFF  # biased exponent field
    exponent += ((bits & 0x7FFFFF) != 0).to(tl.int32)  # ceil: round up unless a power of two
    scale = (exponent << 23).to(tl.float32, bitcast=True)
    inv_scale = ((254 - exponent) << 23).to(tl.float32, bitcast=True)  # exact 1 / scale

    q = tl.clamp(x * inv_scale[:, None], -fp8_max, fp8_max)
    tl.store(q_ptr + offs, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + groups, scale, mask=gmask)


def per_token_group_quant_fp8_ue8m0(
    x: torch.Tensor,
    group_size: int = 128,
    *,
    groups_per_program: int = 16,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to float8_e4m3fn with one power-of-two scale per (row, group of columns).

    Args:
        x: (T, N) bf16/fp16/fp32 (copied if not contiguous); a last group of each row shorter
            than group_size is allowed.
        group_size: Columns per scale group, a power of two (128 in DeepSeek-V3).
        groups_per_program: Consecutive groups one program quantises (power of two).
        num_warps: Warps per program.

    Returns:
        (q, scales): q (T, N) float8_e4m3fn; scales (T, ceil(N / G)) fp32, each a power of two,
        with x[:, g*G:(g+1)*G] ~ q[:, g*G:(g+1)*G] * scales[:, g:g+1].

    Raises:
        ValueError: x is not 2-D floating point, or group_size or groups_per_program is not a
            power of two.
    """
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"x must be a 2-D float tensor (T, N); got {x.dtype} {tuple(x.shape)}")
    if group_size <= 0 or group_size & (group_size - 1):
        raise ValueError(f"group_size {group_size} must be a power of two")
    if groups_per_program <= 0 or groups_per_program & (groups_per_program - 1):
        raise ValueError(f"groups_per_program {groups_per_program} must be a power of two")
    x = x.contiguous()
    t, n = x.shape
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((t, triton.cdiv(n, group_size)), dtype=torch.float32, device=x.device)
    num_groups = scales.numel()
    if num_groups == 0:
        return q, scales
    _group_quant_ue8m0_kernel[(triton.cdiv(num_groups, groups_per_program),)](
        x, q, scales,
        num_groups, n, scales.shape[1],
        FP8_MAX, MIN_AMAX,
        GROUP=group_size, GROUPS_PER_PROGRAM=groups_per_program,
        num_warps=num_warps,
    )  # fmt: skip
    return q, scales


def reference(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scales) in fp32 PyTorch, the power of two found with frexp."""
    t, n = x.shape
    groups = -(-n // group_size)
    # zero padding of a short last group never raises its absmax; the pad is dropped again
    xg = torch.nn.functional.pad(x.float(), (0, groups * group_size - n)).view(t, groups, -1)
    ratio = xg.abs().amax(dim=-1).clamp(min=MIN_AMAX) / FP8_MAX
    mantissa, exponent = torch.frexp(ratio)  # ratio = mantissa * 2^exponent, mantissa in [0.5, 1)
    ceil_log2 = torch.where(mantissa == 0.5, exponent - 1, exponent)
    scales = torch.ldexp(torch.ones_like(ratio), ceil_log2)
    q = (xg / scales[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(t, -1)
    return q[:, :n].contiguous(), scales


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "hidden", "group_size"}``: N(0, 1), one zero group."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    group = shape.get("group_size", 128)
    x[0, :group] = 0.0  # exercises the minimum amax
    if x.numel() > 2 * group:
        x[-1, -group:] *= 1e3  # a group with large values (scale > 1)
    return {"x": x.to(dtype), "group_size": group}

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
  - {name: scales, shape: [T, N / group_size], dtype: fp32}
measured: []
---
DeepSeek-V3 / DeepGEMM-on-Blackwell style activation quantisation: every group of G consecutive
values in a row gets a scale that is a power of two, scale = 2^ceil(log2(max(absmax, 1e-10) / 448)),
so the scale fits an unsigned 8-bit exponent (UE8M0) and x / scale is an exact exponent shift before
the single rounding to float8_e4m3fn (q = clamp(x / scale, -448, 448)). The ceiling never lets the
largest value of a group exceed 448, so nothing saturates. Design: since N % G == 0 the (T, N) input
is a flat array of T * N / G contiguous groups, and program p owns GROUPS_PER_PROGRAM consecutive
groups (which may cross row boundaries) as one (GROUPS_PER_PROGRAM, G) tile: one load, an absmax
reduction along axis 1, the ceiling computed exactly on the fp32 bit pattern (exponent field, +1
when any mantissa bit is set; no log2 approximation), one multiply by the reciprocal power of two
and one store. Scales are written contiguously (T, N / G) in fp32 (every value an exact power of
two). Bytes: 2 read + 1 written per bf16 element plus 4 per group. Limits: G must be a power of two
and divide N; no packed 4-per-int32 UE8M0 scale layout; e4m3fn only.
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
    offs = groups.to(tl.int64)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    x = tl.load(x_ptr + offs, mask=gmask[:, None], other=0.0).to(tl.float32)

    ratio = tl.maximum(tl.max(tl.abs(x), axis=1), min_amax) / fp8_max  # (GPP,), > 0, normal
    bits = ratio.to(tl.int32, bitcast=True)
    exponent = (bits >> 23) & 0xFF  # biased exponent field
    exponent += ((bits & 0x7FFFFF) != 0).to(tl.int32)  # ceil: round up unless a power of two
    scale = (exponent << 23).to(tl.float32, bitcast=True)
    inv_scale = ((254 - exponent) << 23).to(tl.float32, bitcast=True)  # exact 1 / scale

    q = tl.clamp(x * inv_scale[:, None], -fp8_max, fp8_max)
    tl.store(q_ptr + offs, q.to(q_ptr.dtype.element_ty), mask=gmask[:, None])
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
        x: (T, N) bf16/fp16/fp32 with N a multiple of group_size (copied if not contiguous).
        group_size: Columns per scale group, a power of two (128 in DeepSeek-V3).
        groups_per_program: Consecutive groups one program quantises (power of two).
        num_warps: Warps per program.

    Returns:
        (q, scales): q (T, N) float8_e4m3fn; scales (T, N / group_size) fp32, each a power of two,
        with x[:, g*G:(g+1)*G] ~ q[:, g*G:(g+1)*G] * scales[:, g:g+1].

    Raises:
        ValueError: x is not 2-D floating point, group_size is not a power of two dividing N, or
            groups_per_program is not a power of two.
    """
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"x must be a 2-D float tensor (T, N); got {x.dtype} {tuple(x.shape)}")
    if group_size <= 0 or group_size & (group_size - 1) or x.shape[1] % group_size:
        raise ValueError(
            f"group_size {group_size} must be a power of two dividing N = {x.shape[1]}"
        )
    if groups_per_program <= 0 or groups_per_program & (groups_per_program - 1):
        raise ValueError(f"groups_per_program {groups_per_program} must be a power of two")
    x = x.contiguous()
    t, n = x.shape
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((t, n // group_size), dtype=torch.float32, device=x.device)
    num_groups = scales.numel()
    if num_groups == 0:
        return q, scales
    _group_quant_ue8m0_kernel[(triton.cdiv(num_groups, groups_per_program),)](
        x, q, scales,
        num_groups,
        FP8_MAX, MIN_AMAX,
        GROUP=group_size, GROUPS_PER_PROGRAM=groups_per_program,
        num_warps=num_warps,
    )  # fmt: skip
    return q, scales


def reference(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scales) in fp32 PyTorch, the power of two found with frexp."""
    t, n = x.shape
    xg = x.float().view(t, n // group_size, group_size)
    ratio = xg.abs().amax(dim=-1).clamp(min=MIN_AMAX) / FP8_MAX
    mantissa, exponent = torch.frexp(ratio)  # ratio = mantissa * 2^exponent, mantissa in [0.5, 1)
    ceil_log2 = torch.where(mantissa == 0.5, exponent - 1, exponent)
    scales = torch.ldexp(torch.ones_like(ratio), ceil_log2)
    q = (xg / scales[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(t, n)
    return q, scales


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "hidden", "group_size"}``: N(0, 1), one zero group."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    group = shape.get("group_size", 128)
    x[0, :group] = 0.0  # exercises the minimum amax
    if x.numel() > 2 * group:
        x[-1, -group:] *= 1e3  # a group with large values (scale > 1)
    return {"x": x.to(dtype), "group_size": group}

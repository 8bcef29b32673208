"""
---
id: per_token_group_quant_fp8_multigroup
title: Per-token-group FP8 quantisation, several groups of one row per program, ragged last group
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [group-quant, multi-group-tile, ragged-tail, absmax-reduction, fp8-e4m3, dynamic-scale]
status: reference
launcher: per_token_group_quant_fp8_multigroup
tuning:
  groups_per_program: [8, 1, 2, 4, 16, 32]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  group_size: {type: int, default: 128, aliases: [group, quant_group_size]}
returns:
  - {name: quantized, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scales, shape: [T, ceil(N / group_size)], dtype: fp32}
problem:
  shapes: [{tokens: 7, hidden: 320, group_size: 64}, {tokens: 3, hidden: 200, group_size: 128}]
  dtypes: [fp32, bf16]
measured: []
---
Fine-grained (1 x G) FP8 activation quantisation with the semantics of atrex30's
per_token_group_quant_fp8: per (token, group), scale = max(absmax / 448, 1e-10) and quantized =
clamp(x / scale, -448, 448) as float8_e4m3fn, with a last, shorter group when N is not a multiple of
G. Program (t, c) owns GROUPS_PER_PROGRAM consecutive groups of token t as one (GROUPS,
next_pow2(G)) register tile: column i of group row g is x[t, (c * GROUPS + g) * G + i], masked past
G and past N, so any group size (not only powers of two) and a ragged tail cost only masked lanes.
The absmax is a row reduction of that tile, the scales of all its groups are stored with one vector
store. Compared with per_token_group_quant_fp8 (rows x one group per program), each program here
streams a longer contiguous span of one row (GROUPS * G elements: 1024 for the default 8 x 128),
which suits decode (T of 1..64) where a row-tiled grid leaves most rows of its tile empty. Bytes per
bf16 element: 2 read + 1 written, plus 4 per group. Limits: e4m3fn only; no UE8M0 scale rounding;
scales are written row-major (T, ceil(N / G)); a non-power-of-two G wastes the padded lanes.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
MIN_SCALE = 1e-10  # keeps all-zero groups finite


@triton.jit
def _group_quant_fp8_multigroup_kernel(
    # pointers
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    N,
    NUM_GROUPS,
    # strides (elements; the last dim of x and q is contiguous)
    stride_xt,
    stride_qt,
    stride_st,
    # scalars
    fp8_max,
    min_scale,
    # meta
    GROUP: tl.constexpr,
    GROUP_P2: tl.constexpr,
    GROUPS: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)  # int64: token * stride can pass 2^31 elements
    groups = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    lane = tl.arange(0, GROUP_P2)
    cols = groups[:, None] * GROUP + lane[None, :]  # (GROUPS, GROUP_P2)
    mask = (lane[None, :] < GROUP) & (cols < N)

    x = tl.load(x_ptr + token * stride_xt + cols, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=1) / fp8_max, min_scale)  # (GROUPS,)
    q = tl.clamp(x / scale[:, None], -fp8_max, fp8_max)

    tl.store(q_ptr + token * stride_qt + cols, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + token * stride_st + groups, scale, mask=groups < NUM_GROUPS)


def per_token_group_quant_fp8_multigroup(
    x: torch.Tensor,
    group_size: int = 128,
    *,
    groups_per_program: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to float8_e4m3fn with one scale per (token, group of group_size columns).

    Args:
        x: (T, N) bf16/fp16/fp32 with the last dimension contiguous; N need not be a multiple of
            group_size (the last group is shorter).
        group_size: Columns per scale group (any positive size; 128 in DeepSeek-style models).
        groups_per_program: Groups of one token per program (power of two); None = up to 8.
        num_warps: Warps per program; None = 4.

    Returns:
        (quantized, scales): quantized (T, N) float8_e4m3fn; scales (T, ceil(N / group_size))
        fp32, with x[:, g*G:(g+1)*G] ~ quantized[...] * scales[:, g:g+1].

    Raises:
        ValueError: x is not 2D with a contiguous last dim, group_size is not positive, or
            groups_per_program is not a power of two.
    """
    if x.dim() != 2 or (x.shape[1] > 1 and x.stride(1) != 1):
        raise ValueError(
            f"need x (T, N) with a contiguous last dim; got shape {tuple(x.shape)}, "
            f"strides {x.stride()}"
        )
    if group_size <= 0:
        raise ValueError(f"group_size must be positive; got {group_size}")
    t, n = x.shape
    num_groups = triton.cdiv(n, group_size)
    gpp = groups_per_program or min(8, triton.next_power_of_2(max(num_groups, 1)))
    if gpp & (gpp - 1):
        raise ValueError(f"groups_per_program must be a power of two; got {gpp}")
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((t, num_groups), dtype=torch.float32, device=x.device)
    if t == 0 or n == 0:
        return q, scales
    _group_quant_fp8_multigroup_kernel[(t, triton.cdiv(num_groups, gpp))](
        x, q, scales,
        n, num_groups,
        x.stride(0), q.stride(0), scales.stride(0),
        FP8_MAX, MIN_SCALE,
        GROUP=group_size, GROUP_P2=triton.next_power_of_2(group_size), GROUPS=gpp,
        num_warps=num_warps or 4,
    )  # fmt: skip
    return q, scales


def reference(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (quantized, scales) computed in fp32 with PyTorch, ragged last group included."""
    t, n = x.shape
    groups = -(-n // group_size)
    padded = torch.nn.functional.pad(x.float(), (0, groups * group_size - n))
    blocks = padded.view(t, groups, group_size)
    scales = (blocks.abs().amax(dim=-1) / FP8_MAX).clamp(min=MIN_SCALE)
    q = (blocks / scales[..., None]).clamp(-FP8_MAX, FP8_MAX)
    return q.view(t, groups * group_size)[:, :n].to(torch.float8_e4m3fn), scales


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "hidden"}`` (+ optional ``"group_size"``): x ~ N(0, 1)."""
    x = torch.randn(shape["tokens"], shape["hidden"], device=device).to(dtype)
    return {"x": x, "group_size": shape.get("group_size", 128)}

"""
---
id: per_token_group_quant_fp8_persistent
title: Per-token-group FP8 quantisation on a persistent grid over (token, group-run) work items
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [persistent-grid, work-queue-static, multi-group-tile, group-quant, ragged-tail,
  absmax-reduction, fp8-e4m3, dynamic-scale]
status: reference
launcher: per_token_group_quant_fp8_persistent
tuning:
  groups_per_program: [8, 1, 2, 4, 16]
  programs_per_sm: [4, 1, 2, 8]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  group_size: {type: int, default: 128, aliases: [group, quant_group_size]}
returns:
  - {name: quantized, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scales, shape: [T, ceil(N / group_size)], dtype: fp32}
problem:
  shapes: [{rows: 7, hidden: 320, group_size: 64}, {rows: 3, hidden: 200, group_size: 128}]
  dtypes: [fp32, bf16]
measured: []
---
atrex30 per_token_group_quant_fp8: per (token, group of G columns), in fp32, scale = max(absmax /
448, 1e-10) and quantized = fp8_e4m3fn(clamp(x / scale, -448, 448)), with a last, shorter group when
N is not a multiple of G. The work is cut into T x R items, item (t, r) being the run of GROUPS
consecutive groups r GROUPS .. r GROUPS + GROUPS - 1 of token t (R = ceil(ceil(N / G) / GROUPS)).
A grid of min(T R, programs_per_sm x SMs) persistent programs walks the items in a static
round-robin (item w = pid + k grid, t = w // R, r = w % R), each one a (GROUPS, next_pow2(G))
register tile: load once, absmax per tile row, divide, store GROUPS x G codes and GROUPS scales.
Consecutive items of one program are grid items apart, so the program's next load is independent
of the current stores and the grid never exceeds what the SMs hold resident: at prefill (T R in the
10^5 range for T = 8192, N = 7168) it replaces that many program launches by a few hundred programs.
Bytes: 2 read + 1 written per bf16 element plus 4 per group. Limits: at decode sizes T R is below
the grid and it degenerates to one item per program; a non-power-of-two G wastes padded lanes;
e4m3fn only; scales row-major only.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
MIN_SCALE = 1e-10  # keeps all-zero groups finite


@triton.jit
def _per_token_group_quant_fp8_persistent_kernel(
    # pointers
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    N,
    NUM_GROUPS,
    RUNS,
    ITEMS,
    # strides (elements; last dims contiguous)
    stride_xm,
    stride_qm,
    stride_sm,
    # scalars
    fp8_max,
    min_scale,
    # meta
    G: tl.constexpr,
    BLOCK_G: tl.constexpr,
    GROUPS: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)  # int64: token * stride can pass 2^31 elements
    g_offs = tl.arange(0, GROUPS)
    lane = tl.arange(0, BLOCK_G)
    for item in range(pid, ITEMS, tl.num_programs(0)):
        token = item // RUNS
        groups = (item % RUNS) * GROUPS + g_offs  # (GROUPS,)
        cols = groups[:, None] * G + lane[None, :]  # (GROUPS, BLOCK_G)
        mask = (lane[None, :] < G) & (cols < N)
        x = tl.load(x_ptr + token * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        scale = tl.maximum(tl.max(tl.abs(x), axis=1) / fp8_max, min_scale)
        q = tl.clamp(x / scale[:, None], -fp8_max, fp8_max)
        tl.store(q_ptr + token * stride_qm + cols, q.to(q_ptr.dtype.element_ty), mask=mask)
        tl.store(scale_ptr + token * stride_sm + groups, scale, mask=groups < NUM_GROUPS)


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def per_token_group_quant_fp8_persistent(
    x: torch.Tensor,
    group_size: int = 128,
    *,
    groups_per_program: int | None = None,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to float8_e4m3fn with one dynamic scale per (row, group of group_size columns).

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous; a last, shorter group is allowed.
        group_size: Columns per scale group (any positive size; 128 in DeepSeek-style models).
        groups_per_program: Groups per work item (power of two); None = 8 (fewer for narrow rows).
        programs_per_sm: Persistent programs per SM (grid = min(items, this * SMs)); None = 4.
        num_warps: Warps per program; None = 4.

    Returns:
        (quantized, scales): quantized (T, N) float8_e4m3fn; scales (T, ceil(N / G)) fp32.

    Raises:
        ValueError: x is not 2D, group_size is not positive, or groups_per_program is not a power
            of two.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (T, N); got {tuple(x.shape)}")
    if group_size <= 0:
        raise ValueError(f"group_size must be positive; got {group_size}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    t, n = x.shape
    num_groups = triton.cdiv(n, group_size)
    gp = min(8, triton.next_power_of_2(max(num_groups, 1)))
    gp = gp if groups_per_program is None else groups_per_program
    if gp <= 0 or gp & (gp - 1):
        raise ValueError(f"groups_per_program must be a power of two; got {gp}")
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((t, num_groups), dtype=torch.float32, device=x.device)
    if t == 0 or n == 0:
        return q, scales
    runs = triton.cdiv(num_groups, gp)
    items = t * runs
    ppsm = 4 if programs_per_sm is None else programs_per_sm
    _per_token_group_quant_fp8_persistent_kernel[(min(items, ppsm * _num_sms(x.device)),)](
        x, q, scales,
        n, num_groups, runs, items,
        x.stride(0), q.stride(0), scales.stride(0),
        FP8_MAX, MIN_SCALE,
        G=group_size, BLOCK_G=triton.next_power_of_2(group_size), GROUPS=gp,
        num_warps=4 if num_warps is None else num_warps,
    )  # fmt: skip
    return q, scales


def reference(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (quantized, scales) computed in fp32 PyTorch (atrex30's semantics, ragged tail)."""
    t, n = x.shape
    groups = -(-n // group_size)
    padded = torch.nn.functional.pad(x.float(), (0, groups * group_size - n))
    blocks = padded.view(t, groups, group_size)
    scales = (blocks.abs().amax(dim=-1) / FP8_MAX).clamp(min=MIN_SCALE)
    q = (blocks / scales[..., None]).clamp(-FP8_MAX, FP8_MAX).view(t, -1)[:, :n]
    return q.to(torch.float8_e4m3fn), scales


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "hidden", "group_size"}``: N(0, 1), one zero group."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    group = shape.get("group_size", 128)
    x[0, :group] = 0.0  # exercises the minimum scale
    return {"x": x.to(dtype), "group_size": group}

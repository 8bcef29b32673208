"""
---
id: per_token_group_quant_fp8
title: Per-token-group FP8 (e4m3fn) quantisation over (rows x one group) tiles, single pass
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [2d-tile, group-quant, absmax-reduction, fp8-e4m3, dynamic-scale, column-major-scales]
status: reference
launcher: per_token_group_quant_fp8
tuning:
  block_m: [8, 1, 2, 4, 16, 32]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  group_size: {type: int, default: 128, aliases: [group, quant_group_size]}
  column_major_scales: {type: bool, default: false}
returns:
  - {name: q, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scales, shape: [T, ceil(N / group_size)], dtype: fp32}
problem:
  shapes: [{rows: 33, hidden: 256, group_size: 128}, {rows: 1, hidden: 384, group_size: 128}]
  dtypes: [fp32, bf16]
measured: []
---
Fine-grained (DeepSeek-V3 style, 1 x 128) activation quantisation for block-scaled FP8 GEMMs: every
group of G consecutive values in a row gets scale = max(absmax / 448, 1e-10) and q = clamp(x /
scale, -448, 448) as float8_e4m3fn. Program (i, g) owns a (BLOCK_M, G) tile: BLOCK_M rows of group g
are loaded once, reduced along axis 1 to BLOCK_M absmaxes in registers, divided and stored, so x is
read exactly once (unlike a looped two-pass row kernel). Scales are written row-major (T, N / G) or,
with column_major_scales, in the (N / G, T) transposed storage that DeepGEMM-style kernels read
(returned as a (T, ceil(N / G)) strided view either way). When N is not a multiple of G the last
group is shorter (atrex30's tail group): its tile is masked past N, and masked lanes load 0, which
never raises an absmax. Bytes: 2 read + 1 written per bf16 element plus 4 per group. Limits: G a
power of two; e4m3fn only; no UE8M0 (power-of-two) scale rounding; decode (T = 1..8) leaves lanes of
BLOCK_M idle.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
MIN_SCALE = 1e-10  # keeps all-zero groups finite


@triton.jit
def _per_token_group_quant_fp8_kernel(
    # pointers
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim of x and q is contiguous)
    stride_xm,
    stride_qm,
    stride_sm,
    stride_sg,
    # scalars
    fp8_max,
    min_scale,
    # meta
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    group = tl.program_id(1)
    cols = group * GROUP + tl.arange(0, GROUP)
    row_mask = rows < M
    mask = row_mask[:, None] & (cols < N)[None, :]  # cols: only the last, shorter group is cut
    rows64 = rows.to(tl.int64)  # int64: rows * stride can pass 2^31 elements

    # one read of the (BLOCK_M, GROUP) tile; masked lanes read 0, which leaves the absmax alone
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=1) / fp8_max, min_scale)  # (BLOCK_M,), fp32
    q = tl.clamp(x / scale[:, None], -fp8_max, fp8_max)

    tl.store(q_ptr + rows64[:, None] * stride_qm + cols[None, :], q.to(q_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip
    tl.store(scale_ptr + rows64 * stride_sm + group * stride_sg, scale, mask=row_mask)


def _launch_config(m: int) -> dict[str, int]:
    """Return rows per tile (8, fewer for tiny batches) and warps."""
    return {"block_m": min(8, triton.next_power_of_2(m)), "num_warps": 4}


def per_token_group_quant_fp8(
    x: torch.Tensor,
    group_size: int = 128,
    column_major_scales: bool = False,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to float8_e4m3fn with one dynamic scale per (row, group of group_size columns).

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous; a last group shorter than
            group_size is allowed.
        group_size: Columns per scale group (power of two), 128 in DeepSeek-style models.
        column_major_scales: Store scales transposed ((N/G, T) storage) for GEMMs that read them so.
        block_m: Rows per program (power of two); None = min(8, next_pow2(T)).
        num_warps: Warps per program; None = 4.

    Returns:
        (q, scales): q (T, N) float8_e4m3fn contiguous; scales (T, ceil(N / G)) fp32 (strided when
        column_major_scales), with x[:, g*G:(g+1)*G] ~ q[...] * scales[:, g:g+1].

    Raises:
        ValueError: x is not 2D, or group_size is not a positive power of two.
    """
    if x.dim() != 2 or group_size <= 0 or group_size & (group_size - 1):
        raise ValueError(
            f"need x (T, N) and a power-of-two group_size; got {tuple(x.shape)}, {group_size}"
        )
    x = x if x.stride(-1) == 1 else x.contiguous()
    t, n = x.shape
    groups = triton.cdiv(n, group_size)
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    if column_major_scales:
        scales = torch.empty((groups, t), dtype=torch.float32, device=x.device).T
    else:
        scales = torch.empty((t, groups), dtype=torch.float32, device=x.device)
    if t == 0 or groups == 0:
        return q, scales
    cfg = _launch_config(t)
    given = {"block_m": block_m, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _per_token_group_quant_fp8_kernel[(triton.cdiv(t, cfg["block_m"]), groups)](
        x, q, scales,
        t, n,
        x.stride(0), q.stride(0), scales.stride(0), scales.stride(1),
        FP8_MAX, MIN_SCALE,
        GROUP=group_size, BLOCK_M=cfg["block_m"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return q, scales


def reference(
    x: torch.Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scales) computed in fp32 PyTorch (scales contiguous row-major)."""
    t, n = x.shape
    groups = -(-n // group_size)
    # zero padding of a short last group never raises its absmax; the pad is dropped again
    xg = torch.nn.functional.pad(x.float(), (0, groups * group_size - n)).view(t, groups, -1)
    scales = (xg.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
    q = (xg / scales).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(t, -1)[:, :n]
    return q.contiguous(), scales.squeeze(-1)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "hidden", "group_size"}``: N(0, 1), one zero group."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    group = shape.get("group_size", 128)
    x[0, :group] = 0.0  # exercises the minimum scale
    return {"x": x.to(dtype), "group_size": group,
            "column_major_scales": shape.get("column_major_scales", False)}  # fmt: skip

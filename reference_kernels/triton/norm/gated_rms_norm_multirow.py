"""
---
id: gated_rms_norm_multirow
title: Gated RMSNorm, persistent programs striding over multi-row tiles, both gate orders
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [persistent-grid, multi-row-tile, weight-reuse, fused-gate, silu, fp32-accumulate]
status: reference
launcher: gated_rms_norm_multirow
tuning:
  block_m: [16, 1, 4, 8, 32, 64]
  programs_per_sm: [4, 1, 2, 8]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  z: {shape: [..., N], like: x, aliases: [gate, g]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
  norm_before_gate: {type: bool, default: true}
  activation: {type: str, default: silu, aliases: [act]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 37, hidden: 128}, {rows: 5, hidden: 96}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
atrex30 gated_rms_norm: with norm_before_gate (the default, upstream's setting) y = rmsnorm(x) *
w * act(z); without it y = rmsnorm(x * act(z)) * w, where rmsnorm(v) = v * rsqrt(mean(v^2) + eps)
and act is SiLU ("silu"/"swish") or the sigmoid, all fp32 from the upcast inputs, rounded once.
The workload is 10^5+ narrow rows (one 128-wide value head of a gated-delta-net layer per row).
The rows are cut into (BLOCK_M, next_pow2(N)) tiles and a grid of min(tiles, programs_per_sm x SMs)
persistent programs strides over them (tile p, p + grid, ...): each program loads the weight once
for all its tiles, then per tile loads x and z, forms the gate, reduces the mean square along
axis 1 and stores. Against the one-tile-per-program grids of gated_rms_norm and
gated_rms_norm_gate_first (same tile math), the grid stays at the resident size: at 10^5 rows and
BLOCK_M = 16 that is a few hundred programs instead of ~6000 launches, and the weight is fetched
once per program rather than once per tile. Bytes per bf16 element: read x and z, write y (6).
Limits: wide rows need a small BLOCK_M to stay in registers (rows past 65536 are refused: use
gated_rms_norm_looped); with few tiles it is the plain tiled kernel; no group_size sub-groups.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gate(z, SIGMOID: tl.constexpr):
    sig = 1.0 / (1.0 + tl.exp2(-z * 1.4426950408889634))  # sigmoid(z) in fp32, via exp2
    return sig if SIGMOID else z * sig


@triton.jit
def _gated_rms_norm_multirow_kernel(
    # pointers
    x_ptr,
    w_ptr,
    z_ptr,
    y_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_zm,
    stride_ym,
    # scalars
    eps,
    # meta
    NORM_BEFORE_GATE: tl.constexpr,
    SIGMOID: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)  # once per program
    num_tiles = tl.cdiv(M, BLOCK_M)
    for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows < M)[:, None] & col_mask[None, :]
        rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements
        x = tl.load(x_ptr + rows64 * stride_xm + cols[None, :], mask=mask, other=0.0)
        z = tl.load(z_ptr + rows64 * stride_zm + cols[None, :], mask=mask, other=0.0)
        x = x.to(tl.float32)
        gate = _gate(z.to(tl.float32), SIGMOID)
        if not NORM_BEFORE_GATE:
            x = x * gate  # gate first: the statistic is taken over the gated row
        inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)  # padded lanes are 0
        y = x * inv_rms[:, None] * w[None, :]
        if NORM_BEFORE_GATE:
            y = y * gate
        tl.store(y_ptr + rows64 * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=mask)  # fmt: skip


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """Return t viewed as (M, n) with a contiguous last dimension (copying only if needed)."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def gated_rms_norm_multirow(
    x: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor,
    eps: float = 1e-6,
    norm_before_gate: bool = True,
    activation: str = "silu",
    *,
    block_m: int | None = None,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return rmsnorm(x) * weight * act(z) (or rmsnorm(x * act(z)) * weight) over the last dim.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous, N <= 65536.
        weight: (N,) any float dtype.
        z: the gate, same shape and dtype as ``x``.
        eps: Added to the mean square before the reciprocal square root.
        norm_before_gate: True (default) gates after the norm; False gates before it.
        activation: "silu" / "swish" or "sigmoid", applied to z in fp32.
        block_m: Rows per tile (power of two); None picks about 2048 elements per tile.
        programs_per_sm: Persistent programs per SM (grid = min(tiles, this * SMs)); None = 4.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        y: same shape and dtype as ``x``, contiguous; fp32 math rounded once.

    Raises:
        ValueError: Shapes or dtypes do not match, the activation is unknown, the row is wider
            than 65536, or block_m is not a power of two.
    """
    n = x.shape[-1] if x.dim() else 0
    if x.dim() == 0 or z.shape != x.shape or z.dtype != x.dtype:
        raise ValueError(
            f"z must match x {tuple(x.shape)} {x.dtype}; got {tuple(z.shape)} {z.dtype}"
        )
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    if activation not in ("silu", "swish", "sigmoid"):
        raise ValueError(f"activation {activation!r} is unknown; use 'silu', 'swish' or 'sigmoid'")
    if n > 65536:
        raise ValueError(
            f"row width {n} > 65536 does not fit in registers; use gated_rms_norm_looped"
        )
    if block_m is not None and (block_m < 1 or block_m & (block_m - 1)):
        raise ValueError(f"block_m must be a power of two; got {block_m}")
    x2, z2 = _rows(x, n), _rows(z, n)
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    block_n = triton.next_power_of_2(n)
    bm = max(1, min(2048 // block_n, triton.next_power_of_2(m), 64)) if block_m is None else block_m
    bm = max(1, min(bm, 2**20 // block_n))  # Triton's tile limit
    warps = (4 if bm * block_n >= 1024 else 2) if num_warps is None else num_warps
    ppsm = 4 if programs_per_sm is None else programs_per_sm
    _gated_rms_norm_multirow_kernel[(min(triton.cdiv(m, bm), ppsm * _num_sms(x.device)),)](
        x2, weight.contiguous(), z2, y,
        m, n,
        x2.stride(0), z2.stride(0), y.stride(0),
        eps,
        NORM_BEFORE_GATE=bool(norm_before_gate),
        SIGMOID=activation == "sigmoid",
        BLOCK_M=bm, BLOCK_N=block_n,
        num_warps=warps,
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor,
    eps: float = 1e-6,
    norm_before_gate: bool = True,
    activation: str = "silu",
) -> torch.Tensor:
    """Return the gated RMSNorm in fp32 (atrex30 gated_rms_norm's forward), cast to x's dtype."""
    zf = z.float()
    gate = torch.sigmoid(zf) if activation == "sigmoid" else torch.nn.functional.silu(zf)
    xf = x.float() if norm_before_gate else x.float() * gate
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return (y * gate if norm_before_gate else y).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight", "z"}`` for ``shape = {"rows", "hidden"}`` (atrex scales)."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = (torch.randn(rows, hidden, device=device) * 0.02).to(dtype)
    weight = (1.0 + 0.02 * torch.randn(hidden, device=device)).to(dtype)
    z = torch.randn(rows, hidden, device=device).to(dtype)
    return {"x": x, "weight": weight, "z": z}

"""
---
id: gated_rms_norm_gate_first
title: Gated RMSNorm that gates before the norm, rmsnorm(x * act(z)) * w, SiLU or sigmoid gate
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-row-tile, fused-gate, gate-before-norm, silu, sigmoid, fp32-accumulate]
status: reference
launcher: gated_rms_norm_gate_first
tuning:
  block_m: [16, 1, 4, 8, 32, 64]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  z: {shape: [..., N], like: x, aliases: [gate, g]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
  norm_before_gate: {type: bool, default: false}
  activation: {type: str, default: silu, aliases: [act]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
measured: []
---
The gated output norm of gated-delta-net and Mamba2 layers in atrex30 gated_rms_norm's semantics.
Its default, gate-first order multiplies the gate in BEFORE the norm: g = x * act(z), y =
g * rsqrt(mean(g^2) + eps) * w, so the statistic is taken over the gated row (the existing
gated_rms_norm kernel only gates after the norm). norm_before_gate=True gives rmsnorm(x) * w *
act(z) from the same tile code, so one kernel serves both settings of the reference. act is SiLU
("silu"/"swish") or the sigmoid ("sigmoid"), chosen at compile time and evaluated in fp32 through
exp2; all math is fp32 from the upcast inputs, rounded once. Each program owns a (BLOCK_M,
next_pow2(N)) tile of head-sized rows (N = 64..256, 10^5 rows and more), loads the weight once and
reduces along axis 1. Bytes per element: read x and z, write y (6 bytes in bf16). Limits: the norm
spans the whole last dimension (no group_size sub-groups); wide rows need a small BLOCK_M.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gated_rms_norm_gate_first_kernel(
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
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = (rows < M)[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    x = tl.load(x_ptr + rows64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + rows64 * stride_zm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)  # once per BLOCK_M rows

    sig = 1.0 / (1.0 + tl.exp2(-z * 1.4426950408889634))  # sigmoid(z) in fp32, via exp2
    gate = sig if SIGMOID else z * sig
    if not NORM_BEFORE_GATE:
        x = x * gate  # gate first: the norm's statistic is taken over the gated row
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)  # (BLOCK_M,), padded lanes are 0
    y = x * inv_rms[:, None] * w[None, :]
    if NORM_BEFORE_GATE:
        y = y * gate
    tl.store(y_ptr + rows64 * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return a tile of about 2048 elements (at most the row count) and its warps."""
    block_n = triton.next_power_of_2(n)
    block_m = max(1, min(2048 // block_n, triton.next_power_of_2(m), 64))
    return {
        "block_m": block_m,
        "block_n": block_n,
        "num_warps": 4 if block_m * block_n >= 1024 else 2,
    }


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """Return t viewed as (M, n) with a contiguous last dimension (copying only if needed)."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def gated_rms_norm_gate_first(
    x: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor,
    eps: float = 1e-6,
    norm_before_gate: bool = False,
    activation: str = "silu",
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return rmsnorm(x * act(z)) * weight (or rmsnorm(x) * weight * act(z)) over the last dim.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (N,) any float dtype.
        z: the gate, same shape and dtype as ``x``.
        eps: Added to the mean square before the reciprocal square root.
        norm_before_gate: False (default) gates before the norm; True gates after it.
        activation: "silu" / "swish" or "sigmoid", applied to z in fp32.
        block_m: Rows per program (power of two); None picks about 2048 elements per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        y: same shape and dtype as ``x``, contiguous; fp32 math rounded once.

    Raises:
        ValueError: Shapes or dtypes do not match, the activation is unknown, the row is wider
            than 65536, or block_m is not a power of two.
    """
    n = x.shape[-1]
    if z.shape != x.shape or z.dtype != x.dtype:
        raise ValueError(
            f"z must match x {tuple(x.shape)} {x.dtype}; got {tuple(z.shape)} {z.dtype}"
        )
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    if activation not in ("silu", "swish", "sigmoid"):
        raise ValueError(f"activation {activation!r} is unknown; use 'silu', 'swish' or 'sigmoid'")
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers")
    if block_m is not None and (block_m < 1 or block_m & (block_m - 1)):
        raise ValueError(f"block_m must be a power of two; got {block_m}")
    x2, z2 = _rows(x, n), _rows(z, n)
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    cfg["block_m"] = max(1, min(cfg["block_m"], 2**20 // cfg["block_n"]))  # Triton's tile limit
    _gated_rms_norm_gate_first_kernel[(triton.cdiv(m, cfg["block_m"]),)](
        x2, weight.contiguous(), z2, y,
        m, n,
        x2.stride(0), z2.stride(0), y.stride(0),
        eps,
        NORM_BEFORE_GATE=bool(norm_before_gate),
        SIGMOID=activation == "sigmoid",
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor,
    eps: float = 1e-6,
    norm_before_gate: bool = False,
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

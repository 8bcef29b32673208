"""
---
id: gated_rms_norm
title: Gated RMSNorm rmsnorm(x) * w * silu(z) over multi-row tiles for narrow head rows
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-row-tile, fused-gate, silu, fp32-accumulate]
status: reference
launcher: gated_rms_norm
tuning:
  block_m: [16, 1, 4, 8, 32, 64]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  z: {shape: [..., N], like: x, aliases: [gate, g]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
  norm_before_gate: {type: bool, default: true}
  activation: {type: str, default: silu, aliases: [act]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
measured: []
---
The output norm of gated linear-attention / Mamba2 blocks: y = rmsnorm(x) * w * act(z), normalising
before the gate (norm_before_gate=False: y = rmsnorm(x * act(z)) * w), act SiLU or the sigmoid, in
one pass. Rows are short (one head, N = 64..256) and very many (10^5 and more),
so each program takes a (BLOCK_M, next_pow2(N)) tile: BLOCK_M rows of x and z, one weight load
reused by all of them, the sum of squares reduced along axis 1 in fp32 and the gate evaluated in
fp32 through exp2. Bytes per element: read x and z, write y (6 bytes in bf16). Limits: norm over the
whole last dimension only (no group_size sub-groups), and wide rows need a small BLOCK_M to stay in
registers.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gated_rms_norm_kernel(
    # pointers
    x_ptr,
    z_ptr,
    w_ptr,
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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NORM_BEFORE_GATE: tl.constexpr,
    SIGMOID: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = (rows < M)[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    x = tl.load(x_ptr + rows64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + rows64 * stride_zm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)  # once per BLOCK_M rows

    sig = 1.0 / (1.0 + tl.exp2(-z * 1.4426950408889634))  # sigmoid(z) via exp2
    gate = sig if SIGMOID else z * sig  # silu(z) = z * sigmoid(z)
    if not NORM_BEFORE_GATE:
        x = x * gate  # gate first: the norm is taken over the gated row
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)  # (BLOCK_M,), fp32
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


def gated_rms_norm(
    x: torch.Tensor,
    z: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    norm_before_gate: bool = True,
    activation: str = "silu",
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return rmsnorm(x) * weight * act(z) (or rmsnorm(x * act(z)) * weight) over the last dim.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        z: the gate, same shape and dtype as ``x``.
        weight: (N,) any float dtype, contiguous.
        eps: Added to mean(x^2) before the reciprocal square root.
        norm_before_gate: Gate after the norm (True) or the norm of the gated row (False).
        activation: The gate's function: "silu"/"swish" or "sigmoid".
        block_m: Rows per program (power of two); None picks about 2048 elements per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        y: same shape and dtype as ``x``, contiguous; computed in fp32, rounded once.

    Raises:
        ValueError: The shapes or dtypes do not match, the activation is unknown, or the row is
            wider than 2^20.
    """
    if activation not in ("silu", "swish", "sigmoid"):
        raise ValueError(f"activation must be 'silu', 'swish' or 'sigmoid'; got {activation!r}")
    n = x.shape[-1]
    if z.shape != x.shape or z.dtype != x.dtype:
        raise ValueError(
            f"z must match x {tuple(x.shape)} {x.dtype}; got {tuple(z.shape)} {z.dtype}"
        )
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    x2, z2 = _rows(x, n), _rows(z, n)
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    if cfg["block_n"] > 2**20:
        raise ValueError(f"row width {n} of x {tuple(x.shape)} exceeds a 2^20-element tile")
    # a requested block_m is clamped so that the tile stays within Triton's 2^20 elements
    cfg["block_m"] = max(1, min(cfg["block_m"], 2**20 // cfg["block_n"]))
    _gated_rms_norm_kernel[(triton.cdiv(m, cfg["block_m"]),)](
        x2, z2, weight.contiguous(), y,
        m, n,
        x2.stride(0), z2.stride(0), y.stride(0),
        eps,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        NORM_BEFORE_GATE=norm_before_gate, SIGMOID=activation == "sigmoid",
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(
    x: torch.Tensor,
    z: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    norm_before_gate: bool = True,
    activation: str = "silu",
) -> torch.Tensor:
    """Return the gated RMSNorm computed in fp32 and cast to x's dtype."""
    xf, zf = x.float(), z.float()
    gate = torch.sigmoid(zf) if activation == "sigmoid" else torch.nn.functional.silu(zf)
    if not norm_before_gate:
        xf = xf * gate
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return (normed * gate if norm_before_gate else normed).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "z", "weight"}`` for ``shape = {"rows", "hidden"}`` (atrex scales)."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = (torch.randn(rows, hidden, device=device) * 0.02).to(dtype)
    z = torch.randn(rows, hidden, device=device).to(dtype)
    weight = (1.0 + 0.02 * torch.randn(hidden, device=device)).to(dtype)
    return {"x": x, "z": z, "weight": weight}

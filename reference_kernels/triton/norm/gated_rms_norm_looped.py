"""
---
id: gated_rms_norm_looped
title: Gated RMSNorm for wide rows, one program per row in two chunked passes, both gate orders
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, two-pass, fused-gate, silu, fp32-accumulate]
status: reference
launcher: gated_rms_norm_looped
tuning:
  block_n: [1024, 128, 256, 512, 2048, 4096]
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
  shapes: [{rows: 3, hidden: 1500}, {rows: 5, hidden: 96}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
atrex30 gated_rms_norm for rows of any width: with norm_before_gate (the default, upstream's
setting) y = rmsnorm(x) * w * act(z); without it y = rmsnorm(x * act(z)) * w, where rmsnorm(v) = v *
rsqrt(mean(v^2) + eps) and act is SiLU ("silu"/"swish") or the sigmoid, all fp32 from the upcast
inputs and rounded once. One program per row walks it in BLOCK_N chunks twice. Pass 1 accumulates
the squares of the value the statistic is taken over (x, or x * act(z) when gating first, which
then also reads z) in an element-wise fp32 vector, reduced once after the loop; pass 2 reloads x, z
and w chunk by chunk (L2 hits), recomputes the gate, scales and stores. Registers hold one chunk, so
rows past the 65536-column limit of the tile kernels (gated_rms_norm, gated_rms_norm_gate_first),
or wide rows at num_warps 1..2, never spill. Bytes per bf16 element: norm-first reads x twice and z
once (6 + 2 written); gate-first reads x and z twice (8 + 2 written); the second reads come from L2.
Limits: one program per row, so it wastes lanes on the 64..256-wide head rows the tile kernels
serve (one chunk of 128 masked lanes), and few rows use few SMs; no group_size sub-groups.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gate(z, SIGMOID: tl.constexpr):
    sig = 1.0 / (1.0 + tl.exp2(-z * 1.4426950408889634))  # sigmoid(z) in fp32, via exp2
    return sig if SIGMOID else z * sig


@triton.jit
def _gated_rms_norm_looped_kernel(
    # pointers
    x_ptr,
    w_ptr,
    z_ptr,
    y_ptr,
    # sizes
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
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)

    # pass 1: sum of squares of x (norm first) or of x * act(z) (gate first)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        if not NORM_BEFORE_GATE:
            z = tl.load(z_ptr + row * stride_zm + cols, mask=mask, other=0.0).to(tl.float32)
            x = x * _gate(z, SIGMOID)
        acc += x * x
    inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)

    # pass 2: reload, gate, scale, store
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        z = tl.load(z_ptr + row * stride_zm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        gate = _gate(z, SIGMOID)
        if not NORM_BEFORE_GATE:
            x = x * gate
        y = x * inv_rms * w
        if NORM_BEFORE_GATE:
            y = y * gate
        tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """Return t viewed as (M, n) with a contiguous last dimension (copying only if needed)."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def gated_rms_norm_looped(
    x: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor,
    eps: float = 1e-6,
    norm_before_gate: bool = True,
    activation: str = "silu",
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return rmsnorm(x) * weight * act(z) (or rmsnorm(x * act(z)) * weight) over the last dim.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous; any N.
        weight: (N,) any float dtype.
        z: the gate, same shape and dtype as ``x``.
        eps: Added to the mean square before the reciprocal square root.
        norm_before_gate: True (default) gates after the norm; False gates before it.
        activation: "silu" / "swish" or "sigmoid", applied to z in fp32.
        block_n: Chunk width (power of two); None = min(next_pow2(N), 1024).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        y: same shape and dtype as ``x``, contiguous; fp32 math rounded once.

    Raises:
        ValueError: Shapes or dtypes do not match, the activation is unknown, or block_n is not
            a power of two.
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
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    x2, z2 = _rows(x, n), _rows(z, n)
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    bn = min(triton.next_power_of_2(n), 1024) if block_n is None else block_n
    warps = min(max(bn // 256, 1), 8) if num_warps is None else num_warps
    _gated_rms_norm_looped_kernel[(m,)](
        x2, weight.contiguous(), z2, y,
        n,
        x2.stride(0), z2.stride(0), y.stride(0),
        eps,
        NORM_BEFORE_GATE=bool(norm_before_gate),
        SIGMOID=activation == "sigmoid",
        BLOCK_N=bn,
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

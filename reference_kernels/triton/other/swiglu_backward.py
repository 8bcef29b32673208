"""
---
id: swiglu_backward
title: SwiGLU backward, d gate and d up of silu(gate) * up from the upstream gradient in 2-D tiles
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tile, fused-elementwise, recompute-activation, fp32-accumulate, concatenated-halves]
status: reference
launcher: swiglu_backward
tuning:
  block_m: [4, 1, 2, 8, 16]
  block_d: [512, 128, 256, 1024, 2048]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [input, gate_up]}
  grad_output: {shape: [..., D], like: x, aliases: [dy, grad, grad_out]}
returns:
  - {name: grad_x, shape: [..., 2*D], dtype: x}
problem:
  shapes: [{rows: 7, d: 300}]
  dtypes: [fp32]
measured: []
---
The backward of silu_and_mul (out = silu(g) * u with x = [g | u], gate first): given x (..., 2D)
and dy (..., D) it returns dx = [dg | du] with du = dy * silu(g) and dg = dy * u * sigmoid(g) *
(1 + g * (1 - sigmoid(g))). The activation is recomputed from g instead of being saved by the
forward. Program (i, j) owns a (BLOCK_M rows, BLOCK_D columns) tile of the output half: it loads the
matching g, u and dy tiles (contiguous runs, vector loads), evaluates one sigmoid in fp32 and
writes both halves of dx, rounding each once. Bytes per output column: 3 reads + 2 writes (10 B in
bf16) for 7 FLOPs and one exp, so it is HBM-bound; packing several short rows per program keeps the
lanes busy when D is small (decode) and the column split keeps programs short when D is large.
Limits: the halves must be concatenated (gate first, as vLLM/SGLang's silu_and_mul); no clamp
(OpenAI-style clamped SwiGLU has its own gradient); no fused accumulation into an existing dx.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _swiglu_backward_kernel(
    # pointers
    x_ptr,
    dy_ptr,
    dx_ptr,
    # sizes
    M,
    D,
    # strides (elements; the last dims are contiguous)
    stride_xm,
    stride_dym,
    stride_dxm,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (rows < M)[:, None] & (cols < D)[None, :]
    r, c = rows[:, None], cols[None, :]
    g = tl.load(x_ptr + r * stride_xm + c, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + r * stride_xm + D + c, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + r * stride_dym + c, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(g)
    silu = g * sig
    du = dy * silu
    dg = dy * u * sig * (1.0 + g * (1.0 - sig))
    out_ty = dx_ptr.dtype.element_ty
    tl.store(dx_ptr + r * stride_dxm + c, dg.to(out_ty), mask=mask)
    tl.store(dx_ptr + r * stride_dxm + D + c, du.to(out_ty), mask=mask)


def _launch_config(d: int) -> dict[str, int]:
    """Return rows per tile (more for short rows), columns per tile (<= 512) and warps."""
    block_d = min(triton.next_power_of_2(d), 512)
    return {"block_m": max(1, min(16, 2048 // block_d)), "block_d": block_d, "num_warps": 4}


def swiglu_backward(
    x: torch.Tensor,
    grad_output: torch.Tensor,
    *,
    block_m: int | None = None,
    block_d: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return d(silu(g) * u)/dx contracted with ``grad_output``, for ``x = [g | u]``.

    Args:
        x: (..., 2*D) bf16/fp16/fp32, gate half first; last dimension contiguous.
        grad_output: (..., D) with x's dtype and leading dims.
        block_m: Rows per tile (power of two); None = max(1, min(16, 2048 // block_d)).
        block_d: Columns per tile (power of two); None = min(next_pow2(D), 512).
        num_warps: Warps per program; None = 4.

    Returns:
        grad_x: (..., 2*D) with x's dtype, [d gate | d up].

    Raises:
        ValueError: Odd last dim, mismatched shapes or dtypes.
    """
    if (
        x.dtype not in (torch.float32, torch.float16, torch.bfloat16)
        or grad_output.dtype != x.dtype
    ):
        raise ValueError(
            f"x and grad_output must share an fp dtype; got {x.dtype}, {grad_output.dtype}"
        )
    if x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError(f"the last dim of x {tuple(x.shape)} must be even ([gate | up])")
    d = x.shape[-1] // 2
    if grad_output.shape != (*x.shape[:-1], d):
        raise ValueError(
            f"grad_output must be {(*x.shape[:-1], d)}; got {tuple(grad_output.shape)}"
        )
    x2 = x.reshape(-1, 2 * d)
    dy2 = grad_output.reshape(-1, d)
    x2 = x2 if x2.stride(-1) == 1 else x2.contiguous()
    dy2 = dy2 if dy2.stride(-1) == 1 else dy2.contiguous()
    m = x2.shape[0]
    dx = torch.empty((m, 2 * d), dtype=x.dtype, device=x.device)
    if dx.numel() == 0:
        return dx.reshape(x.shape)
    cfg = _launch_config(d)
    given = {"block_m": block_m, "block_d": block_d, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]), triton.cdiv(d, cfg["block_d"]))
    _swiglu_backward_kernel[grid](
        x2, dy2, dx,
        m, d,
        x2.stride(0), dy2.stride(0), dx.stride(0),
        BLOCK_M=cfg["block_m"], BLOCK_D=cfg["block_d"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return dx.reshape(x.shape)


def reference(x: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    """Return the gradient by autograd through silu(g) * u in fp32, cast to x's dtype."""
    xf = x.detach().float().requires_grad_()
    g, u = xf.chunk(2, dim=-1)
    out = torch.nn.functional.silu(g) * u
    (grad,) = torch.autograd.grad(out, xf, grad_outputs=grad_output.float())
    return grad.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "grad_output"}`` for ``shape = {"rows", "d"}``; N(0, 1) values."""
    x = torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)
    dy = torch.randn(shape["rows"], shape["d"], device=device).to(dtype)
    return {"x": x, "grad_output": dy}
